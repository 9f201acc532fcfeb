// RoutePolicy on hand-made signals: each term moves the choice the way
// docs/ROUTING.md says, and the reason names what decided.
#include "server/route_policy.h"

#include <cmath>
#include <vector>

#include <gtest/gtest.h>

namespace kvidx::server {
namespace {

constexpr uint32_t kBs = 16;
constexpr uint64_t kPrompt = 64 * kBs + 5;  // 64 full blocks and a tail

RouteSignals Idle() { return RouteSignals{}; }

TEST(RoutePolicy, AnIdleFleetGoesToTheLongestPrefix) {
  std::vector<RouteSignals> c(3, Idle());
  c[1].gpu_blocks = 40;
  c[2].gpu_blocks = 10;
  RouteChoice r = ChooseRoute(RoutePolicy{}, kPrompt, kBs, c);
  EXPECT_EQ(r.winner, 1u);
  EXPECT_EQ(r.reason, RouteReason::kAffinity);
  EXPECT_EQ(r.scores[1].cached_tokens, 40.0 * kBs);
  EXPECT_EQ(r.scores[1].uncached_tokens, static_cast<double>(kPrompt - 40 * kBs));
}

TEST(RoutePolicy, TheLastTokenIsAlwaysComputed) {
  std::vector<RouteSignals> c(1, Idle());
  c[0].gpu_blocks = 4;  // the whole 64-token prompt
  RouteChoice r = ChooseRoute(RoutePolicy{}, 4 * kBs, kBs, c);
  EXPECT_EQ(r.scores[0].cached_tokens, 3.0 * kBs);  // (64 - 1) / 16 = 3 blocks
  EXPECT_EQ(r.scores[0].uncached_tokens, 1.0 * kBs);
}

TEST(RoutePolicy, LowerTiersAndPredictionsAreCreditedBelowGpu) {
  std::vector<RouteSignals> c(3, Idle());
  c[0].gpu_blocks = 20;
  c[1].gpu_blocks = 10;
  c[1].cpu_blocks = 12;  // 10 + 0.75 x 12 = 19 < 20
  c[2].predicted_blocks = 30;
  RouteChoice r = ChooseRoute(RoutePolicy{}, kPrompt, kBs, c);
  EXPECT_EQ(r.scores[1].cached_tokens, 19.0 * kBs);
  EXPECT_EQ(r.winner, 2u);  // a sibling is computing 30 blocks there
  EXPECT_EQ(r.reason, RouteReason::kAffinity);
  RoutePolicy no_prediction;
  no_prediction.predicted_credit = 0;
  EXPECT_EQ(ChooseRoute(no_prediction, kPrompt, kBs, c).winner, 0u);
}

TEST(RoutePolicy, ASiblingFollowsThePredictionInsteadOfRecomputingElsewhere) {
  std::vector<RouteSignals> c(2, Idle());
  // The first request of a burst went to 0 a moment ago: its whole prompt
  // is queued there and predicted.
  c[0].predicted_blocks = 64;
  c[0].inflight_requests = 1;
  c[0].inflight_uncached_tokens = kPrompt;
  RouteChoice r = ChooseRoute(RoutePolicy{}, kPrompt, kBs, c);
  EXPECT_EQ(r.winner, 0u);
  EXPECT_EQ(r.reason, RouteReason::kAffinity);
  EXPECT_LT(r.scores[0].queued_tokens, r.scores[1].uncached_tokens);
}

TEST(RoutePolicy, AHotSpotLosesToAnIdleRankAndTheReasonSaysLoad) {
  std::vector<RouteSignals> c(2, Idle());
  c[0].gpu_blocks = 32;
  c[0].waiting = 20;
  c[0].running = 64;
  c[0].scrape_weight = 1;
  RouteChoice r = ChooseRoute(RoutePolicy{}, kPrompt, kBs, c);
  EXPECT_EQ(r.winner, 1u);
  EXPECT_EQ(r.reason, RouteReason::kLoad);
  EXPECT_GT(r.scores[0].queued_tokens, 0);
  // The same load, scraped long ago and not confirmed by kvidx's own count:
  // affinity again.
  c[0].scrape_weight = 0;
  r = ChooseRoute(RoutePolicy{}, kPrompt, kBs, c);
  EXPECT_EQ(r.winner, 0u);
  EXPECT_EQ(r.reason, RouteReason::kAffinity);
  // kvidx's own in-flight routes count even without a scrape.
  c[0].inflight_uncached_tokens = 50000;
  EXPECT_EQ(ChooseRoute(RoutePolicy{}, kPrompt, kBs, c).winner, 1u);
}

TEST(RoutePolicy, AFullKvCacheCostsMore) {
  std::vector<RouteSignals> c(2, Idle());
  c[0].gpu_blocks = 10;
  c[0].kv_usage = 1.0;
  c[0].scrape_weight = 1;
  c[1].gpu_blocks = 8;
  RouteChoice r = ChooseRoute(RoutePolicy{}, kPrompt, kBs, c);
  EXPECT_EQ(r.scores[0].kv_factor, 3.0);
  EXPECT_EQ(r.winner, 1u);
  c[0].kv_usage = 0.5;
  EXPECT_EQ(ChooseRoute(RoutePolicy{}, kPrompt, kBs, c).winner, 0u);
}

TEST(RoutePolicy, AFreshRankWinsOnWarmupCreditUntilItsWindowEnds) {
  std::vector<RouteSignals> c(2, Idle());
  c[0].inflight_requests = 4;  // busy enough that a small edge decides
  c[0].inflight_uncached_tokens = 300;
  c[1].age_seconds = 5;
  c[1].inflight_requests = 4;
  c[1].inflight_uncached_tokens = 400;  // a little busier, but new
  RouteChoice r = ChooseRoute(RoutePolicy{}, kPrompt, kBs, c);
  EXPECT_EQ(r.winner, 1u);
  EXPECT_EQ(r.reason, RouteReason::kWarmup);
  EXPECT_LT(r.scores[1].warmup_factor, 1.0);
  c[1].age_seconds = 120;
  r = ChooseRoute(RoutePolicy{}, kPrompt, kBs, c);
  EXPECT_EQ(r.winner, 0u);
  EXPECT_EQ(r.reason, RouteReason::kNoPrefix);
}

TEST(RoutePolicy, TiesGoToGpuOverlapThenToTheFirstCandidate) {
  std::vector<RouteSignals> c(3, Idle());
  EXPECT_EQ(ChooseRoute(RoutePolicy{}, kPrompt, kBs, c).winner, 0u);
  c[2].gpu_blocks = 1;
  c[1].predicted_blocks = 1;
  EXPECT_EQ(ChooseRoute(RoutePolicy{}, kPrompt, kBs, c).winner, 2u);
}

TEST(RoutePolicy, DegenerateInputsGiveFiniteCosts) {
  std::vector<RouteSignals> c(1, Idle());
  c[0].gpu_blocks = 1000000;
  c[0].scrape_weight = 7;   // clamped to 1
  c[0].kv_usage = 2;
  c[0].age_seconds = -3;
  for (uint64_t prompt : {uint64_t{0}, uint64_t{1}, kPrompt}) {
    for (uint32_t bs : {0u, 1u, kBs}) {
      RouteChoice r = ChooseRoute(RoutePolicy{}, prompt, bs, c);
      EXPECT_TRUE(std::isfinite(r.scores[0].cost)) << prompt << " " << bs;
      EXPECT_GE(r.scores[0].uncached_tokens, 0) << prompt << " " << bs;
    }
  }
  EXPECT_EQ(RouteReasonName(RouteReason::kNoPrefix), "no_prefix");
}

}  // namespace
}  // namespace kvidx::server
