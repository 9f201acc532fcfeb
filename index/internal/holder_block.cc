#include "index/internal/holder_block.h"

#include <algorithm>
#include <cstring>
#include <new>

namespace kvidx::internal {

HolderBlock* HolderBlock::New(uint32_t rows, uint32_t words) {
  void* mem = ::operator new(BytesFor(rows, words));
  std::memset(mem, 0, BytesFor(rows, words));
  auto* b = new (mem) HolderBlock;
  b->capacity_ = rows;
  b->words_ = words;
  b->count_ = 0;
  return b;
}

HolderBlock* HolderBlock::Grown(const HolderBlock& old, uint32_t rows, uint32_t words) {
  HolderBlock* b = New(std::max(rows, old.capacity_), std::max(words, old.words_));
  const uint32_t n = old.count();
  for (uint32_t r = 0; r < n; ++r) {
    b->Rows()[r] = Row{old.owner(r), old.held(r)};
    for (uint32_t w = 0; w < old.words_; ++w) b->Bits(r)[w] = old.word(r, w);
  }
  b->count_ = n;
  return b;
}

void HolderBlock::Delete(void* block) {
  static_cast<HolderBlock*>(block)->~HolderBlock();
  ::operator delete(block);
}

uint32_t HolderBlock::Add(uint32_t owner) {
  const uint32_t r = count_;
  Store(Rows()[r].owner, owner);
  Rows()[r].held = 0;   // its words are zero: fresh, or cleared by Drop
  std::atomic_ref<uint32_t>(count_).store(r + 1, std::memory_order_release);
  return r;
}

void HolderBlock::Drop(uint32_t row) {
  const uint32_t last = count_ - 1;
  if (row != last) {
    Store(Rows()[row].owner, Rows()[last].owner);
    Rows()[row].held = Rows()[last].held;
    for (uint32_t w = 0; w < words_; ++w) Store(Bits(row)[w], Bits(last)[w]);
  }
  for (uint32_t w = 0; w < words_; ++w) Store(Bits(last)[w], uint64_t{0});
  std::atomic_ref<uint32_t>(count_).store(last, std::memory_order_release);
}

uint32_t HolderBlock::HeldOnlyBy(uint32_t row) const {
  uint32_t n = 0;
  for (uint32_t w = 0; w < words_; ++w) {
    uint64_t others = 0;
    for (uint32_t r = 0; r < count_; ++r) others |= r == row ? 0 : Bits(r)[w];
    n += static_cast<uint32_t>(std::popcount(Bits(row)[w] & ~others));
  }
  return n;
}

uint32_t HolderBlock::End(uint32_t row) const {
  for (uint32_t w = words_; w-- > 0;) {
    const uint64_t bits = Bits(row)[w];
    if (bits != 0) return w * 64 + 64 - static_cast<uint32_t>(std::countl_zero(bits));
  }
  return 0;
}

}  // namespace kvidx::internal
