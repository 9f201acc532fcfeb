// DnsResolver (server/dns_resolver.h) against a real dnsmasq and against a
// port nobody answers: each answer and each failure comes back as its own
// outcome.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "common/child_process.h"
#include "discovery/dnsmasq.h"
#include "server/dns_resolver.h"

namespace kvidx::server {
namespace {

using kvidx::testing::Dnsmasq;
using kvidx::testing::SilentUdp;
using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(DnsResolverTest, AnswersAndFailuresOfARealServer) {
  if (!Dnsmasq::Available()) GTEST_SKIP() << "dnsmasq not installed (scripts/setup.sh installs dnsmasq-base)";
  Dnsmasq dns;
  dns.Start("srv-host=_kv._tcp.f.test,e1.test,6001\nsrv-host=_kv._tcp.f.test,e2.test,6002\n"
            "host-record=e1.test,127.0.0.11\nhost-record=two.test,127.0.0.12,::1\n");
  auto resolver = DnsResolver::Create({dns.nameserver(), milliseconds(2000), 2});
  ASSERT_TRUE(resolver.ok()) << resolver.status().ToString();
  std::atomic<bool> stop{false};
  DnsResolver& r = *resolver.value();

  auto srv = r.LookupSrv("_kv._tcp.f.test", stop);
  ASSERT_EQ(srv.outcome, DnsOutcome::kOk) << srv.detail;
  ASSERT_EQ(srv.records.size(), 2u);
  auto a = r.LookupAddresses("e1.test", stop);
  ASSERT_EQ(a.outcome, DnsOutcome::kOk) << a.detail;
  ASSERT_EQ(a.records.size(), 1u);
  EXPECT_EQ(a.records[0].ip, "127.0.0.11");
  EXPECT_EQ(a.records[0].ttl_seconds, 1u);  // dnsmasq's local-ttl
  auto both = r.LookupAddresses("two.test", stop);
  ASSERT_EQ(both.outcome, DnsOutcome::kOk) << both.detail;
  EXPECT_EQ(both.records.size(), 2u);  // A and AAAA

  EXPECT_EQ(r.LookupAddresses("missing.test", stop).outcome, DnsOutcome::kNxdomain);
  EXPECT_EQ(r.LookupSrv("_kv._tcp.missing.test", stop).outcome, DnsOutcome::kNxdomain);
  // Outside every local domain, with no upstream: dnsmasq answers REFUSED.
  EXPECT_EQ(r.LookupAddresses("x.example", stop).outcome, DnsOutcome::kRefused);
  EXPECT_EQ(DnsOutcomeName(DnsOutcome::kRefused), "refused");

  dns.Stop();  // nothing listens now: the kernel refuses the datagrams
  EXPECT_EQ(r.LookupAddresses("e1.test", stop).outcome, DnsOutcome::kUnreachable);
}

TEST(DnsResolverTest, NobodyAnsweringIsATimeout) {
  const int port = kvidx::testing::RandomFreePort();
  SilentUdp silent(port);
  ASSERT_TRUE(silent.bound());
  auto resolver = DnsResolver::Create({"127.0.0.1:" + std::to_string(port), milliseconds(200), 2});
  ASSERT_TRUE(resolver.ok());
  std::atomic<bool> stop{false};
  EXPECT_EQ(resolver.value()->LookupAddresses("x.test", stop).outcome, DnsOutcome::kTimeout);
  EXPECT_EQ(resolver.value()->LookupSrv("_x._tcp.x.test", stop).outcome, DnsOutcome::kTimeout);
}

TEST(DnsResolverTest, StopEndsALookupEarly) {
  const int port = kvidx::testing::RandomFreePort();
  SilentUdp silent(port);
  auto resolver = DnsResolver::Create({"127.0.0.1:" + std::to_string(port), milliseconds(30'000), 2});
  ASSERT_TRUE(resolver.ok());
  std::atomic<bool> stop{false};
  std::thread stopper([&] {
    std::this_thread::sleep_for(milliseconds(200));
    stop.store(true);
  });
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(resolver.value()->LookupAddresses("x.test", stop).outcome, DnsOutcome::kError);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, seconds(20));
  stopper.join();
}

}  // namespace
}  // namespace kvidx::server
