// RouteTracker with a fake clock: in-flight accounting, sibling prediction
// and its expiry, RouteDone once only, and the bounds a flood of routes
// without RouteDone runs into.
#include "server/route_tracker.h"

#include <algorithm>
#include <vector>

#include <gtest/gtest.h>

namespace kvidx::server {
namespace {

using namespace std::chrono_literals;
using Clock = RouteTracker::Clock;

std::vector<BlockKey> Keys(uint64_t base, size_t n) {
  std::vector<BlockKey> k;
  for (size_t i = 0; i < n; ++i) k.push_back(BlockKey::FromU64(base + i));
  return k;
}

RouteTracker::Options Opts() {
  RouteTracker::Options o;
  o.prediction_ttl = 10s;
  o.route_ttl = 60s;
  return o;
}

TEST(RouteTracker, ASiblingSeesThePredictedBlocksOnTheChosenSourceOnly) {
  RouteTracker t(Opts());
  const Clock::time_point t0{};
  const std::vector<BlockKey> prompt = Keys(100, 8);
  const uint64_t id = t.Add(/*source=*/3, prompt, /*cached_blocks=*/2, /*uncached_tokens=*/96, t0);
  EXPECT_NE(id, 0u);
  EXPECT_EQ(t.PredictedRun(3, prompt, 2, t0 + 1s), 6u);
  EXPECT_EQ(t.PredictedRun(3, prompt, 0, t0 + 1s), 0u);  // the cached blocks are not predictions
  EXPECT_EQ(t.PredictedRun(4, prompt, 2, t0 + 1s), 0u);
  const std::vector<BlockKey> other = Keys(100, 5);  // shares the first 5 blocks
  EXPECT_EQ(t.PredictedRun(3, other, 2, t0 + 1s), 3u);
  // After one prefill's time the engine has published its own events.
  EXPECT_EQ(t.PredictedRun(3, prompt, 2, t0 + 10s), 0u);
}

TEST(RouteTracker, QueuedTokensAndPredictionsEndWhenTheEnginePublishesTheLastBlock) {
  RouteTracker t(Opts());
  const Clock::time_point t0{};
  const std::vector<BlockKey> a = Keys(0, 4), b = Keys(50, 4);
  (void)t.Add(1, a, 0, 64, t0);
  (void)t.Add(1, b, 0, 32, t0);
  std::vector<BlockKey> stored = {a[0], a[1], a[2]};  // a's prefill still under way
  auto held = [&](const BlockKey& k) { return std::find(stored.begin(), stored.end(), k) != stored.end(); };
  t.ReleaseStored(1, held, t0 + 1s);
  EXPECT_EQ(t.InFlightOn(1, t0 + 1s).uncached_tokens, 96u);
  stored.push_back(a[3]);
  t.ReleaseStored(1, held, t0 + 1s);
  EXPECT_EQ(t.InFlightOn(1, t0 + 1s).uncached_tokens, 32u);
  EXPECT_EQ(t.InFlightOn(1, t0 + 1s).requests, 2u);  // in flight until RouteDone
  EXPECT_EQ(t.PredictedRun(1, a, 0, t0 + 1s), 0u);   // the index has them now
  EXPECT_EQ(t.PredictedRun(1, b, 0, t0 + 1s), 4u);
  t.ReleaseStored(2, [](const BlockKey&) { return true; }, t0 + 1s);  // other sources: untouched
  EXPECT_EQ(t.InFlightOn(1, t0 + 1s).uncached_tokens, 32u);
  EXPECT_EQ(t.stats().predictions_confirmed, 1u);
  EXPECT_EQ(t.stats().predictions_expired, 0u);
  EXPECT_EQ(t.InFlightOn(1, t0 + 20s).uncached_tokens, 0u);  // b's prediction outlived its TTL
  EXPECT_EQ(t.stats().predictions_expired, 1u);
  ASSERT_EQ(t.InFlightBySource().size(), 1u);
  EXPECT_EQ(t.InFlightBySource()[0].second.requests, 2u);
}

TEST(RouteTracker, InFlightCountsUntilDoneAndQueuedTokensUntilThePredictionEnds) {
  RouteTracker t(Opts());
  const Clock::time_point t0{};
  const uint64_t a = t.Add(1, Keys(0, 4), 0, 64, t0);
  (void)t.Add(1, Keys(50, 4), 0, 32, t0 + 5s);
  EXPECT_EQ(t.InFlightOn(1, t0 + 6s).requests, 2u);
  EXPECT_EQ(t.InFlightOn(1, t0 + 6s).uncached_tokens, 96u);
  EXPECT_EQ(t.InFlightOn(1, t0 + 11s).uncached_tokens, 32u);  // a's prefill is over
  EXPECT_EQ(t.InFlightOn(1, t0 + 11s).requests, 2u);
  Result<RouteTracker::Route> done = t.Done(a, t0 + 12s);
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->source, 1u);
  EXPECT_EQ(done->uncached_tokens, 64u);
  EXPECT_EQ(t.InFlightOn(1, t0 + 12s).requests, 1u);
  EXPECT_EQ(t.InFlightOn(2, t0 + 12s).requests, 0u);
}

TEST(RouteTracker, RouteDoneTwiceOrForAnUnknownIdIsNotFound) {
  RouteTracker t(Opts());
  const Clock::time_point t0{};
  const uint64_t a = t.Add(1, Keys(0, 2), 0, 1, t0);
  EXPECT_TRUE(t.Done(a, t0).ok());
  Result<RouteTracker::Route> again = t.Done(a, t0);
  EXPECT_EQ(again.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(again.status().message().rfind("route_id: ", 0), 0u);
  EXPECT_EQ(t.Done(0, t0).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(t.Done(987654321, t0).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(t.stats().done, 1u);
}

// A reused source id: the removed source's routes and predictions are gone,
// other sources' stay, and a late RouteDone of a forgotten route is NotFound.
TEST(RouteTracker, ForgettingASourceEndsItsRoutesOnly) {
  RouteTracker t(Opts());
  const Clock::time_point t0{};
  const uint64_t a = t.Add(1, Keys(0, 4), 0, 64, t0);
  (void)t.Add(1, Keys(50, 4), 0, 32, t0);
  const uint64_t c = t.Add(2, Keys(0, 4), 0, 16, t0);
  t.ForgetSource(1);
  EXPECT_EQ(t.InFlightOn(1, t0 + 1s).requests, 0u);
  EXPECT_EQ(t.InFlightOn(1, t0 + 1s).uncached_tokens, 0u);
  EXPECT_EQ(t.PredictedRun(1, Keys(0, 4), 0, t0 + 1s), 0u);
  EXPECT_EQ(t.InFlightOn(2, t0 + 1s).requests, 1u);
  EXPECT_EQ(t.PredictedRun(2, Keys(0, 4), 0, t0 + 1s), 4u);
  EXPECT_EQ(t.Done(a, t0 + 1s).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(t.Done(c, t0 + 1s).ok());
  EXPECT_EQ(t.stats().evicted, 2u);
  EXPECT_EQ(t.size(), 0u);
  // Expiry later walks past the forgotten routes' prediction entries.
  EXPECT_EQ(t.InFlightOn(1, t0 + 30s).uncached_tokens, 0u);
}

TEST(RouteTracker, UnreportedRoutesExpireAndAFloodStaysBounded) {
  RouteTracker::Options o = Opts();
  o.max_routes = 100;
  o.max_predicted_blocks = 16;
  RouteTracker t(o);
  const Clock::time_point t0{};
  for (int i = 0; i < 1000; ++i) (void)t.Add(i % 4, Keys(i * 1000, 64), 0, 1024, t0);
  EXPECT_EQ(t.size(), 100u);
  EXPECT_EQ(t.stats().evicted, 900u);
  EXPECT_EQ(t.PredictedRun(3, Keys(999 * 1000, 64), 0, t0), 16u);  // capped per route
  uint32_t inflight = 0;
  for (SourceId s = 0; s < 4; ++s) inflight += t.InFlightOn(s, t0).requests;
  EXPECT_EQ(inflight, 100u);
  EXPECT_EQ(t.InFlightOn(0, t0 + 60s).requests, 0u);  // route_ttl
  EXPECT_EQ(t.size(), 0u);
  EXPECT_EQ(t.stats().expired, 100u);
}

TEST(RouteTracker, OverlappingPredictionsOfTwoRoutesEndWithTheLaterOne) {
  RouteTracker t(Opts());
  const Clock::time_point t0{};
  const std::vector<BlockKey> p = Keys(7, 4);
  (void)t.Add(2, p, 0, 64, t0);
  (void)t.Add(2, p, 0, 64, t0 + 5s);
  EXPECT_EQ(t.PredictedRun(2, p, 0, t0 + 12s), 4u);  // the second still predicts
  EXPECT_EQ(t.PredictedRun(2, p, 0, t0 + 15s), 0u);
}

}  // namespace
}  // namespace kvidx::server
