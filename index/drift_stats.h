// Per-source statistics and drift counters of the block index.
//
// The index can tell on itself: every rule below fires only when the event
// stream contradicts what the index believes, i.e. when events were lost.
//   remove_unknown   a BlockRemoved, in an indexed group (block_index.h,
//                    Groups), of a block this source did not hold in that
//                    tier and group: we missed the store.
//                                                    (kvidx_drift_remove_unknown_total)
//   orphan_store     a non-hit BlockStored whose parent this source does not
//                    hold: we missed an earlier store. (kvidx_drift_orphan_store_total)
//   reused_unknown   a store marked origin=REUSED for a block we did not hold:
//                    we missed its original store.
//   over capacity    more GPU copies than the engine's num_gpu_blocks: we
//                    missed removals.                 (kvidx_replica_over_capacity)
// plus hits (engine-confirmed prefix-cache hits, kvidx_hits_total) and the
// eviction recency rank histogram (kvidx_eviction_recency_rank): for every
// GPU block the engine evicts, where it sat in our recency order (0 = the
// coldest block we knew of, 1 = the hottest). An index in sync with an LRU
// engine sees mass near 0; missed events push mass toward 1.
//
// Everything here is plain data or relaxed atomics: the server exports it to
// Prometheus; the index does not depend on any metrics library.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <utility>
#include <vector>

#include "index/source_registry.h"
#include "index/tier.h"

namespace kvidx {

// Snapshot of one source, returned by BlockIndex::GetSourceStats.
struct SourceIndexStats {
  SourceState state = SourceState::kConnecting;
  uint64_t stored_blocks = 0;        // block entries in indexed BlockStored events
  uint64_t removed_blocks = 0;       // block entries in indexed BlockRemoved events
  uint64_t unindexed_blocks = 0;     // block entries not indexed: other groups, or past a block's owner limit
  uint64_t hits = 0;                 // engine-confirmed hits
  uint64_t duplicate_copies = 0;     // stores that raised a refcount above 1
  uint64_t drift_remove_unknown = 0;
  uint64_t drift_orphan_store = 0;
  uint64_t drift_reused_unknown = 0;
  uint64_t clears = 0;               // ClearSource calls
  uint64_t gpu_copies = 0;           // physical GPU copies believed held (sum of refcounts)
  uint64_t gpu_capacity = 0;         // num_gpu_blocks, 0 = unknown
  bool over_capacity = false;        // gpu_copies > gpu_capacity (capacity known)
  std::vector<std::pair<Tier, uint64_t>> blocks_per_tier;  // distinct blocks per tier, non-zero only

  friend bool operator==(const SourceIndexStats&, const SourceIndexStats&) = default;
};

// Histogram of eviction recency ranks, fixed buckets of width 1/kBuckets.
struct RecencyRankHistogram {
  static constexpr size_t kBuckets = 20;
  std::array<uint64_t, kBuckets> counts{};   // bucket i: rank in [i/k, (i+1)/k), last one includes 1
  uint64_t count = 0;
  double sum = 0;
  static double UpperBound(size_t i) { return static_cast<double>(i + 1) / kBuckets; }
};

namespace internal {

// Adds `d` (two's complement for a decrease) to a counter that has one
// writer at a time (the source's mutex): a plain load and store, not a
// locked read-modify-write -- stores and removals bump several per block.
// Readers load it relaxed like any atomic.
inline void SoleWriterAdd(std::atomic<uint64_t>& a, uint64_t d) {
  a.store(a.load(std::memory_order_relaxed) + d, std::memory_order_relaxed);
}

// Live counters behind SourceIndexStats; written under the source's mutex
// (SoleWriterAdd), read by anyone.
struct SourceCounters {
  std::atomic<uint8_t> state{0};
  std::atomic<uint64_t> stored_blocks{0}, removed_blocks{0}, unindexed_blocks{0}, hits{0},
      duplicate_copies{0}, drift_remove_unknown{0}, drift_orphan_store{0},
      drift_reused_unknown{0}, clears{0}, gpu_copies{0}, gpu_capacity{0};
  std::array<std::atomic<uint64_t>, kMaxTiers> blocks_per_tier{};
};

// One call's eviction ranks, added to RankHistogramCounters at its end: a
// removal of many blocks then pays a few shared atomic adds, not three per
// block.
struct RankHistogramBatch {
  std::array<uint32_t, RecencyRankHistogram::kBuckets> counts{};
  uint64_t count = 0;
  uint64_t sum_micro = 0;

  void Add(double rank) {
    size_t b = static_cast<size_t>(rank * RecencyRankHistogram::kBuckets);
    if (b >= RecencyRankHistogram::kBuckets) b = RecencyRankHistogram::kBuckets - 1;
    ++counts[b];
    ++count;
    sum_micro += static_cast<uint64_t>(rank * 1e6);
  }
};

struct RankHistogramCounters {
  std::array<std::atomic<uint64_t>, RecencyRankHistogram::kBuckets> counts{};
  std::atomic<uint64_t> count{0};
  std::atomic<uint64_t> sum_micro{0};   // sum of ranks * 1e6

  void Add(double rank) {
    size_t b = static_cast<size_t>(rank * RecencyRankHistogram::kBuckets);
    if (b >= RecencyRankHistogram::kBuckets) b = RecencyRankHistogram::kBuckets - 1;
    counts[b].fetch_add(1, std::memory_order_relaxed);
    count.fetch_add(1, std::memory_order_relaxed);
    sum_micro.fetch_add(static_cast<uint64_t>(rank * 1e6), std::memory_order_relaxed);
  }
  void Add(const RankHistogramBatch& b) {
    if (b.count == 0) return;
    for (size_t i = 0; i < b.counts.size(); ++i) {
      if (b.counts[i] != 0) counts[i].fetch_add(b.counts[i], std::memory_order_relaxed);
    }
    count.fetch_add(b.count, std::memory_order_relaxed);
    sum_micro.fetch_add(b.sum_micro, std::memory_order_relaxed);
  }
};

}  // namespace internal
}  // namespace kvidx
