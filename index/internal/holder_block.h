// Internal to the block index: which positions of one run each of its
// owners holds (run_store.h), in a block that lock-free readers may read
// while the writer changes it.
//
// One row per owner: its identity and words() 64-bit words, bit p for run
// position p. A block's capacity (rows, words per row) is fixed when it is
// made; a writer that needs more makes a larger copy (Grown), publishes it
// in place of this one and retires this one to an epoch domain, so a
// reader still holding it reads allocated, if stale, memory. Within the
// capacity, rows and bits change in place.
//
// Readers: any thread, no lock, relaxed loads; what they read is torn
// unless a sequence lock validates it (the run's, see run_store.h).
// Writer: one thread, inside the run's write section. `held` counts are
// the writer's alone.
#pragma once

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>

namespace kvidx::internal {

class alignas(8) HolderBlock {   // rows start 8-aligned after it
 public:
  static constexpr uint32_t kNoRow = ~0u;

  // An empty block with room for `rows` rows of `words` words.
  static HolderBlock* New(uint32_t rows, uint32_t words);
  // A copy of `old` with room for at least `rows` rows and `words` words.
  static HolderBlock* Grown(const HolderBlock& old, uint32_t rows, uint32_t words);
  // Frees a block from New or Grown (an epoch domain's deleter).
  static void Delete(void* block);

  // --- Readers
  uint32_t count() const {   // rows in use, <= capacity()
    const uint32_t n = std::atomic_ref<uint32_t>(const_cast<uint32_t&>(count_)).load(std::memory_order_acquire);
    return n < capacity_ ? n : capacity_;
  }
  uint32_t capacity() const { return capacity_; }
  uint32_t words() const { return words_; }
  uint32_t owner(uint32_t row) const { return Load(Rows()[row].owner); }
  // Word w of `row` (0 past the row's words).
  uint64_t word(uint32_t row, uint32_t w) const { return w < words_ ? Load(Bits(row)[w]) : 0; }
  bool Has(uint32_t row, uint32_t pos) const { return (word(row, pos / 64) >> (pos % 64) & 1) != 0; }
  // Consecutive held positions of `row` from `from`, at most `cap`.
  // Inline: a query calls it once per source and segment.
  uint32_t LeadingFrom(uint32_t row, uint32_t from, uint32_t cap) const {
    uint32_t n = 0;
    for (uint32_t w = from / 64; w < words_ && n < cap; ++w) {
      const uint32_t skip = w == from / 64 ? from % 64 : 0;
      const uint32_t ones = static_cast<uint32_t>(std::countr_one(Load(Bits(row)[w]) >> skip));
      n += ones < 64 - skip ? ones : 64 - skip;
      if (ones < 64 - skip) break;
    }
    return n < cap ? n : cap;
  }

  // --- The writer
  // The row of `owner`, or kNoRow. Inline: a store asks once per block.
  uint32_t Find(uint32_t owner) const {
    const uint32_t n = count_;
    for (uint32_t r = 0; r < n; ++r) {
      if (Rows()[r].owner == owner) return r;
    }
    return kNoRow;
  }
  uint32_t held(uint32_t row) const { return Rows()[row].held; }
  // fn(pos) for every position `row` holds, ascending (the writer's).
  template <typename Fn>
  void ForEachHeld(uint32_t row, Fn fn) const {
    for (uint32_t w = 0; w < words_; ++w) {
      for (uint64_t bits = word(row, w); bits != 0; bits &= bits - 1) {
        fn(w * 64 + static_cast<uint32_t>(std::countr_zero(bits)));
      }
    }
  }
  // Whether a row other than `row` holds `pos`; the writer's. Early exit:
  // a shared position is usually found in the first rows.
  bool HeldByOther(uint32_t row, uint32_t pos) const {
    if (pos / 64 >= words_) return false;
    const uint64_t bit = uint64_t{1} << (pos % 64);
    for (uint32_t r = 0; r < count_; ++r) {
      if (r != row && (Bits(r)[pos / 64] & bit) != 0) return true;
    }
    return false;
  }
  // Positions `row` holds that no other row does; O(rows x words).
  uint32_t HeldOnlyBy(uint32_t row) const;
  // Appends a row for `owner`, holding nothing; count() < capacity().
  uint32_t Add(uint32_t owner);
  // Removes `row`, moving the last row into its place.
  void Drop(uint32_t row);
  // Sets / clears position `pos` (pos / 64 < words()); false when it
  // already was / was not held.
  // Inline: a store sets one per block.
  bool Set(uint32_t row, uint32_t pos) {
    uint64_t& w = Bits(row)[pos / 64];
    const uint64_t bit = uint64_t{1} << (pos % 64);
    if ((w & bit) != 0) return false;
    Store(w, w | bit);
    ++Rows()[row].held;
    return true;
  }
  bool Clear(uint32_t row, uint32_t pos) {
    if (pos / 64 >= words_) return false;
    uint64_t& w = Bits(row)[pos / 64];
    const uint64_t bit = uint64_t{1} << (pos % 64);
    if ((w & bit) == 0) return false;
    Store(w, w & ~bit);
    --Rows()[row].held;
    return true;
  }
  // One past the highest position `row` holds (0 if none).
  uint32_t End(uint32_t row) const;
  size_t bytes() const { return BytesFor(capacity_, words_); }

 private:
  struct Row {
    uint32_t owner;
    uint32_t held;
  };
  static size_t BytesFor(uint32_t rows, uint32_t words) {
    return sizeof(HolderBlock) + rows * (sizeof(Row) + words * sizeof(uint64_t));
  }
  template <typename T>
  static T Load(const T& x) {
    return std::atomic_ref<T>(const_cast<T&>(x)).load(std::memory_order_relaxed);
  }
  template <typename T>
  static void Store(T& x, T v) {
    std::atomic_ref<T>(x).store(v, std::memory_order_relaxed);
  }
  Row* Rows() const { return reinterpret_cast<Row*>(const_cast<HolderBlock*>(this) + 1); }
  uint64_t* Bits(uint32_t row) const {
    return reinterpret_cast<uint64_t*>(Rows() + capacity_) + size_t{row} * words_;
  }

  uint32_t capacity_;
  uint32_t words_;
  uint32_t count_;
};

}  // namespace kvidx::internal
