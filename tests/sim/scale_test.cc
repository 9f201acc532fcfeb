// A fleet scaled under traffic, followed by kvidx through DNS alone (issue
// 19): the simulated replicas are published as SRV records by a real DNS
// server (dnsmasq on 127.0.0.1, tools/sim/fleet_dns.h), kvidx-server has no
// static engine and one `discovery:` DNS provider, and the fleet goes
// 2 -> 5 -> 1 replicas while kvidx routes the traffic. Fidelity must stay
// 100% on EXACT sources at every checkpoint, and the stopped replicas'
// sources must stay through the grace period and be gone soon after it.
// docs/FIDELITY.md has the longer run (kvidx-sim --dns-port --scale-at).
#include <atomic>
#include <chrono>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "sim/sim_test_util.h"
#include "tools/sim/fleet_dns.h"

namespace kvidx::sim::testing {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kGraceMs = 1500;

// Replicas of kModel that kvidx lists a source of (with `origin`, as
// "<replica> <origin>").
std::set<std::string> ListedReplicas(const client::Client& kvidx, bool origin = false) {
  v1::ListReplicasRequest req;
  req.set_model(kModel);
  v1::ListReplicasResponse resp;
  std::set<std::string> out;
  if (!kvidx.ListReplicas(req, &resp).ok()) return {"<ListReplicas failed>"};
  for (const v1::ReplicaSummary& r : resp.replicas()) {
    if (r.sources_size() > 0) out.insert(origin ? r.replica() + " " + r.origin() : r.replica());
  }
  return out;
}

// Watches kvidx from its own thread until none of `replicas` is listed, and
// records when that was first seen.
class RemovalWatch {
 public:
  RemovalWatch(const client::Client* kvidx, std::vector<std::string> replicas)
      : start_(Clock::now()), thread_([this, kvidx, replicas] {
          while (!stop_) {
            std::set<std::string> listed = ListedReplicas(*kvidx);
            bool any = false;
            for (const std::string& r : replicas) any = any || listed.count(r) > 0;
            if (!any && !listed.count("<ListReplicas failed>")) {
              gone_after_ms_ = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start_).count();
              return;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
          }
        }) {}
  ~RemovalWatch() {
    stop_ = true;
    thread_.join();
  }
  // Milliseconds from construction until they were gone; -1 while listed.
  int64_t gone_after_ms() const { return gone_after_ms_; }

