// kvidx Server end to end: real gRPC on a loopback port, real ZMQ engines
// (SimRank), real RocksDB in a temp dir.
#include <map>
#include <set>

#include "common/http_get.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "server/node.h"
#include "server_test_util.h"

namespace kvidx::server::testing {
namespace {

using kvidx::testing::HttpGet;

// Serves `tokens` on `rank` and waits until the server reports exactly the
// rank's true prefix for them.
void ServeAndWait(sim::SimRank* rank, v1::KvIndex::Stub* stub, const std::vector<int64_t>& tokens) {
  ASSERT_TRUE(rank->Serve(tokens, false).ok());
  rank->publisher().Flush();
  const std::vector<BlockKey> keys = KeysOf(tokens);
  const size_t truth = rank->CachedPrefix(keys);
  ASSERT_TRUE(WaitFor([&] { return MatchedBlocks(stub, tokens, rank->options().replica) == truth; }))
      << "server never reported " << truth << " blocks for " << rank->options().replica;
}

// Value of the first exposition line starting with `series` (name{labels}).
double MetricValue(const std::string& text, const std::string& series) {
  size_t p = 0;
  while ((p = text.find(series, p)) != std::string::npos) {
    if (p == 0 || text[p - 1] == '\n') {
      size_t sp = text.find(' ', p + series.size());
      if (sp != std::string::npos && sp == p + series.size()) return std::stod(text.substr(sp + 1));
    }
    p += series.size();
  }
  return -1;
}

TEST(Server, FindPrefixByTokensAndByHashesMatchesTheEngine) {
  TempDir dir;
  auto rank = MakeRank("r0");
  ServerConfig cfg = TestConfig(dir, false);
  cfg.engines.push_back(EngineFor(*rank));
  RunningServer s = StartServer(cfg);
  ASSERT_TRUE(WaitFor([&] { return s.server->serving(); }));

  const std::vector<int64_t> prompt = Prompt(1, 16 * 10 + 5);  // 10 full blocks
  ServeAndWait(rank.get(), s.stubs.index.get(), prompt);

  v1::FindPrefixRequest req;
  req.set_model(kModel);
  for (int64_t t : prompt) req.mutable_tokens()->add_token_ids(t);
  req.set_include_block_hashes(true);
  req.set_request_id(77);
  // Read until the connect's probe replay (ReplayOptions::probe_delay) is
  // over: it can show the source REPLAYING for an instant after EXACT.
  v1::FindPrefixResponse r;
  ASSERT_TRUE(WaitFor([&] {
    grpc::ClientContext ctx;
    r.Clear();
    return s.stubs.index->FindPrefix(&ctx, req, &r).ok() && r.replicas_size() == 1 &&
           r.replicas(0).state() == v1::SOURCE_STATE_EXACT;
  }));
  EXPECT_EQ(r.model(), kModel);
  EXPECT_EQ(r.blocks_in_query(), 10u);
  EXPECT_EQ(r.block_size(), 16u);
  EXPECT_EQ(r.request_id(), 77u);
  ASSERT_EQ(r.replicas_size(), 1);
  const v1::ReplicaMatch& m = r.replicas(0);
  EXPECT_EQ(m.replica(), "r0");
  EXPECT_EQ(m.source(), "r0/dp0");
  EXPECT_EQ(m.matched_blocks(), 10u);
  EXPECT_EQ(m.matched_blocks_with_lower_tiers(), 10u);
  EXPECT_EQ(m.matched_tokens(), 160u);
  EXPECT_EQ(m.state(), v1::SOURCE_STATE_EXACT);
  EXPECT_TRUE(m.has_seq());
  EXPECT_GE(r.applied_batches(), 1u);
  // The server's hashes are vLLM's.
  const std::vector<uint64_t> expect = U64Of(KeysOf(prompt));
  ASSERT_EQ(r.block_hashes().u64_size(), 10);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(r.block_hashes().u64(i), expect[static_cast<size_t>(i)]);

  // Same answer from the hashes; a longer query stops where the cache does.
  v1::FindPrefixRequest hq;
  hq.set_model(kModel);
  for (uint64_t h : expect) hq.mutable_hashes()->add_u64(h);
  hq.mutable_hashes()->add_u64(12345);
  v1::FindPrefixResponse hr;
  grpc::ClientContext hctx;
  ASSERT_TRUE(s.stubs.index->FindPrefix(&hctx, hq, &hr).ok());
  EXPECT_EQ(hr.blocks_in_query(), 11u);
  EXPECT_EQ(MatchedOn(hr, "r0"), 10u);

  // A diverging prompt shares only its common blocks.
  std::vector<int64_t> other = prompt;
  other[16 * 4 + 3] += 1;  // block 4 differs
  EXPECT_EQ(MatchedBlocks(s.stubs.index.get(), other, "r0"), 4u);

  // The replica filter and LoRA / salt (different chains) behave.
  v1::FindPrefixRequest fq = req;
  fq.add_replicas("nobody");
  v1::FindPrefixResponse fr;
  grpc::ClientContext fctx;
  ASSERT_TRUE(s.stubs.index->FindPrefix(&fctx, fq, &fr).ok());
  EXPECT_EQ(fr.replicas_size(), 0);
  v1::FindPrefixRequest lq = req;
  lq.mutable_tokens()->set_lora_name("adapter");
  v1::FindPrefixResponse lr;
  grpc::ClientContext lctx;
  ASSERT_TRUE(s.stubs.index->FindPrefix(&lctx, lq, &lr).ok());
  EXPECT_EQ(MatchedOn(lr, "r0"), 0u);
  EXPECT_NE(lr.block_hashes().u64(0), expect[0]);
}

TEST(Server, BadInputGetsTheRightCodeNamingTheField) {
  TempDir dir;
  ServerConfig cfg = TestConfig(dir, false);
  cfg.grpc.max_query_tokens = 100;
  cfg.grpc.max_query_hashes = 10;
  cfg.grpc.max_batch_queries = 2;
  RunningServer s = StartServer(cfg);
  auto call = [&](const v1::FindPrefixRequest& req) {
    v1::FindPrefixResponse r;
    grpc::ClientContext ctx;
    return s.stubs.index->FindPrefix(&ctx, req, &r);
  };
  v1::FindPrefixRequest req;
  grpc::Status st = call(req);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("model"), std::string::npos);

