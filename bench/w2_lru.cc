#include "bench/w2_lru.h"

#include <bit>
#include <cstdio>
#include <cstdlib>

namespace kvidx::bench {

LruBlockSet::LruBlockSet(uint32_t max_blocks)
    : nodes_(uint64_t{max_blocks} + 1),
      slots_(std::bit_ceil(2 * (uint64_t{max_blocks} + 1)), kNone),
      mask_(slots_.size() - 1) {
  nodes_[0].prev = nodes_[0].next = 0;
  for (uint32_t n = max_blocks; n >= 1; --n) {
    nodes_[n].next = free_;
    free_ = n;
  }
}

// The slot holding `key`, or the empty slot where it would go.
uint32_t* LruBlockSet::FindSlot(uint64_t key) {
  for (uint64_t i = key & mask_;; i = (i + 1) & mask_) {
    uint32_t n = slots_[i];
    if (n == kNone || nodes_[n].key == key) return &slots_[i];
  }
}

// Backward-shift deletion: later entries of the probe run move into the
// hole, so lookups never need tombstones and the load stays what size_ says.
void LruBlockSet::EraseSlot(uint32_t* slot) {
  uint64_t hole = static_cast<uint64_t>(slot - slots_.data());
  for (uint64_t i = (hole + 1) & mask_; slots_[i] != kNone; i = (i + 1) & mask_) {
    const uint64_t home = nodes_[slots_[i]].key & mask_;
    // Entry i may move to the hole only if its home is not in (hole, i].
    if (((i - home) & mask_) >= ((i - hole) & mask_)) {
      slots_[hole] = slots_[i];
      hole = i;
    }
  }
  slots_[hole] = kNone;
}

void LruBlockSet::Unlink(uint32_t n) {
  nodes_[nodes_[n].prev].next = nodes_[n].next;
  nodes_[nodes_[n].next].prev = nodes_[n].prev;
}

void LruBlockSet::PushNewest(uint32_t n) {
  const uint32_t newest = nodes_[0].prev;
  nodes_[n].prev = newest;
  nodes_[n].next = 0;
  nodes_[newest].next = n;
  nodes_[0].prev = n;
}

bool LruBlockSet::Touch(uint64_t key) {
  uint32_t* slot = FindSlot(key);
  if (*slot != kNone) {
    Unlink(*slot);
    PushNewest(*slot);
    return true;
  }
  if (free_ == kNone) {
    std::fprintf(stderr, "LruBlockSet: more than %zu blocks\n", nodes_.size() - 1);
    std::abort();
  }
  const uint32_t n = free_;
  free_ = nodes_[n].next;
  nodes_[n].key = key;
  PushNewest(n);
  *slot = n;
  ++size_;
  return false;
}

uint64_t LruBlockSet::PopOldest() {
  const uint32_t n = nodes_[0].next;
  const uint64_t key = nodes_[n].key;
  Unlink(n);
  EraseSlot(FindSlot(key));
  nodes_[n].next = free_;
  free_ = n;
  --size_;
  return key;
}

}  // namespace kvidx::bench
