// Internal to the block index: the state its implementation files share
// (block_index.cc: models, sources and the per-block core;
// block_index_runs.cc: the run core, docs/RUN_CORE.md). Not for use
// outside them.
#pragma once

#include <array>
#include <atomic>
#include <bit>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "index/block_index.h"
#include "index/epoch.h"
#include "index/internal/lookup_pipeline.h"
#include "index/internal/ptr_dir.h"
#include "index/internal/run_store.h"
#include "index/internal/shard.h"
#include "index/internal/shard_order.h"
#include "index/record_set.h"
#include "index/recency.h"

namespace kvidx {

using internal::AWord;
using internal::kNoId;
using internal::kOwnerWords;
using internal::kShards;
using internal::Ld;
using internal::LongQueryPipeline;
using internal::QueryPipeline;
using internal::WritePipeline;
using internal::ShardOrder;
using internal::kShortQueryBlocks;
using internal::OwnerCounts;
using internal::OwnerGroup;
using internal::OwnerHitsView;
using internal::OwnerIdentity;
using internal::OwnerKey;
using internal::OwnerSource;
using internal::OwnerStamp;
using internal::OwnerTier;
using internal::ProbeKey;
using internal::Rec;
using internal::Shard;
using internal::St;

inline constexpr uint32_t kUnindexedGroup = internal::kMaxOwnerGroups;   // groups >= this are never indexed
inline constexpr uint32_t kNoPrimary = 0xFFFFFFFF;
inline constexpr uint32_t kClearBatch = 64;              // records per shard-lock hold in ClearSource
// Stamps are 24-bit. A rebase keeps the newest kStampKeep clock ticks
// exact and folds anything older into stamp 0 ("ancient": coldest anyway).
// Stores are applied in steps of at most kStoreStep blocks so that one
// rebase always makes room.
inline constexpr uint64_t kStampLimit = uint64_t{1} << internal::kStampBits;
inline constexpr uint64_t kStampKeep = uint64_t{1} << 22;
inline constexpr size_t kStoreStep = 1 << 16;
static_assert(kStampKeep + kStoreStep + 1 < kStampLimit);

// RemoveCopy's note: the owner's stamp, whether a copy went and whether
// it was the last one.
inline constexpr uint32_t kRemovedCopy = 1u << 31;
inline constexpr uint32_t kRemovedLast = 1u << 30;
static_assert(internal::kStampBits <= 30);

// A stamp's value after the clock moved down by `base`.
inline uint32_t RebaseStamp(uint64_t stamp, uint64_t base) {
  return stamp > base ? static_cast<uint32_t>(stamp - base) : 0;
}
inline uint32_t Saturating(uint64_t v) { return v > 0xFFFFFFFFu ? 0xFFFFFFFFu : static_cast<uint32_t>(v); }


// A model's blocks in the run core: the run store and its writer lock
// (one per model: a run spans shards; readers take none).
struct RunModel {
  explicit RunModel(internal::EpochDomain& epoch) : store(epoch) {}
  Mutex mu;
  internal::RunStore store;
};

struct Model {
  std::string name;
  ModelOptions options;
  std::atomic<uint32_t> primary_group{kNoPrimary};
  std::array<std::atomic<uint64_t>, 4> indexed_groups{};   // bit per group that had an indexed store
  std::array<Shard, kShards> shards;
  // The run core's store, when the index uses it (IndexOptions); the
  // shards then stay empty.
  std::unique_ptr<RunModel> runs;

  void MarkIndexed(uint32_t g) {
    indexed_groups[g >> 6].fetch_or(uint64_t{1} << (g & 63), std::memory_order_relaxed);
  }
  bool WasIndexed(uint32_t g) const {
    return (indexed_groups[g >> 6].load(std::memory_order_relaxed) >> (g & 63)) & 1;
  }

  uint32_t PrimaryGroup() const {
    uint32_t g = primary_group.load(std::memory_order_relaxed);
    return g == kNoPrimary ? 0 : g;
  }