  req.set_model("nope");
  req.mutable_hashes()->add_u64(1);
  st = call(req);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(st.error_message().find("nope"), std::string::npos);

  req.set_model(kModel);
  req.clear_hashes();
  st = call(req);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("query"), std::string::npos);

  req.mutable_hashes()->add_u64(1);
  req.mutable_hashes()->add_digest("abcd");
  st = call(req);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("hashes"), std::string::npos);

  req.clear_hashes();
  req.mutable_hashes()->add_digest("");
  st = call(req);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("hashes.digest[0]"), std::string::npos);

  req.clear_hashes();
  for (int i = 0; i < 11; ++i) req.mutable_hashes()->add_u64(static_cast<uint64_t>(i));
  st = call(req);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(st.error_message().find("max_query_hashes"), std::string::npos);

  req.clear_hashes();
  for (int i = 0; i < 101; ++i) req.mutable_tokens()->add_token_ids(i);
  st = call(req);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(st.error_message().find("tokens.token_ids"), std::string::npos);

  req.mutable_tokens()->clear_token_ids();
  for (int i = 0; i < 40; ++i) req.mutable_tokens()->add_token_ids(i);
  auto* mm = req.mutable_tokens()->add_mm_items();
  mm->set_identifier("img");
  mm->set_offset(30);
  mm->set_length(20);  // past the end
  st = call(req);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("tokens.mm_items[0]"), std::string::npos);
  mm->set_length(5);
  EXPECT_TRUE(call(req).ok());

  // A deadline already passed is never served.
  v1::FindPrefixResponse r;
  grpc::ClientContext dctx;
  dctx.set_deadline(std::chrono::system_clock::now() - std::chrono::seconds(1));
  EXPECT_EQ(s.stubs.index->FindPrefix(&dctx, req, &r).error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);

  // Batch over the limit.
  v1::FindPrefixBatchRequest b;
  for (int i = 0; i < 3; ++i) *b.add_queries() = req;
  v1::FindPrefixBatchResponse br;
  grpc::ClientContext bctx;
  st = s.stubs.index->FindPrefixBatch(&bctx, b, &br);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(st.error_message().find("max_batch_queries"), std::string::npos);

  // A message over max_message_bytes is refused by gRPC itself.
  ServerConfig small = TestConfig(dir, false);
  small.grpc.max_message_bytes = 1024;
  small.grpc.admin_token_file = "";
  RunningServer s2 = StartServer(small);
  v1::FindPrefixRequest big;
  big.set_model(kModel);
  for (int i = 0; i < 1000; ++i) big.mutable_hashes()->add_u64(~uint64_t{0});
  v1::FindPrefixResponse r2;
  grpc::ClientContext c2;
  EXPECT_EQ(s2.stubs.index->FindPrefix(&c2, big, &r2).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
}

