// Internal to the block index: the lookups of a known list of keys,
// started ahead of the code that walks them.
//
// The lookup of one block is a chain of dependent cache misses (table
// group -> record -> owner array). When the keys are known upfront -- a
// query's prefix, a stored or removed chain -- block i+6's group is
// prefetched, block i+4's record and block i+2's owner array while block i
// is processed. Prefetches and peeks are unvalidated hints: they never
// fault and never change a result, so the pipeline may run outside read
// sections and beside a writer. An early exit wastes at most six blocks'
// prefetches.
//
// Not thread-safe; one pipeline per walk, on the walking thread.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>

#include "index/block_key.h"
#include "index/internal/probe_key.h"
#include "index/internal/shard.h"
#include "index/internal/words.h"

namespace kvidx::internal {

// The owners of `k` (count 0 if absent); false on a stale read. Runs inside
// a read section. `hint` is the record PeekRecord found for `k` (id
// `hint_id`), or null. Inlined by force like the Shard calls it makes
// (see Shard's reader side).
[[gnu::always_inline]] inline bool ProbeOwners(const Shard& sh, const ProbeKey& k, const Rec* hint, uint32_t hint_id,
                                               const AWord** o, uint32_t* cnt) {
  *cnt = 0;
  *o = nullptr;
  const Rec* r = hint;
  if (r == nullptr || !sh.RecHolds(r, hint_id, k)) {
    uint32_t id = sh.Find(k);
    if (id == kNoId) return true;
    r = sh.RecAt(id);
    if (r == nullptr) return false;
  }
  *o = sh.Owners(r, cnt);
  return *o != nullptr;
}

// `GroupAhead`, `RecAhead`, `OwnersAhead`: how many blocks ahead each stage
// runs (see QueryPipeline and WritePipeline below for the measured choices).
// `Keys`: the walk's keys in walk order, anything with size() and
// operator[] giving a BlockKey (a span, or a ShardOrder's permuted view).
template <size_t GroupAhead, size_t RecAhead, size_t OwnersAhead, typename Keys = std::span<const BlockKey>>
class LookupPipeline {
 public:
  using Shards = std::array<Shard, kShards>;

  [[gnu::always_inline]] LookupPipeline(const Shards& shards, Keys keys)
      : shards_(shards), keys_(keys) {
    const size_t n = keys_.size();
    for (size_t j = 0; j < std::min(n, kGroupAhead); ++j) Start(j, j);
    for (size_t j = 0; j < std::min(n, kRecAhead); ++j) peek_[j] = ShardOf(j).PeekRecord(pk_[j], &peek_id_[j]);
    for (size_t j = 0; j < std::min(n, kOwnersAhead); ++j) {
      if (peek_[j] != nullptr) ShardOf(j).PrefetchOwnersOf(peek_[j]);
    }
  }

  // Starts the stages that run while block i is processed; call it for
  // every i in order. (Inlined by force: as a call it cost ~5% of W1 query
  // throughput.)
  [[gnu::always_inline]] void Advance(size_t i) {
    const size_t n = keys_.size();
    if (i + kGroupAhead < n) Start(i + kGroupAhead, (i + kGroupAhead) % kRing);
    if (i + kRecAhead < n) {
      const size_t r = (i + kRecAhead) % kRing;
      peek_[r] = ShardOf(r).PeekRecord(pk_[r], &peek_id_[r]);
    }
    if (i + kOwnersAhead < n && peek_[(i + kOwnersAhead) % kRing] != nullptr) {
      const size_t r = (i + kOwnersAhead) % kRing;
      ShardOf(r).PrefetchOwnersOf(peek_[r]);
    }
  }

  // Block i's probe key, shard index and shard (i within the ring's window).
  const ProbeKey& KeyOf(size_t i) const { return pk_[i % kRing]; }
  uint32_t ShardIndexOf(size_t i) const { return pk_[i % kRing].shard(); }
  const Shard& ShardOf(size_t i) const { return *shard_[i % kRing]; }
  // Block i's owners; see ProbeOwners.
  [[gnu::always_inline]] bool Probe(size_t i, const AWord** o, uint32_t* cnt) const {
    const size_t r = i % kRing;
    return ProbeOwners(ShardOf(r), pk_[r], peek_[r], peek_id_[r], o, cnt);
  }

 private:
  // The first stage for block j, in ring slot r: its key hashed, its shard
  // kept (every later stage and the walk look the shard up again: from the
  // hash that was ~25 instructions per block), its table group prefetched.
  [[gnu::always_inline]] void Start(size_t j, size_t r) {
    pk_[r].Set(keys_[j]);
    shard_[r] = &shards_[pk_[r].shard()];
    shard_[r]->PrefetchGroup(pk_[r]);
  }

  static constexpr size_t kGroupAhead = GroupAhead, kRecAhead = RecAhead, kOwnersAhead = OwnersAhead;
  static constexpr size_t kRing = std::bit_ceil(kGroupAhead + 1);
  static_assert(kGroupAhead < kRing && kRecAhead < kGroupAhead && kOwnersAhead < kRecAhead && kOwnersAhead >= 1);

  const Shards& shards_;
  Keys keys_;
  ProbeKey pk_[kRing];
  const Shard* shard_[kRing];
  const Rec* peek_[kRing] = {};
  uint32_t peek_id_[kRing];
};

// Queries of up to kShortQueryBlocks blocks, measured on W1 (same-session
// A/B): 6/4/2 beat 4/2/1 by ~6% (3% at 100k prompts) once records were 16
// bytes; 7/5/3, 6/4/3, 6/3/2 and 5/3/2 were no better; with 20-byte records
// 8/4/2 and 12/6/3 had not helped. W1's queries stop after ~16 blocks.
inline constexpr size_t kShortQueryBlocks = 64;
using QueryPipeline = LookupPipeline<6, 4, 2>;
// Longer queries (W2's p99 walks ~3,400 blocks) and the chains of stores
// and removals: at 6/4/2 a stage has two blocks' work to hide a memory
// miss, too little once the table is far larger than the cache.
// Measured on W2 (docs/BENCHMARKS.md): 16/10/4 beat 6/4/2 and 24/16/8 for
// stores and removals, and cut the query p99 by a quarter.
using LongQueryPipeline = LookupPipeline<16, 10, 4>;
template <typename Keys>
using WritePipeline = LookupPipeline<16, 10, 4, Keys>;

}  // namespace kvidx::internal
