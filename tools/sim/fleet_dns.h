// FleetDns: publishes a Fleet's running engines through a real DNS server
// (tools/sim/dnsmasq.h on 127.0.0.1), so that kvidx follows the fleet with a
// `discovery:` DNS provider instead of a static engine list.
//
// One SRV record per running replica under SrvName(options):
//   _kvevents._tcp.<dns_domain>  ->  <replica>:<PUB port>
// and an A record for each target (its own loopback address, fleet.h). The
// fleet must have been created with `dns_domain` set. Publish() after every
// Fleet::ScaleTo restarts dnsmasq with the new records on the same port;
// resolutions during the restart fail, which kvidx treats as an outage
// (nothing changes, the provider is flagged stale until the next answer).
//
// Not thread-safe: the thread driving the Fleet drives this.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "base/status.h"
#include "tools/sim/dnsmasq.h"
#include "tools/sim/fleet.h"

namespace kvidx::sim {

// How kvidx should poll the fleet's name (the provider's keys, docs/CONFIG.md).
struct DnsProviderTiming {
  uint32_t interval_ms = 1000;
  uint32_t min_interval_ms = 200;
  uint32_t grace_ms = 5000;
  uint32_t timeout_ms = 1000;
};

// "_kvevents._tcp.<dns_domain>".
std::string SrvName(const FleetOptions& o);
// The dnsmasq config lines publishing `engines`.
std::string DnsRecords(const FleetOptions& o, const std::vector<EngineDesc>& engines);
// kvidx YAML: the `discovery:` section with one DNS provider named
// "sim-dns" for the fleet's model, asking `nameserver` (IP:PORT).
std::string DiscoveryYaml(const FleetOptions& o, const std::string& nameserver, const DnsProviderTiming& t);

class FleetDns {
 public:
  // Starts dnsmasq (files under `dir`; port 0 = a random free one) with the
  // fleet's engines. InvalidArgument if the fleet has no dns_domain;
  // FailedPrecondition without dnsmasq; Unavailable if it does not start.
  static Result<std::unique_ptr<FleetDns>> Start(const Fleet& fleet, const std::filesystem::path& dir, int port);

  // Republishes the fleet's running engines.
  Status Publish(const Fleet& fleet);

  std::string nameserver() const { return server_->nameserver(); }
  uint64_t publications() const { return publications_; }
  const Dnsmasq& server() const { return *server_; }

 private:
  explicit FleetDns(std::unique_ptr<Dnsmasq> server) : server_(std::move(server)) {}

  std::unique_ptr<Dnsmasq> server_;
  uint64_t publications_ = 0;
};

}  // namespace kvidx::sim
