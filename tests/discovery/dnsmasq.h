// Dnsmasq for the discovery tests: tools/sim/dnsmasq.h (a real DNS server on
// 127.0.0.1, shared with kvidx-sim's DNS-published fleet) with gtest
// assertions, and ready only once kvidx's own resolver gets an answer from
// it (test-only).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "server/dns_resolver.h"
#include "tools/sim/dnsmasq.h"

namespace kvidx::testing {

class Dnsmasq {
 public:
  static bool Available() { return sim::Dnsmasq::Available(); }

  // (Re)starts with these extra config lines (srv-host=..., host-record=...)
  // and record TTL, and waits until it answers.
  void Start(const std::string& records, int ttl_seconds = 1) {
    Status s = server_.Start(records, ttl_seconds);
    ASSERT_TRUE(s.ok()) << s.ToString();
    WaitReady();
  }
  void Stop() { server_.Stop(); }
  // Replaces the addn-hosts file ("IP NAME" lines) and has dnsmasq re-read it.
  void SetHosts(const std::string& lines) {
    Status s = server_.SetHosts(lines);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  int port() const { return server_.port(); }
  std::string nameserver() const { return server_.nameserver(); }
  std::string hosts() const { return server_.hosts(); }
  std::string log() const { return server_.log(); }

 private:
  void WaitReady() {
    server::DnsResolver::Options o;
    o.nameserver = nameserver();
    o.timeout = std::chrono::milliseconds(200);
    auto r = server::DnsResolver::Create(o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    std::atomic<bool> stop{false};
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      if (r.value()->LookupAddresses("ready.test", stop).outcome == server::DnsOutcome::kOk) return;
      ASSERT_TRUE(server_.running()) << "dnsmasq exited: " << log();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    FAIL() << "dnsmasq did not answer within 30 s: " << log();
  }

  sim::Dnsmasq server_{::testing::TempDir()};
};

// A bound UDP socket that never answers: DNS queries to it time out.
class SilentUdp {
 public:
  explicit SilentUdp(int port) : fd_(socket(AF_INET, SOCK_DGRAM, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bound_ = bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~SilentUdp() { close(fd_); }
  bool bound() const { return bound_; }

 private:
  int fd_;
  bool bound_ = false;
};

}  // namespace kvidx::testing