  // After a restore, whose owners carry no group kinds. Without
  // index_all_groups an owner outside group 0 comes from a full-attention
  // store, so owners in exactly one such group (and none in group 0) name
  // the primary group. Any other mix stays unresolved until the next
  // full-attention store, as on a fresh start.
  void InferPrimaryGroup() {
    static_assert(kUnindexedGroup <= 64, "indexed groups of owners fit the first word");
    if (options.index_all_groups) return;
    const uint64_t groups = indexed_groups[0].load(std::memory_order_relaxed);
    if ((groups & 1) != 0 || std::popcount(groups) != 1) return;
    uint32_t expected = kNoPrimary;
    primary_group.compare_exchange_strong(expected, static_cast<uint32_t>(std::countr_zero(groups)),
                                          std::memory_order_relaxed);
  }
};

// Per model, per shard, created on first use.
template <typename T>
using PerModelShard = std::vector<std::unique_ptr<std::array<T, kShards>>>;
template <typename T>
[[gnu::noinline, gnu::cold]] void AddModelShards(PerModelShard<T>& v, ModelId m) {
  if (v.size() <= m) v.resize(m + 1);
  if (!v[m]) v[m] = std::make_unique<std::array<T, kShards>>();
}
// Per block on stores and removals: the fast path stays small enough to inline.
template <typename T>
inline T& AtModelShard(PerModelShard<T>& v, ModelId m, uint32_t shard_idx) {
  if (v.size() <= m || !v[m]) [[unlikely]] AddModelShards(v, m);
  return (*v[m])[shard_idx];
}

// A source's RecencyHistogram (~4 KiB) allocated on its first GPU stamp and
// freed by Release(), so a source that holds no GPU block, or was removed,
// costs a pointer. Same calls as the histogram; an absent one is empty.
class LazyRecencyHistogram {
 public:
  void Add(uint32_t stamp) {
    if (!h_) h_ = std::make_unique<internal::RecencyHistogram>();
    h_->Add(stamp);
  }
  void Remove(uint32_t stamp) {
    if (h_) h_->Remove(stamp);
  }
  double Rank(uint32_t stamp) { return h_ ? h_->Rank(stamp) : 0; }
  void Clear() {
    if (h_) h_->Clear();
  }
  void Release() { h_.reset(); }
  size_t MemoryBytes() const { return h_ ? sizeof(internal::RecencyHistogram) : 0; }

 private:
  std::unique_ptr<internal::RecencyHistogram> h_;
};

struct SourceData {
  Mutex mu;                                    // serialises this source's writers
  uint64_t clock KVIDX_GUARDED_BY(mu) = 0;           // recency clock; stamps are clock values (< 2^32)
  LazyRecencyHistogram gpu_hist KVIDX_GUARDED_BY(mu);
  // By ModelId, then shard: the records where this source owns something.
  PerModelShard<internal::RecordSet> members KVIDX_GUARDED_BY(mu);
  internal::SourceCounters counters;   // atomics: read by stats and queries without mu

  std::array<internal::RecordSet, kShards>* MembersOf(ModelId m) KVIDX_REQUIRES(mu) {
    return m < members.size() ? members[m].get() : nullptr;
  }
  internal::RecordSet& Members(ModelId m, uint32_t shard_idx) KVIDX_REQUIRES(mu) {
    return AtModelShard(members, m, shard_idx);
  }
  // Restore's bulk-load buffer (by ModelId, then shard): record ids
  // collected per owner and turned into `members` at the end. Empty
  // otherwise.
  PerModelShard<std::vector<uint32_t>> restoring KVIDX_GUARDED_BY(mu);
  std::vector<uint32_t>& Restoring(ModelId m, uint32_t shard_idx) KVIDX_REQUIRES(mu) {
    return AtModelShard(restoring, m, shard_idx);
  }
};

struct BlockIndex::Impl {
  explicit Impl(const IndexOptions& o) : options(o) {}
  const IndexOptions options;
  mutable internal::EpochDomain epoch;
  Mutex admin_mu;   // model and source creation
  std::unordered_map<std::string, ModelId> model_ids KVIDX_GUARDED_BY(admin_mu);
  std::atomic<uint32_t> model_count{0};
  std::unique_ptr<std::atomic<Model*>[]> models{new std::atomic<Model*>[kMaxModels]()};
  internal::PtrDir<SourceData> sources{kMaxSources};   // lazily committed: 512 KiB of mostly nulls
  internal::RankHistogramCounters eviction_rank;

  ~Impl() {
    for (uint32_t i = 0; i < kMaxModels; ++i) delete models[i].load(std::memory_order_relaxed);
    for (uint32_t i = 0; i < kMaxSources; ++i) delete sources.Get(i);
  }

  Model* GetModel(ModelId m) const {
    return m < kMaxModels ? models[m].load(std::memory_order_acquire) : nullptr;
  }
  SourceData* GetSource(SourceId s) const {
    return s < kMaxSources ? sources.Get(s) : nullptr;
  }
  SourceData* GetOrCreateSource(SourceId s) {
    SourceData* d = GetSource(s);
    if (d != nullptr) return d;
    MutexLock lock(admin_mu);
    d = sources.Get(s);
    if (d == nullptr) {
      d = new SourceData();
      sources.Set(s, d);
    }
    return d;
  }

