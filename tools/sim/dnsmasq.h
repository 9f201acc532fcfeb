// Dnsmasq: a real DNS server on 127.0.0.1 for discovery tests and kvidx-sim's
// DNS-published fleet (never production).
//
// Runs Debian's dnsmasq (scripts/setup.sh installs dnsmasq-base) on
// 127.0.0.1 and one port, answering only from its own records: no upstream
// servers (--no-resolv: a name outside `local` domains is REFUSED), no
// /etc/hosts, everything under .test local (unknown names are NXDOMAIN),
// records with a TTL of 1 s unless told otherwise; `ready.test` always
// resolves to 127.0.0.1. Records change while kvidx runs: Start() again with
// new config lines (a restart on the same port: queries in between fail,
// which a resolver treats as an outage), or SetHosts() + SIGHUP for the
// addn-hosts file.
//
// Owns the child process (SIGTERM, then reaped, at Stop and destruction) and
// its directory of config and log files (removed at destruction).
// Not thread-safe: one thread drives it.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <string>

#include "base/status.h"

namespace kvidx::sim {

inline constexpr const char* kDnsmasqPath = "/usr/sbin/dnsmasq";

class Dnsmasq {
 public:
  // Files go to a new directory under `parent`; port 0 = a random free one.
  explicit Dnsmasq(const std::filesystem::path& parent, int port = 0);
  ~Dnsmasq();
  Dnsmasq(const Dnsmasq&) = delete;
  Dnsmasq& operator=(const Dnsmasq&) = delete;

  static bool Available();

  // (Re)starts with these extra config lines (srv-host=..., host-record=...)
  // and record TTL, and waits (up to 30 s) until it listens on its port.
  // FailedPrecondition without dnsmasq; Unavailable if it exits or does not
  // listen (the message includes its log).
  Status Start(const std::string& records, int ttl_seconds = 1);
  // SIGTERM, and waits for the exit (SIGKILL after 10 s). Idempotent.
  void Stop();
  // Replaces the addn-hosts file ("IP NAME" lines) and has a running
  // dnsmasq re-read it.
  Status SetHosts(const std::string& lines);

  bool running() const { return pid_ > 0; }
  int port() const { return port_; }
  std::string nameserver() const { return "127.0.0.1:" + std::to_string(port_); }
  std::string hosts() const { return (dir_ / "hosts").string(); }
  // What dnsmasq logged (its log file and stderr).
  std::string log() const;

 private:
  Status Spawn();
  Status WaitListening();
  bool Exited();

  std::filesystem::path dir_;
  int port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace kvidx::sim
