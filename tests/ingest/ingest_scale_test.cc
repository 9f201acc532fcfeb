// Many sources per ingest thread. The publishers here are bare XPUB sockets
// driven by the test thread (a FakeEngine per source would mean a thread per
// source): XPUB hands us each subscription, so we publish only once every
// subscriber is live and the test needs no sleeps.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "ingest/ingester.h"
#include "ingest/testing/encoder.h"
#include "ingest_test_util.h"

namespace kvidx::ingest {
namespace {

using namespace std::chrono_literals;
using testing::RecordingSink;
using testing::StorePayload;
using testing::WaitFor;

struct Publishers {
  explicit Publishers(int n) : ctx(1, 4 * n + 64) {
    for (int i = 0; i < n; ++i) {
      socks.emplace_back(ctx, zmq::socket_type::xpub);
      socks.back().set(zmq::sockopt::linger, 0);
      socks.back().set(zmq::sockopt::sndhwm, 0);
      socks.back().set(zmq::sockopt::rcvtimeo, 20000);
      socks.back().bind("tcp://127.0.0.1:*");
      endpoints.push_back(socks.back().get(zmq::sockopt::last_endpoint));
    }
  }
  // Blocks until every publisher has seen its subscriber's subscription.
  bool WaitSubscribed() {
    for (auto& s : socks) {
      zmq::message_t m;
      if (!s.recv(m) || m.size() == 0 || m.data<uint8_t>()[0] != 1) return false;
    }
    return true;
  }
  void Send(int i, uint64_t seq, const std::string& payload) {
    std::string seq_frame = EncodeSeq(seq);
    socks[i].send(zmq::const_buffer(nullptr, 0), zmq::send_flags::sndmore);
    socks[i].send(zmq::buffer(seq_frame), zmq::send_flags::sndmore);
    socks[i].send(zmq::buffer(payload), zmq::send_flags::none);
  }

  zmq::context_t ctx;
  std::vector<zmq::socket_t> socks;
  std::vector<std::string> endpoints;
};

// Built with append rather than operator+: GCC 12 at -O3 reports a bogus
// -Wrestrict on `"s" + std::to_string(i)`.
std::string Replica(int i) {
  std::string s = "s";
  s.append(std::to_string(i));
  return s;
}

void RunSources(int n, size_t threads, int batches) {
  Publishers pubs(n);
  RecordingSink sink;
  IngestOptions o;
  o.num_threads = threads;
  Ingester ing(o, &sink);
  ASSERT_TRUE(ing.Start().ok());
  for (int i = 0; i < n; ++i) {
    EngineConfig c;
    c.replica = Replica(i);
    c.model = "m";
    c.endpoint = pubs.endpoints[static_cast<size_t>(i)];  // no replay endpoint
    ASSERT_TRUE(ing.AddEngine(c).ok()) << i;
  }
  ASSERT_TRUE(pubs.WaitSubscribed());
  for (int b = 0; b < batches; ++b) {
    for (int i = 0; i < n; ++i) pubs.Send(i, static_cast<uint64_t>(b), StorePayload(1000u * i + 10u * b, 2));
  }
  ASSERT_TRUE(WaitFor(
      [&] {
        for (int i = 0; i < n; ++i) {
          if (sink.Applied(Replica(i).append("/dp0")) != static_cast<size_t>(batches)) return false;
        }
        return true;
      },
      30s));
  std::set<size_t> used_threads;
  for (const SourceStatus& s : ing.ListSources()) {
    used_threads.insert(s.thread);
    EXPECT_EQ(s.state, SourceState::kExact) << s.spec.name;
    EXPECT_EQ(s.last_seq, batches - 1) << s.spec.name;
    EXPECT_EQ(s.stats->batches_lost.load(), 0u) << s.spec.name;
    EXPECT_TRUE(testing::IsRange(sink.Get(s.spec.name).seqs, 0, static_cast<uint64_t>(batches - 1)));
  }
  EXPECT_EQ(used_threads.size(), threads);
}

TEST(IngestScaleTest, ThousandSourcesOnOneThread) { RunSources(1000, 1, 5); }

TEST(IngestScaleTest, SourcesAreShardedOverThreadsAndKeepTheirOrder) { RunSources(60, 3, 20); }

}  // namespace
}  // namespace kvidx::ingest
