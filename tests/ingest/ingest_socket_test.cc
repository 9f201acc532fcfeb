// End-to-end ingest over real sockets on 127.0.0.1: FakeEngine publishers,
// an Ingester, a recording sink. Ports are ephemeral (wildcard binds).
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>

#include "ingest/ingester.h"
#include "ingest/testing/fake_engine.h"
#include "ingest_test_util.h"

namespace kvidx::ingest {
namespace {

using namespace std::chrono_literals;
using testing::IsRange;
using testing::RecordingSink;
using testing::StorePayload;
using testing::WaitFor;

#define ASSERT_OK(expr)                                  \
  do {                                                   \
    ::kvidx::Status _s = (expr);                         \
    ASSERT_TRUE(_s.ok()) << #expr << ": " << _s.ToString(); \
  } while (0)

IngestOptions FastOptions() {
  IngestOptions o;
  o.heartbeat_ivl = 200ms;
  o.heartbeat_timeout = 1000ms;
  o.reconnect_ivl = 20ms;
  o.reconnect_ivl_max = 200ms;
  o.replay.timeout = 500ms;
  o.replay.max_retries = 2;
  o.replay.backoff = 50ms;
  o.replay.probe_delay = 50ms;
  return o;
}

std::string PortOf(const std::string& ep) { return ep.substr(ep.rfind(':') + 1); }

class IngestSocketTest : public ::testing::Test {
 protected:
  void StartIngester(const IngestOptions& o = FastOptions()) {
    ing_ = std::make_unique<Ingester>(o, &sink_);
    ASSERT_OK(ing_->Start());
  }

  static std::unique_ptr<FakeEngine> Engine(bool replay, const std::string& topic = "",
                                            ReplayFormat format = ReplayFormat::kWithTopic,
                                            const std::string& endpoint = "tcp://127.0.0.1:*") {
    FakeEngineOptions o;
    o.endpoint = endpoint;
    o.replay_endpoint = replay ? "tcp://127.0.0.1:*" : "";
    o.topic = topic;
    o.replay_format = format;
    auto e = FakeEngine::Create(o);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return e.ok() ? std::move(e.value()) : nullptr;
  }

  static EngineConfig Config(const std::string& replica, const FakeEngine& e, const std::string& topic = "") {
    EngineConfig c;
    c.replica = replica;
    c.model = "m";
    c.endpoint = e.pub_endpoint();
    c.replay_endpoint = e.replay_endpoint();
    if (!topic.empty()) c.topic = topic;
    return c;
  }

  // An engine whose PUB is opened later with OpenPub(), once kvidx in bind
  // mode has a port for it to connect to.
  static std::unique_ptr<FakeEngine> DeferredEngine(const std::string& topic) {
    FakeEngineOptions fo;
    fo.endpoint = "";
    fo.replay_endpoint = "tcp://127.0.0.1:*";
    fo.topic = topic;
    auto e = FakeEngine::Create(fo);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return e.ok() ? std::move(e.value()) : nullptr;
  }

  // Bind mode with llm-d's topic convention: kv@<replica>@<model>.
  void StartBindMode() {
    IngestOptions o = FastOptions();
    o.topic_template = TopicTemplate("kv@{replica}@{model}");
    StartIngester(o);
  }

  // A deferred engine publishing as `replica` of model m1, added to the
  // ingester in bind mode; null (and a test failure) if either step fails.
  std::unique_ptr<FakeEngine> AddBindEngine(const std::string& replica) {
    auto e = DeferredEngine("kv@" + replica + "@m1");
    if (e == nullptr) return nullptr;
    EngineConfig c;
    c.replica = replica;
    c.model = "m1";
    c.endpoint = "tcp://127.0.0.1:*";
    c.replay_endpoint = e->replay_endpoint();
    c.mode = ConnectMode::kBind;
    Status st = ing_->AddEngine(c);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return st.ok() ? std::move(e) : nullptr;
  }

