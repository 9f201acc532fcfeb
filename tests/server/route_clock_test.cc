// The simulated route clock (routing.clock: simulated) over real gRPC on
// loopback: AdvanceClock moves Route's time terms (warm-up, the age of a
// scraped reading) and ScrapeLoads is the only scraper, against a real HTTP
// /metrics; a wall-clock server refuses both calls.
#include <limits>
#include <thread>

#include "common/http_test_server.h"
#include "server/route_clock.h"
#include "server/server_test_util.h"

namespace kvidx::server::testing {
namespace {

grpc::Status AdvanceBy(v1::KvIndexAdmin::Stub* admin, uint64_t by_us, uint64_t* now_us = nullptr) {
  v1::AdvanceClockRequest req;
  req.set_by_us(by_us);
  v1::AdvanceClockResponse resp;
  grpc::ClientContext ctx;
  Admin(&ctx);
  grpc::Status s = admin->AdvanceClock(&ctx, req, &resp);
  if (now_us != nullptr) *now_us = resp.now_us();
  return s;
}

grpc::Status ScrapeNow(v1::KvIndexAdmin::Stub* admin, v1::ScrapeLoadsResponse* resp) {
  grpc::ClientContext ctx;
  Admin(&ctx);
  return admin->ScrapeLoads(&ctx, v1::ScrapeLoadsRequest(), resp);
}

class RouteClockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerConfig cfg = TwoRankConfig(dir_, &a_, &b_);
    ASSERT_TRUE(a_ && b_);
    cfg.engines[0].metrics_url = http_.Url("/a/metrics");
    cfg.routing.simulated_clock = true;
    cfg.routing.scrape_interval_ms = 10;   // would be 100 background scrapes a second
    cfg.routing.stale_after_ms = 5000;
    cfg.models[0].route.warmup_seconds = 60;
    rs_ = StartServer(cfg);
    ASSERT_NE(rs_.server, nullptr);
  }

  // The candidate of replica `replica` in a Route for a fresh prompt.
  v1::RouteCandidate CandidateOn(const std::string& replica) {
    v1::RouteRequest req;
    req.set_model(kModel);
    for (int64_t t : Prompt(++prompt_seed_, 16 * 4 + 1)) req.mutable_tokens()->add_token_ids(t);
    v1::RouteResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    EXPECT_TRUE(rs_.stubs.index->Route(&ctx, req, &resp).ok());
    v1::RouteDoneRequest done;
    done.set_route_id(resp.route_id());
    v1::RouteDoneResponse done_resp;
    grpc::ClientContext done_ctx;
    done_ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    EXPECT_TRUE(rs_.stubs.index->RouteDone(&done_ctx, done, &done_resp).ok());   // nothing of kvidx's in flight
    for (const v1::RouteCandidate& c : resp.candidates()) {
      if (c.replica() == replica) return c;
    }
    ADD_FAILURE() << "no candidate " << replica << ": " << resp.DebugString();
    return {};
  }

  kvidx::testing::HttpTestServer http_;
  TempDir dir_;
  std::unique_ptr<sim::SimRank> a_, b_;
  RunningServer rs_;
  uint64_t prompt_seed_ = 100;
};

TEST_F(RouteClockTest, WarmUpRunsOnSimulatedTime) {
  const double young = CandidateOn("b").warmup_factor();
  EXPECT_LT(young, 1.0);
  // Wall time alone changes nothing.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(CandidateOn("b").warmup_factor(), young);
  uint64_t now_us = 0;
  ASSERT_TRUE(AdvanceBy(rs_.stubs.admin.get(), 30'000'000, &now_us).ok());
  EXPECT_EQ(now_us, 30'000'000u);
  const double half = CandidateOn("b").warmup_factor();
  EXPECT_GT(half, young);
  EXPECT_LT(half, 1.0);
  ASSERT_TRUE(AdvanceBy(rs_.stubs.admin.get(), 30'000'000, &now_us).ok());
  EXPECT_EQ(now_us, 60'000'000u);
  EXPECT_EQ(CandidateOn("b").warmup_factor(), 1.0);
  // 0 reads the clock.
  ASSERT_TRUE(AdvanceBy(rs_.stubs.admin.get(), 0, &now_us).ok());
  EXPECT_EQ(now_us, 60'000'000u);
}

