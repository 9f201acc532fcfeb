// Clients that hold connections open against a kvidx-server process:
// /metrics requests that never finish, thousands of idle FindPrefixStream
// streams, and engines added and removed over and over through the admin
// API. Each must leave the server answering, within the suite's bounds.
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "kvidx/v1/kvidx.grpc.pb.h"
#include "reliability/server_under_attack.h"

namespace kvidx::reliability {
namespace {

class ConnectionTest : public ServerUnderAttack {};

// 16 stalled clients against the default 8 HTTP threads and 5 s request
// timeout: a scrape waits behind at most two rounds of timeouts, never
// indefinitely (fewer stalled clients than threads cost nothing; see
// tests/server/metrics_slow_client_test.cc).
TEST_F(ConnectionTest, UnfinishedMetricsRequestsDelayScrapesBoundedly) {
  ASSERT_NO_FATAL_FAILURE(Launch());
  std::vector<int> slow;
  ExpectBounded("16 unfinished /metrics requests", [&] {
    for (int i = 0; i < 16; ++i) {
      const int fd = testing::ConnectLoopback(metrics_port_);
      ASSERT_GE(fd, 0);
      const std::string partial = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n";  // no blank line: never ends
      ASSERT_EQ(write(fd, partial.data(), partial.size()), static_cast<ssize_t>(partial.size()));
      slow.push_back(fd);
    }
    const auto start = std::chrono::steady_clock::now();
    const std::string scrape = testing::HttpGet(metrics_port_, "/metrics", 20);
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_NE(scrape.find("kvidx_serving"), std::string::npos) << "a scrape got nothing while slow clients wait";
    EXPECT_LT(waited, 2 * 5.0 + 4.0) << "a scrape waited longer than two request timeouts";
  });
  for (int fd : slow) close(fd);
}

TEST_F(ConnectionTest, IdleStreamsDoNotCostAThreadEach) {
  ASSERT_NO_FATAL_FAILURE(Launch());
  constexpr int kChannels = 4, kStreamsPerChannel = 500;
  struct Open {
    std::unique_ptr<grpc::ClientContext> ctx;
    std::unique_ptr<grpc::ClientReaderWriter<v1::FindPrefixRequest, v1::FindPrefixResult>> stream;
  };
  std::vector<std::unique_ptr<v1::KvIndex::Stub>> stubs;
  std::vector<Open> open;
  ExpectBounded("2,000 idle FindPrefixStream streams", [&] {
    for (int c = 0; c < kChannels; ++c) {
      grpc::ChannelArguments args;
      args.SetInt("kvidx.reliability.channel", c);  // distinct args: a connection each
      stubs.push_back(v1::KvIndex::NewStub(grpc::CreateCustomChannel(
          "127.0.0.1:" + std::to_string(grpc_port_), grpc::InsecureChannelCredentials(), args)));
      for (int s = 0; s < kStreamsPerChannel; ++s) {
        Open o;
        o.ctx = std::make_unique<grpc::ClientContext>();
        o.ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
        o.stream = stubs.back()->FindPrefixStream(o.ctx.get());
        open.push_back(std::move(o));
      }
    }
    std::this_thread::sleep_for(std::chrono::seconds(2));  // let the server take them all
    // The server still answers a plain query.
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::GetStatsResponse resp;
    EXPECT_TRUE(stubs[0]->GetStats(&ctx, v1::GetStatsRequest(), &resp).ok());
  });
  for (Open& o : open) o.ctx->TryCancel();
  for (Open& o : open) (void)o.stream->Finish();
}

// Each cycle adds an engine (two DP ranks, nothing listening at its
// endpoint) and removes it through the admin API.
class EngineChurnTest : public ServerUnderAttack {
 protected:
  void Cycles(int first, int n, int distinct_names) {
    for (int i = first; i < first + n; ++i) {
      v1::AddEngineRequest add;
      v1::EngineSpec* e = add.mutable_engine();
      e->set_replica("churn-" + std::to_string(i % distinct_names));
      e->set_model("m");
      e->set_endpoint("tcp://127.0.0.1:1");
      e->set_dp_size(2);
      grpc::ClientContext c1;
      c1.AddMetadata("authorization", std::string("Bearer ") + kAdminToken);
      v1::AddEngineResponse added;
      const grpc::Status s1 = admin_->AddEngine(&c1, add, &added);
      ASSERT_TRUE(s1.ok()) << s1.error_message();
      v1::RemoveEngineRequest rm;
      rm.set_replica(e->replica());
      grpc::ClientContext c2;
      c2.AddMetadata("authorization", std::string("Bearer ") + kAdminToken);
      v1::RemoveEngineResponse removed;
      const grpc::Status s2 = admin_->RemoveEngine(&c2, rm, &removed);
      ASSERT_TRUE(s2.ok()) << s2.error_message();
    }
  }
  // RSS growth per cycle over `n` cycles, measured after a warm-up of 300
  // and a first round of `n` (under the suite's bounds): the first rounds
  // also touch malloc arenas and gRPC's pools, more of them the more
  // threads the loaded machine runs at once, which is not per-cycle growth.
  // The least of three measured rounds: a leak grows in every round, while
  // a loaded machine's allocator noise (one round read 265 B/cycle) does not.
  double GrowthPerCycle(int n, int distinct_names) {
    admin_ = v1::KvIndexAdmin::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(grpc_port_), grpc::InsecureChannelCredentials()));
    Cycles(0, 300, distinct_names);  // warm-up: allocator pools, id tables
    ExpectBounded(std::to_string(n) + " engine add/remove cycles", [&] { Cycles(300, n, distinct_names); });
    double least = -1;
    for (int round = 0; round < 3; ++round) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      const uint64_t warm = testing::UsageOf(pid()).rss_bytes;
      Cycles(300 + (round + 1) * n, n, distinct_names);
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      const uint64_t after = testing::UsageOf(pid()).rss_bytes;
      const double per_cycle = after > warm ? static_cast<double>(after - warm) / n : 0.0;
      std::cerr << "[reliability] add/remove over " << distinct_names << " names, round " << round << ": "
                << per_cycle << " bytes RSS per cycle after warm-up\n";
      least = least < 0 ? per_cycle : std::min(least, per_cycle);
    }
    return least;
  }
  std::unique_ptr<v1::KvIndexAdmin::Stub> admin_;
};

