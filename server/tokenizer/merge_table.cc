#include "server/tokenizer/merge_table.h"

namespace kvidx::tokenizer {

void MergeTable::Reserve(size_t count) {
  size_t capacity = 16;
  unsigned bits = 4;
  while (capacity < count * 2) capacity <<= 1, ++bits;  // load factor <= 1/2
  if (capacity <= slots_.size()) return;
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(capacity, Slot{});
  mask_ = capacity - 1;
  shift_ = 64 - bits;
  size_ = 0;
  for (const Slot& s : old) {
    if (s.key != kEmpty) Insert(static_cast<uint32_t>(s.key >> 32), static_cast<uint32_t>(s.key), s.target);
  }
}

void MergeTable::Insert(uint32_t left, uint32_t right, Target target) {
  if ((size_ + 1) * 2 > slots_.size()) Reserve(size_ + 1);
  const uint64_t key = Key(left, right);
  for (size_t i = Home(key);; i = (i + 1) & mask_) {
    Slot& s = slots_[i];
    if (s.key == key) {
      s.target = target;
      return;
    }
    if (s.key == kEmpty) {
      s.key = key;
      s.target = target;
      ++size_;
      return;
    }
  }
}

}  // namespace kvidx::tokenizer
