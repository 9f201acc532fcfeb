// SimRank: one simulated vLLM engine rank — a prefix-caching block pool that
// turns requests into exactly the KV events vLLM's BlockPool would publish.
//
// Model (vllm/v1/core/block_pool.py, kv_cache_manager.py): `num_blocks`
// physical blocks; a full block is cached under its chained hash; a block
// whose request finished goes to the tail of an LRU free queue, and a
// request's blocks are freed tail-first so its last blocks are evicted
// first; allocation pops the queue head and, if that block was cached,
// evicts it (one BlockRemoved). Per request, one batch is published with the
// events in vLLM's order: full-report re-announcement of the hit prefix
// (parent None, from block 0) when the request asked for it, then evictions,
// then one BlockStored for the newly cached full blocks (parent = the last
// hit block). Requests run one at a time (no concurrent residency), which is
// enough to reproduce vLLM's event stream and eviction order.
//
// Ground truth: CachedPrefix() answers from the pool itself, so a harness can
// compare kvidx's answer with what the engine really holds (fidelity).
//
// Faults (kvidx-sim, fidelity tests): Serve() can drop the batch it
// publishes at the publisher (DropMode: lost live but kept for replay, or
// not even buffered), and Restart() can re-create the sockets as a new
// process would.
//
// Not thread-safe: one SimRank is driven by one thread. The FakeEngine it
// publishes through is thread-safe and owned by the SimRank.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "index/block_hasher.h"
#include "ingest/event.h"
#include "ingest/testing/encoder.h"
#include "ingest/testing/fake_engine.h"

namespace kvidx::sim {

struct SimRankOptions {
  std::string replica;
  uint32_t dp_rank = 0;
  size_t num_blocks = 4096;             // vLLM num_gpu_blocks
  BlockHasherOptions hasher;            // algorithm, seed, block size
  bool bytes_hashes = false;            // VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0
  ingest::WireEra era = ingest::WireEra::Newest();
  ingest::FakeEngineOptions publisher;  // endpoints, topic, buffer_steps, ...
};

struct ServeResult {
  size_t full_blocks = 0;   // full blocks of the prompt (what could be cached)
  size_t hit_blocks = 0;    // leading blocks found in the cache
  size_t evicted = 0;
  uint64_t seq = 0;         // the batch published for this request
  bool published = false;   // a batch was published (false: nothing changed)
  bool dropped = false;     // ... and it was dropped at the publisher (Serve's `drop`)
  size_t events = 0;        // events in the published batch
};

class SimRank {
 public:
  static Result<std::unique_ptr<SimRank>> Create(const SimRankOptions& options);

  // Serves one request (prefill only). Prompts longer than the pool are cut to
  // what fits. `full_report` = kv_cache_report_mode="full". With `drop`, the
  // batch this request publishes (if any) is dropped at the publisher in
  // that mode (see FakeEngine::DropSeqs).
  Result<ServeResult> Serve(std::span<const int64_t> tokens, bool full_report,
                            std::optional<ingest::DropMode> drop = std::nullopt);

  // Leading blocks of `keys` this rank holds right now (the truth).
  size_t CachedPrefix(std::span<const BlockKey> keys) const;
  size_t cached_blocks() const { return cached_.size(); }
  // Every block this rank holds right now, in no particular order.
  std::vector<BlockKey> CachedKeys() const;

  // Step batching, as vLLM publishes: while held, Serve() caches at once (a
  // later request hits what an earlier one allocated, as vLLM caches blocks
  // when it schedules them) but appends its events to one pending batch,
  // which PublishHeld() sends (the end of the engine step). Drops do not
  // apply to held batches.
  void HoldBatches(bool hold) { hold_ = hold; }
  // Publishes the pending batch; its seq, or nullopt if it was empty.
  std::optional<uint64_t> PublishHeld();

  // vLLM's reset_prefix_cache(): drops every cached block, publishes AllBlocksCleared.
  void ResetPrefixCache();
  // Engine restart: empty cache, seq back to 0, no event (vLLM sends none).
  // `recreate_sockets`: PUB and ROUTER are closed and bound again, as a new
  // engine process would (subscribers see a disconnect and reconnect).
  Status Restart(bool recreate_sockets = false);

  // What this rank has published since creation (restarts included).
  uint64_t batches_published() const { return batches_published_; }
  uint64_t events_published() const { return events_published_; }
  uint64_t batches_dropped() const { return batches_dropped_; }

  ingest::FakeEngine& publisher() { return *publisher_; }
  const SimRankOptions& options() const { return opts_; }
  BlockKey KeyOf(const BlockDigest& d) const { return opts_.bytes_hashes ? d.ToBytesKey() : d.ToKey(); }

 private:
  struct Block {
    bool cached = false;
    BlockKey key;
    uint32_t ref = 0;
    std::list<uint32_t>::iterator free_pos;
    bool in_free = false;
  };

  SimRank(const SimRankOptions& options, BlockHasher hasher);
  uint32_t PopFree();
  void PushFree(uint32_t b);
  void Publish(std::optional<ingest::DropMode> drop = std::nullopt);

  SimRankOptions opts_;
  BlockHasher hasher_;
  std::unique_ptr<ingest::FakeEngine> publisher_;
  std::vector<Block> blocks_;
  std::list<uint32_t> free_;   // head = next to evict
  std::unordered_map<BlockKey, uint32_t, BlockKeyHash> cached_;
  // Scratch reused across requests.
  std::vector<BlockDigest> digests_;
  std::vector<uint32_t> held_;
  ingest::EventBatch batch_;
  uint64_t batches_published_ = 0;
  uint64_t events_published_ = 0;
  uint64_t batches_dropped_ = 0;
  bool hold_ = false;
};

}  // namespace kvidx::sim
