// HeapTrimmer's policy on a scripted RSS: a burst starts an episode of
// trims, every 4 s while they return memory and with growing gaps when they
// do not, that ends when RSS is back or after the fourth fruitless trim,
// when the grown RSS becomes the new baseline.
#include "server/heap_trim.h"

#include <gtest/gtest.h>

namespace kvidx::server {
namespace {

using namespace std::chrono_literals;
constexpr uint64_t kMiB = 1 << 20;

struct Script {
  uint64_t rss = 100 * kMiB;
  uint64_t rss_after_trim = 100 * kMiB;
  int trims = 0;
};

class HeapTrimmerTest : public ::testing::Test {
 protected:
  bool Poll(std::chrono::seconds at) {
    return trimmer_.Poll(t0_ + at, script_.rss, [this] {
      script_.rss = script_.rss_after_trim;
      return script_.rss;
    });
  }
  Script script_;
  HeapTrimmer::Clock::time_point t0_ = HeapTrimmer::Clock::now();
  HeapTrimmer trimmer_{64 * kMiB, [this] { ++script_.trims; }};
};

TEST_F(HeapTrimmerTest, SteadyOrSlowlyChangingRssNeverTrims) {
  for (int s = 0; s < 100; ++s) {
    script_.rss = (100 + (s % 50)) * kMiB;
    EXPECT_FALSE(Poll(std::chrono::seconds(s)));
  }
  EXPECT_EQ(script_.trims, 0);
}

TEST_F(HeapTrimmerTest, ABurstIsTrimmedOnceItsMemoryIsFreedWithGrowingGaps) {
  EXPECT_FALSE(Poll(0s));  // baseline 100 MiB
  script_.rss = 900 * kMiB;
  script_.rss_after_trim = 900 * kMiB;  // still in use: the backlog drains
  EXPECT_TRUE(Poll(1s));
  EXPECT_FALSE(Poll(2s));
  EXPECT_FALSE(Poll(4s));
  EXPECT_TRUE(Poll(5s));  // 4 s after the first
  EXPECT_FALSE(Poll(12s));
  script_.rss_after_trim = 110 * kMiB;  // drained: the trim returns it
  EXPECT_TRUE(Poll(13s));  // 8 s after the second
  EXPECT_EQ(script_.trims, 3);
  EXPECT_EQ(trimmer_.baseline(), 100 * kMiB);
  // Episode over: no more trims while RSS stays near the baseline.
  for (int s = 14; s < 60; ++s) EXPECT_FALSE(Poll(std::chrono::seconds(s)));
  EXPECT_EQ(script_.trims, 3);
}

TEST_F(HeapTrimmerTest, TrimsEveryFirstRetryWhileABacklogDrainsSlowly) {
  EXPECT_FALSE(Poll(0s));
  script_.rss = script_.rss_after_trim = 2000 * kMiB;
  EXPECT_TRUE(Poll(1s));  // nothing freed yet
  int trims = 1;
  // The backlog frees 100 MiB per 4 s: each trim returns it, so the gap
  // stays at 4 s however long the drain takes.
  int s = 5;
  for (; script_.rss >= 164 * kMiB; s += 4) {
    script_.rss_after_trim = script_.rss - 100 * kMiB;
    EXPECT_FALSE(Poll(std::chrono::seconds(s - 1)));
    EXPECT_TRUE(Poll(std::chrono::seconds(s))) << s;
    ++trims;
  }
  EXPECT_EQ(script_.trims, trims);
  EXPECT_EQ(trimmer_.baseline(), 100 * kMiB);
  EXPECT_FALSE(Poll(std::chrono::seconds(s + 10)));
}

TEST_F(HeapTrimmerTest, MemoryReallyInUseBecomesTheBaselineAfterTheLastAttempt) {
  EXPECT_FALSE(Poll(0s));
  script_.rss = script_.rss_after_trim = 500 * kMiB;  // the index grew
  int trims_at = 0;
  for (int s = 1; s < 60; ++s) trims_at += Poll(std::chrono::seconds(s)) ? 1 : 0;
  EXPECT_EQ(trims_at, HeapTrimmer::kAttempts);
  EXPECT_EQ(trimmer_.baseline(), 500 * kMiB);
  // A later burst is measured from the new baseline.
  script_.rss = 540 * kMiB;
  EXPECT_FALSE(Poll(61s));
  script_.rss = 600 * kMiB;
  EXPECT_TRUE(Poll(62s));
}

TEST(ProcessRssBytesTest, ReadsThisProcess) {
  EXPECT_GT(ProcessRssBytes(), 1u << 20);
}

}  // namespace
}  // namespace kvidx::server
