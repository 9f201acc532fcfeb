#include "index/recency.h"

namespace kvidx::internal {

uint32_t RecencyHistogram::Bucket(uint32_t stamp) const {
  if (stamp < base_) return 0;
  uint64_t b = (stamp - base_) >> shift_;
  return b >= kBuckets ? kBuckets - 1 : static_cast<uint32_t>(b);
}

uint64_t RecencyHistogram::CountBelow(uint32_t bucket) const {
  // Sums from whichever end is nearer, at both levels (size_ is the sum of
  // all groups, each group the sum of its buckets): at most 16 + 16 terms.
  constexpr uint32_t kGroups = kBuckets >> kGroupBits;
  constexpr uint32_t kGroupSize = 1u << kGroupBits;
  const uint32_t g = bucket >> kGroupBits;
  uint64_t n = 0;
  if (g < kGroups / 2) {
    for (uint32_t i = 0; i < g; ++i) n += groups_[i];
  } else {
    n = size_;
    for (uint32_t i = g; i < kGroups; ++i) n -= groups_[i];
  }
  const uint32_t first = g << kGroupBits;
  if (bucket - first <= kGroupSize / 2) {
    for (uint32_t b = first; b < bucket; ++b) n += counts_[b];
  } else {
    n += groups_[g];
    for (uint32_t b = bucket; b < first + kGroupSize; ++b) n -= counts_[b];
  }
  return n;
}

uint32_t RecencyHistogram::OldestStamp() const {
  if (size_ == 0) return 0;
  for (uint32_t b = 0; b < kBuckets; ++b) {
    if (counts_[b] != 0) return static_cast<uint32_t>(base_ + (uint64_t{b} << shift_));
  }
  return static_cast<uint32_t>(base_);
}

void RecencyHistogram::Rebuild(uint64_t lo, uint64_t hi, Room room) {
  // [lo, hi] takes less than half the window and the other half stays free
  // on the side of `room`, so the next rebuild in that direction is
  // kBuckets/2 buckets of clock away: amortised O(1) per Add.
  ++rebuilds_;
  uint32_t shift = shift_;
  while (((hi >> shift) - (lo >> shift)) >= kBuckets / 2) ++shift;
  uint64_t base = (lo >> shift) << shift;
  if (room == Room::kBelow) {
    const uint64_t below = uint64_t{kBuckets / 2} << shift;
    base = base > below ? base - below : 0;
  }
  std::array<uint32_t, kBuckets> old = counts_;
  uint64_t old_base = base_;
  uint32_t old_shift = shift_;
  counts_.fill(0);
  groups_.fill(0);
  memo_bucket_ = kNoMemo;
  base_ = base;
  shift_ = shift;
  for (uint32_t b = 0; b < kBuckets; ++b) {
    if (old[b] == 0) continue;
    uint64_t start = old_base + (uint64_t{b} << old_shift);
    uint64_t nb = start < base ? 0 : (start - base) >> shift;
    if (nb >= kBuckets) nb = kBuckets - 1;
    counts_[nb] += old[b];
  }
  for (uint32_t b = 0; b < kBuckets; ++b) groups_[b >> kGroupBits] += counts_[b];
}

uint64_t RecencyHistogram::NewestStamp() const {
  for (uint32_t b = kBuckets; b-- > 0;) {
    if (counts_[b] != 0) return base_ + ((uint64_t{b} + 1) << shift_) - 1;
  }
  return base_;
}

void RecencyHistogram::Add(uint32_t stamp) {
  if (size_ == 0) {
    Clear();
    // Leave room below the first stamp: an event's blocks are stamped newest
    // first (see BlockIndex::Store), so the next adds may be slightly older.
    base_ = stamp > kBuckets / 2 ? stamp - kBuckets / 2 : 0;
  } else if (stamp < base_) {
    Rebuild(stamp, NewestStamp(), Room::kBelow);
  } else if (((stamp - base_) >> shift_) >= kBuckets) {
    Rebuild(OldestStamp(), stamp, Room::kAbove);
  }
  uint32_t b = Bucket(stamp);
  ++counts_[b];
  ++groups_[b >> kGroupBits];
  if (b < memo_bucket_) ++memo_below_;   // kNoMemo: counts nothing that is read
  ++size_;
}

void RecencyHistogram::Remove(uint32_t stamp) {
  if (size_ == 0) return;
  uint32_t b = Bucket(stamp);
  if (counts_[b] == 0) return;  // not live: ignore rather than corrupt
  --counts_[b];
  --groups_[b >> kGroupBits];
  if (b < memo_bucket_) --memo_below_;
  --size_;
}

double RecencyHistogram::Rank(uint32_t stamp) {
  if (size_ <= 1) return 0.0;
  uint32_t b = Bucket(stamp);
  if (b != memo_bucket_) {
    memo_bucket_ = b;
    memo_below_ = CountBelow(b);
  }
  const uint64_t older = memo_below_;
  double same = counts_[b] > 0 ? static_cast<double>(counts_[b] - 1) : 0.0;
  double r = (static_cast<double>(older) + same / 2) / static_cast<double>(size_ - 1);
  return r > 1.0 ? 1.0 : r;
}

void RecencyHistogram::Clear() {
  counts_.fill(0);
  groups_.fill(0);
  memo_bucket_ = kNoMemo;
  base_ = 0;
  shift_ = 0;
  size_ = 0;
}

}  // namespace kvidx::internal
