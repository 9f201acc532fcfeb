// StampRanges (index/internal/stamp_ranges.h) against a dense array of
// optional stamps: random descending stamps over overlapping, nested and
// adjacent ranges (some continuing a neighbour's descent, so pieces merge)
// cleared positions and rebases (stamps moved down, the oldest folded into
// 0), every position checked.
#include "index/internal/stamp_ranges.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <random>
#include <vector>

namespace kvidx::internal {
namespace {

TEST(StampRangesTest, AgreesWithADenseArray) {
  constexpr uint32_t kLen = 70;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE(seed);
    std::mt19937_64 rng(seed);
    StampRanges ranges;
    std::vector<std::optional<uint32_t>> dense(kLen);
    uint32_t clock = 1000;
    for (int step = 0; step < 300; ++step) {
      if (rng() % 4 == 0) {
        const uint32_t pos = static_cast<uint32_t>(rng() % kLen);
        ranges.Clear(pos);
        dense[pos].reset();
      } else if (rng() % 20 == 0) {
        const uint32_t base = clock - static_cast<uint32_t>(rng() % 400);
        ranges.Rebase(base);
        for (auto& d : dense) {
          if (d) d = *d > base ? *d - base : 0;
        }
        clock -= base;
      } else {
        const uint32_t b = static_cast<uint32_t>(rng() % kLen);
        const uint32_t e = b + static_cast<uint32_t>(rng() % (kLen - b + 1));
        // Half the time continue the descent of the stamp just before b.
        uint32_t top = clock += 100;
        if (rng() % 2 == 0 && b > 0 && dense[b - 1] && *dense[b - 1] > e - b) top = *dense[b - 1] - 1;
        ranges.Set(b, e, top);
        for (uint32_t p = b; p < e; ++p) dense[p] = top - (p - b);
      }
      for (uint32_t p = 0; p < kLen; ++p) ASSERT_EQ(ranges.At(p), dense[p]) << "position " << p;
    }
  }
}

TEST(StampRangesTest, AStoreThenItsContinuationIsOnePiece) {
  StampRanges ranges;
  ranges.Set(0, 16, 100);    // stamps 100..85
  ranges.Set(16, 32, 84);    // 84..69: the same descent
  EXPECT_EQ(ranges.At(31), 69u);
  EXPECT_EQ(ranges.pieces(), 1u);
}

TEST(StampRangesTest, ARebaseKeepsTheNewestAndFoldsTheRest) {
  StampRanges ranges;
  ranges.Set(0, 10, 109);   // 109..100
  ranges.Rebase(104);       // 5..1, then five zeros
  EXPECT_EQ(ranges.At(0), 5u);
  EXPECT_EQ(ranges.At(4), 1u);
  EXPECT_EQ(ranges.At(5), 0u);
  EXPECT_EQ(ranges.At(9), 0u);
  ranges.Clear(9);
  EXPECT_EQ(ranges.At(9), std::nullopt);
  EXPECT_EQ(ranges.At(8), 0u);
}

TEST(StampRangesTest, EmptyAndOutOfRangeCallsChangeNothing) {
  StampRanges ranges;
  ranges.Set(5, 5, 9);
  ranges.Clear(3);
  EXPECT_TRUE(ranges.empty());
  EXPECT_EQ(ranges.At(0), std::nullopt);
}

}  // namespace
}  // namespace kvidx::internal
