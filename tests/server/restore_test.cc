// Restore outcomes of issue #5 through the whole server: a restart resumes
// from the snapshot's watermarks through the engines' replay buffers.
#include "server/node.h"
#include "server_test_util.h"

namespace kvidx::server::testing {
namespace {

std::unique_ptr<Server> Start(const ServerConfig& cfg) {
  auto s = Server::Create(cfg);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  if (!s.ok()) return nullptr;
  Status st = s.value()->Start();
  EXPECT_TRUE(st.ok()) << st.ToString();
  return std::move(s).value();
}

v1::SourceInfo SourceOf(const Stubs& stubs, const std::string& name) {
  grpc::ClientContext ctx;
  Admin(&ctx);
  v1::ListSourcesResponse ls;
  EXPECT_TRUE(stubs.admin->ListSources(&ctx, v1::ListSourcesRequest(), &ls).ok());
  for (const auto& s : ls.sources()) {
    if (s.source() == name) return s;
  }
  return {};
}

// kvidx's answer for every prompt equals the engine's truth.
bool AllMatch(const Stubs& stubs, sim::SimRank* rank, const std::vector<std::vector<int64_t>>& prompts) {
  for (const auto& p : prompts) {
    if (MatchedBlocks(stubs.index.get(), p, rank->options().replica) != rank->CachedPrefix(KeysOf(p))) return false;
  }
  return true;
}

// Serves `n` new six-block prompts (seeds `seed`, `seed` + 1, ...) on `rank`,
// appends them to `prompts` and flushes the engine's publisher.
void ServeNewPrompts(sim::SimRank* rank, uint64_t seed, uint64_t n, std::vector<std::vector<int64_t>>* prompts) {
  for (uint64_t i = 0; i < n; ++i) {
    prompts->push_back(Prompt(seed + i, 16 * 6));
    ASSERT_TRUE(rank->Serve(prompts->back(), false).ok());
  }
  rank->publisher().Flush();
}

// A first kvidx run on `cfg`: the engine serves `n` new prompts (as
// ServeNewPrompts), kvidx indexes them all, then shuts down (final snapshot).
void IndexNewPromptsThenShutDown(const ServerConfig& cfg, sim::SimRank* rank, uint64_t seed, uint64_t n,
                                 std::vector<std::vector<int64_t>>* prompts) {
  auto s = Start(cfg);
  Stubs stubs = Connect(s->grpc_port());
  ASSERT_NO_FATAL_FAILURE(ServeNewPrompts(rank, seed, n, prompts));
  ASSERT_TRUE(WaitFor([&] { return AllMatch(stubs, rank, *prompts); }));
  ASSERT_TRUE(s->Shutdown().ok());
}

TEST(Restore, EngineRestartedWhileKvidxWasDownClearsTheSourceAndStaysExact) {
  TempDir dir;
  auto rank = MakeRank("r0");
  ServerConfig cfg = TestConfig(dir, true);
  cfg.engines.push_back(EngineFor(*rank));
  std::vector<std::vector<int64_t>> prompts;
  ASSERT_NO_FATAL_FAILURE(IndexNewPromptsThenShutDown(cfg, rank.get(), 300, 6, &prompts));
  // The engine restarts (empty cache, seq from 0) and serves two requests.
  ASSERT_TRUE(rank->Restart().ok());
  ASSERT_NO_FATAL_FAILURE(ServeNewPrompts(rank.get(), 400, 2, &prompts));

  auto s = Start(cfg);
  Stubs stubs = Connect(s->grpc_port());
  EXPECT_EQ(s->node().restore_report().sources_resumed, 1u);
  // Old blocks are gone (the engine lost them), new ones are there.
  ASSERT_TRUE(WaitFor([&] { return AllMatch(stubs, rank.get(), prompts); }));
  ASSERT_TRUE(WaitFor([&] { return SourceOf(stubs, "r0/dp0").state() == v1::SOURCE_STATE_EXACT; }));
  v1::SourceInfo si = SourceOf(stubs, "r0/dp0");
  EXPECT_EQ(si.batches_lost(), 0u);
  EXPECT_GE(si.restarts(), 1u);
  EXPECT_EQ(si.last_seq(), 1u);
}

TEST(Restore, EngineRestartedAndPublishedPastOurWatermarkIsToldApartByFingerprint) {
  TempDir dir;
  auto rank = MakeRank("r0");
  ServerConfig cfg = TestConfig(dir, true);
  cfg.engines.push_back(EngineFor(*rank));
  std::vector<std::vector<int64_t>> prompts;
  ASSERT_NO_FATAL_FAILURE(IndexNewPromptsThenShutDown(cfg, rank.get(), 350, 4, &prompts));
  // A new engine incarnation publishes more batches than the old one had:
  // seq 3 exists again, with other contents. Sequence numbers alone would
  // take 4.. as the continuation and keep the dead engine's blocks.
  ASSERT_TRUE(rank->Restart().ok());
  ASSERT_NO_FATAL_FAILURE(ServeNewPrompts(rank.get(), 450, 7, &prompts));
  auto s = Start(cfg);
  Stubs stubs = Connect(s->grpc_port());
  ASSERT_TRUE(WaitFor([&] { return AllMatch(stubs, rank.get(), prompts); }));
  // Read until the connect's probe replay is over: it can show the source
  // REPLAYING for an instant after EXACT.
  v1::SourceInfo si;
  ASSERT_TRUE(WaitFor([&] {
    si = SourceOf(stubs, "r0/dp0");
    return si.state() == v1::SOURCE_STATE_EXACT;
  }));
  EXPECT_EQ(si.restarts(), 1u);
  EXPECT_EQ(si.batches_lost(), 0u);
  EXPECT_EQ(si.last_seq(), 6u);
}

TEST(Restore, ReplayBufferOverrunCountsTheLossAndDegrades) {
  TempDir dir;
  sim::SimRankOptions o;
  o.replica = "r0";
  o.num_blocks = 512;
  o.publisher.endpoint = "tcp://127.0.0.1:*";
  o.publisher.pub_bind = true;
  o.publisher.replay_endpoint = "tcp://127.0.0.1:*";
  o.publisher.buffer_steps = 3;
  auto created = sim::SimRank::Create(o);
  ASSERT_TRUE(created.ok());
  auto rank = std::move(created).value();
  ServerConfig cfg = TestConfig(dir, true);
  cfg.engines.push_back(EngineFor(*rank));
  uint64_t last_seq_before = 0;
  {
    auto s = Start(cfg);
    Stubs stubs = Connect(s->grpc_port());
    for (uint64_t i = 0; i < 3; ++i) {
      auto r = rank->Serve(Prompt(500 + i, 16 * 4), false);
      ASSERT_TRUE(r.ok());
      last_seq_before = r->seq;
    }
    rank->publisher().Flush();
    ASSERT_TRUE(WaitFor([&] {
      v1::SourceInfo si = SourceOf(stubs, "r0/dp0");
      return si.has_seq() && si.last_seq() == last_seq_before;
    }));
    ASSERT_TRUE(s->Shutdown().ok());
  }
  // 10 batches while kvidx is down; the engine keeps only the last 3.
  uint64_t last = 0;
  for (uint64_t i = 0; i < 10; ++i) {
    auto r = rank->Serve(Prompt(600 + i, 16 * 4), false);
    ASSERT_TRUE(r.ok());
    last = r->seq;
  }
  rank->publisher().Flush();
  const uint64_t first_buffered = last - 2;
  const uint64_t expected_lost = first_buffered - (last_seq_before + 1);

  auto s = Start(cfg);
  Stubs stubs = Connect(s->grpc_port());
  ASSERT_TRUE(WaitFor([&] {
    v1::SourceInfo si = SourceOf(stubs, "r0/dp0");
    return si.has_seq() && si.last_seq() == last;
  }));
  v1::SourceInfo si = SourceOf(stubs, "r0/dp0");
  EXPECT_EQ(si.batches_lost(), expected_lost);
  EXPECT_EQ(si.state(), v1::SOURCE_STATE_DEGRADED);
  // The answers say so: queries report the source as DEGRADED.
  v1::FindPrefixResponse r;
  ASSERT_TRUE(QueryTokens(stubs.index.get(), Prompt(609, 16 * 4), &r).ok());
  ASSERT_EQ(r.replicas_size(), 1);
  EXPECT_EQ(r.replicas(0).state(), v1::SOURCE_STATE_DEGRADED);

  // An operator resync makes it exact again (clears, replays the buffer).
  grpc::ClientContext ctx;
  Admin(&ctx);
  v1::ResyncRequest rr;
  rr.set_source("r0/dp0");
  v1::ResyncResponse rresp;
  ASSERT_TRUE(stubs.admin->Resync(&ctx, rr, &rresp).ok());
  ASSERT_TRUE(WaitFor([&] { return SourceOf(stubs, "r0/dp0").state() == v1::SOURCE_STATE_EXACT; }));
}

TEST(Restore, NewEngineInConfigColdStartsFromZero) {
  TempDir dir;
  auto r0 = MakeRank("r0");
  auto r1 = MakeRank("r1");
  ServerConfig cfg = TestConfig(dir, true);
  cfg.engines.push_back(EngineFor(*r0));
  const std::vector<int64_t> prompt = Prompt(700, 16 * 5);
  {
    auto s = Start(cfg);
    ASSERT_TRUE(s->SnapshotNow().ok());
    ASSERT_TRUE(s->Shutdown().ok());
  }
  // r1 published before kvidx ever knew it: cold start replays from 0.
  ASSERT_TRUE(r1->Serve(prompt, false).ok());
  r1->publisher().Flush();
  cfg.engines.push_back(EngineFor(*r1));
  auto s = Start(cfg);
  Stubs stubs = Connect(s->grpc_port());
  EXPECT_EQ(s->node().restore_report().sources_resumed, 0u);  // r0 had applied nothing
  ASSERT_TRUE(WaitFor([&] { return MatchedBlocks(stubs.index.get(), prompt, "r1") == 5u; }));
}

TEST(Restore, TimerAndBatchCountTriggerSnapshots) {
  TempDir dir;
  auto rank = MakeRank("r0");
  ServerConfig cfg = TestConfig(dir, true);
  cfg.snapshot.every_batches = 3;
  cfg.engines.push_back(EngineFor(*rank));
  auto s = Start(cfg);
  for (uint64_t i = 0; i < 3; ++i) ASSERT_TRUE(rank->Serve(Prompt(800 + i, 32), false).ok());
  ASSERT_TRUE(WaitFor([&] { return s->node().snapshot_stats()->snapshots_ok.load() >= 1; }));
  ASSERT_TRUE(s->Shutdown().ok());

  ServerConfig timed = TestConfig(dir, true);
  timed.data_dir = dir.path() + "/timed";
  timed.snapshot.interval_seconds = 1;
  auto t = Start(timed);
  ASSERT_TRUE(WaitFor([&] { return t->node().snapshot_stats()->snapshots_ok.load() >= 1; },
                      std::chrono::seconds(5)));
}

}  // namespace
}  // namespace kvidx::server::testing
