// DNS discovery end to end against a real DNS server (dnsmasq, started per
// test on 127.0.0.1, records changed while kvidx runs) and real ZMQ engines
// (FakeEngine, with replay) bound on 127.0.0.x addresses, driving a Node:
// SRV and A providers, engines added then removed after the grace, back
// within it resumed untouched, failures (NXDOMAIN, REFUSED, timeout) keeping
// the last good set, a static engine never removed, and a large answer.
//
// Waits poll with generous deadlines (sanitizer builds are slow); nothing
// asserts on how fast discovery reacts, only on what it ends up doing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/child_process.h"
#include "discovery/dnsmasq.h"
#include "discovery/node_metric.h"
#include "ingest/testing/fake_engine.h"
#include "server/discovery.h"
#include "server/node.h"

namespace kvidx::server {
namespace {

using kvidx::testing::Dnsmasq;
using kvidx::testing::SilentUdp;
using std::chrono::milliseconds;
using std::chrono::seconds;
using Labels = kvidx::testing::MetricLabels;
using kvidx::testing::NodeMetric;

constexpr auto kDeadline = seconds(60);

bool WaitFor(const std::function<bool()>& done, std::chrono::steady_clock::duration limit = kDeadline) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(milliseconds(50));
  }
  return done();
}


double Engines(const Node& n, const std::string& provider, const std::string& state) {
  return NodeMetric(n, "kvidx_discovery_engines", {{"provider", provider}, {"state", state}});
}
double Resolutions(const Node& n, const std::string& provider, const std::string& result) {
  return NodeMetric(n, "kvidx_discovery_resolutions_total", {{"provider", provider}, {"result", result}});
}

bool HasEngine(const Node& n, const std::string& replica) {
  for (const EngineEntry& e : n.Engines()) {
    if (e.engine.replica == replica) return true;
  }
  return false;
}

bool Exact(const Node& n, const std::string& source) {
  auto s = n.ingester().GetSource(source);
  return s.has_value() && s->state == SourceState::kExact;
}

// A publisher with replay bound at ip:pub and ip:replay.
std::unique_ptr<ingest::FakeEngine> EngineAt(const std::string& ip, int pub, int replay) {
  ingest::FakeEngineOptions o;
  o.endpoint = "tcp://" + ip + ":" + std::to_string(pub);
  o.pub_bind = true;
  o.replay_endpoint = "tcp://" + ip + ":" + std::to_string(replay);
  auto e = ingest::FakeEngine::Create(o);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? std::move(e.value()) : nullptr;
}

DnsProviderConfig Provider(const std::string& name, const Dnsmasq& dns) {
  DnsProviderConfig p;
  p.name = name;
  p.model = "qwen";
  p.interval_ms = 200;
  p.min_interval_ms = 100;
  p.timeout_ms = 300;
  p.nameserver = dns.nameserver();
  return p;
}

std::unique_ptr<Node> StartNode(std::vector<DnsProviderConfig> providers, std::vector<EngineEntry> engines = {}) {
  ServerConfig c;
  c.data_dir = "";
  c.models.push_back(ModelConfig{});
  c.models[0].name = "qwen";
  c.engines = std::move(engines);
  c.discovery.providers = std::move(providers);
  auto node = Node::Create(c);
  EXPECT_TRUE(node.ok()) << node.status().ToString();
  if (!node.ok()) return nullptr;
  Status s = node.value()->Start();
  EXPECT_TRUE(s.ok()) << s.ToString();
  return std::move(node.value());
}

class DnsDiscoveryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!Dnsmasq::Available()) GTEST_SKIP() << "dnsmasq not installed (scripts/setup.sh installs dnsmasq-base)";
  }
  Dnsmasq dns_;
};

