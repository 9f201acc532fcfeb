// Dnsmasq: a real DNS server for the discovery tests (test-only).
//
// Runs Debian's dnsmasq (scripts/setup.sh installs dnsmasq-base) on
// 127.0.0.1 and a free port, answering only from its own records: no
// upstream servers (--no-resolv: a name outside `local` domains is REFUSED),
// no /etc/hosts, everything under .test local (unknown names are NXDOMAIN),
// records with a TTL of 1 s unless told otherwise. Records change while kvidx runs: Restart()
// with new config lines, or SetHosts() + SIGHUP for the addn-hosts file.
#pragma once

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "common/child_process.h"
#include "server/dns_resolver.h"

namespace kvidx::testing {

inline constexpr const char* kDnsmasq = "/usr/sbin/dnsmasq";

class Dnsmasq {
 public:
  Dnsmasq() : dir_(std::filesystem::path(::testing::TempDir()) / ("dnsmasq_" + std::to_string(getpid()) + "_" +
                                                                  std::to_string(counter_++))) {
    std::filesystem::create_directories(dir_);
    WriteAtomically(hosts(), "");
  }
  ~Dnsmasq() {
    Stop();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  static bool Available() { return access(kDnsmasq, X_OK) == 0; }

  // (Re)starts with these extra config lines (srv-host=..., host-record=...)
  // and record TTL, and waits until it answers.
  void Start(const std::string& records, int ttl_seconds = 1) {
    Stop();
    if (port_ == 0) port_ = RandomFreePort();
    std::string conf = "port=" + std::to_string(port_) +
                       "\nlisten-address=127.0.0.1\nbind-interfaces\nno-resolv\nno-hosts\nlocal=/test/\n"
                       "local-ttl=" + std::to_string(ttl_seconds) + "\npid-file=\nlog-facility=" +
                       (dir_ / "log").string() +
                       "\naddn-hosts=" + hosts() + "\nhost-record=ready.test,127.0.0.1\n" + records + "\n";
    if (geteuid() == 0) conf += "user=root\n";  // else it would switch to nobody, unable to read the files
    WriteAtomically((dir_ / "conf").string(), conf);
    child_ = Child::Spawn({kDnsmasq, "--keep-in-foreground", "--conf-file=" + (dir_ / "conf").string()},
                          (dir_ / "out").string(), (dir_ / "err").string());
    ASSERT_NE(child_, nullptr);
    WaitReady();
  }
  void Stop() {
    if (child_ == nullptr) return;
    if (!child_->Poll()) child_->Signal(SIGTERM);
    child_->WaitExit(std::chrono::seconds(10));
    child_.reset();
  }
  // Replaces the addn-hosts file ("IP NAME" lines) and has dnsmasq re-read it.
  void SetHosts(const std::string& lines) {
    WriteAtomically(hosts(), lines);
    if (child_ != nullptr) child_->Signal(SIGHUP);
  }

  int port() const { return port_; }
  std::string nameserver() const { return "127.0.0.1:" + std::to_string(port_); }
  std::string hosts() const { return (dir_ / "hosts").string(); }
  std::string log() const { return Slurp((dir_ / "log").string()) + Slurp((dir_ / "err").string()); }

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
      ASSERT_FALSE(child_->Poll().has_value()) << "dnsmasq exited: " << log();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    FAIL() << "dnsmasq did not answer within 30 s: " << log();
  }

  static inline std::atomic<int> counter_{0};
  std::filesystem::path dir_;
  int port_ = 0;
  std::unique_ptr<Child> child_;
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
