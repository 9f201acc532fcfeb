// Restart parity (issue #15 item 8): a Node that is killed (no final
// snapshot: the last periodic one plus replay) or stopped (final snapshot)
// and restored must hold exactly what a never-restarted Node on the same
// engines holds — every (block, source, tier, group) with its refcount,
// hits and recency stamp, every source clock, every per-source GPU copy and
// tier count — not only give the same FindPrefix answers.
//
// Real parts: SimRank engines publishing over ZMQ on 127.0.0.1 with replay
// ROUTERs, Nodes with RocksDB data directories, snapshots cut while batches
// flow. The traffic is arranged so that the first batch a restored Node
// replays starts with a BlockRemoved (an eviction before any store), the
// shape that exposed the drift; and an engine restarts while one node is
// away, so the two applied different histories before that source's clear.
// Run on the default core (the run core), on the per-block core, and with
// a run-core node restarting beside a per-block one: both cores must hold
// the same blocks, counts, stamps and clocks.
#include <algorithm>
#include <atomic>
#include <functional>
#include <thread>

#include "server/index_state_util.h"
#include "server/node.h"
#include "server/server_test_util.h"

namespace kvidx::server::testing {
namespace {

constexpr size_t kPoolBlocks = 40;  // small pools: every new prompt evicts
constexpr size_t kRanks = 2;

struct Engines {
  std::vector<std::unique_ptr<sim::SimRank>> ranks;
  uint64_t next_prompt = 1;

