// Internal to the block index: the hit counts of one run's owners as
// lock-free readers see them (run_store.h).
//
// The writer keeps each owner's HitRanges for itself and, after a call
// that changed a run's hits, builds a new view of all of them, publishes
// it in place of the old one and retires the old one to an epoch domain.
// A view never changes once built, so a reader needs no validation to read
// it, only the epoch pin that keeps it allocated. Hits change in
// full-report re-announcements and removals, far less often than queries
// read them, and a run has a few pieces per owner with hits.
//
// Readers see each position's count saturated at kMaxViewedHits, as the
// index reports hits over a prefix (prefix_match.h); exact counts stay in
// the writer's ranges.
//
// Readers: any thread (Over). Build and Delete: the writer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>

#include "index/internal/hit_ranges.h"

namespace kvidx::internal {

inline constexpr uint32_t kMaxViewedHits = 255;

class HitView {
 public:
  // A view of `owners` (owner, its ranges or null for none), in the order
  // of the run's holder rows so that Over finds an owner at its row; null
  // when no owner has hits.
  static const HitView* Build(std::span<const std::pair<uint32_t, const HitRanges*>> owners);
  static void Delete(void* view);

  // `owner`'s counts over [begin, end), each saturated at kMaxViewedHits.
  // `row` is where the owner was when the view was built (its holder row):
  // checked first, then every entry (a row that moved since).
  HitRanges::Sum Over(uint32_t owner, uint32_t begin, uint32_t end, uint32_t row = 0) const;
  size_t bytes() const { return BytesFor(owners_, pieces_); }

 private:
  struct Owner {
    uint32_t owner, first, count;   // its pieces: [first, first + count)
  };
  static size_t BytesFor(uint32_t owners, uint32_t pieces) {
    return sizeof(HitView) + owners * sizeof(Owner) + pieces * sizeof(HitRanges::Piece);
  }
  const Owner* Owners() const { return reinterpret_cast<const Owner*>(this + 1); }
  const HitRanges::Piece* Pieces() const { return reinterpret_cast<const HitRanges::Piece*>(Owners() + owners_); }

  uint32_t owners_ = 0;
  uint32_t pieces_ = 0;
};

}  // namespace kvidx::internal
