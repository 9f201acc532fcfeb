// Route and RouteDone over real gRPC on loopback, on a Server fed by
// SimRank engines over real ZMQ: affinity, sibling prediction, candidate
// sets, RouteDone's bookkeeping and every refused input.
#include <set>

#include "common/http_test_server.h"
#include "server/node.h"
#include "server/route_engine.h"
#include "server/route_policy.h"
#include "server/server_test_util.h"

namespace kvidx::server::testing {
namespace {

class RouteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerConfig cfg = TwoRankConfig(dir_, &a_, &b_);
    ASSERT_TRUE(a_ && b_);
    cfg.engines[0].metrics_url = http_.Url("/a/metrics");
    cfg.routing.scrape_interval_ms = 50;
    cfg.routing.stale_after_ms = 400;
    cfg_ = cfg;
    rs_ = StartServer(cfg);
    ASSERT_NE(rs_.server, nullptr);
  }

  void Serve(sim::SimRank& rank, const std::vector<int64_t>& tokens) {
    ASSERT_TRUE(rank.Serve(tokens, /*full_report=*/false).ok());
    rank.publisher().Flush();
    ASSERT_TRUE(WaitFor([&] { return MatchedBlocks(rs_.stubs.index.get(), tokens, rank.options().replica) ==
                                     tokens.size() / 16; }));
  }

  grpc::Status Route(const v1::RouteRequest& req, v1::RouteResponse* resp) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return rs_.stubs.index->Route(&ctx, req, resp);
  }
  grpc::Status Done(uint64_t id, v1::RouteDoneResponse* resp, uint64_t prompt_tokens = 0, uint64_t cached = 0) {
    v1::RouteDoneRequest req;
    req.set_route_id(id);
    req.set_outcome(v1::ROUTE_OUTCOME_OK);
    req.set_prompt_tokens(prompt_tokens);
    req.set_cached_tokens(cached);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return rs_.stubs.index->RouteDone(&ctx, req, resp);
  }
  // The node's metric sample `name` with label `label`=`value`; -1 if none.
  double Sample(std::string_view name, const std::string& label, const std::string& value) const {
    for (const MetricSample& s : rs_.server->node().RenderMetrics()) {
      if (s.name() != name) continue;
      for (const auto& [k, v] : s.labels) {
        if (k == label && v == value) return s.value;
      }
    }
    return -1.0;
  }
  static v1::RouteRequest TokensRequest(const std::vector<int64_t>& tokens) {
    v1::RouteRequest req;
    req.set_model(kModel);
    for (int64_t t : tokens) req.mutable_tokens()->add_token_ids(t);
    return req;
  }

  kvidx::testing::HttpTestServer http_;
  TempDir dir_;
  ServerConfig cfg_;
  std::unique_ptr<sim::SimRank> a_, b_;
  RunningServer rs_;
};

TEST_F(RouteTest, AReloadedPolicyDecidesTheNextRoute) {
  const std::vector<int64_t> prompt = Prompt(21, 16 * 4);
  v1::RouteResponse resp;
  ASSERT_TRUE(Route(TokensRequest(prompt), &resp).ok());
  const std::string first = resp.replica();
  // Both ranks joined moments ago: the default warm-up credit applies.
  for (const v1::RouteCandidate& c : resp.candidates()) EXPECT_LT(c.warmup_factor(), 1.0) << resp.DebugString();
  ServerConfig next = cfg_;
  next.models[0].route.warmup_credit = 0;
  next.models[0].route.decode_weight = 0.5;
  ASSERT_TRUE(rs_.server->Reload(next).ok());
  ASSERT_TRUE(Route(TokensRequest(prompt), &resp).ok());
  for (const v1::RouteCandidate& c : resp.candidates()) EXPECT_EQ(c.warmup_factor(), 1.0) << resp.DebugString();
  // The first route is still in flight on its rank: 1 + 0.5 x 1 running.
  for (const v1::RouteCandidate& c : resp.candidates()) {
    EXPECT_DOUBLE_EQ(c.decode_factor(), c.replica() == first ? 1.5 : 1.0) << resp.DebugString();
  }
}

