// The pieces the bench's run-compressed reference indexes share
// (radix_prefix_index.h, run_prefix_index.h): HeldBits (which positions of
// a run a replica holds), a block map whose slots point into runs,
// removal, a query segment.
// Single-threaded.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"

namespace kvidx::bench {

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

// Where a block hash sits: run `run`, position `pos`.
struct RunPlace {
  uint32_t run, pos;
};

// One BlockRemoved against a block map and its runs (anything indexable
// by run id with a `holders` member): `replica` stops holding each listed
// block it holds. `touched` is set to the runs that changed, sorted and
// unique, for the caller to prune.
template <typename Map, typename Runs>
void UnholdBlocks(const Map& map, Runs& runs, uint32_t replica, std::span<const uint64_t> blocks,
                  std::vector<uint32_t>* touched) {
  touched->clear();
  for (uint64_t h : blocks) {
    const RunPlace* p = map.Find(h);
    if (p == nullptr) continue;
    const RunPlace at = *p;
    if (!Unhold(runs[at.run].holders, replica, at.pos)) continue;
    if (touched->empty() || touched->back() != at.run) touched->push_back(at.run);
  }
  std::sort(touched->begin(), touched->end());
  touched->erase(std::unique(touched->begin(), touched->end()), touched->end());
}

// One matched segment of a query: keys [i, i + k) are a run's positions
// [from, from + k). Every holder that matched all of keys [0, i) extends
// its match[] by its consecutive held positions from `from`; returns how
// many held all k (only they can continue past the segment).
inline uint32_t MatchSegment(const std::vector<HeldBits>& holders, uint32_t i, uint32_t from, uint32_t k,
                             std::span<uint32_t> match, uint32_t* best) {
  uint32_t through = 0;
  for (const HeldBits& h : holders) {
    if (match[h.owner] != i) continue;
    const uint32_t got = h.LeadingFrom(from, k);
    match[h.owner] = i + got;
    *best = std::max(*best, i + got);
    through += got == k;
  }
  return through;
}

// Block hash -> RunPlace. The set keeps no key: it hashes and compares the
// run's entry at the place (`KeyAt`: RunPlace -> uint64_t, reading the
// owner's runs), which a lookup reads next anyway, so a slot is 8 bytes
// where a (hash -> place) pair would be 16.
template <typename KeyAt>
class RunBlockMap {
 public:
  explicit RunBlockMap(KeyAt key_at) : set_(0, Hash{key_at}, Eq{key_at}) {}

  const RunPlace* Find(uint64_t hash) const {
    auto it = set_.find(Key{hash});
    return it == set_.end() ? nullptr : &*it;
  }
  // Places the block whose hash the run entry at `at` already holds: `at`
  // and true if the hash was not in the map, else its place there and
  // false. One probe either way.
  std::pair<RunPlace, bool> Insert(RunPlace at) {
    auto [it, added] = set_.insert(at);
    return {*it, added};
  }
  // `hash` must be present; its old place must still hold it, and `to`
  // must hold it too.
  void Move(uint64_t hash, RunPlace to) {
    Erase(hash);
    set_.insert(to);
  }
  void Erase(uint64_t hash) { set_.erase(set_.find(Key{hash})); }
  size_t size() const { return set_.size(); }

 private:
  struct Key {
    uint64_t hash;
  };
  struct Hash {
    using is_transparent = void;
    KeyAt key_at;
    size_t operator()(Key k) const { return absl::Hash<uint64_t>()(k.hash); }
    size_t operator()(RunPlace p) const { return (*this)(Key{key_at(p)}); }
  };
  struct Eq {
    using is_transparent = void;
    KeyAt key_at;
    bool operator()(RunPlace a, RunPlace b) const { return key_at(a) == key_at(b); }
    bool operator()(RunPlace a, Key k) const { return key_at(a) == k.hash; }
    bool operator()(Key k, RunPlace a) const { return key_at(a) == k.hash; }
  };
  absl::flat_hash_set<RunPlace, Hash, Eq> set_;
};

}  // namespace kvidx::bench
