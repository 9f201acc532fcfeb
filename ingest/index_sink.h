// IndexSink: applies what ingest decodes to the BlockIndex.
//
// The one place where vLLM's event vocabulary meets the index's domain
// terms: a source spec becomes a SourceId (SourceRegistry) and its model a
// ModelId; `medium` becomes a Tier ("GPU" when absent, as in engines before
// vLLM #19737); `group_idx` + `kv_cache_spec_kind` become a KvGroup;
// `origin` (proposed vLLM #51699) becomes a StoreOrigin. AllBlocksCleared
// clears the source's GPU blocks; an engine restart or operator resync
// clears all of the source's tiers; removing a source drops its blocks.
//
// Threading: BatchSink calls for one source come from that source's ingest
// thread (batch_sink.h); calls for different sources may be concurrent. The
// source table is read under a shared lock (one per batch, never across
// I/O); the index itself is safe for one writer per source.
//
// A BlockStored whose block_size is not the model's (SetModelBlockSize) is
// not indexed: its hashes were computed over other token spans than
// queries hash, so they could only ever match by accident. It is counted
// (IndexSinkStats::block_size_mismatch_events) and logged, sampled. Only
// stores of groups the index would match are checked (kind absent or full
// attention); other groups are not indexed by default anyway.
//
// Removing a source releases its index state (BlockIndex::ReleaseSource)
// and releases its id in the SourceRegistry (retires it only if the index
// could not drop its blocks: the id must then never name another source).
//
// The sink also keeps each source's watermark (last applied seq and the
// engine timestamp of that batch), which snapshots record so that a restart
// can resume through replay.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "index/block_index.h"
#include "index/source_registry.h"
#include "index/tier.h"
#include "ingest/batch_sink.h"
#include "ingest/source_watermark.h"

namespace kvidx::ingest {

struct IndexSinkStats {
  std::atomic<uint64_t> applied_batches{0};  // batches applied (monotone: orders answers)
  std::atomic<uint64_t> applied_events{0};
  std::atomic<uint64_t> apply_errors{0};     // index calls that returned an error
  std::atomic<uint64_t> unbound_batches{0};  // batches for a source never added
  std::atomic<uint64_t> block_size_mismatch_events{0};  // BlockStored events skipped: wrong block_size
};

class IndexSink final : public BatchSink {
 public:
  // All three must outlive the sink.
  IndexSink(BlockIndex* index, SourceRegistry* sources, TierRegistry* tiers);

  void OnSourceAdded(const SourceSpec& source) override;
  void OnBatch(const SourceSpec& source, uint64_t seq, const EventBatch& batch, bool replayed) override;
  void OnSourceReset(const SourceSpec& source, ResetReason reason) override;
  void OnSourceStateChanged(const SourceSpec& source, SourceState from, SourceState to) override;
  void OnSourceRemoved(const SourceSpec& source) override;

  // Watermarks of every bound source (control plane; snapshots): the
  // stream position only (state and capacity stay 0).
  std::vector<SourceWatermark> Watermarks() const;
  std::optional<SourceId> FindSource(const std::string& replica, uint32_t dp_rank) const;
  // Last applied seq of a bound source by SourceId (-1 = none): the index's
  // position that query answers report. Lock-free.
  int64_t LastSeq(SourceId id) const {
    return id < kMaxSources ? last_seq_by_id_[id].load(std::memory_order_relaxed) : -1;
  }
  // Seeds the watermark a source resumes from (a restored snapshot), so a
  // snapshot taken before its first new batch still records it. Call before
  // the source is added; consumed by OnSourceAdded.
  void SeedWatermark(const std::string& source_name, uint64_t last_seq, double last_batch_ts,
                     uint64_t last_batch_fingerprint);
  // The block_size (tokens per block) engines of `model` must announce;
  // unset = not checked. Call before the model's sources are added.
  void SetModelBlockSize(const std::string& model, uint32_t block_size);
  const IndexSinkStats& stats() const { return stats_; }
  // Ends a source id's life in the index: its blocks released, its state
  // Disconnected, the id released for reuse if nothing of it remains, else
  // only retired (blocks that stay must not name another source). Used for
  // removed sources and for restored ones nobody resumes. A failed release
  // is counted as an apply error and returned. Takes no lock of its own:
  // call it where no batch of the id can be applied at the same time (from
  // OnSourceRemoved, which holds the apply gate, or before ingestion starts).
  Status EndSource(SourceId id);

  // Holds every batch application (and reset, removal) back while alive, so
  // the caller can Dump() the index and read Watermarks() as one consistent
  // cut. A batch being applied finishes first; none starts until release.
  // Never take it on an ingest thread.
  std::unique_lock<std::shared_mutex> PauseApplies() { return std::unique_lock(gate_); }

 private:
  struct Binding {
    SourceId source = 0;
    ModelId model = 0;
    std::string name, replica, model_name;
    uint32_t dp_rank = 0;
    uint32_t block_size = 0;  // expected in BlockStored; 0 = not checked
    std::atomic<bool> has_seq{false};
    std::atomic<uint64_t> last_seq{0};
    std::atomic<double> last_ts{0};
    std::atomic<uint64_t> last_fp{0};
  };

  Binding* Find(uint64_t spec_id) const;
  Tier TierOf(const std::optional<std::string_view>& medium);
  void Count(const Status& s);
  // False (counted, logged sampled) if the store must not be indexed.
  bool BlockSizeMatches(const Binding& b, const KvEvent& e);

  BlockIndex* index_;
  SourceRegistry* sources_;
  TierRegistry* tiers_;
  mutable std::shared_mutex mu_;
  struct Seed {
    uint64_t seq = 0;
    double ts = 0;
    uint64_t fingerprint = 0;
  };
  std::unordered_map<std::string, Seed> seeds_;  // guarded by mu_
  std::unordered_map<std::string, uint32_t> block_sizes_;  // by model name; guarded by mu_
  std::unique_ptr<std::atomic<int64_t>[]> last_seq_by_id_;
  // Shared by appliers, exclusive for a snapshot cut (PauseApplies).
  std::shared_mutex gate_;
  std::unordered_map<uint64_t, std::unique_ptr<Binding>> bindings_;  // by SourceSpec::id
  IndexSinkStats stats_;
};

}  // namespace kvidx::ingest
