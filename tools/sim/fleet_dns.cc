#include "tools/sim/fleet_dns.h"

namespace kvidx::sim {

namespace {

// The port number of "tcp://HOST:PORT".
std::string PortOf(const std::string& endpoint) { return endpoint.substr(endpoint.rfind(':') + 1); }

}  // namespace

std::string SrvName(const FleetOptions& o) { return "_kvevents._tcp." + o.dns_domain; }

std::string DnsRecords(const FleetOptions& o, const std::vector<EngineDesc>& engines) {
  std::string r;
  for (const EngineDesc& e : engines) {
    r += "srv-host=" + SrvName(o) + "," + e.replica + "," + PortOf(e.endpoint) + "\n";
    r += "host-record=" + e.replica + "," + e.host + "\n";
  }
  return r;
}

std::string DiscoveryYaml(const FleetOptions& o, const std::string& nameserver, const DnsProviderTiming& t) {
  const EngineDesc first = EngineAt(o, 0);
  std::string y = "discovery:\n  providers:\n";
  y += "    - type: dns\n";
  y += "      name: sim-dns\n";
  y += "      model: \"" + o.model + "\"\n";
  y += "      srv: \"" + SrvName(o) + "\"\n";
  if (!first.replay_endpoint.empty()) y += "      ports: {replay: " + PortOf(first.replay_endpoint) + "}\n";
  y += "      dp_size: " + std::to_string(o.dp) + "\n";
  y += "      interval_ms: " + std::to_string(t.interval_ms) + "\n";
  y += "      min_interval_ms: " + std::to_string(t.min_interval_ms) + "\n";
  y += "      grace_ms: " + std::to_string(t.grace_ms) + "\n";
  y += "      timeout_ms: " + std::to_string(t.timeout_ms) + "\n";
  y += "      nameserver: \"" + nameserver + "\"\n";
  return y;
}

Result<std::unique_ptr<FleetDns>> FleetDns::Start(const Fleet& fleet, const std::filesystem::path& dir, int port) {
  if (fleet.options().dns_domain.empty()) return Status::InvalidArgument("the fleet has no DNS domain");
  std::unique_ptr<FleetDns> d(new FleetDns(std::make_unique<Dnsmasq>(dir, port)));
  if (Status s = d->Publish(fleet); !s.ok()) return s;
  return d;
}

Status FleetDns::Publish(const Fleet& fleet) {
  // TTL 1 s: resolvers that cache see a change within a second.
  if (Status s = server_->Start(DnsRecords(fleet.options(), fleet.engines()), 1); !s.ok()) return s;
  ++publications_;
  return Status::Ok();
}

}  // namespace kvidx::sim
