// MergeTable: BPE's (left id, right id) -> (rank, merged id), an
// open-addressing hash table with linear probing, built once at load and
// read-only afterwards (so thread-safe to read). The BPE merge loop does one
// lookup per adjacent pair; a flat table keeps that to one cache line.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace kvidx::tokenizer {

class MergeTable {
 public:
  struct Target {
    uint32_t rank;
    uint32_t id;
  };

  // `expected` sizes the table; Insert beyond it still works (it grows).
  explicit MergeTable(size_t expected = 0) { Reserve(expected); }

  // Sets the target of (left, right), replacing an earlier one.
  void Insert(uint32_t left, uint32_t right, Target target);

  const Target* Find(uint32_t left, uint32_t right) const {
    if (slots_.empty()) return nullptr;
    const uint64_t key = Key(left, right);
    for (size_t i = Home(key);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == key) return &s.target;
      if (s.key == kEmpty) return nullptr;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  struct Slot {
    uint64_t key = kEmpty;
    Target target{};
  };
  static uint64_t Key(uint32_t left, uint32_t right) { return (uint64_t{left} << 32) | right; }
  size_t Home(uint64_t key) const { return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_); }
  void Reserve(size_t count);

  std::vector<Slot> slots_;
  size_t size_ = 0;
  size_t mask_ = 0;
  unsigned shift_ = 64;
};

}  // namespace kvidx::tokenizer