TEST_F(RouteClockTest, OnlyScrapeLoadsScrapesAndReadingsAgeOnSimulatedTime) {
  http_.Set("/a/metrics", 200, "vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 10\n");
  // No background scraper: the page is there, yet no reading arrives.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(CandidateOn("a").queued_tokens(), 0.0);
  v1::ScrapeLoadsResponse round;
  ASSERT_TRUE(ScrapeNow(rs_.stubs.admin.get(), &round).ok());
  EXPECT_EQ(round.targets(), 1u);
  EXPECT_EQ(round.failed(), 0u);
  EXPECT_EQ(CandidateOn("a").queued_tokens(), 10 * kDefaultQueuedPromptTokens);
  // Fresh for two intervals of simulated time, whatever the wall clock
  // says; then it fades until stale_after_ms and counts no more.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(CandidateOn("a").queued_tokens(), 10 * kDefaultQueuedPromptTokens);
  ASSERT_TRUE(AdvanceBy(rs_.stubs.admin.get(), 2'510'000).ok());   // 20 ms fresh + half of the fade
  EXPECT_DOUBLE_EQ(CandidateOn("a").queued_tokens(), 5 * kDefaultQueuedPromptTokens);
  ASSERT_TRUE(AdvanceBy(rs_.stubs.admin.get(), 2'490'000).ok());
  EXPECT_EQ(CandidateOn("a").queued_tokens(), 0.0);
  // A failed scrape is reported and keeps the old reading, which ages on.
  http_.Set("/a/metrics", 500, "down\n");
  ASSERT_TRUE(ScrapeNow(rs_.stubs.admin.get(), &round).ok());
  EXPECT_EQ(round.targets(), 1u);
  EXPECT_EQ(round.failed(), 1u);
  EXPECT_EQ(CandidateOn("a").queued_tokens(), 0.0);
}

TEST_F(RouteClockTest, AClockThatWouldOverflowIsRefusedAndUnchanged) {
  uint64_t now_us = 0;
  ASSERT_TRUE(AdvanceBy(rs_.stubs.admin.get(), 5, &now_us).ok());
  grpc::Status s = AdvanceBy(rs_.stubs.admin.get(), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_NE(s.error_message().find("by_us"), std::string::npos) << s.error_message();
  ASSERT_TRUE(AdvanceBy(rs_.stubs.admin.get(), 0, &now_us).ok());
  EXPECT_EQ(now_us, 5u);
  // Admin calls: no credentials, no clock.
  v1::AdvanceClockRequest req;
  req.set_by_us(1);
  v1::AdvanceClockResponse resp;
  grpc::ClientContext ctx;
  EXPECT_EQ(rs_.stubs.admin->AdvanceClock(&ctx, req, &resp).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  ASSERT_TRUE(AdvanceBy(rs_.stubs.admin.get(), 0, &now_us).ok());
  EXPECT_EQ(now_us, 5u);
}

TEST(RouteClockWall, AWallClockServerRefusesBothCalls) {
  TempDir dir;
  RunningServer rs = StartServer(TestConfig(dir, /*persistent=*/false));
  ASSERT_NE(rs.server, nullptr);
  grpc::Status s = AdvanceBy(rs.stubs.admin.get(), 1000);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("routing.clock"), std::string::npos) << s.error_message();
  v1::ScrapeLoadsResponse round;
  s = ScrapeNow(rs.stubs.admin.get(), &round);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("routing.clock: simulated"), std::string::npos) << s.error_message();
}

TEST(RouteClockUnit, AdvancesOnlyWhenSimulated) {
  RouteClock wall(false);
  EXPECT_EQ(wall.Advance(1).status().code(), StatusCode::kFailedPrecondition);
  const auto before = RouteClock::Clock::now();
  EXPECT_GE(wall.Now(), before);

  RouteClock sim(true);
  const auto t0 = sim.Now();
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(sim.Now(), t0);
  ASSERT_TRUE(sim.Advance(1500).ok());
  EXPECT_EQ(sim.Now() - t0, std::chrono::microseconds(1500));
  EXPECT_EQ(sim.Advance(0).value(), 1500u);
  EXPECT_EQ(sim.Advance(std::numeric_limits<uint64_t>::max()).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(sim.Advance(0).value(), 1500u);
}

}  // namespace
}  // namespace kvidx::server::testing
