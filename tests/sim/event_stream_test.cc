// The simulator's own event stream against its ground truth: whatever a
// SimRank publishes, decoded with the production decoder and applied to a
// fresh BlockIndex through the production IndexSink, must leave the index
// holding exactly the rank's cached block set (once each) after every
// request — in every wire era, hash form and replay reply format.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ostream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "index/block_index.h"
#include "index/source_registry.h"
#include "index/tier.h"
#include "ingest/decoder.h"
#include "ingest/index_sink.h"
#include "ingest/testing/encoder.h"
#include "tools/sim/sim_rank.h"
#include "tools/sim/workload.h"

namespace kvidx::sim {
namespace {

struct Case {
  const char* era;
  bool bytes_hashes;
  ingest::ReplayFormat format;
  HashAlgo algo;
  uint32_t dp_rank;
};

// gtest prints a parameter in test listings (and ctest names): the era, not bytes.
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.era << (c.bytes_hashes ? " bytes" : " int") << " hashes, "
      << (c.format == ingest::ReplayFormat::kLegacy ? "legacy" : "new") << " replay, " << HashAlgoName(c.algo)
      << ", dp " << c.dp_rank;
}

std::string Name(const ::testing::TestParamInfo<Case>& info) {
  std::string n = std::string(info.param.era) + (info.param.bytes_hashes ? "_bytes" : "_int") +
                  (info.param.format == ingest::ReplayFormat::kLegacy ? "_legacyreplay" : "") + "_" +
                  std::string(HashAlgoName(info.param.algo)) + "_dp" + std::to_string(info.param.dp_rank);
  std::replace(n.begin(), n.end(), '-', '_');
  return n;
}

// Reads everything the rank's replay ring holds from `start` on, as a
// subscriber would receive it: (seq, payload) pairs.
std::vector<std::pair<uint64_t, std::string>> FetchFrom(zmq::context_t& ctx, SimRank& rank, uint64_t start,
                                                        ingest::ReplayFormat format) {
  rank.publisher().Flush();
  zmq::socket_t d(ctx, zmq::socket_type::dealer);
  d.set(zmq::sockopt::rcvtimeo, 5000);
  d.set(zmq::sockopt::linger, 0);
  d.connect(rank.publisher().replay_endpoint());
  ingest::Frames req = ingest::ReplayRequestFrames(start);
  for (size_t i = 0; i < req.size(); ++i) {
    d.send(zmq::buffer(req[i]), i + 1 < req.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }
  const size_t want = format == ingest::ReplayFormat::kLegacy ? 3 : 4;
  std::vector<std::pair<uint64_t, std::string>> out;
  for (;;) {
    std::vector<zmq::message_t> parts;
    auto n = zmq::recv_multipart(d, std::back_inserter(parts));
    EXPECT_TRUE(n.has_value()) << "replay reply timed out";
    if (!n) return out;
    EXPECT_EQ(parts.size(), want);
    if (parts.size() != want) return out;
    std::string seq_frame = parts[want - 2].to_string();
    EXPECT_EQ(seq_frame.size(), 8u);
    uint64_t seq = 0;
    for (unsigned char c : seq_frame) seq = (seq << 8) | c;
    if (seq == ingest::kReplayEndSeq) return out;
    out.emplace_back(seq, parts[want - 1].to_string());
  }
}

class EventStreamTest : public ::testing::TestWithParam<Case> {};

TEST_P(EventStreamTest, DecodedStreamRebuildsTheCachedSet) {
  const Case& c = GetParam();
  SimRankOptions o;
  o.replica = "sim";
  o.dp_rank = c.dp_rank;
  o.num_blocks = 96;  // small: most requests evict
  o.hasher.algo = c.algo;
  o.hasher.seed = "7";
  o.bytes_hashes = c.bytes_hashes;
  ASSERT_TRUE(ingest::ParseWireEra(c.era, &o.era)) << c.era;
  o.publisher.pub_bind = true;
  o.publisher.replay_format = c.format;
  o.publisher.topic = "kv@sim@m";
  // vLLM's DP rule needs numeric ports (rank r binds port + r): try a few.
  std::mt19937_64 port_rng(static_cast<uint64_t>(::getpid()) * 31 + c.dp_rank);
  Result<std::unique_ptr<SimRank>> rank_or = Status::Internal("not created");
  for (int attempt = 0; attempt < 30 && !rank_or.ok(); ++attempt) {
    int base = 20000 + static_cast<int>(port_rng() % 40000);
    o.publisher.endpoint = "tcp://127.0.0.1:" + std::to_string(base);
    o.publisher.replay_endpoint = "tcp://127.0.0.1:" + std::to_string(base + 10);
    rank_or = SimRank::Create(o);
  }
  ASSERT_TRUE(rank_or.ok()) << rank_or.status().ToString();
  SimRank& rank = *rank_or.value();

  BlockIndex index;
  SourceRegistry sources;
  TierRegistry tiers;
  ingest::IndexSink sink(&index, &sources, &tiers);
  ingest::SourceSpec spec;
  spec.id = 1;
  spec.replica = o.replica;
  spec.model = "m";
  spec.dp_rank = o.dp_rank;
  spec.name = ingest::SourceName(o.replica, o.dp_rank);
  sink.OnSourceAdded(spec);
  const SourceId sid = sources.Find(o.replica, o.dp_rank).value();

  WorkloadOptions wo;
  wo.seed = 3;
  wo.system_prompts = 6;
  wo.system_min = 32;
  wo.system_max = 400;
  wo.turn_min = 8;
  wo.turn_max = 120;
  wo.max_session_tokens = 2500;  // longer than the pool: exercises the cut
  wo.max_sessions = 16;
  Workload w(wo);
  zmq::context_t ctx;
  ingest::Decoder decoder;
  ingest::EventBatch batch;
  uint64_t next = 0, stored = 0, removed = 0, cleared = 0, full_reports = 0;
  std::mt19937_64 rng(1);

  auto check = [&](const char* when, size_t step) {
    std::vector<BlockKey> truth = rank.CachedKeys();
    IndexSnapshot snap;
    index.Dump(&snap);
    std::vector<BlockKey> held;
    for (const OwnerRecord& r : snap.owners) {
      if (r.source != sid) continue;
      EXPECT_EQ(r.refcount, 1u) << when << " step " << step;
      EXPECT_EQ(r.tier, Tier::kGpu);
      held.push_back(r.key);
    }
    ASSERT_EQ(held.size(), truth.size()) << when << " step " << step;
    std::set<std::string> a, b;
    for (const BlockKey& k : held) a.insert(k.ToString());
    for (const BlockKey& k : truth) b.insert(k.ToString());
    ASSERT_EQ(a, b) << when << " step " << step;
  };

  auto apply_new = [&] {
    for (auto& [seq, payload] : FetchFrom(ctx, rank, next, c.format)) {
      ASSERT_EQ(seq, next);
      ingest::DecodeError err;
      ASSERT_TRUE(decoder.DecodePayload(payload, &batch, &err)) << err.detail;
      ASSERT_EQ(batch.unknown_events, 0u);
      if (o.era.with_rank) {
        ASSERT_TRUE(batch.data_parallel_rank.has_value());
        EXPECT_EQ(*batch.data_parallel_rank, c.dp_rank);
      } else {
        EXPECT_FALSE(batch.data_parallel_rank.has_value());
      }
      for (const ingest::KvEvent& e : batch.events) {
        stored += e.type == ingest::EventType::kBlockStored;
        removed += e.type == ingest::EventType::kBlockRemoved;
        cleared += e.type == ingest::EventType::kAllBlocksCleared;
        if (e.type == ingest::EventType::kBlockStored) {
          for (const BlockKey& k : batch.HashesOf(e)) EXPECT_EQ(k.is_bytes(), c.bytes_hashes);
          EXPECT_EQ(batch.TokensOf(e).size(), e.block_hashes.count * 16u);
        }
      }
      batch.fingerprint = seq + 1;
      sink.OnBatch(spec, seq, batch, /*replayed=*/true);
      ++next;
    }
  };

  for (size_t i = 0; i < 400; ++i) {
    bool full = rng() % 4 == 0;
    full_reports += full;
    auto r = rank.Serve(w.Next(), full);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    if (i == 250) rank.ResetPrefixCache();
    ASSERT_NO_FATAL_FAILURE(apply_new());
    ASSERT_NO_FATAL_FAILURE(check("after request", i));
  }
  EXPECT_EQ(next, rank.publisher().next_seq());
  EXPECT_EQ(rank.batches_published(), next);
  EXPECT_GT(stored, 0u);
  EXPECT_GT(removed, 0u);
  EXPECT_EQ(cleared, 1u);
  EXPECT_GT(full_reports, 0u);
  EXPECT_EQ(sink.stats().apply_errors.load(), 0u);
}

INSTANTIATE_TEST_SUITE_P(
    Eras, EventStreamTest,
    ::testing::Values(Case{"map", false, ingest::ReplayFormat::kWithTopic, HashAlgo::kSha256, 0},
                      Case{"map", true, ingest::ReplayFormat::kWithTopic, HashAlgo::kSha256Cbor, 1},
                      Case{"map-origin", false, ingest::ReplayFormat::kLegacy, HashAlgo::kXxhash, 0},
                      Case{"array-v1-norank", false, ingest::ReplayFormat::kLegacy, HashAlgo::kSha256, 0},
                      Case{"array-v3", true, ingest::ReplayFormat::kLegacy, HashAlgo::kXxhashCbor, 3},
                      Case{"array-v6-signed", false, ingest::ReplayFormat::kWithTopic, HashAlgo::kSha256, 1}),
    Name);

// Serve(..., drop) drops exactly the batch of that request: it is in the
// replay ring (HWM-style drop) but was never sent live, and the counters say so.
TEST(SimRankFaultTest, DropCountsAndRestart) {
  SimRankOptions o;
  o.replica = "r";
  o.num_blocks = 64;
  o.publisher.endpoint = "tcp://127.0.0.1:*";
  o.publisher.pub_bind = true;
  o.publisher.replay_endpoint = "tcp://127.0.0.1:*";
  auto rank = SimRank::Create(o);
  ASSERT_TRUE(rank.ok());
  std::vector<int64_t> p(64);
  for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<int64_t>(i);
  auto a = (*rank)->Serve(p, false, ingest::DropMode::kNotSent);
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(a->published);
  EXPECT_TRUE(a->dropped);
  EXPECT_EQ(a->seq, 0u);
  auto b = (*rank)->Serve(p, false, ingest::DropMode::kNotSent);  // a full hit: nothing to publish
  ASSERT_TRUE(b.ok());
  EXPECT_FALSE(b->published);
  EXPECT_FALSE(b->dropped);
  auto cr = (*rank)->Serve(p, true);  // full report: one re-announcement
  ASSERT_TRUE(cr.ok());
  EXPECT_TRUE(cr->published);
  EXPECT_EQ(cr->events, 1u);
  (*rank)->publisher().Flush();
  EXPECT_EQ((*rank)->batches_published(), 2u);
  EXPECT_EQ((*rank)->batches_dropped(), 1u);
  EXPECT_EQ((*rank)->publisher().live_sent(), 1u);
  EXPECT_EQ((*rank)->cached_blocks(), 4u);
  ASSERT_TRUE((*rank)->Restart(/*recreate_sockets=*/true).ok());
  EXPECT_EQ((*rank)->cached_blocks(), 0u);
  EXPECT_EQ((*rank)->publisher().next_seq(), 0u);
  auto d = (*rank)->Serve(p, false);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->seq, 0u);
  EXPECT_EQ(d->hit_blocks, 0u);
}

}  // namespace
}  // namespace kvidx::sim