  // One request on `rank`; `full_report` puts a re-announced hit (a store)
  // before the batch's evictions.
  void Serve(size_t rank, bool full_report, uint64_t family) {
    std::vector<int64_t> tokens = Prompt(100 + family % 3, 16 * 2);
    std::vector<int64_t> tail = Prompt(7000 + next_prompt++, 16 * 4 + 5);
    tokens.insert(tokens.end(), tail.begin(), tail.end());
    ASSERT_TRUE(ranks[rank]->Serve(tokens, full_report).ok());
  }
  void Traffic(size_t n) {
    for (size_t i = 0; i < n; ++i) {
      for (size_t k = 0; k < ranks.size(); ++k) ASSERT_NO_FATAL_FAILURE(Serve(k, i % 3 == 0, i));
    }
    Flush();
  }
  // A request whose batch starts with evictions (no full-report hit first).
  void EvictFirst() {
    for (size_t k = 0; k < ranks.size(); ++k) ASSERT_NO_FATAL_FAILURE(Serve(k, /*full_report=*/false, 1000 + k));
    Flush();
  }
  void Flush() {
    for (auto& r : ranks) r->publisher().Flush();
  }
};

ServerConfig NodeConfig(const TempDir& dir, const Engines& e, bool persistent) {
  ServerConfig cfg = TestConfig(dir, persistent);
  for (const auto& r : e.ranks) cfg.engines.push_back(EngineFor(*r));
  return cfg;
}

std::unique_ptr<Node> StartNode(const ServerConfig& cfg) {
  Result<std::unique_ptr<Node>> n = Node::Create(cfg);
  EXPECT_TRUE(n.ok()) << n.status().ToString();
  if (!n.ok()) return nullptr;
  Status s = n.value()->Start();
  EXPECT_TRUE(s.ok()) << s.ToString();
  return std::move(n).value();
}

// Every source applied its engine's last published batch.
bool CaughtUp(const Node& node, Engines& e) {
  for (const auto& r : e.ranks) {
    std::optional<SourceId> id = node.sink().FindSource(r->options().replica, 0);
    if (!id) return false;
    const int64_t last = static_cast<int64_t>(r->publisher().next_seq()) - 1;
    if (node.sink().LastSeq(*id) != last) return false;
  }
  return true;
}

// The never-restarted node also equals the engines' truth: each rank's GPU
// blocks, one copy each (SimRank never holds duplicates).
void ExpectTruth(const Node& node, Engines& e) {
  IndexSnapshot snap;
  node.index().Dump(&snap);
  for (const auto& r : e.ranks) {
    const SourceId id = *node.sink().FindSource(r->options().replica, 0);
    std::vector<std::string> want, have;
    for (const BlockKey& k : r->CachedKeys()) want.push_back(k.ToString());
    for (const OwnerRecord& o : snap.owners) {
      if (o.source == id && o.tier == Tier::kGpu) {
        have.push_back(o.key.ToString());
        EXPECT_EQ(o.refcount, 1u) << Describe(o);
      }
    }
    std::sort(want.begin(), want.end());
    std::sort(have.begin(), have.end());
    EXPECT_EQ(have, want) << r->options().replica;
    EXPECT_EQ(node.index().GetSourceStats(id).gpu_copies, want.size()) << r->options().replica;
  }
}

// Snapshots `node` repeatedly while `traffic` publishes on the engines.
void SnapshotWhileServing(Node* node, const std::function<void()>& traffic) {
  std::atomic<bool> done{false};
  std::thread t([&] {
    traffic();
    done = true;
  });
  int snapshots = 0;
  while (!done.load() || snapshots == 0) {
    Result<SnapshotOutcome> r = node->Snapshot();
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    ++snapshots;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  t.join();
}

// `a_core`, `b_core`: the never-restarted and the restarted node's index
// cores, so that each core is held to the same truth through ingest,
// snapshots, restores, replay and an engine restart.
void RunParity(IndexCore a_core, IndexCore b_core) {
  Engines e;
  for (size_t k = 0; k < kRanks; ++k) {
    e.ranks.push_back(MakeRank("vllm-" + std::to_string(k), kPoolBlocks));
    ASSERT_NE(e.ranks.back(), nullptr);
  }
  ASSERT_NO_FATAL_FAILURE(e.Traffic(8));  // pools full before any kvidx runs

  TempDir dir_a, dir_b;
  ServerConfig cfg_a = NodeConfig(dir_a, e, /*persistent=*/false);
  cfg_a.index_core = a_core;
  ServerConfig cfg_b = NodeConfig(dir_b, e, /*persistent=*/true);
  cfg_b.index_core = b_core;
  std::unique_ptr<Node> a = StartNode(cfg_a);
  std::unique_ptr<Node> b = StartNode(cfg_b);
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(WaitFor([&] { return CaughtUp(*a, e) && CaughtUp(*b, e); }));
  ExpectSameIndexState(*a, *b, "both cold-started");

  for (int round = 0; round < 4; ++round) {
    const bool kill = round % 2 == 0;
    SCOPED_TRACE(kill ? "killed (last periodic snapshot + replay)" : "stopped (final snapshot)");
    SnapshotWhileServing(b.get(), [&] { e.Traffic(6); });
    ASSERT_TRUE(WaitFor([&] { return CaughtUp(*a, e) && CaughtUp(*b, e); }));
    if (kill) {
      // The last periodic snapshot, then batches it does not hold, then the
      // process dies without another one.
      ASSERT_TRUE(b->Snapshot().ok());
      ASSERT_NO_FATAL_FAILURE(e.EvictFirst());
      ASSERT_TRUE(WaitFor([&] { return CaughtUp(*b, e); }));
      b.reset();
    } else {
      b->Stop();
      ASSERT_TRUE(b->Snapshot().ok());
      b.reset();
    }
    // While it is away the engines go on; the first batch it will replay
    // starts with evictions. Last round, an engine also restarts (a new
    // process: empty cache, seq from 0) after publishing what only the
    // never-restarted node applies.
    ASSERT_NO_FATAL_FAILURE(e.EvictFirst());
    if (round == 3) {
      ASSERT_TRUE(e.ranks[1]->Restart(/*recreate_sockets=*/true).ok());
    }
    ASSERT_NO_FATAL_FAILURE(e.Traffic(2));
    b = StartNode(cfg_b);
    ASSERT_TRUE(b);
    EXPECT_EQ(b->restore_report().sources_resumed, kRanks);
    ASSERT_TRUE(WaitFor([&] { return CaughtUp(*a, e) && CaughtUp(*b, e); }));
    ExpectSameIndexState(*a, *b, "after the restart");
    ExpectTruth(*a, e);
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(RestartParity, KilledAndStoppedNodesEqualANeverRestartedPeerBlockByBlock) {
  RunParity(ServerConfig{}.index_core, ServerConfig{}.index_core);
}

TEST(RestartParity, OnThePerBlockCoreToo) { RunParity(IndexCore::kBlocks, IndexCore::kBlocks); }

TEST(RestartParity, ARunCoreNodeEqualsABlockCoreNodeAcrossRestarts) { RunParity(IndexCore::kBlocks, IndexCore::kRuns); }

}  // namespace
}  // namespace kvidx::server::testing
