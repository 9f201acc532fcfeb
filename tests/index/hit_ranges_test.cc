// HitRanges (index/internal/hit_ranges.h) against a dense array of counts:
// random range hits (overlapping, nested, adjacent), cleared positions and
// single-position decrements (the run store's extra copies), counts added
// in any order and in position order (a restore), with every
// sum over every sub-range checked.
#include "index/internal/hit_ranges.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

namespace kvidx::internal {
namespace {

TEST(HitRangesTest, AgreesWithADenseArray) {
  constexpr uint32_t kLen = 70;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE(seed);
    std::mt19937_64 rng(seed);
    HitRanges ranges;
    std::vector<uint32_t> dense(kLen, 0);
    for (int step = 0; step < 200; ++step) {
      const uint64_t op = rng() % 8;
      if (op < 2) {
        const uint32_t pos = static_cast<uint32_t>(rng() % kLen);
        ranges.Clear(pos);
        dense[pos] = 0;
      } else if (op < 4) {
        const uint32_t pos = static_cast<uint32_t>(rng() % kLen);
        if (dense[pos] > 0) {   // SubOne's contract: the position has a count
          ranges.SubOne(pos);
          --dense[pos];
        }
      } else {
        const uint32_t b = static_cast<uint32_t>(rng() % kLen);
        const uint32_t e = b + static_cast<uint32_t>(rng() % (kLen - b + 1));
        const uint32_t n = rng() % 3 == 0 ? 2 + static_cast<uint32_t>(rng() % 4) : 1;
        n == 1 ? ranges.AddOne(b, e) : ranges.Add(b, e, n);
        for (uint32_t p = b; p < e; ++p) dense[p] += n;
      }
      for (uint32_t b = 0; b < kLen; b += 7) {
        for (uint32_t e = b; e <= kLen; e += 5) {
          uint64_t hits = 0;
          uint32_t blocks = 0;
          for (uint32_t p = b; p < e; ++p) {
            hits += dense[p];
            blocks += dense[p] > 0;
          }
          const HitRanges::Sum s = ranges.Over(b, e);
          ASSERT_EQ(s.hits, hits) << b << ".." << e;
          ASSERT_EQ(s.hit_blocks, blocks) << b << ".." << e;
        }
      }
    }
  }
}

TEST(HitRangesTest, APrefixHitRepeatedStaysOnePiece) {
  HitRanges ranges;
  for (int i = 0; i < 100; ++i) ranges.AddOne(0, 5000);
  EXPECT_EQ(ranges.Over(0, 5000).hits, 500000u);
  EXPECT_EQ(ranges.pieces(), 1u);
}

// A restore adds each position's count in position order: equal counts
// merge into one piece, others append; counts saturate.
TEST(HitRangesTest, CountsAddedInPositionOrderMerge) {
  HitRanges ranges;
  for (uint32_t p = 0; p < 100; ++p) ranges.Add(p, p + 1, 3);
  ranges.Add(100, 101, 4);
  ranges.Add(105, 106, 4);
  EXPECT_EQ(ranges.pieces(), 3u);
  EXPECT_EQ(ranges.Over(0, 200).hits, 300u + 8u);
  EXPECT_EQ(ranges.Over(0, 200).hit_blocks, 102u);
  ranges.Add(0, 1, ~0u);
  EXPECT_EQ(ranges.Over(0, 1).hits, uint64_t{~0u});
}

TEST(HitRangesTest, EmptyAndOutOfRangeCallsChangeNothing) {
  HitRanges ranges;
  ranges.AddOne(5, 5);
  ranges.Add(2, 9, 0);
  ranges.Clear(3);
  EXPECT_TRUE(ranges.empty());
  EXPECT_EQ(ranges.Over(0, 10).hits, 0u);
}

}  // namespace
}  // namespace kvidx::internal
