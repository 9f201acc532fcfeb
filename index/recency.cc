#include "index/recency.h"

namespace kvidx::internal {

uint32_t RecencyHistogram::Bucket(uint32_t stamp) const {
  if (stamp < base_) return 0;
  uint64_t b = (stamp - base_) >> shift_;
  return b >= kBuckets ? kBuckets - 1 : static_cast<uint32_t>(b);
}

void RecencyHistogram::FenwickAdd(uint32_t i, int64_t d) {
  for (uint32_t x = i + 1; x <= kBuckets; x += x & (~x + 1)) tree_[x] += static_cast<uint64_t>(d);
}

uint64_t RecencyHistogram::FenwickPrefix(uint32_t i) const {
  uint64_t s = 0;
  for (uint32_t x = i + 1; x > 0; x -= x & (~x + 1)) s += tree_[x];
  return s;
}

uint32_t RecencyHistogram::OldestStamp() const {
  if (size_ == 0) return 0;
  for (uint32_t b = 0; b < kBuckets; ++b) {
    if (counts_[b] != 0) return static_cast<uint32_t>(base_ + (uint64_t{b} << shift_));
  }
  return static_cast<uint32_t>(base_);
}

void RecencyHistogram::Rebuild(uint64_t lo, uint64_t hi) {
  // Keep half the window free ahead of `hi` so that the next rebuild is
  // kBuckets/2 buckets of clock away: amortised O(1) per Add.
  uint32_t shift = shift_;
  while (((hi >> shift) - (lo >> shift)) >= kBuckets / 2) ++shift;
  uint64_t base = (lo >> shift) << shift;
  std::array<uint32_t, kBuckets> old = counts_;
  uint64_t old_base = base_;
  uint32_t old_shift = shift_;
  counts_.fill(0);
  tree_.fill(0);
  base_ = base;
  shift_ = shift;
  for (uint32_t b = 0; b < kBuckets; ++b) {
    if (old[b] == 0) continue;
    uint64_t start = old_base + (uint64_t{b} << old_shift);
    uint64_t nb = start < base ? 0 : (start - base) >> shift;
    if (nb >= kBuckets) nb = kBuckets - 1;
    counts_[nb] += old[b];
  }
  for (uint32_t b = 0; b < kBuckets; ++b) {
    if (counts_[b] != 0) FenwickAdd(b, counts_[b]);
  }
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
    Rebuild(stamp, NewestStamp());
  } else if (((stamp - base_) >> shift_) >= kBuckets) {
    Rebuild(OldestStamp(), stamp);
  }
  uint32_t b = Bucket(stamp);
  ++counts_[b];
  FenwickAdd(b, 1);
  ++size_;
}

void RecencyHistogram::Remove(uint32_t stamp) {
  if (size_ == 0) return;
  uint32_t b = Bucket(stamp);
  if (counts_[b] == 0) return;  // not live: ignore rather than corrupt
  --counts_[b];
  FenwickAdd(b, -1);
  --size_;
}

double RecencyHistogram::Rank(uint32_t stamp) const {
  if (size_ <= 1) return 0.0;
  uint32_t b = Bucket(stamp);
  uint64_t older = b == 0 ? 0 : FenwickPrefix(b - 1);
  double same = counts_[b] > 0 ? static_cast<double>(counts_[b] - 1) : 0.0;
  double r = (static_cast<double>(older) + same / 2) / static_cast<double>(size_ - 1);
  return r > 1.0 ? 1.0 : r;
}

void RecencyHistogram::Clear() {
  counts_.fill(0);
  tree_.fill(0);
  base_ = 0;
  shift_ = 0;
  size_ = 0;
}

}  // namespace kvidx::internal