TEST_F(DnsDiscoveryTest, SrvEnginesAreSubscribedThenRemovedAfterTheGrace) {
  const int pub1 = kvidx::testing::RandomFreePort(), pub2 = kvidx::testing::RandomFreePort();
  const int replay = kvidx::testing::RandomFreePort();
  auto e1 = EngineAt("127.0.0.11", pub1, replay);
  auto e2 = EngineAt("127.0.0.12", pub2, replay);
  ASSERT_TRUE(e1 && e2);
  const std::string e1_records = "srv-host=_kv._tcp.fleet.test,e1.test," + std::to_string(pub1) +
                                 "\nhost-record=e1.test,127.0.0.11\n";
  const std::string e2_records = "srv-host=_kv._tcp.fleet.test,e2.test," + std::to_string(pub2) +
                                 "\nhost-record=e2.test,127.0.0.12\n";
  dns_.Start(e1_records + e2_records);
  DnsProviderConfig p = Provider("fleet", dns_);
  p.srv = "_kv._tcp.fleet.test";
  p.replay_port = static_cast<uint32_t>(replay);
  p.grace_ms = 1500;
  auto node = StartNode({p});
  ASSERT_NE(node, nullptr);

  // Really subscribed: each source reached EXACT through its engine's replay.
  ASSERT_TRUE(WaitFor([&] { return Exact(*node, "e1.test/dp0") && Exact(*node, "e2.test/dp0"); }));
  EXPECT_EQ(Engines(*node, "fleet", "active"), 2);
  EXPECT_EQ(NodeMetric(*node, "kvidx_discovery_engines_added_total", {{"provider", "fleet"}}), 2);
  EXPECT_GE(Resolutions(*node, "fleet", "ok"), 1);
  EXPECT_GE(NodeMetric(*node, "kvidx_discovery_last_success_age_seconds", {{"provider", "fleet"}}), 0);

  dns_.Start(e1_records);  // e2 scaled away
  ASSERT_TRUE(WaitFor([&] { return !HasEngine(*node, "e2.test"); })) << dns_.log();
  EXPECT_TRUE(HasEngine(*node, "e1.test"));
  EXPECT_EQ(NodeMetric(*node, "kvidx_discovery_engines_removed_total", {{"provider", "fleet"}}), 1);
  EXPECT_EQ(Engines(*node, "fleet", "grace"), 0);
  EXPECT_EQ(Engines(*node, "fleet", "active"), 1);
  EXPECT_FALSE(node->ingester().GetSource("e2.test/dp0").has_value());
}

TEST_F(DnsDiscoveryTest, AEngineBackWithinTheGraceKeepsItsSources) {
  const int pub = kvidx::testing::RandomFreePort(), replay = kvidx::testing::RandomFreePort();
  auto a = EngineAt("127.0.0.21", pub, replay);
  auto b = EngineAt("127.0.0.22", pub, replay);
  ASSERT_TRUE(a && b);
  dns_.SetHosts("127.0.0.21 pool.test\n127.0.0.22 pool.test\n");
  dns_.Start("");
  DnsProviderConfig p = Provider("pool", dns_);
  p.host = "pool.test";
  p.events_port = static_cast<uint32_t>(pub);
  p.replay_port = static_cast<uint32_t>(replay);
  p.grace_ms = 600'000;  // far longer than the test
  auto node = StartNode({p});
  ASSERT_NE(node, nullptr);
  ASSERT_TRUE(WaitFor([&] { return Exact(*node, "127.0.0.21/dp0") && Exact(*node, "127.0.0.22/dp0"); }));
  const uint64_t source_id = node->ingester().GetSource("127.0.0.22/dp0")->spec.id;

  dns_.SetHosts("127.0.0.21 pool.test\n");
  ASSERT_TRUE(WaitFor([&] { return Engines(*node, "pool", "grace") == 1; })) << dns_.log();
  EXPECT_TRUE(HasEngine(*node, "127.0.0.22"));  // kept through its grace
  dns_.SetHosts("127.0.0.21 pool.test\n127.0.0.22 pool.test\n");
  ASSERT_TRUE(WaitFor([&] { return Engines(*node, "pool", "active") == 2; }));
  EXPECT_EQ(Engines(*node, "pool", "grace"), 0);
  EXPECT_EQ(NodeMetric(*node, "kvidx_discovery_engines_added_total", {{"provider", "pool"}}), 2);
  EXPECT_EQ(NodeMetric(*node, "kvidx_discovery_engines_removed_total", {{"provider", "pool"}}), 0);
  ASSERT_TRUE(node->ingester().GetSource("127.0.0.22/dp0").has_value());
  EXPECT_EQ(node->ingester().GetSource("127.0.0.22/dp0")->spec.id, source_id);  // the same source throughout
  EXPECT_TRUE(Exact(*node, "127.0.0.22/dp0"));
}