TEST(Server, BatchAndStreamAnswerEachQueryOnItsOwn) {
  TempDir dir;
  auto rank = MakeRank("r0");
  ServerConfig cfg = TestConfig(dir, false);
  cfg.engines.push_back(EngineFor(*rank));
  RunningServer s = StartServer(cfg);
  const std::vector<int64_t> prompt = Prompt(2, 16 * 6);
  ServeAndWait(rank.get(), s.stubs.index.get(), prompt);

  v1::FindPrefixRequest good;
  good.set_model(kModel);
  for (int64_t t : prompt) good.mutable_tokens()->add_token_ids(t);
  v1::FindPrefixRequest bad;
  bad.set_model("unknown");
  bad.mutable_hashes()->add_u64(1);

  v1::FindPrefixBatchRequest b;
  *b.add_queries() = good;
  *b.add_queries() = bad;
  *b.add_queries() = good;
  for (int i = 0; i < 3; ++i) b.mutable_queries(i)->set_request_id(100 + static_cast<uint64_t>(i));
  v1::FindPrefixBatchResponse br;
  grpc::ClientContext bctx;
  ASSERT_TRUE(s.stubs.index->FindPrefixBatch(&bctx, b, &br).ok());
  ASSERT_EQ(br.results_size(), 3);
  EXPECT_EQ(br.results(0).code(), 0);
  EXPECT_EQ(MatchedOn(br.results(0).response(), "r0"), 6u);
  EXPECT_EQ(br.results(1).code(), static_cast<int>(grpc::StatusCode::NOT_FOUND));
  EXPECT_EQ(br.results(1).request_id(), 101u);
  EXPECT_EQ(br.results(2).response().request_id(), 102u);

  grpc::ClientContext sctx;
  auto stream = s.stubs.index->FindPrefixStream(&sctx);
  for (int i = 0; i < 20; ++i) {
    v1::FindPrefixRequest q = (i % 5 == 4) ? bad : good;
    q.set_request_id(static_cast<uint64_t>(i));
    ASSERT_TRUE(stream->Write(q));
  }
  stream->WritesDone();
  v1::FindPrefixResult res;
  int n = 0;
  while (stream->Read(&res)) {
    EXPECT_EQ(res.request_id(), static_cast<uint64_t>(n));
    if (n % 5 == 4) {
      EXPECT_EQ(res.code(), static_cast<int>(grpc::StatusCode::NOT_FOUND));
    } else {
      EXPECT_EQ(res.code(), 0);
      EXPECT_EQ(MatchedOn(res.response(), "r0"), 6u);
    }
    ++n;
  }
  EXPECT_EQ(n, 20);
  EXPECT_TRUE(stream->Finish().ok());
}

