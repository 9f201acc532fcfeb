// RecencyHistogram: order statistics over a source's GPU recency stamps.
//
// Every GPU block a source holds carries a stamp from the source's logical
// clock (newer = larger). An exact LRU would need a linked list plus an
// order-statistics tree; this keeps only a count of live stamps per bucket
// (1024 buckets, also summed per group of 32) over a sliding window
// [base, base + 1024 << shift). Rank(stamp) = fraction of live blocks older
// than `stamp`, accurate to one bucket (<= 1/512 of the live stamp span):
// enough for the eviction recency histogram, at ~4 KiB per source instead
// of 8 bytes per block.
// Add and Remove touch two counters; Rank sums at most 16 group and 16
// bucket counters (a Fenwick tree's ten dependent steps per Add cost more:
// stores call Add per block, removals Rank and Remove).
//
// The window slides (and widens when it must) as stamps leave it, up or
// down: a rebuild leaves at least half the window free on the side the
// stamp left by, so the cost is amortised O(1) per Add in either direction
// (a store event's blocks are stamped newest first, so a source's first
// event walks down from its first stamp). Stamps below the window are
// clamped into the first bucket.
//
// Thread-compatible: owned by one source's writer.
#pragma once

#include <array>
#include <cstdint>

namespace kvidx::internal {

class RecencyHistogram {
 public:
  static constexpr uint32_t kBuckets = 1024;

  void Add(uint32_t stamp);
  void Remove(uint32_t stamp);
  // Fraction of the other live stamps that are older than `stamp` (which
  // must be live). 0 = coldest, 1 = hottest; 0 when it is the only one.
  // Not const: it keeps the last bucket's count of older stamps, which
  // Add and Remove keep current, because a removal event's blocks mostly
  // share their neighbours' buckets (a chain's blocks are stamped in a row).
  double Rank(uint32_t stamp);
  uint64_t size() const { return size_; }
  void Clear();
  // Start of the oldest non-empty bucket (0 when empty).
  uint32_t OldestStamp() const;
  // Times the window moved or widened so far (each costs O(kBuckets)).
  uint64_t rebuilds() const { return rebuilds_; }

 private:
  uint32_t Bucket(uint32_t stamp) const;
  uint64_t NewestStamp() const;   // end of the newest non-empty bucket
  // Which side of [lo, hi] the new window keeps free.
  enum class Room : uint8_t { kAbove, kBelow };
  void Rebuild(uint64_t lo, uint64_t hi, Room room);
  uint64_t CountBelow(uint32_t bucket) const;   // live stamps in buckets [0, bucket)

  uint64_t base_ = 0;     // stamp at bucket 0 (aligned to 1 << shift_)
  uint32_t shift_ = 0;
  uint64_t size_ = 0;
  uint64_t rebuilds_ = 0;
  // CountBelow(memo_bucket_) == memo_below_ unless memo_bucket_ is kNoMemo.
  static constexpr uint32_t kNoMemo = kBuckets;
  uint32_t memo_bucket_ = kNoMemo;
  uint64_t memo_below_ = 0;
  std::array<uint32_t, kBuckets> counts_{};
  static constexpr uint32_t kGroupBits = 5;
  std::array<uint64_t, (kBuckets >> kGroupBits)> groups_{};   // counts_ summed per group
};

}  // namespace kvidx::internal