TEST_F(DnsDiscoveryTest, FailuresKeepTheLastGoodSetAndAreCounted) {
  dns_.Start("host-record=a.test,127.0.0.31\nhost-record=b.other,127.0.0.32\n");
  DnsProviderConfig nx = Provider("nx", dns_);
  nx.host = "a.test";
  nx.events_port = 5557;
  nx.grace_ms = 100;  // short: a failure must not start anyone's grace
  DnsProviderConfig refused = nx;
  refused.name = "refused";
  refused.host = "b.other";
  auto node = StartNode({nx, refused});
  ASSERT_NE(node, nullptr);
  ASSERT_TRUE(WaitFor([&] { return HasEngine(*node, "127.0.0.31") && HasEngine(*node, "127.0.0.32"); }));
  EXPECT_EQ(NodeMetric(*node, "kvidx_discovery_stale", {{"provider", "nx"}}), 0);

  // a.test is now NXDOMAIN (.test is local); b.other is outside every local
  // domain and dnsmasq has no upstream: REFUSED.
  dns_.Start("");
  ASSERT_TRUE(WaitFor([&] { return Resolutions(*node, "nx", "nxdomain") >= 3; })) << dns_.log();
  ASSERT_TRUE(WaitFor([&] { return Resolutions(*node, "refused", "refused") >= 3; })) << dns_.log();
  EXPECT_EQ(NodeMetric(*node, "kvidx_discovery_stale", {{"provider", "nx"}}), 1);
  EXPECT_EQ(NodeMetric(*node, "kvidx_discovery_stale", {{"provider", "refused"}}), 1);

  // Nobody answers at all.
  dns_.Stop();
  SilentUdp silent(dns_.port());
  ASSERT_TRUE(silent.bound());
  ASSERT_TRUE(WaitFor([&] { return Resolutions(*node, "nx", "timeout") >= 1; }));
  ASSERT_TRUE(WaitFor([&] { return Resolutions(*node, "refused", "timeout") >= 1; }));

  // Through all of it, far past the grace, both engines stayed.
  EXPECT_TRUE(HasEngine(*node, "127.0.0.31"));
  EXPECT_TRUE(HasEngine(*node, "127.0.0.32"));
  EXPECT_EQ(Engines(*node, "nx", "active"), 1);
  EXPECT_EQ(NodeMetric(*node, "kvidx_discovery_engines_removed_total", {{"provider", "nx"}}), 0);
  EXPECT_GT(NodeMetric(*node, "kvidx_discovery_last_success_age_seconds", {{"provider", "nx"}}), 0);
}

TEST_F(DnsDiscoveryTest, AStaticEngineIsNeverRemovedByDiscovery) {
  dns_.SetHosts("127.0.0.41 s.test\n127.0.0.42 s.test\n");
  dns_.Start("");
  DnsProviderConfig p = Provider("s", dns_);
  p.host = "s.test";
  p.events_port = 5557;
  p.grace_ms = 100;
  EngineEntry fixed;
  fixed.engine.replica = "127.0.0.41";
  fixed.engine.model = "qwen";
  fixed.engine.endpoint = "tcp://127.0.0.41:6000";
  auto node = StartNode({p}, {fixed});
  ASSERT_NE(node, nullptr);
  ASSERT_TRUE(WaitFor([&] { return HasEngine(*node, "127.0.0.42"); }));
  ASSERT_TRUE(WaitFor([&] { return NodeMetric(*node, "kvidx_discovery_add_errors_total", {{"provider", "s"}}) >= 1; }));
  // (An empty answer would be NXDOMAIN, a failure that keeps everything.)
  dns_.SetHosts("127.0.0.41 s.test\n");
  ASSERT_TRUE(WaitFor([&] { return !HasEngine(*node, "127.0.0.42"); }));
  EXPECT_TRUE(HasEngine(*node, "127.0.0.41"));
  EXPECT_EQ(node->ingester().GetSource("127.0.0.41/dp0")->endpoint, "tcp://127.0.0.41:6000");
}

