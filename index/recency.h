// RecencyHistogram: order statistics over a source's GPU recency stamps.
//
// Every GPU block a source holds carries a stamp from the source's logical
// clock (newer = larger). An exact LRU would need a linked list plus an
// order-statistics tree; this keeps only a count of live stamps per bucket
// (1024 buckets, Fenwick tree) over a sliding window [base, base + 1024 <<
// shift). Rank(stamp) = fraction of live blocks older than `stamp`, accurate
// to one bucket (<= 1/512 of the live stamp span): enough for the eviction
// recency histogram, at 8 KiB per source instead of 8 bytes per block.
//
// The window slides (and widens when it must) as the clock advances; the cost
// is amortised O(1) per Add. Stamps below the window are clamped into the
// first bucket.
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
  double Rank(uint32_t stamp) const;
  uint64_t size() const { return size_; }
  void Clear();
  // Start of the oldest non-empty bucket (0 when empty).
  uint32_t OldestStamp() const;

 private:
  uint32_t Bucket(uint32_t stamp) const;
  uint64_t NewestStamp() const;   // end of the newest non-empty bucket
  void Rebuild(uint64_t lo, uint64_t hi);
  void FenwickAdd(uint32_t i, int64_t d);
  uint64_t FenwickPrefix(uint32_t i) const;   // sum of counts[0..i]

  uint64_t base_ = 0;     // stamp at bucket 0 (aligned to 1 << shift_)
  uint32_t shift_ = 0;
  uint64_t size_ = 0;
  std::array<uint32_t, kBuckets> counts_{};
  std::array<uint64_t, kBuckets + 1> tree_{};
};

}  // namespace kvidx::internal
