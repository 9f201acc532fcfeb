// The discovery section (server/config.h DnsProviderConfig,
// KubernetesProviderConfig): what a valid
// provider reads as, and that every mistake is refused with its key path
// and line, like the rest of the file.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "server/config.h"

namespace kvidx::server {
namespace {

using ::testing::HasSubstr;

constexpr std::string_view kHead = "models:\n  - name: qwen\ndiscovery:\n  providers:\n";

Result<ServerConfig> Parse(const std::string& providers) {
  return ParseConfig(std::string(kHead) + providers, "cfg.yaml");
}

std::string ErrorOf(const std::string& providers) {
  auto r = Parse(providers);
  if (r.ok()) return "OK";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
  return r.status().message();
}

TEST(DiscoveryConfig, SrvProviderWithDefaults) {
  auto r = Parse("    - {type: dns, name: fleet, model: qwen, srv: _kvevents._tcp.vllm.ns.svc.cluster.local}\n");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r.value().discovery.providers.size(), 1u);
  const DnsProviderConfig& p = r.value().discovery.providers[0];
  EXPECT_EQ(p.name, "fleet");
  EXPECT_EQ(p.model, "qwen");
  EXPECT_EQ(p.srv, "_kvevents._tcp.vllm.ns.svc.cluster.local");
  EXPECT_EQ(p.events_port, 0u);
  EXPECT_EQ(p.replay_port, 0u);
  EXPECT_EQ(p.grace_ms, 30'000u);
  EXPECT_EQ(p.interval_ms, 30'000u);
  EXPECT_EQ(p.min_interval_ms, 1'000u);
  EXPECT_EQ(p.nameserver, "");
  EXPECT_TRUE(r.value().engines.empty());
}

TEST(DiscoveryConfig, HostProviderWithEverything) {
  auto r = Parse(
      "    - type: dns\n      name: a\n      model: qwen\n      host: vllm.ns.svc.cluster.local\n"
      "      ports: {events: 5557, replay: 5558, metrics: 8000}\n      dp_size: 4\n"
      "      interval_ms: 10000\n      min_interval_ms: 500\n      grace_ms: 0\n      timeout_ms: 2000\n"
      "      nameserver: 127.0.0.1:5353\n");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const DnsProviderConfig& p = r.value().discovery.providers[0];
  EXPECT_EQ(p.host, "vllm.ns.svc.cluster.local");
  EXPECT_EQ(p.events_port, 5557u);
  EXPECT_EQ(p.replay_port, 5558u);
  EXPECT_EQ(p.metrics_port, 8000u);
  EXPECT_EQ(p.data_parallel_size, 4u);
  EXPECT_EQ(p.interval_ms, 10'000u);
  EXPECT_EQ(p.min_interval_ms, 500u);
  EXPECT_EQ(p.grace_ms, 0u);
  EXPECT_EQ(p.timeout_ms, 2'000u);
  EXPECT_EQ(p.nameserver, "127.0.0.1:5353");
}

TEST(DiscoveryConfig, StaticEnginesKeepWorkingBeside) {
  auto r = ParseConfig(
      "models: [{name: qwen}]\nengines: [{replica: a, model: qwen, endpoint: \"tcp://h:1\"}]\n"
      "discovery: {providers: [{type: dns, name: d, model: qwen, host: h, ports: {events: 2}}]}\n");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r.value().engines.size(), 1u);
  EXPECT_EQ(r.value().discovery.providers.size(), 1u);
}

TEST(DiscoveryConfig, RequiredKeys) {
  EXPECT_THAT(ErrorOf("    - {name: d, model: qwen, srv: s}\n"),
              HasSubstr("cfg.yaml:5: discovery.providers[0].type: is required"));
  EXPECT_THAT(ErrorOf("    - {type: dns, model: qwen, srv: s}\n"), HasSubstr("discovery.providers[0].name: is required"));
  EXPECT_THAT(ErrorOf("    - {type: dns, name: d, srv: s}\n"), HasSubstr("discovery.providers[0].model: is required"));
  EXPECT_THAT(ErrorOf("    - {type: dns, name: d, model: qwen}\n"), HasSubstr("needs srv (an SRV name) or host"));
  EXPECT_THAT(ErrorOf("    - {type: dns, name: d, model: qwen, host: h}\n"),
              HasSubstr("discovery.providers[0].ports.events: is required with host"));
}

TEST(DiscoveryConfig, RefusesContradictionsAndUnknowns) {
  EXPECT_THAT(ErrorOf("    - {type: dns, name: d, model: qwen, srv: s, host: h}\n"), HasSubstr("not both"));
  EXPECT_THAT(ErrorOf("    - {type: dns, name: d, model: qwen, srv: s, ports: {events: 1}}\n"),
              HasSubstr("ports.events: not with srv"));
  EXPECT_THAT(ErrorOf("    - {type: dns, name: d, model: other, srv: s}\n"),
              HasSubstr("discovery.providers[0].model: model \"other\" is not configured"));
  EXPECT_THAT(ErrorOf("    - {type: consul, name: d, model: qwen, srv: s}\n"),
              HasSubstr("discovery.providers[0].type: expected one of dns, kubernetes, got \"consul\""));
  EXPECT_THAT(ErrorOf("    - {type: dns, name: d, model: qwen, srv: s, grace: 5}\n"),
              HasSubstr("discovery.providers[0].grace: unknown key (expected one of: type, name, model, srv, host"));
  EXPECT_THAT(ErrorOf("    - {type: dns, name: d, model: qwen, host: h, ports: {event: 1}}\n"),
              HasSubstr("discovery.providers[0].ports.event: unknown key"));
  EXPECT_THAT(ErrorOf("    - {type: dns, name: d, model: qwen, srv: \"\"}\n"), HasSubstr("srv: must not be empty"));
  EXPECT_THAT(ErrorOf("    - {type: dns, name: d, model: qwen, srv: s}\n    - {type: dns, name: d, model: qwen, srv: t}\n"),
              HasSubstr("cfg.yaml:6: discovery.providers[1].name: duplicate provider \"d\""));
  EXPECT_THAT(ParseConfig("discovery: {provider: []}\n").status().message(),
              HasSubstr("discovery.provider: unknown key (expected one of: providers)"));
}

TEST(DiscoveryConfig, RangesAndAddresses) {
  EXPECT_THAT(ErrorOf("    - {type: dns, name: d, model: qwen, host: h, ports: {events: 65535}, dp_size: 2}\n"),
              HasSubstr("dp_size: port 65535 + dp_size - 1 exceeds 65535"));
  EXPECT_THAT(ErrorOf("    - {type: dns, name: d, model: qwen, srv: s, interval_ms: 1000, min_interval_ms: 2000}\n"),
              HasSubstr("min_interval_ms: must not exceed interval_ms (1000)"));
  EXPECT_THAT(ErrorOf("    - {type: dns, name: d, model: qwen, srv: s, interval_ms: 5}\n"),
              HasSubstr("interval_ms: expected an integer in [100, 86400000], got \"5\""));
  EXPECT_THAT(ErrorOf("    - {type: dns, name: d, model: qwen, srv: s, nameserver: dns.local:53}\n"),
              HasSubstr("nameserver: expected an IP address and port"));
  EXPECT_THAT(ErrorOf("    - {type: dns, name: d, model: qwen, srv: s, nameserver: 127.0.0.1}\n"),
              HasSubstr("nameserver: expected host:port"));
  EXPECT_EQ(ErrorOf("    - {type: dns, name: d, model: qwen, srv: s, nameserver: \"[::1]:53\"}\n"), "OK");
}

TEST(DiscoveryConfig, KubernetesProviderWithDefaults) {
  auto r = Parse("    - {type: kubernetes, name: k, model: qwen, namespace: llm, service: vllm, ports: {events: kv-events}}\n");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r.value().discovery.kubernetes.size(), 1u);
  EXPECT_TRUE(r.value().discovery.providers.empty());
  const KubernetesProviderConfig& p = r.value().discovery.kubernetes[0];
  EXPECT_EQ(p.name, "k");
  EXPECT_EQ(p.namespace_name, "llm");
  EXPECT_EQ(p.service, "vllm");
  EXPECT_EQ(p.events_port.name, "kv-events");
  EXPECT_TRUE(p.replay_port.empty());
  EXPECT_TRUE(p.metrics_port.empty());
  EXPECT_EQ(p.api_server, "");
  EXPECT_EQ(p.token_file, "/var/run/secrets/kubernetes.io/serviceaccount/token");
  EXPECT_EQ(p.ca_file, "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt");
  EXPECT_FALSE(p.insecure_skip_tls_verify);
  EXPECT_EQ(p.grace_ms, 30'000u);
  EXPECT_EQ(p.watch_timeout_seconds, 300u);
}

TEST(DiscoveryConfig, KubernetesProviderWithEverythingBesideADnsOne) {
  auto r = Parse(
      "    - {type: dns, name: d, model: qwen, srv: s}\n"
      "    - type: kubernetes\n      name: k\n      model: qwen\n      namespace: llm\n      service: vllm\n"
      "      ports: {events: 5557, replay: kv-replay, metrics: http}\n      dp_size: 2\n      grace_ms: 0\n"
      "      api_server: https://10.0.0.1:6443\n      token_file: /t\n      ca_file: /c\n"
      "      insecure_skip_tls_verify: true\n      watch_timeout_seconds: 60\n      timeout_ms: 3000\n"
      "      backoff_initial_ms: 100\n      backoff_max_ms: 1000\n");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r.value().discovery.providers.size(), 1u);
  const KubernetesProviderConfig& p = r.value().discovery.kubernetes.at(0);
  EXPECT_EQ(p.events_port.number, 5557u);
  EXPECT_EQ(p.replay_port.name, "kv-replay");
  EXPECT_EQ(p.metrics_port.name, "http");
  EXPECT_EQ(p.data_parallel_size, 2u);
  EXPECT_EQ(p.grace_ms, 0u);
  EXPECT_EQ(p.api_server, "https://10.0.0.1:6443");
  EXPECT_EQ(p.token_file, "/t");
  EXPECT_EQ(p.ca_file, "/c");
  EXPECT_TRUE(p.insecure_skip_tls_verify);
  EXPECT_EQ(p.watch_timeout_seconds, 60u);
  EXPECT_EQ(p.timeout_ms, 3000u);
  EXPECT_EQ(p.backoff_initial_ms, 100u);
  EXPECT_EQ(p.backoff_max_ms, 1000u);
}

TEST(DiscoveryConfig, KubernetesProviderMistakes) {
  const std::string base = "    - {type: kubernetes, name: k, model: qwen, namespace: n, service: s, ports: {events: kv}";
  EXPECT_EQ(ErrorOf(base + "}\n"), "OK");
  EXPECT_THAT(ErrorOf("    - {type: kubernetes, name: k, model: qwen, service: s, ports: {events: kv}}\n"),
              HasSubstr("discovery.providers[0].namespace: is required"));
  EXPECT_THAT(ErrorOf("    - {type: kubernetes, name: k, model: qwen, namespace: n, service: s}\n"),
              HasSubstr("discovery.providers[0].ports.events: is required"));
  EXPECT_EQ(ErrorOf("    - {type: kubernetes, name: k, model: qwen, namespace: n, pod_selector: app=vllm}\n"), "OK");
  EXPECT_THAT(ErrorOf("    - {type: kubernetes, name: k, model: qwen, namespace: n}\n"),
              HasSubstr("needs service (its EndpointSlices) or pod_selector"));
  EXPECT_THAT(ErrorOf(base + ", pod_selector: app=vllm}\n"), HasSubstr("set service or pod_selector, not both"));
  EXPECT_THAT(ErrorOf("    - {type: kubernetes, name: k, model: qwen, namespace: n, pod_selector: \"\"}\n"),
              HasSubstr("pod_selector: must not be empty"));
  EXPECT_THAT(ErrorOf(base + ", api_server: \"http://10.0.0.1\"}\n"),
              HasSubstr("api_server: expected an https:// URL"));
  EXPECT_THAT(ErrorOf(base + ", srv: x}\n"), HasSubstr("discovery.providers[0].srv: unknown key"));
  EXPECT_THAT(ErrorOf("    - {type: kubernetes, name: k, model: qwen, namespace: n, service: s, ports: {events: KV_EVENTS}}\n"),
              HasSubstr("ports.events: expected a port number or a port name (1-15 of a-z, 0-9, -), got \"KV_EVENTS\""));
  EXPECT_THAT(ErrorOf("    - {type: kubernetes, name: k, model: qwen, namespace: n, service: s, ports: {events: 70000}}\n"),
              HasSubstr("ports.events: expected an integer in [1, 65535]"));
  EXPECT_THAT(ErrorOf("    - {type: kubernetes, name: k, model: qwen, namespace: n, service: s, ports: {events: [1]}}\n"),
              HasSubstr("ports.events: expected a port number or a port name"));
  EXPECT_THAT(ErrorOf(base + ", insecure_skip_tls_verify: yes}\n"), HasSubstr("insecure_skip_tls_verify"));
  EXPECT_THAT(ErrorOf(base + ", backoff_initial_ms: 5000, backoff_max_ms: 1000}\n"),
              HasSubstr("backoff_initial_ms: must not exceed backoff_max_ms (1000)"));
  EXPECT_THAT(ErrorOf("    - {type: kubernetes, name: k, model: other, namespace: n, service: s, ports: {events: kv}}\n"),
              HasSubstr("model \"other\" is not configured"));
  EXPECT_THAT(ErrorOf("    - {type: dns, name: k, model: qwen, srv: x}\n" + base + "}\n"),
              HasSubstr("discovery.providers[1].name: duplicate provider \"k\" (also discovery.providers[0])"));
}

TEST(DiscoveryConfig, KubernetesProviderFromAKubeconfig) {
  std::string dir = ::testing::TempDir();
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  const std::string path = dir + "/discovery_config_kubeconfig";
  std::ofstream(path) << "current-context: c\n"
                         "clusters: [{name: k, cluster: {server: 'https://10.0.0.1:6443', certificate-authority: ca.crt}}]\n"
                         "users: [{name: u, user: {token: t0k3n}}]\n"
                         "contexts: [{name: c, context: {cluster: k, user: u, namespace: inference}},"
                         " {name: d, context: {cluster: k, user: u}}]\n";
  const std::string base = "    - {type: kubernetes, name: k, model: qwen, service: s, ports: {events: kv}, kubeconfig: '" +
                           path + "'";
  auto r = Parse(base + "}\n");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const KubernetesProviderConfig& p = r.value().discovery.kubernetes[0];
  EXPECT_EQ(p.api_server, "https://10.0.0.1:6443");
  EXPECT_EQ(p.namespace_name, "inference");
  EXPECT_EQ(p.token, "t0k3n");
  EXPECT_EQ(p.token_file, "");
  EXPECT_EQ(p.ca_file, dir + "/ca.crt");

  r = Parse(base + ", kubeconfig_context: d, namespace: mine}\n");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r.value().discovery.kubernetes[0].namespace_name, "mine");
  r = Parse(base + ", kubeconfig_context: d}\n");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r.value().discovery.kubernetes[0].namespace_name, "default");

  EXPECT_THAT(ErrorOf(base + ", api_server: 'https://x:1'}\n"), HasSubstr("api_server: set kubeconfig or api_server"));
  EXPECT_THAT(ErrorOf(base + ", token_file: /t}\n"), HasSubstr("token_file: set kubeconfig or token_file"));
  EXPECT_THAT(ErrorOf(base + ", ca_file: /c}\n"), HasSubstr("ca_file: set kubeconfig or ca_file"));
  EXPECT_THAT(ErrorOf(base + ", kubeconfig_context: nope}\n"),
              HasSubstr("discovery.providers[0].kubeconfig: kubeconfig " + path + ": contexts: no context named \"nope\""));
  EXPECT_THAT(ErrorOf("    - {type: kubernetes, name: k, model: qwen, service: s, ports: {events: kv}, kubeconfig: '" +
                      dir + "/missing'}\n"),
              HasSubstr("discovery.providers[0].kubeconfig: kubeconfig " + dir + "/missing: cannot be read"));
  EXPECT_THAT(ErrorOf("    - {type: kubernetes, name: k, model: qwen, namespace: n, service: s, ports: {events: kv},"
                      " kubeconfig_context: d}\n"),
              HasSubstr("kubeconfig_context: needs kubeconfig"));
  EXPECT_THAT(ErrorOf("    - {type: kubernetes, name: k, model: qwen, service: s, ports: {events: kv}, kubeconfig: ''}\n"),
              HasSubstr("kubeconfig: must not be empty"));
}

}  // namespace
}  // namespace kvidx::server