  // Writer-side helpers; the caller holds src.mu.
  void MaybeRebase(SourceData& src, SourceId source, uint64_t needed) KVIDX_REQUIRES(src.mu);
  // One block of a store, under `sh`'s writer lock (pk's shard).
  void ApplyStore(Shard& sh, ModelId m, SourceData& src, uint32_t okey, const ProbeKey& pk, uint32_t stamp,
                  bool hit_candidate, bool reused) KVIDX_REQUIRES(src.mu);
  // One copy of one block of a removal, under `sh`'s writer lock. Returns
  // the note Remove replays the recency ranks from (kRemovedCopy, maybe
  // kRemovedLast, the owner's stamp), or 0 when the source did not hold
  // the block (counted as drift).
  uint32_t RemoveCopy(Shard& sh, ModelId m, SourceData& src, uint32_t okey, const ProbeKey& pk)
      KVIDX_REQUIRES(src.mu);
  bool Holds(Model& model, const BlockKey& key, uint32_t okey);
  void AdjustTierCount(SourceData& src, uint32_t tier, int64_t d) KVIDX_REQUIRES(src.mu) {
    internal::SoleWriterAdd(src.counters.blocks_per_tier[tier], static_cast<uint64_t>(d));
  }
  void AddGpuCopies(SourceData& src, int64_t d) KVIDX_REQUIRES(src.mu) {
    internal::SoleWriterAdd(src.counters.gpu_copies, static_cast<uint64_t>(d));
  }
  // Visits every record where `src` owns something in `model`, under the
  // shard lock in batches (fn says so with sh.AssertWriteLocked(): the
  // analysis does not follow a lock into a lambda). fn(shard, id) runs
  // inside no write section and returns true when the source no longer
  // owns anything in the record, which drops the record from the source's
  // membership.
  template <typename Fn>
  void ForEachSourceRecord(SourceData& src, ModelId m, Model& model, Fn fn) KVIDX_REQUIRES(src.mu);
  // Turns every source's Restore buffer into its membership sets.
  void BuildRestoredMembership();
  // The counters and GPU recency of one stored block (both cores): `held`
  // when the owner already had it, then a hit or one more copy as `hit`
  // says, re-stamped from `old_stamp`; else a new owner (`reused`: with a
  // hit on a store that was missed).
  void CountStore(SourceData& src, uint32_t tier, bool held, bool hit, bool reused, uint32_t old_stamp,
                  uint32_t stamp) KVIDX_REQUIRES(src.mu);
  // The counters of one removed copy (both cores): the note Remove ranks
  // recency from (kRemovedCopy, maybe kRemovedLast, the stamp), or 0 and a
  // remove_unknown drift when the owner did not hold the block.
  uint32_t CountRemove(SourceData& src, uint32_t tier, bool held, bool last, uint32_t stamp) KVIDX_REQUIRES(src.mu);

  // --- The run core (block_index_runs.cc); each takes the model's writer
  // lock where it writes or reads the writer's state.
  void StoreRuns(Model& model, SourceData& src, SourceId source, uint32_t okey, std::span<const BlockKey> hashes,
                 const std::optional<BlockKey>& parent, bool hit_candidate, bool reused) KVIDX_REQUIRES(src.mu);
  // Fills removed[i] as RemoveCopy would for hashes[i].
  void RemoveRuns(Model& model, SourceData& src, uint32_t okey, std::span<const BlockKey> hashes,
                  std::span<uint32_t> removed) KVIDX_REQUIRES(src.mu);
  bool HoldsRuns(Model& model, const BlockKey& key, uint32_t okey);
  void ClearRuns(Model& model, SourceId source, std::optional<uint32_t> tier);
  // Moves the source's stamps down by `base`, re-adding GPU ones to its histogram.
  void RebaseRuns(Model& model, SourceData& src, SourceId source, uint32_t base) KVIDX_REQUIRES(src.mu);
  void FindRuns(const Model& model, std::span<const BlockKey> keys, uint32_t group, uint64_t tier_mask,
                std::vector<SourceMatch>* res) const;
  void StampedRuns(Model& model, SourceId source, std::vector<std::pair<uint32_t, BlockKey>>* gpu) const;
  void LookupRuns(Model& model, ModelId m, const BlockKey& key, std::vector<OwnerRecord>* out) const;
  void DumpRuns(Model& model, ModelId m, std::vector<OwnerRecord>* out) const;
  // Restores one owner of a run model; Corruption on a duplicate.
  // `after`: the record `o` follows in its chain, if any.
  Status RestoreRuns(Model& model, const OwnerRecord& o, uint32_t okey, uint32_t stamp, const OwnerRecord* after);
  static uint64_t BlockCountRuns(Model& model);
  static size_t MemoryRuns(Model& model);

  // Sets each match's source state (FindPrefix's last stage; forced inline,
  // as a call it cost ~10 instructions per query).
  [[gnu::always_inline]] inline void StampStates(std::vector<SourceMatch>* res) const;
};

}  // namespace kvidx