 private:
  const Clock::time_point start_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> gone_after_ms_{-1};
  std::thread thread_;
};

TEST(ScaleTest, FleetScaledTwoFiveOneThroughDnsKeepsFidelityAndRemovesStoppedReplicas) {
  ASSERT_TRUE(Dnsmasq::Available()) << kDnsmasqPath << " is missing: bash scripts/setup.sh installs dnsmasq-base";
  FleetOptions fo = SmallFleet();
  fo.dns_domain = "sim.test";
  server::testing::TempDir dns_dir;
  std::unique_ptr<FleetDns> dns;
  SimHarness h;
  ASSERT_NO_FATAL_FAILURE(h.StartWith(fo, [&](Fleet& fleet, server::ServerConfig* config) {
    auto d = FleetDns::Start(fleet, dns_dir.path(), 0);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    dns = std::move(d).value();
    server::DnsProviderConfig p;
    p.name = "sim-dns";
    p.model = kModel;
    p.srv = SrvName(fleet.options());
    const std::string replay = fleet.engines()[0].replay_endpoint;
    p.replay_port = static_cast<uint32_t>(std::stoul(replay.substr(replay.rfind(':') + 1)));
    p.data_parallel_size = static_cast<uint32_t>(fleet.options().dp);
    p.interval_ms = 300;
    p.min_interval_ms = 100;
    p.grace_ms = kGraceMs;
    p.timeout_ms = 300;
    p.nameserver = dns->nameserver();
    config->discovery.providers.push_back(p);
  }));
  ASSERT_EQ(h.fleet().replicas(), 2);

  Runner runner(&h.fleet(), &h.client());
  std::unique_ptr<RemovalWatch> watch;
  std::vector<std::string> stopped;
  runner.set_on_scale([&]() -> Status {
    if (Status s = dns->Publish(h.fleet()); !s.ok()) return s;
    if (h.fleet().replicas() == 1) {
      for (const EngineDesc& e : h.fleet().removed()) stopped.push_back(e.replica);
      watch = std::make_unique<RemovalWatch>(&h.client(), stopped);
    }
    return Status::Ok();
  });
  PhaseOptions p = Phase(Routing::kKvidx, 1200);
  p.scale_at = {{300, 5}, {700, 1}};
  p.check_every = 200;
  p.samples = 100;
  auto rep = runner.Run(p);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_FIDELITY_PERFECT(*rep);
  EXPECT_EQ(rep->scale_steps, 2u);
  EXPECT_EQ(rep->checks, 6u);
  EXPECT_EQ(rep->routing_errors, 0u);
  EXPECT_GT(rep->hit_blocks, 0u);
  EXPECT_EQ(dns->publications(), 3u);

  // Replicas 2, 3, 4 (started at the first step) and then 1 were stopped.
  ASSERT_EQ(h.fleet().replicas(), 1);
  EXPECT_EQ(stopped, (std::vector<std::string>{"vllm-4.sim.test", "vllm-3.sim.test", "vllm-2.sim.test",
                                               "vllm-1.sim.test"}));
  ASSERT_NE(watch, nullptr);
  Status gone = WaitRemovedGone(h.fleet(), h.client(), std::chrono::seconds(15));
  EXPECT_TRUE(gone.ok()) << gone.ToString();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  // Kept through the grace period (which starts no sooner than DNS changed),
  // gone within it plus a resolution interval and some slack.
  EXPECT_GE(watch->gone_after_ms(), kGraceMs);
  EXPECT_LE(watch->gone_after_ms(), kGraceMs + 5000);
  EXPECT_EQ(ListedReplicas(h.client(), /*origin=*/true), std::set<std::string>{"vllm-0.sim.test dns:sim-dns"});

  KvidxCounters c = h.Counters();
  EXPECT_EQ(c.batches_lost, 0u);
  EXPECT_EQ(c.sources_by_state["EXACT"], h.fleet().size());
}

TEST(ScaleTest, ScaleStepsParse) {
  auto ok = ParseScaleSteps("20:5,40:1");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  ASSERT_EQ(ok->size(), 2u);
  EXPECT_EQ((*ok)[0].at, 20u);
  EXPECT_EQ((*ok)[0].replicas, 5);
  EXPECT_EQ((*ok)[1].at, 40u);
  EXPECT_EQ((*ok)[1].replicas, 1);
  for (const char* bad : {"", "20", "20:", ":5", "20:0", "20:1001", "20:5,10:2", "20:5,20:2", "a:1", "20:5,", "-1:2",
                          "20:5;40:1"}) {
    auto r = ParseScaleSteps(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(ScaleTest, FleetScaleToStartsNewNamesAndStopsTheNewest) {
  FleetOptions fo = SmallFleet();
  fo.dns_domain = "sim.test";
  auto f = Fleet::Create(fo);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  Fleet& fleet = *f.value();
  EXPECT_EQ(fleet.engines()[1].host, "127.1.0.3");
  EXPECT_EQ(fleet.engines()[0].endpoint.substr(fleet.engines()[0].endpoint.rfind(':')),
            fleet.engines()[1].endpoint.substr(fleet.engines()[1].endpoint.rfind(':')));
  ASSERT_TRUE(fleet.ScaleTo(3).ok());
  ASSERT_TRUE(fleet.ScaleTo(1).ok());
  ASSERT_TRUE(fleet.ScaleTo(2).ok());
  ASSERT_EQ(fleet.replicas(), 2);
  EXPECT_EQ(fleet.engines()[1].replica, "vllm-3.sim.test");  // never a stopped replica's name again
  EXPECT_EQ(fleet.size(), 4u);
  EXPECT_EQ(fleet.source_name(3), "vllm-3.sim.test/dp1");
  ASSERT_EQ(fleet.removed().size(), 2u);
  EXPECT_EQ(fleet.ScaleTo(0).code(), StatusCode::kInvalidArgument);
  std::string records = DnsRecords(fleet.options(), fleet.engines());
  EXPECT_NE(records.find("srv-host=_kvevents._tcp.sim.test,vllm-3.sim.test,"), std::string::npos) << records;
  EXPECT_NE(records.find("host-record=vllm-3.sim.test,127.1.0.5\n"), std::string::npos) << records;
  EXPECT_EQ(records.find("vllm-1."), std::string::npos) << records;
}

}  // namespace
}  // namespace kvidx::sim::testing
