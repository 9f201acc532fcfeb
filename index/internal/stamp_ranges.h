// Internal to the block index: one owner's recency stamps over the
// positions of a run (run_store.h), as pieces of consecutive clock values.
//
// A store stamps its blocks with consecutive values of the source's clock,
// earlier blocks newer (vLLM frees a request's blocks tail first, so its
// LRU evicts the tail before the head); a hit re-stamps the prefix it
// touched the same way. So a run's stamps are a few pieces where
// stamp(p) = top - (p - begin), however long the run.
//
// Not thread-safe.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace kvidx::internal {

class StampRanges {
 public:
  // Positions [begin, end) get stamps top, top - 1, ... (top >= end - begin - 1).
  void Set(uint32_t begin, uint32_t end, uint32_t top) {
    if (begin >= end) return;
    Cut(begin, end);
    auto it = std::lower_bound(pieces_.begin(), pieces_.end(), begin,
                               [](const Piece& x, uint32_t p) { return x.begin < p; });
    it = pieces_.insert(it, Piece{begin, end, top});
    // Merge with neighbours that continue the same descent.
    if (it + 1 != pieces_.end() && Continues(*it, *(it + 1))) {
      it->end = (it + 1)->end;
      pieces_.erase(it + 1);
    }
    if (it != pieces_.begin() && Continues(*(it - 1), *it)) {
      (it - 1)->end = it->end;
      pieces_.erase(it);
    }
  }

  // Position `pos` has no stamp any more (its block left the owner). A
  // piece's first or last position (LRU evictions take a chain from one
  // end) shrinks it in place.
  void Clear(uint32_t pos) {
    auto it = std::upper_bound(pieces_.begin(), pieces_.end(), pos,
                               [](uint32_t p, const Piece& x) { return p < x.end; });
    if (it == pieces_.end() || it->begin > pos) return;
    if (it->end - it->begin == 1) {
      pieces_.erase(it);
    } else if (pos == it->begin) {
      ++it->begin;
      --it->top;
    } else if (pos + 1 == it->end) {
      --it->end;
    } else {
      Cut(pos, pos + 1);
    }
  }

  // Every stamp moves down by `base`; stamps <= base become 0 (a clock
  // rebase folds the oldest into "ancient"). A zero stamp cannot continue
  // a descent, so each becomes a piece of its own: rebases keep the newest
  // stamps, and few blocks live long enough to be folded.
  void Rebase(uint32_t base) {
    std::vector<Piece> out;
    out.reserve(pieces_.size());
    for (const Piece& p : pieces_) {
      const uint32_t live = p.top > base ? std::min(p.end - p.begin, p.top - base) : 0;   // positions kept > 0
      if (live > 0) out.push_back(Piece{p.begin, p.begin + live, p.top - base});
      for (uint32_t pos = p.begin + live; pos < p.end; ++pos) out.push_back(Piece{pos, pos + 1, 0});
    }
    pieces_.swap(out);
  }

  // The stamp of `pos`, if it has one.
  std::optional<uint32_t> At(uint32_t pos) const {
    auto it = std::upper_bound(pieces_.begin(), pieces_.end(), pos,
                               [](uint32_t p, const Piece& x) { return p < x.end; });
    if (it == pieces_.end() || it->begin > pos) return std::nullopt;
    return it->top - (pos - it->begin);
  }

  bool empty() const { return pieces_.empty(); }
  size_t pieces() const { return pieces_.size(); }
  size_t bytes() const { return pieces_.capacity() * sizeof(Piece); }

 private:
  struct Piece {
    uint32_t begin, end, top;   // stamp(p) = top - (p - begin) on [begin, end)
  };
  static bool Continues(const Piece& a, const Piece& b) {
    return a.end == b.begin && a.top - (a.end - a.begin) == b.top;
  }
  // Removes [begin, end) from every piece, keeping what lies outside.
  void Cut(uint32_t begin, uint32_t end) {
    auto it = std::upper_bound(pieces_.begin(), pieces_.end(), begin,
                               [](uint32_t p, const Piece& x) { return p < x.end; });
    while (it != pieces_.end() && it->begin < end) {
      const Piece p = *it;
      it = pieces_.erase(it);
      if (p.end > end) it = pieces_.insert(it, Piece{end, p.end, p.top - (end - p.begin)});
      if (p.begin < begin) it = pieces_.insert(it, Piece{p.begin, begin, p.top}) + 1;
      if (p.end > end) break;
    }
  }

  std::vector<Piece> pieces_;   // sorted, disjoint
};

}  // namespace kvidx::internal