TEST_F(RouteTest, AScrapedHotSpotLosesItsAffinity) {
  const std::vector<int64_t> prompt = Prompt(9, 16 * 8 + 3);
  Serve(*a_, std::vector<int64_t>(prompt.begin(), prompt.begin() + 16 * 8));
  v1::RouteResponse resp;
  ASSERT_TRUE(Route(TokensRequest(prompt), &resp).ok());
  EXPECT_EQ(resp.replica(), "a") << resp.DebugString();
  EXPECT_EQ(resp.reason(), v1::ROUTE_REASON_AFFINITY);
  // vLLM on replica a reports a deep queue and a full batch.
  http_.Set("/a/metrics", 200,
            "vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 256\n"
            "vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 40\n"
            "vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.97\n");
  ASSERT_TRUE(WaitFor([&] {
    return Route(TokensRequest(prompt), &resp).ok() && resp.reason() == v1::ROUTE_REASON_LOAD;
  })) << resp.DebugString();
  EXPECT_EQ(resp.replica(), "b");
  const v1::RouteCandidate& hot = resp.candidates(1);
  EXPECT_EQ(hot.replica(), "a");
  EXPECT_EQ(hot.gpu_blocks(), 8u);
  EXPECT_GT(hot.queued_tokens(), 0);
  EXPECT_GT(hot.kv_factor(), 1.0);
  // The engine's endpoint fails: the reading ages out (stale_after_ms) and
  // stops weighing on a; only kvidx's own accounting is left.
  http_.Set("/a/metrics", 500, "down\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  ASSERT_TRUE(Route(TokensRequest(prompt), &resp).ok());
  for (const v1::RouteCandidate& c : resp.candidates()) {
    if (c.replica() != "a") continue;
    EXPECT_EQ(c.kv_factor(), 1.0) << resp.DebugString();
    EXPECT_LT(c.queued_tokens(), 40 * 2048) << resp.DebugString();
  }
}

TEST_F(RouteTest, AScrapedQueueIsCostedAtTheMeanUncachedPromptRouted) {
  const std::vector<int64_t> prompt = Prompt(41, 16 * 8 + 3);  // nothing cached: 131 uncached tokens
  http_.Set("/a/metrics", 200, "vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 10\n");
  auto queued_on_a = [&](double* queued) {
    v1::RouteResponse resp;
    if (!Route(TokensRequest(prompt), &resp).ok()) return false;
    v1::RouteDoneResponse done;
    if (!Done(resp.route_id(), &done).ok()) return false;  // nothing of kvidx's own in flight
    for (const v1::RouteCandidate& c : resp.candidates()) {
      if (c.replica() == "a") *queued = c.queued_tokens();
    }
    return true;
  };
  // By default each of the 10 waiting requests costs the fixed mean.
  double queued = 0;
  EXPECT_TRUE(WaitFor([&] { return queued_on_a(&queued) && queued == 10 * kDefaultQueuedPromptTokens; }))
      << queued;
  // Learned: every route so far had 131 uncached tokens, so each waiting
  // request is assumed to be one like them.
  ServerConfig next = cfg_;
  next.models[0].route.mean_prompt_tokens = 0;
  ASSERT_TRUE(rs_.server->Reload(next).ok());
  EXPECT_TRUE(WaitFor([&] { return queued_on_a(&queued) && queued == 10 * 131.0; })) << queued;
  // A fixed mean in the policy overrides what was learned.
  next.models[0].route.mean_prompt_tokens = 3000;
  ASSERT_TRUE(rs_.server->Reload(next).ok());
  EXPECT_TRUE(WaitFor([&] { return queued_on_a(&queued) && queued == 10 * 3000.0; })) << queued;
}

TEST_F(RouteTest, AnEngineAddedOverTheAdminApiIsScrapedAtItsMetricsUrl) {
  auto c = MakeRank("c");
  ASSERT_TRUE(c);
  http_.Set("/c/metrics", 200,
            "vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 256\n"
            "vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.97\n");
  const EngineEntry e = EngineFor(*c);
  v1::AddEngineRequest req;
  v1::EngineSpec* spec = req.mutable_engine();
  spec->set_replica(e.engine.replica);
  spec->set_model(e.engine.model);
  spec->set_endpoint(e.engine.endpoint);
  spec->set_replay_endpoint(e.engine.replay_endpoint);
  spec->set_metrics_url(http_.Url("/c/metrics"));
  v1::AddEngineResponse added;
  {
    grpc::ClientContext ctx;
    Admin(&ctx);
    grpc::Status st = rs_.stubs.admin->AddEngine(&ctx, req, &added);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  const std::vector<int64_t> prompt = Prompt(31, 16 * 2 + 1);
  v1::RouteResponse resp;
  auto c_is_loaded = [&] {
    if (!Route(TokensRequest(prompt), &resp).ok()) return false;
    for (const v1::RouteCandidate& cand : resp.candidates()) {
      if (cand.replica() == "c") return cand.kv_factor() > 1.0;
    }
    return false;
  };
  EXPECT_TRUE(WaitFor(c_is_loaded)) << resp.DebugString();

  // Not a URL kvidx can scrape: refused, nothing added.
  for (const std::string& url : {std::string("ftp://h/metrics"), "http://h/" + std::string(4096, 'p')}) {
    spec->set_replica("d");
    spec->set_endpoint("tcp://127.0.0.1:5999");
    spec->set_replay_endpoint("");
    spec->set_metrics_url(url);
    grpc::ClientContext ctx;
    Admin(&ctx);
    grpc::Status st = rs_.stubs.admin->AddEngine(&ctx, req, &added);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << url.substr(0, 20);
    EXPECT_NE(st.error_message().find("engine.metrics_url"), std::string::npos) << st.error_message();
  }
}

TEST_F(RouteTest, AnEngineRemovedAndAddedAgainIsYoungAgain) {
  ServerConfig next = cfg_;
  next.models[0].route.warmup_seconds = 0.2;
  ASSERT_TRUE(rs_.server->Reload(next).ok());
  const std::vector<int64_t> prompt = Prompt(41, 16 * 2 + 1);
  v1::RouteResponse resp;
  ASSERT_TRUE(Route(TokensRequest(prompt), &resp).ok());  // first seen now
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_TRUE(Route(TokensRequest(prompt), &resp).ok());
  for (const v1::RouteCandidate& c : resp.candidates()) EXPECT_EQ(c.warmup_factor(), 1.0) << resp.DebugString();

  // Same name, same SourceId, but a new engine with an empty cache.
  const EngineEntry e = EngineFor(*b_);
  {
    v1::RemoveEngineRequest rm;
    rm.set_replica("b");
    v1::RemoveEngineResponse removed;
    grpc::ClientContext ctx;
    Admin(&ctx);
    ASSERT_TRUE(rs_.stubs.admin->RemoveEngine(&ctx, rm, &removed).ok());
  }
  v1::AddEngineRequest add;
  add.mutable_engine()->set_replica("b");
  add.mutable_engine()->set_model(e.engine.model);
  add.mutable_engine()->set_endpoint(e.engine.endpoint);
  add.mutable_engine()->set_replay_endpoint(e.engine.replay_endpoint);
  v1::AddEngineResponse added;
  {
    grpc::ClientContext ctx;
    Admin(&ctx);
    ASSERT_TRUE(rs_.stubs.admin->AddEngine(&ctx, add, &added).ok());
  }
  ASSERT_TRUE(Route(TokensRequest(prompt), &resp).ok());
  bool saw_b = false;
  for (const v1::RouteCandidate& c : resp.candidates()) {
    if (c.replica() == "b") {
      saw_b = true;
      EXPECT_LT(c.warmup_factor(), 1.0) << resp.DebugString();
    } else {
      EXPECT_EQ(c.warmup_factor(), 1.0) << resp.DebugString();
    }
  }
  EXPECT_TRUE(saw_b) << resp.DebugString();
}

TEST(ScrapeWeight, FullWhileFreshThenFadingToNothing) {
  RoutingConfig r;
  r.scrape_interval_ms = 1000;
  r.stale_after_ms = 5000;
  using std::chrono::milliseconds;
  EXPECT_EQ(ScrapeWeight(r, milliseconds(0)), 1.0);
  EXPECT_EQ(ScrapeWeight(r, milliseconds(2000)), 1.0);
  EXPECT_DOUBLE_EQ(ScrapeWeight(r, milliseconds(3500)), 0.5);
  EXPECT_EQ(ScrapeWeight(r, milliseconds(5000)), 0.0);
  r.stale_after_ms = 1500;  // shorter than two intervals: a step
  EXPECT_EQ(ScrapeWeight(r, milliseconds(1499)), 1.0);
  EXPECT_EQ(ScrapeWeight(r, milliseconds(1500)), 0.0);
}

TEST_F(RouteTest, ThePrefixHolderWinsAndEveryRankIsScored) {
  const std::vector<int64_t> prompt = Prompt(1, 16 * 8 + 3);
  Serve(*b_, std::vector<int64_t>(prompt.begin(), prompt.begin() + 16 * 8));
  v1::RouteRequest req = TokensRequest(prompt);
  req.set_request_id(77);
  v1::RouteResponse resp;
  ASSERT_TRUE(Route(req, &resp).ok());
  EXPECT_EQ(resp.replica(), "b");
  EXPECT_EQ(resp.source(), "b/dp0");
  EXPECT_EQ(resp.reason(), v1::ROUTE_REASON_AFFINITY);
  EXPECT_NE(resp.route_id(), 0u);
  EXPECT_EQ(resp.request_id(), 77u);
  EXPECT_EQ(resp.prompt_tokens(), prompt.size());
  ASSERT_EQ(resp.candidates_size(), 2);
  EXPECT_EQ(resp.candidates(0).replica(), "b");
  EXPECT_EQ(resp.candidates(0).gpu_blocks(), 8u);
  EXPECT_EQ(resp.candidates(0).cached_tokens(), 16.0 * 8);
  EXPECT_EQ(resp.candidates(1).gpu_blocks(), 0u);
  EXPECT_LT(resp.candidates(0).cost(), resp.candidates(1).cost());

  v1::RouteDoneResponse done;
  ASSERT_TRUE(Done(resp.route_id(), &done, prompt.size(), 16 * 7).ok());
  EXPECT_EQ(done.predicted_cached_tokens(), 16u * 8);
  // Predicted vs delivered cached tokens, and the decision, on /metrics.
  EXPECT_EQ(Sample("kvidx_route_predicted_cached_tokens_total", "source", "b/dp0"), 16.0 * 8);
  EXPECT_EQ(Sample("kvidx_route_delivered_cached_tokens_total", "source", "b/dp0"), 16.0 * 7);
  EXPECT_GE(Sample("kvidx_route_decisions_total", "reason", "affinity"), 1.0);
  EXPECT_EQ(Sample("kvidx_routes_ended_total", "how", "done"), 1.0);
  EXPECT_EQ(Sample("kvidx_engine_scrapes_total", "replica", "a") >= 0, true);
  EXPECT_EQ(Done(resp.route_id(), &done).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Done(424242, &done).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(RouteTest, SiblingsArrivingBeforeAnyEventFollowTheFirst) {
  const std::vector<int64_t> prompt = Prompt(2, 16 * 32);
  std::set<std::string> chosen;
  v1::RouteResponse first;
  ASSERT_TRUE(Route(TokensRequest(prompt), &first).ok());
  EXPECT_EQ(first.reason(), v1::ROUTE_REASON_NO_PREFIX);
  chosen.insert(first.replica());
  for (int i = 0; i < 7; ++i) {
    v1::RouteResponse r;
    ASSERT_TRUE(Route(TokensRequest(prompt), &r).ok());
    chosen.insert(r.replica());
    EXPECT_EQ(r.reason(), v1::ROUTE_REASON_AFFINITY);
    EXPECT_EQ(r.candidates(0).predicted_blocks(), 32u);
    EXPECT_EQ(r.candidates(0).cached_tokens(), 16.0 * 31);  // the last block is always computed
    EXPECT_EQ(r.candidates(0).gpu_blocks(), 0u);          // predictions are not cached blocks
  }
  EXPECT_EQ(chosen.size(), 1u) << "the burst's prefix would be computed on more than one replica";
  // FindPrefix never reports predictions.
  EXPECT_EQ(MatchedBlocks(rs_.stubs.index.get(), prompt, first.replica()), 0u);
  const std::string source = first.replica() + "/dp0";
  EXPECT_EQ(Sample("kvidx_routes_in_flight", "source", source), 8.0);
  // The engine publishes the prompt: the next Route sees the blocks cached,
  // and all eight predictions end confirmed.
  Serve(first.replica() == "a" ? *a_ : *b_, prompt);
  v1::RouteResponse after;
  ASSERT_TRUE(Route(TokensRequest(prompt), &after).ok());
  EXPECT_EQ(after.candidates(0).predicted_blocks(), 0u) << after.DebugString();
  EXPECT_EQ(after.candidates(0).gpu_blocks(), 32u);
  EXPECT_EQ(Sample("kvidx_route_predictions_total", "how", "confirmed"), 8.0);
  EXPECT_EQ(Sample("kvidx_route_predictions_total", "how", "expired"), 0.0);
}

TEST_F(RouteTest, TheCandidateSetLimitsTheChoice) {
  const std::vector<int64_t> prompt = Prompt(3, 16 * 4);
  Serve(*a_, prompt);
  v1::RouteRequest req = TokensRequest(prompt);
  req.add_replicas("b");
  v1::RouteResponse resp;
  ASSERT_TRUE(Route(req, &resp).ok());
  EXPECT_EQ(resp.replica(), "b");
  EXPECT_EQ(resp.candidates_size(), 1);
}

TEST_F(RouteTest, HashPromptsTakeTheirLengthFromTheHashesOrTheCaller) {
  const std::vector<int64_t> prompt = Prompt(4, 16 * 4);
  Serve(*a_, prompt);
  v1::RouteRequest req;
  req.set_model(kModel);
  for (uint64_t h : U64Of(KeysOf(prompt))) req.mutable_hashes()->add_u64(h);
  v1::RouteResponse resp;
  ASSERT_TRUE(Route(req, &resp).ok());
  EXPECT_EQ(resp.replica(), "a");
  EXPECT_EQ(resp.prompt_tokens(), 64u);
  req.set_prompt_tokens(70);
  ASSERT_TRUE(Route(req, &resp).ok());
  EXPECT_EQ(resp.prompt_tokens(), 70u);
  EXPECT_EQ(resp.candidates(0).cached_tokens(), 64.0);
  req.set_prompt_tokens(10);
  grpc::Status s = Route(req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message().rfind("prompt_tokens: ", 0), 0u) << s.error_message();
}

TEST_F(RouteTest, BadRequestsAreRefusedNamingTheField) {
  v1::RouteResponse resp;
  v1::RouteRequest req = TokensRequest(Prompt(5, 40));
  auto expect = [&](const v1::RouteRequest& r, grpc::StatusCode code, const std::string& prefix) {
    grpc::Status s = Route(r, &resp);
    EXPECT_EQ(s.error_code(), code) << prefix << ": " << s.error_message();
    EXPECT_EQ(s.error_message().rfind(prefix, 0), 0u) << s.error_message();
  };
  v1::RouteRequest r = req;
  r.set_model("nope");
  expect(r, grpc::StatusCode::NOT_FOUND, "model: ");
  r = req;
  r.clear_model();
  expect(r, grpc::StatusCode::INVALID_ARGUMENT, "model: required");
  r = req;
  r.clear_tokens();
  expect(r, grpc::StatusCode::INVALID_ARGUMENT, "query: ");
  r = req;
  r.add_replicas("a");
  r.add_replicas("ghost");
  expect(r, grpc::StatusCode::NOT_FOUND, "replicas[1]: ");
  r = req;
  r.set_n(1000000);
  expect(r, grpc::StatusCode::INVALID_ARGUMENT, "n: ");
  r = req;
  r.set_expected_output_tokens(0xFFFFFFFF);
  expect(r, grpc::StatusCode::INVALID_ARGUMENT, "expected_output_tokens: ");
  // A flood of routes nobody reports stays bounded (RouteTracker caps it).
  for (int i = 0; i < 300; ++i) ASSERT_TRUE(Route(TokensRequest(Prompt(100 + i, 64)), &resp).ok());
}

}  // namespace
}  // namespace kvidx::server::testing
