// Internal to the block index: which positions of a run of blocks one
// owner holds, one bit per position (the run store's membership; see
// run_store.h). Writer-side for now: plain words, one thread.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace kvidx::internal {

// Owner `owner` holds position p iff bit p is set: bits 0-63 in `first`
// (most runs are short), the rest in `more` (words past its end are zero).
// `held` counts the set bits.
struct HeldBits {
  uint32_t owner;
  uint32_t held = 0;
  uint64_t first = 0;
  std::vector<uint64_t> more;

  explicit HeldBits(uint32_t o) : owner(o) {}
  size_t words() const { return 1 + more.size(); }
  uint64_t word(size_t w) const { return w == 0 ? first : w - 1 < more.size() ? more[w - 1] : 0; }
  uint64_t& grow_word(size_t w) {
    if (w == 0) return first;
    if (more.size() < w) more.resize(w);
    return more[w - 1];
  }
  bool Has(uint32_t pos) const { return (word(pos / 64) >> (pos % 64) & 1) != 0; }
  // Sets / clears one position; false if it already was / was not held.
  bool Set(uint32_t pos) {
    uint64_t& w = grow_word(pos / 64);
    const uint64_t bit = uint64_t{1} << (pos % 64);
    if ((w & bit) != 0) return false;
    w |= bit;
    ++held;
    return true;
  }
  bool Clear(uint32_t pos) {
    if (!Has(pos)) return false;
    grow_word(pos / 64) &= ~(uint64_t{1} << (pos % 64));
    --held;
    return true;
  }
  // Consecutive held positions from `from`, at most `cap`.
  uint32_t LeadingFrom(uint32_t from, uint32_t cap) const {
    uint32_t n = 0;
    for (size_t w = from / 64; w < words() && n < cap; ++w) {
      const uint32_t skip = w == from / 64 ? from % 64 : 0;
      const uint64_t bits = word(w) >> skip;
      const uint32_t ones = static_cast<uint32_t>(std::countr_one(bits));
      n += std::min(ones, 64 - skip);
      if (ones < 64 - skip) break;
    }
    return std::min(n, cap);
  }
  // One past the highest held position (0 if none).
  uint32_t End() const {
    for (size_t w = words(); w-- > 0;) {
      if (word(w) != 0) return static_cast<uint32_t>(w * 64 + 64 - std::countl_zero(word(w)));
    }
    return 0;
  }
};

// The holder of `owner` among `holders`, added if absent.
inline HeldBits& HolderOf(std::vector<HeldBits>& holders, uint32_t owner) {
  for (HeldBits& h : holders) {
    if (h.owner == owner) return h;
  }
  return holders.emplace_back(owner);
}

// Clears `owner`'s hold on position `pos`, dropping its holder when it
// holds nothing else; false if it did not hold the position.
inline bool Unhold(std::vector<HeldBits>& holders, uint32_t owner, uint32_t pos) {
  auto h = std::find_if(holders.begin(), holders.end(), [&](const HeldBits& x) { return x.owner == owner; });
  if (h == holders.end() || !h->Clear(pos)) return false;
  if (h->held == 0) {
    *h = std::move(holders.back());
    holders.pop_back();
  }
  return true;
}

// Held positions over every run's holders: `owner`'s, or every owner's when
// it is nullopt.
template <typename Runs>
uint64_t CountHeld(const Runs& runs, std::optional<uint32_t> owner) {
  uint64_t n = 0;
  for (const auto& run : runs) {
    for (const HeldBits& h : run.holders) n += !owner || h.owner == *owner ? h.held : 0;
  }
  return n;
}

}  // namespace kvidx::internal
