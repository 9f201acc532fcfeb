// Internal to the block index: the blocks of one write, grouped by shard.
//
// Store and Remove take a shard's writer lock once per run of blocks in
// that shard rather than once per block: an uncontended lock and unlock
// per block were ~5% of W2's instructions, each a locked read-modify-
// write. The grouping is stable -- the blocks of one shard keep their event
// order -- so a key listed twice in an event is applied in event order as
// before; what a write does outside the shards (counters, the recency
// histogram) is order-free or replayed by the caller in event order.
// Steps shorter than kMinGroupedBlocks (two blocks per shard) are walked
// in event order without a ShardOrder: there the sort costs more than the
// locks it saves (grouping from 16 blocks up made W1's 16-block stores 14%
// slower).
//
// Not thread-safe: one writer's scratch, reused across writes (it
// allocates only until it has seen its largest step of blocks).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "index/block_key.h"

namespace kvidx::internal {

// The most blocks one Build takes: a write is grouped in steps of this
// many, which bounds the scratch (~36 KiB per writer thread).
inline constexpr size_t kGroupStep = 4096;
inline constexpr size_t kMinGroupedBlocks = 128;

class ShardOrder {
 public:
  // The step's keys in shard order, without copying them: view[j] is the
  // step's key number index()[j].
  class View {
   public:
    View(std::span<const BlockKey> keys, const uint32_t* index) : keys_(keys), index_(index) {}
    size_t size() const { return keys_.size(); }
    const BlockKey& operator[](size_t j) const { return keys_[index_[j]]; }

   private:
    std::span<const BlockKey> keys_;
    const uint32_t* index_;
  };

  // Orders `keys` (at most kGroupStep; they must outlive the view) by
  // shard.
  void Build(std::span<const BlockKey> keys);
  View keys() const { return View(keys_, index_.data()); }
  std::span<const uint32_t> index() const { return {index_.data(), keys_.size()}; }
  // `n` (at most kGroupStep) zeroed words, for a caller to note per block
  // of a step what it replays in event order afterwards.
  std::span<uint32_t> Notes(size_t n);

 private:
  std::span<const BlockKey> keys_;
  std::vector<uint8_t> shard_;
  std::vector<uint32_t> index_;
  std::vector<uint32_t> notes_;
};

}  // namespace kvidx::internal