// The same names again and again (a StatefulSet's pods restarting): no
// growth, and no series of removed sources left in /metrics.
TEST_F(EngineChurnTest, CyclesOfTheSameNamesDoNotGrow) {
  ASSERT_NO_FATAL_FAILURE(Launch());
  const size_t metrics_before = Metrics().size();
  const double per_cycle = GrowthPerCycle(1500, 8);
  if (kMemoryBoundsAsserted) {
    EXPECT_LT(per_cycle, 256.0) << "RSS grows with add/remove cycles";
  }
  const std::string m = Metrics();
  EXPECT_EQ(m.find("churn-"), std::string::npos) << "series of removed sources remain";
  EXPECT_LT(m.size(), metrics_before + 4096) << "/metrics grew from " << metrics_before << " to " << m.size();
}

// A new name every cycle (a Deployment's pods), with released ids reused at
// once: no growth, as with the same names.
TEST_F(EngineChurnTest, CyclesOfNewNamesReuseIdsAndDoNotGrow) {
  ingest_yaml_ = ", source_id_reuse_after_s: 0";
  ASSERT_NO_FATAL_FAILURE(Launch());
  const size_t metrics_before = Metrics().size();
  const double per_cycle = GrowthPerCycle(1500, 1 << 30);
  if (kMemoryBoundsAsserted) {
    EXPECT_LT(per_cycle, 256.0) << "RSS grows with add/remove cycles";
  }
  const std::string m = Metrics();
  EXPECT_EQ(m.find("churn-"), std::string::npos) << "series of removed sources remain";
  EXPECT_NE(m.find("kvidx_source_ids_free 65534"), std::string::npos) << "every id free again";
  EXPECT_LT(m.size(), metrics_before + 4096) << "/metrics grew from " << metrics_before << " to " << m.size();
}

// A new name every cycle within source_id_reuse_after_s (default 15 min): a
// removed source's id waits, which costs its registry entry and counters,
// about 1.5 KB; nothing else stays.
TEST_F(EngineChurnTest, CyclesOfNewNamesKeepOnlyTheReleasedIds) {
  ASSERT_NO_FATAL_FAILURE(Launch());
  const size_t metrics_before = Metrics().size();
  const double per_cycle = GrowthPerCycle(1500, 1 << 30);
  if (kMemoryBoundsAsserted) {
    EXPECT_LT(per_cycle, 3072.0) << "more than the retired ids' entries stays per cycle";
  }
  const std::string m = Metrics();
  EXPECT_EQ(m.find("churn-"), std::string::npos) << "series of removed sources remain";
  EXPECT_LT(m.size(), metrics_before + 4096) << "/metrics grew from " << metrics_before << " to " << m.size();
}

}  // namespace
}  // namespace kvidx::reliability
