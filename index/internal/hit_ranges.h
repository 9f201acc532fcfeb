// Internal to the block index: one owner's engine-confirmed hit counts
// over the positions of a run (run_store.h), as ranges of equal counts;
// the run store keeps its extra copy counts the same way (a store of a
// prefix already held adds a copy over a range, as a hit does).
//
// A full-report hit re-announces a request's cached blocks from block 0,
// so hits arrive as +1 over a range of consecutive positions, and the
// positions of a prefix end up with equal or stepped counts: a few pieces
// per run, however long it is. A query sums counts over a matched segment
// in O(pieces).
//
// Not thread-safe.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace kvidx::internal {

class HitRanges {
 public:
  struct Sum {
    uint64_t hits = 0;         // summed counts
    uint32_t hit_blocks = 0;   // positions with a count > 0
  };
  struct Piece {
    uint32_t begin, end, count;   // count > 0 on [begin, end)
  };
  // Over() on sorted, disjoint pieces (this class's or a copy of them).
  static Sum SumOver(std::span<const Piece> pieces, uint32_t begin, uint32_t end) {
    Sum s;
    auto it = std::upper_bound(pieces.begin(), pieces.end(), begin,
                               [](uint32_t p, const Piece& x) { return p < x.end; });
    for (; it != pieces.end() && it->begin < end; ++it) {
      const uint32_t n = std::min(it->end, end) - std::max(it->begin, begin);
      s.hits += uint64_t{it->count} * n;
      s.hit_blocks += n;
    }
    return s;
  }

  // One more hit on every position in [begin, end).
  void AddOne(uint32_t begin, uint32_t end) { Add(begin, end, 1); }

  // `n` more on every position in [begin, end) (counts saturate at 2^32 - 1).
  void Add(uint32_t begin, uint32_t end, uint32_t n) {
    if (begin >= end || n == 0) return;
    if (pieces_.empty() || pieces_.back().end <= begin) {   // past every piece: a restore's order
      if (!pieces_.empty() && pieces_.back().end == begin && pieces_.back().count == n) {
        pieces_.back().end = end;
      } else {
        pieces_.push_back(Piece{begin, end, n});
      }
      return;
    }
    std::vector<Piece> out;
    out.reserve(pieces_.size() + 2);
    auto push = [&](Piece p) {   // appends, merging with an equal neighbour
      if (p.begin >= p.end) return;
      if (!out.empty() && out.back().end == p.begin && out.back().count == p.count) {
        out.back().end = p.end;
      } else {
        out.push_back(p);
      }
    };
    size_t i = 0;
    while (i < pieces_.size() && pieces_[i].end <= begin) out.push_back(pieces_[i++]);
    for (uint32_t pos = begin; pos < end;) {
      if (i < pieces_.size() && pieces_[i].begin <= pos) {   // pieces_[i] covers pos
        const Piece p = pieces_[i++];
        const uint32_t stop = std::min(p.end, end);
        if (p.begin < pos) push({p.begin, pos, p.count});
        push({pos, stop, p.count + std::min(n, ~0u - p.count)});
        if (p.end > end) push({end, p.end, p.count});
        pos = stop;
      } else {
        const uint32_t stop = i < pieces_.size() ? std::min(pieces_[i].begin, end) : end;
        push({pos, stop, n});
        pos = stop;
      }
    }
    while (i < pieces_.size()) push(pieces_[i++]);
    pieces_.swap(out);
  }

  // Position `pos` has no hits any more (its block left the owner).
  void Clear(uint32_t pos) {
    auto it = std::upper_bound(pieces_.begin(), pieces_.end(), pos,
                               [](uint32_t p, const Piece& x) { return p < x.end; });
    if (it == pieces_.end() || it->begin > pos) return;
    if (it->end - it->begin > 1 && (pos == it->begin || pos + 1 == it->end)) {   // shrink in place
      pos == it->begin ? ++it->begin : --it->end;
      return;
    }
    const Piece p = *it;
    it = pieces_.erase(it);
    if (pos + 1 < p.end) it = pieces_.insert(it, Piece{pos + 1, p.end, p.count});
    if (p.begin < pos) pieces_.insert(it, Piece{p.begin, pos, p.count});
  }

  // One count less on position `pos` (which has one).
  void SubOne(uint32_t pos) {
    auto it = std::upper_bound(pieces_.begin(), pieces_.end(), pos,
                               [](uint32_t p, const Piece& x) { return p < x.end; });
    if (it == pieces_.end() || it->begin > pos) return;
    const Piece p = *it;
    if (p.count == 1) {
      Clear(pos);
      return;
    }
    it = pieces_.erase(it);
    if (pos + 1 < p.end) it = pieces_.insert(it, Piece{pos + 1, p.end, p.count});
    it = pieces_.insert(it, Piece{pos, pos + 1, p.count - 1});
    if (p.begin < pos) pieces_.insert(it, Piece{p.begin, pos, p.count});
  }

  // Counts over [begin, end).
  Sum Over(uint32_t begin, uint32_t end) const { return SumOver(pieces_, begin, end); }

  bool empty() const { return pieces_.empty(); }
  size_t pieces() const { return pieces_.size(); }
  std::span<const Piece> all() const { return pieces_; }
  size_t bytes() const { return pieces_.capacity() * sizeof(Piece); }

 private:
  std::vector<Piece> pieces_;   // sorted, disjoint
};

}  // namespace kvidx::internal
