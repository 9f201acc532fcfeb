// RecencyHistogram against an exact model: ranks within the one-bucket
// accuracy the header promises, and a window that moves O(1) amortised times
// per Add whichever way the stamps go.
#include "index/recency.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>

namespace kvidx::internal {
namespace {

// Fraction of the other live stamps older than `stamp`, counting equal ones
// as half older: what Rank() approximates.
double ExactRank(const std::multiset<uint32_t>& live, uint32_t stamp) {
  if (live.size() <= 1) return 0.0;
  const double older = static_cast<double>(std::distance(live.begin(), live.lower_bound(stamp)));
  const double same = static_cast<double>(live.count(stamp) - 1);
  return (older + same / 2) / static_cast<double>(live.size() - 1);
}

// The header's bound: one bucket is at most 1/512 of the live stamp span, so
// a rank can be off by the share of live stamps in one bucket. With stamps
// spread evenly that share is small; allow a few buckets of slack.
constexpr double kRankSlack = 8.0 / 512;

TEST(RecencyHistogram, RanksFollowAnExactModelAsTheClockRuns) {
  RecencyHistogram h;
  std::multiset<uint32_t> live;
  std::mt19937 rng(7);
  uint32_t clock = 1;
  for (int step = 0; step < 40000; ++step) {
    const uint32_t n = 1 + rng() % 64;
    if (live.size() < 4000 || (live.size() < 8000 && rng() % 2 == 0)) {
      clock += n;   // an event: its blocks stamped newest first
      for (uint32_t i = 0; i < n; ++i) {
        h.Add(clock - i);
        live.insert(clock - i);
      }
    } else {
      // Evict mostly old blocks, sometimes any: LRU with the odd early free.
      for (uint32_t i = 0; i < n; ++i) {
        auto it = live.begin();
        if (rng() % 8 == 0) std::advance(it, rng() % live.size());
        h.Remove(*it);
        live.erase(it);
      }
    }
    ASSERT_EQ(h.size(), live.size());
    if (step % 997 == 0 && !live.empty()) {
      auto it = live.begin();
      std::advance(it, rng() % live.size());
      EXPECT_NEAR(h.Rank(*it), ExactRank(live, *it), kRankSlack) << "step " << step;
    }
  }
}

TEST(RecencyHistogram, ALongFirstEventWalkingDownMovesTheWindowRarely) {
  // A source's first store event of 60,000 blocks: stamps from the newest
  // down, each below the last.
  RecencyHistogram h;
  constexpr uint32_t kTop = 1'000'000;
  constexpr uint32_t kBlocks = 60'000;
  for (uint32_t i = 0; i < kBlocks; ++i) h.Add(kTop - i);
  EXPECT_EQ(h.size(), kBlocks);
  // Each rebuild either doubles the bucket width or frees half the window
  // below: about log2(60,000 / 512) + a few, not one per block.
  EXPECT_LE(h.rebuilds(), 16u);
  EXPECT_NEAR(h.Rank(kTop), 1.0, kRankSlack);
  EXPECT_NEAR(h.Rank(kTop - kBlocks + 1), 0.0, kRankSlack);
  EXPECT_NEAR(h.Rank(kTop - kBlocks / 2), 0.5, kRankSlack);

  // Then events going up again, as the clock does: still rare rebuilds.
  const uint64_t before = h.rebuilds();
  for (uint32_t e = 0; e < 1000; ++e) {
    for (uint32_t i = 0; i < 60; ++i) h.Add(kTop + 60 * (e + 1) - i);
  }
  EXPECT_LE(h.rebuilds() - before, 8u);
}

// Rank keeps the last bucket's count of older stamps across Add and Remove;
// a twin whose memo is flushed before every Rank must read the same.
TEST(RecencyHistogram, RankMemoAgreesWithAFreshCount) {
  RecencyHistogram memo, fresh;
  std::set<uint32_t> live;
  std::mt19937 rng(11);
  uint32_t clock = 10;
  auto add = [&](uint32_t s) {
    memo.Add(s);
    fresh.Add(s);
    live.insert(s);
  };
  for (int round = 0; round < 3000; ++round) {
    const uint32_t n = 1 + rng() % 64;
    clock += n;
    for (uint32_t i = 0; i < n; ++i) add(clock - i);   // an event, newest first
    if (live.size() < 2000) continue;
    // Evict a run of neighbouring stamps, as a removal event does, going up
    // or down (down: each removal is below the bucket Rank just counted).
    const bool down = rng() % 2 == 0;
    auto it = live.lower_bound(*live.begin() + rng() % (clock - *live.begin()));
    for (uint32_t k = 0; k < n && it != live.end() && live.size() > 2; ++k) {
      const uint32_t s = *it;
      const uint32_t far = s - *live.begin() > *live.rbegin() - s ? *live.begin() : *live.rbegin();
      (void)fresh.Rank(far);   // a different bucket's count: the next Rank counts afresh
      const double want = fresh.Rank(s);
      ASSERT_DOUBLE_EQ(memo.Rank(s), want) << "round " << round << " stamp " << s;
      memo.Remove(s);
      fresh.Remove(s);
      it = live.erase(it);
      if (rng() % 4 == 0) {
        // A block stored again: its old stamp leaves without a Rank (often
        // below the counted bucket) and it takes the newest one.
        auto old = live.lower_bound(*live.begin() + rng() % (clock - *live.begin()));
        if (old != live.end() && old != it) {
          const uint32_t was = *old;
          memo.Remove(was);
          fresh.Remove(was);
          live.erase(old);
          // Usually the newest stamp; sometimes the old one again, i.e. an
          // Add below the counted bucket (a restore adds in any order).
          add(rng() % 2 == 0 ? ++clock : was);
        }
      }
      if (down) {
        if (it == live.begin()) break;
        --it;
        if (it != live.begin()) --it;
      }
    }
  }
}

TEST(RecencyHistogram, StampsBelowTheWindowCountAsTheOldest) {
  RecencyHistogram h;
  for (uint32_t s = 100'000; s < 101'000; ++s) h.Add(s);
  h.Add(5);   // far older than anything: the window widens down to it
  EXPECT_EQ(h.Rank(5), 0.0);
  // Buckets now span 1/512 of [5, 101,000] and hold ~256 live stamps each:
  // a rank is exact to that share of the live ones.
  EXPECT_GT(h.Rank(100'999), 0.85);
  EXPECT_LT(h.Rank(100'000), 0.15);
  h.Remove(5);
  EXPECT_EQ(h.size(), 1000u);
}

TEST(RecencyHistogram, RemovingAStampNotLiveChangesNothing) {
  RecencyHistogram h;
  h.Remove(3);   // empty
  EXPECT_EQ(h.size(), 0u);
  h.Add(10);
  h.Add(11);
  h.Remove(2000);   // its bucket is empty
  EXPECT_EQ(h.size(), 2u);
  EXPECT_DOUBLE_EQ(h.Rank(11), 1.0);
  EXPECT_DOUBLE_EQ(h.Rank(10), 0.0);
}

}  // namespace
}  // namespace kvidx::internal