  std::shared_ptr<const SourceStats> Stats(const std::string& name) {
    auto s = ing_->GetSource(name);
    EXPECT_TRUE(s.has_value()) << name;
    return s ? s->stats : std::make_shared<SourceStats>();
  }
  SourceState State(const std::string& name) {
    auto s = ing_->GetSource(name);
    return s ? s->state : SourceState::kConnecting;
  }
  bool WaitState(const std::string& name, SourceState st, std::chrono::milliseconds t = 10s) {
    return WaitFor([&] { return State(name) == st; }, t);
  }

  // Publishes store batches (one every 100 ms at most) until one arrives over
  // the SUB socket (not through a replay): from then on the subscription is
  // surely live, and every later batch either arrives or leaves a gap that a
  // later one reveals. Returns that batch's seq.
  uint64_t Prime(FakeEngine& e, const std::string& name, uint64_t base) {
    for (int i = 0; i < 100; ++i) {
      uint64_t seq = e.Publish(StorePayload(base + 10 * static_cast<uint64_t>(i)));
      if (WaitFor([&] { return sink_.SawLive(name, seq); }, 100ms)) return seq;
    }
    ADD_FAILURE() << "source " << name << " never received a batch";
    return 0;
  }

  RecordingSink sink_;
  std::unique_ptr<Ingester> ing_;
};

TEST_F(IngestSocketTest, SlowJoinerIsRecoveredByColdStartReplay) {
  StartIngester();
  auto e = Engine(true);
  for (uint64_t i = 0; i < 10; ++i) e->Publish(StorePayload(100 * i));  // nobody listens yet
  e->Flush();
  ASSERT_OK(ing_->AddEngine(Config("r", *e)));
  ASSERT_TRUE(WaitFor([&] { return sink_.Applied("r/dp0") == 10; }));
  ASSERT_TRUE(WaitState("r/dp0", SourceState::kExact));
  auto st = Stats("r/dp0");
  EXPECT_EQ(st->batches_replayed.load(), 10u);
  EXPECT_EQ(st->batches_lost.load(), 0u);
  EXPECT_EQ(st->replay_count(ReplayResult::kOk), 1u);
  uint64_t s = Prime(*e, "r/dp0", 5000);
  EXPECT_TRUE(IsRange(sink_.Get("r/dp0").seqs, 0, s));
  EXPECT_EQ(State("r/dp0"), SourceState::kExact);
  EXPECT_EQ(st->batches_lost.load(), 0u);
}

struct GapCase {
  ReplayFormat format;
  WireEra era;
  bool bytes_hashes;
};

class GapTest : public IngestSocketTest, public ::testing::WithParamInterface<GapCase> {};

TEST_P(GapTest, GapIsRecoveredExactly) {
  const GapCase& c = GetParam();
  StartIngester();
  auto e = Engine(true, "kv-events", c.format);
  ASSERT_OK(ing_->AddEngine(Config("r", *e, "kv-events")));
  uint64_t s0 = Prime(*e, "r/dp0", 1);
  e->DropSeqs({s0 + 3, s0 + 4, s0 + 7});
  for (uint64_t i = 1; i <= 10; ++i) e->Publish(StorePayload(1000 * i, 2, 0, c.era, c.bytes_hashes));
  ASSERT_TRUE(WaitFor([&] { return sink_.Saw("r/dp0", s0 + 10); }));
  ASSERT_TRUE(WaitState("r/dp0", SourceState::kExact));
  auto got = sink_.Get("r/dp0");
  EXPECT_TRUE(IsRange(got.seqs, 0, s0 + 10));
  auto st = Stats("r/dp0");
  EXPECT_GE(st->seq_gaps.load(), 1u);
  EXPECT_GE(st->batches_replayed.load(), 3u);
  EXPECT_EQ(st->batches_lost.load(), 0u);
  EXPECT_EQ(st->decode_error_total(), 0u);
  EXPECT_EQ(st->replay_count(ReplayResult::kTimeout), 0u);
  // Every block of every batch arrived.
  for (uint64_t i = 1; i <= 10; ++i) EXPECT_TRUE(got.blocks.contains(1000 * i + 1)) << i;
}

INSTANTIATE_TEST_SUITE_P(
    Eras, GapTest,
    ::testing::Values(GapCase{ReplayFormat::kWithTopic, WireEra::Newest(), false},
                      GapCase{ReplayFormat::kLegacy, WireEra::Newest(), false},
                      GapCase{ReplayFormat::kLegacy, WireEra::Array(3), true},
                      GapCase{ReplayFormat::kWithTopic, WireEra::Array(6), true},
                      GapCase{ReplayFormat::kLegacy, WireEra::Array(1, /*with_rank=*/false), false}),
    [](const auto& info) {
      return std::string(info.param.format == ReplayFormat::kLegacy ? "legacy_" : "topic_") +
             (info.param.era.form == EventForm::kMap ? "map" : "array" + std::to_string(info.param.era.array_schema)) +
             (info.param.bytes_hashes ? "_bytes" : "_int");
    });

TEST_F(IngestSocketTest, GapBeyondTheRingIsCountedExactlyAndDegrades) {
  StartIngester();
  auto e = Engine(true);
  ASSERT_OK(ing_->AddEngine(Config("r", *e)));
  uint64_t s0 = Prime(*e, "r/dp0", 1);
  ASSERT_TRUE(WaitState("r/dp0", SourceState::kExact));
  auto st = Stats("r/dp0");
  uint64_t lost_before = st->batches_lost.load();
  e->SetBufferSteps(5);
  std::set<uint64_t> drop;
  for (uint64_t s = s0 + 1; s <= s0 + 12; ++s) drop.insert(s);
  e->DropSeqs(drop);
  for (uint64_t i = 1; i <= 13; ++i) e->Publish(StorePayload(1000 * i));
  ASSERT_TRUE(WaitFor([&] { return sink_.Saw("r/dp0", s0 + 13); }));
  ASSERT_TRUE(WaitState("r/dp0", SourceState::kDegraded));
  // The ring held s0+9 .. s0+13: s0+1 .. s0+8 are gone.
  EXPECT_EQ(st->batches_lost.load() - lost_before, 8u);
  EXPECT_EQ(st->replay_count(ReplayResult::kPartial), 1u);
  auto seqs = sink_.Get("r/dp0").seqs;
  EXPECT_EQ(std::vector<uint64_t>(seqs.end() - 5, seqs.end()),
            (std::vector<uint64_t>{s0 + 9, s0 + 10, s0 + 11, s0 + 12, s0 + 13}));
  // AllBlocksCleared makes the engine's state known again.
  uint64_t c = e->Publish(EncodePayload(testing::ClearBatch(), WireEra::Newest()));
  ASSERT_TRUE(WaitFor([&] { return sink_.Saw("r/dp0", c); }));
  EXPECT_TRUE(WaitState("r/dp0", SourceState::kExact));
}

TEST_F(IngestSocketTest, NoReplayEndpointCountsLossExactly) {
  StartIngester();
  auto e = Engine(false);
  for (uint64_t i = 0; i < 5; ++i) e->Publish(StorePayload(i));  // no subscriber: gone
  e->Flush();
  ASSERT_OK(ing_->AddEngine(Config("r", *e)));
  uint64_t s0 = Prime(*e, "r/dp0", 100);
  ASSERT_GE(s0, 5u);
  auto st = Stats("r/dp0");
  EXPECT_EQ(st->batches_lost.load(), s0);  // first received - 0
  EXPECT_GE(st->replay_count(ReplayResult::kUnavailable), 1u);
  EXPECT_TRUE(WaitState("r/dp0", SourceState::kDegraded));
  e->DropSeqs({s0 + 2});
  for (uint64_t i = 1; i <= 3; ++i) e->Publish(StorePayload(1000 * i));
  ASSERT_TRUE(WaitFor([&] { return sink_.Saw("r/dp0", s0 + 3); }));
  EXPECT_EQ(st->batches_lost.load(), s0 + 1);
  EXPECT_EQ(st->replay_count(ReplayResult::kOk), 0u);
}

TEST_F(IngestSocketTest, ReplayTimeoutIsBoundedAndCounted) {
  IngestOptions o = FastOptions();
  o.replay.timeout = 200ms;
  o.replay.max_retries = 1;
  StartIngester(o);
  auto e = Engine(true);
  e->SetReplayEnabled(false);  // the ROUTER exists but never answers
  ASSERT_OK(ing_->AddEngine(Config("r", *e)));
  auto st = Stats("r/dp0");
  // Cold start: 1 attempt + 1 retry of 200 ms each, then give up.
  ASSERT_TRUE(WaitFor([&] { return st->replay_count(ReplayResult::kTimeout) == 1; }, 5s));
  EXPECT_EQ(e->replay_requests_served(), 0u);
  // Live traffic still flows (held while the post-connect probe also times
  // out, then merged). Nothing was published before we subscribed, so the
  // first live seq is 0 and nothing is lost.
  uint64_t s0 = Prime(*e, "r/dp0", 1);
  ASSERT_TRUE(WaitFor([&] { return !e->replay_endpoint().empty() && State("r/dp0") == SourceState::kExact; }));
  EXPECT_TRUE(IsRange(sink_.Get("r/dp0").seqs, 0, s0));
  EXPECT_EQ(st->batches_lost.load(), 0u);
  EXPECT_GE(st->replay_count(ReplayResult::kTimeout), 1u);
  EXPECT_EQ(st->replay_count(ReplayResult::kOk), 0u);
}

TEST_F(IngestSocketTest, EngineRestartClearsOnlyItsOwnBlocks) {
  StartIngester();
  auto a = Engine(true);
  auto b = Engine(true);
  ASSERT_OK(ing_->AddEngine(Config("a", *a)));
  ASSERT_OK(ing_->AddEngine(Config("b", *b)));
  Prime(*a, "a/dp0", 1000);
  for (int i = 0; i < 4; ++i) a->Publish(StorePayload(1500 + 10 * static_cast<uint64_t>(i)));
  Prime(*b, "b/dp0", 2000);
  ASSERT_TRUE(WaitFor([&] { return sink_.Get("a/dp0").blocks.contains(1530); }));
  auto b_blocks = sink_.Get("b/dp0").blocks;
  ASSERT_FALSE(b_blocks.empty());

  ASSERT_OK(a->Restart(/*recreate_sockets=*/true));  // new publisher: seq 0, empty ring
  for (uint64_t i = 0; i < 100 && !sink_.Get("a/dp0").blocks.contains(9000); ++i) {
    a->Publish(StorePayload(9000));
    WaitFor([&] { return sink_.Get("a/dp0").blocks.contains(9000); }, 100ms);
  }
  auto got = sink_.Get("a/dp0");
  ASSERT_EQ(got.resets.size(), 1u);
  EXPECT_EQ(got.resets[0], ResetReason::kEngineRestart);
  EXPECT_EQ(got.blocks, (std::set<uint64_t>{9000, 9001}));  // nothing from before the restart
  EXPECT_EQ(sink_.Get("b/dp0").blocks, b_blocks);           // the other engine untouched
  EXPECT_TRUE(sink_.Get("b/dp0").resets.empty());
  EXPECT_EQ(Stats("a/dp0")->engine_restarts.load(), 1u);
  EXPECT_EQ(Stats("b/dp0")->engine_restarts.load(), 0u);
  EXPECT_TRUE(WaitState("a/dp0", SourceState::kExact));
  EXPECT_GE(Stats("a/dp0")->peer_disconnects.load(), 1u);
}

TEST_F(IngestSocketTest, DeadPeerIsDisconnected) {
  StartIngester();
  auto e = Engine(true);
  ASSERT_OK(ing_->AddEngine(Config("r", *e)));
  Prime(*e, "r/dp0", 1);
  ASSERT_TRUE(WaitState("r/dp0", SourceState::kExact));
  e.reset();
  EXPECT_TRUE(WaitState("r/dp0", SourceState::kDisconnected));
}

TEST_F(IngestSocketTest, DataParallelRanksUseOffsetPorts) {
  StartIngester();
  // Ranks need consecutive ports, which a wildcard bind cannot promise. Pick
  // random bases below the kernel's ephemeral range (32768+ on Linux), where
  // outgoing connections of concurrently running tests never land, and retry
  // on a collision with another listener.
  std::unique_ptr<FakeEngine> r0, r1;
  std::string pub_port, rep_port, last_error;
  std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<int> base(20000, 32000);
  for (int attempt = 0; attempt < 50 && !r1; ++attempt) {
    r0.reset();
    pub_port = std::to_string(base(rng));
    rep_port = std::to_string(base(rng));
    auto make = [&](uint32_t rank) -> std::unique_ptr<FakeEngine> {
      FakeEngineOptions o;
      o.endpoint = "tcp://127.0.0.1:" + pub_port;
      o.replay_endpoint = "tcp://127.0.0.1:" + rep_port;
      o.data_parallel_rank = rank;
      o.pub_bind = true;  // vLLM would need "*" to bind; tests stay on loopback
      auto e = FakeEngine::Create(o);
      if (!e.ok()) {
        last_error = e.status().ToString();
        return nullptr;
      }
      return std::move(e.value());
    };
    r0 = make(0);
    if (r0) r1 = make(1);
  }
  ASSERT_TRUE(r1) << "no two consecutive free ports: " << last_error;
  EXPECT_EQ(PortOf(r1->pub_endpoint()), std::to_string(std::stoi(pub_port) + 1));
  EngineConfig c;
  c.replica = "dp";
  c.model = "m";
  c.endpoint = "tcp://127.0.0.1:" + pub_port;
  c.replay_endpoint = "tcp://127.0.0.1:" + rep_port;
  c.data_parallel_size = 2;
  ASSERT_OK(ing_->AddEngine(c));
  auto s1 = ing_->GetSource("dp/dp1");
  ASSERT_TRUE(s1);
  EXPECT_EQ(s1->spec.endpoint, r1->pub_endpoint());
  EXPECT_EQ(s1->spec.replay_endpoint, r1->replay_endpoint());

  for (uint64_t i = 0; i < 3; ++i) {
    r0->Publish(StorePayload(100 + 10 * i, 2, 0));
    r1->Publish(StorePayload(200 + 10 * i, 2, 1));
  }
  ASSERT_TRUE(WaitFor([&] { return sink_.Applied("dp/dp0") == 3 && sink_.Applied("dp/dp1") == 3; }));
  EXPECT_EQ(sink_.Get("dp/dp0").blocks, (std::set<uint64_t>{100, 101, 110, 111, 120, 121}));
  EXPECT_EQ(sink_.Get("dp/dp1").blocks, (std::set<uint64_t>{200, 201, 210, 211, 220, 221}));
  EXPECT_EQ(Stats("dp/dp1")->dp_rank_mismatches.load(), 0u);
  // A batch claiming the wrong rank is applied (the endpoint is the identity) and counted.
  uint64_t s = r1->Publish(StorePayload(300, 1, /*rank=*/0));
  ASSERT_TRUE(WaitFor([&] { return sink_.Saw("dp/dp1", s); }));
  EXPECT_EQ(Stats("dp/dp1")->dp_rank_mismatches.load(), 1u);
}

TEST_F(IngestSocketTest, BindModeRoutesEnginesByTopic) {
  StartBindMode();
  auto a = AddBindEngine("ra");
  auto b = AddBindEngine("rb");
  auto stranger = DeferredEngine("kv@ra@m1-other");  // prefix-matches ra's subscription
  ASSERT_TRUE(a && b && stranger);
  auto sa = ing_->GetSource("ra/dp0");
  auto sb = ing_->GetSource("rb/dp0");
  ASSERT_TRUE(sa && sb);
  EXPECT_EQ(sa->spec.topic, "kv@ra@m1");
  EXPECT_EQ(sa->endpoint, sb->endpoint);  // one bound socket
  ASSERT_NE(PortOf(sa->endpoint), "*");
  ASSERT_OK(a->OpenPub(sa->endpoint));
  ASSERT_OK(b->OpenPub(sa->endpoint));
  ASSERT_OK(stranger->OpenPub(sa->endpoint));
  EXPECT_FALSE(a->pub_binds());  // vLLM connects to an endpoint without '*'

  uint64_t la = Prime(*a, "ra/dp0", 10000);
  uint64_t lb = Prime(*b, "rb/dp0", 20000);
  for (int i = 0; i < 50 && ing_->unknown_topic_messages() == 0; ++i) {
    stranger->Publish(StorePayload(30000));
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_GE(ing_->unknown_topic_messages(), 1u);
  for (uint64_t i = 1; i <= 5; ++i) {
    a->Publish(StorePayload(10000 + 100 * i));
    b->Publish(StorePayload(20000 + 100 * i));
  }
  ASSERT_TRUE(WaitFor([&] { return sink_.Saw("ra/dp0", la + 5) && sink_.Saw("rb/dp0", lb + 5); }));
  EXPECT_TRUE(IsRange(sink_.Get("ra/dp0").seqs, 0, la + 5));
  EXPECT_TRUE(IsRange(sink_.Get("rb/dp0").seqs, 0, lb + 5));
  for (uint64_t k : sink_.Get("ra/dp0").blocks) EXPECT_TRUE(k >= 10000 && k < 20000) << k;
  for (uint64_t k : sink_.Get("rb/dp0").blocks) EXPECT_TRUE(k >= 20000 && k < 30000) << k;
  EXPECT_EQ(Stats("ra/dp0")->batches_lost.load(), 0u);
  // A second engine may not claim a topic already routed on that socket.
  EngineConfig dup;
  dup.replica = "ra2";
  dup.model = "m1";
  dup.topic = "kv@ra@m1";
  dup.endpoint = "tcp://127.0.0.1:*";
  dup.mode = ConnectMode::kBind;
  EXPECT_FALSE(ing_->AddEngine(dup).ok());
  EXPECT_FALSE(ing_->GetSource("ra2/dp0").has_value());
}

// Several engines on one bound socket each have their own connection state:
// one engine reconnecting or dying says nothing about the others.
TEST_F(IngestSocketTest, BindModeTracksEachEnginesConnection) {
  StartBindMode();
  auto a = AddBindEngine("ra");
  auto b = AddBindEngine("rb");
  ASSERT_TRUE(a && b);
  std::string ep = ing_->GetSource("ra/dp0")->endpoint;
  ASSERT_OK(a->OpenPub(ep));
  ASSERT_OK(b->OpenPub(ep));
  Prime(*a, "ra/dp0", 10000);
  Prime(*b, "rb/dp0", 20000);
  ASSERT_TRUE(WaitState("ra/dp0", SourceState::kExact));
  ASSERT_TRUE(WaitState("rb/dp0", SourceState::kExact));
  EXPECT_EQ(Stats("ra/dp0")->peer_connects.load(), 1u);
  EXPECT_EQ(Stats("rb/dp0")->peer_connects.load(), 1u);

  // b restarts on a new connection: its own blocks go, a's stay.
  ASSERT_OK(b->Restart(/*recreate_sockets=*/true));
  // The new connection is a slow joiner too; publish until the restart shows
  // (whichever batch arrives first, seq reuse or the reconnect probe tells).
  bool restarted = false;
  for (int i = 0; i < 100 && !restarted; ++i) {
    b->Publish(StorePayload(25000 + 10 * static_cast<uint64_t>(i)));
    restarted = WaitFor([&] { return Stats("rb/dp0")->engine_restarts.load() == 1; }, 100ms);
  }
  ASSERT_TRUE(restarted);
  EXPECT_TRUE(WaitState("rb/dp0", SourceState::kExact));
  EXPECT_EQ(Stats("rb/dp0")->peer_connects.load(), 2u);
  EXPECT_GE(Stats("rb/dp0")->peer_disconnects.load(), 1u);
  EXPECT_EQ(Stats("ra/dp0")->peer_disconnects.load(), 0u);
  EXPECT_EQ(Stats("ra/dp0")->engine_restarts.load(), 0u);
  EXPECT_TRUE(sink_.Get("ra/dp0").resets.empty());

  // a dies: only a is DISCONNECTED; b, idle but alive, stays EXACT.
  a.reset();
  ASSERT_TRUE(WaitState("ra/dp0", SourceState::kDisconnected));
  EXPECT_EQ(State("rb/dp0"), SourceState::kExact);
  uint64_t s = b->Publish(StorePayload(26000));
  ASSERT_TRUE(WaitFor([&] { return sink_.Saw("rb/dp0", s); }));
  EXPECT_EQ(State("rb/dp0"), SourceState::kExact);
  EXPECT_EQ(State("ra/dp0"), SourceState::kDisconnected);
}

TEST_F(IngestSocketTest, MalformedFramesAreCountedAndTheSourceKeepsGoing) {
  StartIngester();
  auto e = Engine(true);
  ASSERT_OK(ing_->AddEngine(Config("r", *e)));
  uint64_t s0 = Prime(*e, "r/dp0", 1);
  ASSERT_TRUE(WaitState("r/dp0", SourceState::kExact));
  e->SendGarbage(GarbageKind::kWrongFrameCount);
  e->SendGarbage(GarbageKind::kShortSeq);
  uint64_t s1 = e->Publish(StorePayload(100));
  ASSERT_EQ(s1, s0 + 1);
  ASSERT_TRUE(WaitFor([&] { return sink_.Saw("r/dp0", s1); }));
  auto st = Stats("r/dp0");
  EXPECT_EQ(st->decode_errors[ErrorIndex(DecodeErrorReason::kFrameCount)].load(), 1u);
  EXPECT_EQ(st->decode_errors[ErrorIndex(DecodeErrorReason::kSeqLength)].load(), 1u);
  EXPECT_EQ(State("r/dp0"), SourceState::kExact);  // no seq consumed, nothing lost

  auto bad = e->SendGarbage(GarbageKind::kBadPayload);  // consumes s0 + 2
  ASSERT_EQ(bad, s0 + 2);
  uint64_t s3 = e->Publish(StorePayload(200));
  ASSERT_TRUE(WaitFor([&] { return sink_.Saw("r/dp0", s3); }));
  EXPECT_EQ(st->decode_error_total(), 3u);
  EXPECT_EQ(st->batches_lost.load(), 0u);
  EXPECT_TRUE(WaitState("r/dp0", SourceState::kDegraded));  // that batch's events are unknown
  uint64_t c = e->Publish(EncodePayload(testing::ClearBatch(), WireEra::Newest()));
  ASSERT_TRUE(WaitFor([&] { return sink_.Saw("r/dp0", c); }));
  EXPECT_TRUE(WaitState("r/dp0", SourceState::kExact));
}

TEST_F(IngestSocketTest, SourcesAreRemovedAndResyncedAtRunTime) {
  StartIngester();
  auto a = Engine(true);
  auto b = Engine(true);
  ASSERT_OK(ing_->AddEngine(Config("a", *a)));
  ASSERT_OK(ing_->AddEngine(Config("b", *b)));
  Prime(*a, "a/dp0", 1000);
  uint64_t lb = Prime(*b, "b/dp0", 2000);
  EXPECT_FALSE(ing_->AddEngine(Config("a", *a)).ok());  // already there

  ASSERT_OK(ing_->RemoveEngine("a"));
  EXPECT_TRUE(sink_.Get("a/dp0").removed);
  EXPECT_FALSE(ing_->GetSource("a/dp0").has_value());
  for (const MetricSample& m : ing_->RenderMetrics()) {
    EXPECT_NE(m.labels[0].second, "a/dp0") << m.name();
  }
  EXPECT_EQ(ing_->RemoveEngine("a").code(), StatusCode::kNotFound);

  auto before = sink_.Get("b/dp0").blocks;
  ASSERT_OK(ing_->Resync("b"));
  ASSERT_TRUE(WaitFor([&] {
    auto g = sink_.Get("b/dp0");
    return g.resets.size() == 1 && g.blocks == before && g.seqs.size() == 2 * (lb + 1);
  }));
  EXPECT_EQ(sink_.Get("b/dp0").resets[0], ResetReason::kOperatorResync);
  EXPECT_TRUE(WaitState("b/dp0", SourceState::kExact));
  EXPECT_EQ(Stats("b/dp0")->resyncs.load(), 1u);
  uint64_t s = b->Publish(StorePayload(2500));
  ASSERT_TRUE(WaitFor([&] { return sink_.Saw("b/dp0", s); }));
}

// Sources come and go while their sockets are live (a cold-start replay
// in flight, the peer monitor reporting): the sockets leave the wait set
// cleanly, and the sources that stay are not disturbed. (Run under ASan and
// TSan in CI: a socket freed while still watched shows up there.)
TEST_F(IngestSocketTest, SourcesChurnWhileOthersKeepFlowing) {
  StartIngester();
  auto steady = Engine(true);
  ASSERT_OK(ing_->AddEngine(Config("steady", *steady)));
  uint64_t last = Prime(*steady, "steady/dp0", 1000);
  auto churn = Engine(true);
  const EngineConfig churn_config = Config("churn", *churn);
  for (int i = 0; i < 20; ++i) {
    ASSERT_OK(ing_->AddEngine(churn_config));  // its cold-start replay opens at once
    churn->Publish(StorePayload(5000 + static_cast<uint64_t>(i)));
    last = steady->Publish(StorePayload(2000 + static_cast<uint64_t>(i)));
    if (i % 2 == 1) std::this_thread::sleep_for(5ms);  // sometimes after the replay answered
    ASSERT_OK(ing_->RemoveEngine("churn"));
  }
  ASSERT_TRUE(WaitFor([&] { return sink_.Saw("steady/dp0", last); }));
  EXPECT_TRUE(IsRange(sink_.Get("steady/dp0").seqs, 0, last));
  EXPECT_EQ(Stats("steady/dp0")->batches_lost.load(), 0u);
  EXPECT_EQ(State("steady/dp0"), SourceState::kExact);
  EXPECT_FALSE(ing_->GetSource("churn/dp0").has_value());
}

TEST_F(IngestSocketTest, MetricsAreRenderedUnderCommittedNames) {
  StartIngester();
  auto e = Engine(true);
  ASSERT_OK(ing_->AddEngine(Config("r", *e)));
  uint64_t s = Prime(*e, "r/dp0", 1);
  ASSERT_TRUE(WaitState("r/dp0", SourceState::kExact));
  decltype(ing_->RenderMetrics()) samples;
  auto find = [&](const std::string& name, const std::string& lk = "", const std::string& lv = "") -> double {
    for (const MetricSample& m : samples) {
      if (m.name() != name) continue;
      if (m.labels[0] != std::pair<std::string, std::string>("source", "r/dp0")) continue;
      if (!lk.empty() && (m.labels.size() < 2 || m.labels[1] != std::pair(lk, lv))) continue;
      return m.value;
    }
    return -1;
  };
  // Read until the source's figures show the batch the sink saw and the
  // connect's probe replay is over: either can trail the sink for an instant.
  ASSERT_TRUE(WaitFor([&] {
    samples = ing_->RenderMetrics();
    return find("kvidx_source_last_seq") == static_cast<double>(s) &&
           find("kvidx_source_state", "state", "EXACT") == 1;
  }));
  EXPECT_EQ(find("kvidx_batches_total"), static_cast<double>(s + 1));
  EXPECT_EQ(find("kvidx_events_total", "type", "BlockStored"), static_cast<double>(s + 1));
  EXPECT_EQ(find("kvidx_events_total", "type", "AllBlocksCleared"), 0);
  EXPECT_EQ(find("kvidx_source_state", "state", "EXACT"), 1);
  EXPECT_EQ(find("kvidx_source_state", "state", "DEGRADED"), 0);
  EXPECT_EQ(find("kvidx_source_last_seq"), static_cast<double>(s));
  EXPECT_GE(find("kvidx_replay_requests_total", "result", "ok"), 1);
  EXPECT_EQ(find("kvidx_decode_errors_total", "reason", "truncated"), 0);
  EXPECT_GE(find("kvidx_source_lag_seconds"), 0);
  for (const char* n : {"kvidx_seq_gaps_total", "kvidx_batches_replayed_total", "kvidx_batches_lost_total",
                        "kvidx_duplicate_batches_total", "kvidx_engine_restarts_total", "kvidx_unknown_events_total"}) {
    EXPECT_GE(find(n), 0) << n;
  }
}

}  // namespace
}  // namespace kvidx::ingest