// The schedule follows the records' TTL below the interval, but never
// below min_interval. Bounds only: a slow machine resolves less often.
TEST_F(DnsDiscoveryTest, ResolvesAtTheRecordTtlButNotBelowTheFloor) {
  dns_.Start("host-record=t.test,127.0.0.61\n", /*ttl_seconds=*/1);
  DnsProviderConfig p = Provider("ttl", dns_);
  p.host = "t.test";
  p.events_port = 5557;
  p.interval_ms = 3'600'000;  // without the TTL: one resolution in the test
  p.min_interval_ms = 100;
  auto node = StartNode({p});
  ASSERT_NE(node, nullptr);
  EXPECT_TRUE(WaitFor([&] { return Resolutions(*node, "ttl", "ok") >= 3; }));
  node.reset();

  dns_.Start("host-record=t.test,127.0.0.61\n", /*ttl_seconds=*/0);
  p.min_interval_ms = 1000;
  node = StartNode({p});
  ASSERT_NE(node, nullptr);
  ASSERT_TRUE(WaitFor([&] { return Resolutions(*node, "ttl", "ok") >= 1; }));
  std::this_thread::sleep_for(milliseconds(2500));
  EXPECT_LE(Resolutions(*node, "ttl", "ok"), 4);  // TTL 0, yet at most one a second
}

// dnsmasq answers over TCP with at most one 64 KiB message: 4,094 A records
// of 16 bytes fit, so a name with 5,000 addresses comes back with 4,094 of
// them (the UDP answer is truncated; c-ares retries over TCP). The test
// checks that the largest answer dnsmasq can give arrives whole.
TEST_F(DnsDiscoveryTest, LargeAnswerOverTcp) {
  std::string hosts;
  for (int i = 1; i <= 5000; ++i) {
    hosts += "10.1." + std::to_string(i / 256) + "." + std::to_string(i % 256) + " big.test\n";
  }
  dns_.SetHosts(hosts);
  dns_.Start("");
  DnsProviderConfig p = Provider("big", dns_);
  p.host = "big.test";
  p.events_port = 5557;
  p.timeout_ms = 5000;
  auto resolver = DnsResolver::Create({p.nameserver, milliseconds(p.timeout_ms), 2});
  ASSERT_TRUE(resolver.ok());
  std::atomic<bool> stop{false};
  ResolvedEngines r = ResolveEngines(p, resolver.value().get(), stop);
  ASSERT_EQ(r.outcome, DnsOutcome::kOk) << r.detail;
  EXPECT_EQ(r.engines.size(), 4094u);
  EXPECT_EQ(r.ttl_seconds, 1u);
  // Every one a distinct engine at its own address.
  std::set<std::string> replicas;
  for (const EngineEntry& e : r.engines) {
    replicas.insert(e.engine.replica);
    EXPECT_EQ(e.engine.endpoint, "tcp://" + e.engine.replica + ":5557");
  }
  EXPECT_EQ(replicas.size(), r.engines.size());
  DiscoveryState state;
  EXPECT_EQ(state.Update("big", milliseconds(0), r.engines, DiscoveryState::Clock::now()).add.size(), 4094u);
}

TEST_F(DnsDiscoveryTest, SrvTargetWithoutAddressIsSkippedAndCounted) {
  dns_.Start("srv-host=_kv._tcp.m.test,ok.test,7001\nsrv-host=_kv._tcp.m.test,gone.test,7002\n"
             "host-record=ok.test,127.0.0.51\n");
  DnsProviderConfig p = Provider("m", dns_);
  p.srv = "_kv._tcp.m.test";
  auto resolver = DnsResolver::Create({p.nameserver, milliseconds(2000), 2});
  ASSERT_TRUE(resolver.ok());
  std::atomic<bool> stop{false};
  ResolvedEngines r = ResolveEngines(p, resolver.value().get(), stop);
  ASSERT_EQ(r.outcome, DnsOutcome::kOk) << r.detail;
  ASSERT_EQ(r.engines.size(), 1u);
  EXPECT_EQ(r.engines[0].engine.replica, "ok.test");
  EXPECT_EQ(r.engines[0].engine.endpoint, "tcp://127.0.0.51:7001");
  EXPECT_EQ(r.skipped[static_cast<size_t>(SkipReason::kNoAddress)], 1u);
}

}  // namespace
}  // namespace kvidx::server