TEST(Server, ListReplicasGetStatsAndGetBlock) {
  TempDir dir;
  auto r0 = MakeRank("r0");
  auto r1 = MakeRank("r1");
  ServerConfig cfg = TestConfig(dir, true);
  cfg.engines.push_back(EngineFor(*r0));
  cfg.engines.push_back(EngineFor(*r1));
  RunningServer s = StartServer(cfg);
  const std::vector<int64_t> prompt = Prompt(3, 16 * 4);
  ServeAndWait(r0.get(), s.stubs.index.get(), prompt);
  ServeAndWait(r1.get(), s.stubs.index.get(), prompt);
  ASSERT_TRUE(WaitFor([&] { return s.server->serving(); }));

  // Read until the connects' probe replays are over (see above).
  v1::ListReplicasResponse lr;
  ASSERT_TRUE(WaitFor([&] {
    grpc::ClientContext c1;
    lr.Clear();
    if (!s.stubs.index->ListReplicas(&c1, v1::ListReplicasRequest(), &lr).ok()) return false;
    for (const auto& rep : lr.replicas()) {
      for (const auto& src : rep.sources()) {
        if (src.state() != v1::SOURCE_STATE_EXACT) return false;
      }
    }
    return true;
  }));
  ASSERT_EQ(lr.replicas_size(), 2);
  EXPECT_EQ(lr.replicas(0).replica(), "r0");
  EXPECT_EQ(lr.replicas(1).model(), kModel);
  ASSERT_EQ(lr.replicas(0).sources_size(), 1);
  const v1::SourceSummary& ss = lr.replicas(0).sources(0);
  EXPECT_EQ(ss.state(), v1::SOURCE_STATE_EXACT);
  EXPECT_EQ(ss.gpu_capacity(), 512u);
  ASSERT_EQ(ss.blocks_size(), 1);
  EXPECT_EQ(ss.blocks(0).tier(), "GPU");
  EXPECT_EQ(ss.blocks(0).blocks(), 4u);
  v1::ListReplicasRequest bad;
  bad.set_model("x");
  grpc::ClientContext c1b;
  EXPECT_EQ(s.stubs.index->ListReplicas(&c1b, bad, &lr).error_code(), grpc::StatusCode::NOT_FOUND);

  v1::GetStatsResponse st;
  grpc::ClientContext c2;
  ASSERT_TRUE(s.stubs.index->GetStats(&c2, v1::GetStatsRequest(), &st).ok());
  EXPECT_TRUE(st.serving());
  ASSERT_EQ(st.models_size(), 1);
  EXPECT_EQ(st.models(0).blocks(), 4u);
  EXPECT_EQ(st.models(0).hash_algo(), "sha256");
  EXPECT_GE(st.applied_batches(), 2u);
  EXPECT_GE(st.queries(), 2u);
  EXPECT_EQ(st.batches_lost(), 0u);
  EXPECT_LT(st.snapshot_age_seconds(), 0);  // none taken yet
  uint64_t exact = 0;
  for (const auto& sc : st.sources_by_state()) {
    if (sc.state() == v1::SOURCE_STATE_EXACT) exact = sc.sources();
  }
  EXPECT_EQ(exact, 2u);

  const std::vector<uint64_t> h = U64Of(KeysOf(prompt));
  v1::GetBlockRequest gb;
  gb.set_model(kModel);
  gb.mutable_hash()->add_u64(h[2]);
  v1::GetBlockResponse gr;
  grpc::ClientContext c3;
  ASSERT_TRUE(s.stubs.index->GetBlock(&c3, gb, &gr).ok());
  ASSERT_EQ(gr.owners_size(), 2);
  std::set<std::string> owners;
  for (const auto& o : gr.owners()) {
    owners.insert(o.source());
    EXPECT_EQ(o.tier(), "GPU");
    EXPECT_EQ(o.refcount(), 1u);
  }
  EXPECT_EQ(owners, (std::set<std::string>{"r0/dp0", "r1/dp0"}));
  gb.mutable_hash()->set_u64(0, 42);
  grpc::ClientContext c4;
  EXPECT_EQ(s.stubs.index->GetBlock(&c4, gb, &gr).error_code(), grpc::StatusCode::NOT_FOUND);
  gb.mutable_hash()->add_u64(43);
  grpc::ClientContext c5;
  EXPECT_EQ(s.stubs.index->GetBlock(&c5, gb, &gr).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST(Server, AdminNeedsTheTokenAndManagesEngines) {
  TempDir dir;
  auto r0 = MakeRank("r0");
  auto r1 = MakeRank("r1");
  ServerConfig cfg = TestConfig(dir, true);
  cfg.engines.push_back(EngineFor(*r0));
  RunningServer s = StartServer(cfg);

  v1::ListSourcesResponse ls;
  {
    grpc::ClientContext ctx;
    EXPECT_EQ(s.stubs.admin->ListSources(&ctx, v1::ListSourcesRequest(), &ls).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    grpc::ClientContext ctx;
    Admin(&ctx, "wrong");
    EXPECT_EQ(s.stubs.admin->ListSources(&ctx, v1::ListSourcesRequest(), &ls).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    grpc::ClientContext ctx;
    Admin(&ctx);
    ASSERT_TRUE(s.stubs.admin->ListSources(&ctx, v1::ListSourcesRequest(), &ls).ok());
    ASSERT_EQ(ls.sources_size(), 1);
    EXPECT_EQ(ls.sources(0).source(), "r0/dp0");
    EXPECT_EQ(ls.sources(0).model(), kModel);
  }
  // Add r1 at run time and see its blocks.
  v1::AddEngineRequest add;
  const EngineEntry e1 = EngineFor(*r1);
  add.mutable_engine()->set_replica("r1");
  add.mutable_engine()->set_model(kModel);
  add.mutable_engine()->set_endpoint(e1.engine.endpoint);
  add.mutable_engine()->set_replay_endpoint(e1.engine.replay_endpoint);
  {
    v1::AddEngineResponse ar;
    grpc::ClientContext ctx;
    Admin(&ctx);
    grpc::Status st = s.stubs.admin->AddEngine(&ctx, add, &ar);
    ASSERT_TRUE(st.ok()) << st.error_message();
    ASSERT_EQ(ar.sources_size(), 1);
    EXPECT_EQ(ar.sources(0), "r1/dp0");
  }
  {
    v1::AddEngineResponse ar;
    grpc::ClientContext ctx;
    Admin(&ctx);
    EXPECT_EQ(s.stubs.admin->AddEngine(&ctx, add, &ar).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  }
  {
    v1::AddEngineRequest bad = add;
    bad.mutable_engine()->set_replica("r9");
    bad.mutable_engine()->set_model("nope");
    v1::AddEngineResponse ar;
    grpc::ClientContext ctx;
    Admin(&ctx);
    EXPECT_EQ(s.stubs.admin->AddEngine(&ctx, bad, &ar).error_code(), grpc::StatusCode::NOT_FOUND);
    bad.mutable_engine()->set_replica("");
    grpc::ClientContext ctx2;
    Admin(&ctx2);
    grpc::Status st = s.stubs.admin->AddEngine(&ctx2, bad, &ar);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(st.error_message().find("engine.replica"), std::string::npos);
    bad.mutable_engine()->set_replica("r9");
    bad.mutable_engine()->set_model(kModel);
    bad.mutable_engine()->set_mode("sideways");
    grpc::ClientContext ctx3;
    Admin(&ctx3);
    EXPECT_EQ(s.stubs.admin->AddEngine(&ctx3, bad, &ar).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  const std::vector<int64_t> prompt = Prompt(4, 16 * 5);
  ServeAndWait(r1.get(), s.stubs.index.get(), prompt);

  {
    grpc::ClientContext ctx;
    Admin(&ctx);
    v1::ResyncRequest rr;
    rr.set_source("r1/dp0");
    v1::ResyncResponse rresp;
    EXPECT_TRUE(s.stubs.admin->Resync(&ctx, rr, &rresp).ok());
    grpc::ClientContext ctx2;
    Admin(&ctx2);
    rr.set_source("ghost/dp0");
    EXPECT_EQ(s.stubs.admin->Resync(&ctx2, rr, &rresp).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  // A resync replays the engine's buffer: the blocks come back.
  ASSERT_TRUE(WaitFor([&] { return MatchedBlocks(s.stubs.index.get(), prompt, "r1") == 5u; }));
  {
    grpc::ClientContext ctx;
    Admin(&ctx);
    v1::TriggerSnapshotResponse tr;
    ASSERT_TRUE(s.stubs.admin->TriggerSnapshot(&ctx, v1::TriggerSnapshotRequest(), &tr).ok());
    EXPECT_EQ(tr.generation(), 1u);
    EXPECT_GE(tr.owners(), 5u);
    EXPECT_GT(tr.bytes(), 0u);
  }
  {
    grpc::ClientContext ctx;
    Admin(&ctx);
    v1::RemoveEngineRequest rm;
    rm.set_replica("r1");
    v1::RemoveEngineResponse rmr;
    ASSERT_TRUE(s.stubs.admin->RemoveEngine(&ctx, rm, &rmr).ok());
    grpc::ClientContext ctx2;
    Admin(&ctx2);
    EXPECT_EQ(s.stubs.admin->RemoveEngine(&ctx2, rm, &rmr).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  EXPECT_EQ(MatchedBlocks(s.stubs.index.get(), prompt, "r1"), 0u);
}

TEST(Server, AdminIsRefusedWhenNoCredentialIsConfigured) {
  TempDir dir;
  ServerConfig cfg = TestConfig(dir, false);
  cfg.grpc.admin_token_file = "";
  RunningServer s = StartServer(cfg);
  grpc::ClientContext ctx;
  Admin(&ctx);
  v1::ListSourcesResponse ls;
  grpc::Status st = s.stubs.admin->ListSources(&ctx, v1::ListSourcesRequest(), &ls);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_NE(st.error_message().find("admin_token_file"), std::string::npos);
}

TEST(Server, HealthTurnsServingAndMetricsAreExported) {
  TempDir dir;
  auto rank = MakeRank("r0");
  ServerConfig cfg = TestConfig(dir, true);
  cfg.metrics.listen = "127.0.0.1:0";
  cfg.engines.push_back(EngineFor(*rank));
  RunningServer s = StartServer(cfg);
  ASSERT_GT(s.server->metrics_port(), 0);

  auto health = grpc::health::v1::Health::NewStub(s.stubs.channel);
  ASSERT_TRUE(WaitFor([&] {
    grpc::health::v1::HealthCheckRequest hreq;
    grpc::health::v1::HealthCheckResponse hresp;
    grpc::ClientContext ctx;
    return health->Check(&ctx, hreq, &hresp).ok() &&
           hresp.status() == grpc::health::v1::HealthCheckResponse::SERVING;
  }));

  const std::vector<int64_t> prompt = Prompt(5, 16 * 3);
  ServeAndWait(rank.get(), s.stubs.index.get(), prompt);
  std::string m1 = HttpGet(s.server->metrics_port(), "/metrics");
  ASSERT_NE(m1.find("200 OK"), std::string::npos) << m1.substr(0, 200);
  for (const char* name :
       {"kvidx_grpc_requests_total", "kvidx_grpc_request_duration_seconds_bucket", "kvidx_batches_total",
        "kvidx_source_state", "kvidx_index_blocks", "kvidx_source_blocks", "kvidx_drift_remove_unknown_total",
        "kvidx_snapshots_total", "kvidx_snapshot_age_seconds", "kvidx_restored_blocks", "kvidx_serving",
        "kvidx_batches_lost_total", "kvidx_seq_gaps_total", "kvidx_eviction_recency_rank_bucket"}) {
    EXPECT_NE(m1.find(name), std::string::npos) << name;
  }
  EXPECT_NE(m1.find("# TYPE kvidx_grpc_requests_total counter"), std::string::npos);
  EXPECT_EQ(MetricValue(m1, "kvidx_index_blocks{model=\"m\"}"), 3);
  EXPECT_EQ(MetricValue(m1, "kvidx_source_state{source=\"r0/dp0\",state=\"EXACT\"}"), 1);
  EXPECT_EQ(MetricValue(m1, "kvidx_serving"), 1);
  EXPECT_EQ(MetricValue(m1, "kvidx_source_ids_free"), 65534 - 1);  // one source, r0/dp0
  const std::string ok_series = "kvidx_grpc_requests_total{code=\"OK\",method=\"FindPrefix\"}";
  const double q1 = MetricValue(m1, ok_series);
  ASSERT_GE(q1, 1);
  v1::FindPrefixResponse r;
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(QueryTokens(s.stubs.index.get(), prompt, &r).ok());
  grpc::ClientContext sctx;
  Admin(&sctx);
  v1::TriggerSnapshotResponse tr;
  ASSERT_TRUE(s.stubs.admin->TriggerSnapshot(&sctx, v1::TriggerSnapshotRequest(), &tr).ok());
  std::string m2 = HttpGet(s.server->metrics_port(), "/metrics");
  EXPECT_EQ(MetricValue(m2, ok_series), q1 + 5);
  EXPECT_EQ(MetricValue(m2, "kvidx_snapshots_total{result=\"ok\"}"), 1);
  EXPECT_GE(MetricValue(m2, "kvidx_snapshot_age_seconds"), 0);
}

TEST(Server, RestartResumesFromTheSnapshotThroughReplay) {
  TempDir dir;
  auto rank = MakeRank("r0");
  ServerConfig cfg = TestConfig(dir, true);
  cfg.engines.push_back(EngineFor(*rank));
  std::vector<std::vector<int64_t>> prompts;
  {
    RunningServer s = StartServer(cfg);
    for (uint64_t i = 0; i < 5; ++i) {
      prompts.push_back(Prompt(100 + i, 16 * 8));
      ServeAndWait(rank.get(), s.stubs.index.get(), prompts.back());
    }
    ASSERT_TRUE(s.server->Shutdown().ok());  // final snapshot
  }
  // The engine keeps working while kvidx is down.
  for (uint64_t i = 0; i < 5; ++i) {
    prompts.push_back(Prompt(200 + i, 16 * 8));
    ASSERT_TRUE(rank->Serve(prompts.back(), false).ok());
  }
  rank->publisher().Flush();

  RunningServer s = StartServer(cfg);
  const RestoreReport& rep = s.server->node().restore_report();
  EXPECT_TRUE(rep.had_snapshot);
  EXPECT_EQ(rep.sources_resumed, 1u);
  EXPECT_EQ(rep.sources_dropped, 0u);
  EXPECT_GE(rep.owners, 40u);
  ASSERT_TRUE(WaitFor([&] { return s.server->serving(); }));
  for (const auto& p : prompts) {
    const size_t truth = rank->CachedPrefix(KeysOf(p));
    ASSERT_TRUE(WaitFor([&] { return MatchedBlocks(s.stubs.index.get(), p, "r0") == truth; }));
  }
  // Read until the connect's probe replay is over (see the first test).
  v1::ListSourcesResponse ls;
  ASSERT_TRUE(WaitFor([&] {
    grpc::ClientContext ctx;
    Admin(&ctx);
    ls.Clear();
    return s.stubs.admin->ListSources(&ctx, v1::ListSourcesRequest(), &ls).ok() && ls.sources_size() == 1 &&
           ls.sources(0).state() == v1::SOURCE_STATE_EXACT;
  }));
  EXPECT_EQ(ls.sources(0).batches_lost(), 0u);
  EXPECT_EQ(ls.sources(0).batches(), 5u);  // only the missed batches were replayed
}

TEST(Server, RestoreDropsSourcesNoLongerConfigured) {
  TempDir dir;
  auto r0 = MakeRank("r0");
  auto r1 = MakeRank("r1");
  ServerConfig cfg = TestConfig(dir, true);
  cfg.engines.push_back(EngineFor(*r0));
  cfg.engines.push_back(EngineFor(*r1));
  const std::vector<int64_t> prompt = Prompt(6, 16 * 4);
  {
    RunningServer s = StartServer(cfg);
    ServeAndWait(r0.get(), s.stubs.index.get(), prompt);
    ServeAndWait(r1.get(), s.stubs.index.get(), prompt);
    ASSERT_TRUE(s.server->Shutdown().ok());
  }
  cfg.engines.pop_back();  // r1 removed from config
  RunningServer s = StartServer(cfg);
  EXPECT_EQ(s.server->node().restore_report().sources_dropped, 1u);
  v1::FindPrefixResponse r;
  ASSERT_TRUE(QueryTokens(s.stubs.index.get(), prompt, &r).ok());
  EXPECT_EQ(MatchedOn(r, "r0"), 4u);
  EXPECT_EQ(MatchedOn(r, "r1"), 0u);
}

TEST(Server, CorruptDataDirectoryIsAnErrorUnlessStartEmpty) {
  TempDir dir;
  ServerConfig cfg = TestConfig(dir, true);
  {
    RunningServer s = StartServer(cfg);
    ASSERT_TRUE(s.server->SnapshotNow().ok());
    ASSERT_TRUE(s.server->Shutdown().ok());
  }
  // Damage the store: an empty CURRENT file.
  std::filesystem::resize_file(cfg.data_dir + "/rocksdb/CURRENT", 0);
  auto bad = Server::Create(cfg);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(cfg.data_dir), std::string::npos) << bad.status().ToString();

  cfg.on_corrupt = OnCorruptData::kStartEmpty;
  RunningServer s = StartServer(cfg);
  ASSERT_TRUE(s.server);
  EXPECT_FALSE(s.server->node().restore_report().corruption.empty());
  EXPECT_FALSE(s.server->node().restore_report().moved_aside_to.empty());
  EXPECT_EQ(s.server->node().snapshot_stats()->corrupt_start_empty_total.load(), 1u);
}

TEST(Server, ReloadAppliesTheEngineList) {
  TempDir dir;
  auto r0 = MakeRank("r0");
  auto r1 = MakeRank("r1");
  ServerConfig cfg = TestConfig(dir, false);
  cfg.engines.push_back(EngineFor(*r0));
  RunningServer s = StartServer(cfg);
  ServerConfig next = cfg;
  next.engines.push_back(EngineFor(*r1));
  ASSERT_TRUE(s.server->Reload(next).ok());
  const std::vector<int64_t> prompt = Prompt(7, 16 * 3);
  ServeAndWait(r1.get(), s.stubs.index.get(), prompt);
  ServerConfig last = cfg;
  last.engines = {EngineFor(*r1)};
  ASSERT_TRUE(s.server->Reload(last).ok());
  std::vector<std::string> names;
  for (const auto& e : s.server->node().Engines()) names.push_back(e.engine.replica);
  EXPECT_EQ(names, std::vector<std::string>{"r1"});
  EXPECT_EQ(MatchedBlocks(s.stubs.index.get(), prompt, "r1"), 3u);
}

TEST(Server, ListenFailureIsAClearError) {
  TempDir dir;
  ServerConfig cfg = TestConfig(dir, false);
  RunningServer a = StartServer(cfg);
  ServerConfig clash = TestConfig(dir, false);
  clash.grpc.listen = "127.0.0.1:" + std::to_string(a.server->grpc_port());
  auto b = Server::Create(clash);
  ASSERT_TRUE(b.ok());
  Status st = b.value()->Start();
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_NE(st.message().find("grpc.listen"), std::string::npos);
  ServerConfig badtok = TestConfig(dir, false);
  badtok.grpc.admin_token_file = dir.path() + "/missing-token";
  auto c = Server::Create(badtok);
  ASSERT_TRUE(c.ok());
  st = c.value()->Start();
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_NE(st.message().find("admin_token_file"), std::string::npos);
}

}  // namespace
}  // namespace kvidx::server::testing
