// Discovery: follows each provider's engines (issue 19): DNS providers on
// one thread, each Kubernetes provider on its own (k8s_watch.h).
//
// For every provider (config.h DnsProviderConfig) it resolves the SRV or
// A/AAAA name through its own DnsResolver, turns the records into engine
// entries (ResolveEngines), feeds each good answer to a DiscoveryState and
// applies the resulting adds and removes through the Target -- the Node's
// AddDiscoveredEngine / RemoveDiscoveredEngine, the same path as the admin
// API's AddEngine / RemoveEngine. Between resolutions it sleeps until the
// next one is due (min(interval, record TTL), not before min_interval) or
// the next grace period ends.
//
// A failed resolution (nxdomain, timeout, ...) is counted by its outcome and
// changes nothing: the engines of the last good answer stay, and the
// provider is flagged stale until one succeeds again.
//
// A Kubernetes provider's watcher hands over its whole engine set after
// each change; it goes through the same DiscoveryState (grace periods,
// conflicts), and the readiness of each engine (EndpointSlice
// conditions.ready) goes to the Target's `ready`, so that Route skips a
// not-ready engine while its sources stay subscribed. Its failures are
// counted by KubeOutcome and flag it stale like a failed resolution.
//
// The DNS thread also ends grace periods (for every provider); a resolution
// blocks it for at most about 2 x timeout. The state changes of all threads
// are applied to the Target one at a time. Stop() interrupts the
// resolutions and watches and joins. Metrics may be rendered from any
// thread. Thread-safe.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_set>
#include <vector>

#include "base/metric.h"
#include "base/status.h"
#include "server/config.h"
#include "server/discovery_state.h"
#include "server/dns_resolver.h"
#include "server/k8s_endpoints.h"
#include "server/k8s_watch.h"
#include "server/kube_api.h"

namespace kvidx::server {

// One resolution of a provider, as engines.
struct ResolvedEngines {
  DnsOutcome outcome = DnsOutcome::kError;
  std::string detail;
  std::vector<EngineEntry> engines;
  std::optional<uint32_t> ttl_seconds;  // smallest TTL of the addresses used
  std::array<uint64_t, kNumSkipReasons> skipped{};
};

// Resolves the provider's name and builds its engines (replica = SRV target
// or address; endpoints from the record's address and the provider's ports).
ResolvedEngines ResolveEngines(const DnsProviderConfig& provider, DnsResolver* resolver,
                               const std::atomic<bool>& stop);

class Discovery {
 public:
  using Clock = std::chrono::steady_clock;
  struct Target {
    // Adds the engine already marked not ready when `ready` is false, so
    // Route never sees a not-ready engine as ready for a moment.
    std::function<Status(const EngineEntry&, std::string_view provider, bool ready)> add;
    std::function<Status(std::string_view replica, std::string_view provider)> remove;
    // The engine's readiness changed since it was added.
    std::function<Status(std::string_view replica, std::string_view provider, bool ready)> ready;
  };

  Discovery(DiscoveryConfig config, Target target);
  ~Discovery();  // Stop()s
  Discovery(const Discovery&) = delete;
  Discovery& operator=(const Discovery&) = delete;

  // Creates the resolvers and watchers and starts the threads (the first
  // resolutions and lists run at once). InvalidArgument for a nameserver
  // c-ares refuses; FailedPrecondition for a Kubernetes provider with no
  // api_server outside a pod.
  Status Start();
  void Stop();

  // kvidx_discovery_* samples (node_metrics.h).
  void RenderMetrics(std::vector<MetricSample>* out) const;

 private:
  struct Provider {
    std::string name;
    bool kubernetes = false;
    DnsProviderConfig config;  // DNS
    std::unique_ptr<DnsResolver> resolver;
    Clock::time_point next_due{};
    KubernetesProviderConfig k8s;
    std::unique_ptr<KubernetesWatcher> watcher;
    // Guarded by apply_mu_: replicas last reported not ready to the Target.
    std::set<std::string, std::less<>> not_ready;
    // Guarded by mu_:
    std::array<uint64_t, std::max(kNumDnsOutcomes, kNumKubeOutcomes)> resolutions{};
    size_t not_ready_count = 0;
    std::array<uint64_t, kNumSkipReasons> skipped{};
    std::optional<Clock::time_point> last_success;
    bool stale = false;
    uint64_t added = 0;
    uint64_t removed = 0;
    uint64_t add_errors = 0;
  };

  void Run();
  void Resolve(Provider* p);
  // Adds the engines of `actions` not ready when listed in `not_ready`.
  void Apply(Provider* p, const DiscoveryActions& actions, const std::unordered_set<std::string>& not_ready = {});
  // A Kubernetes provider's whole engine set (its watcher's thread).
  void Publish(Provider* p, const std::vector<DiscoveredEngine>& engines);
  void Report(Provider* p, KubeOutcome outcome, const std::string& detail);
  void SyncReadiness(Provider* p, const std::vector<DiscoveredEngine>& engines);
  void ApplyRemove(const DiscoveryRemoval& removal);
  Clock::time_point NextWake() const;
  Provider* FindProvider(std::string_view name);

  std::vector<std::unique_ptr<Provider>> providers_;
  const Target target_;
  std::atomic<bool> stop_{false};
  std::thread thread_;

  // Held while a state change is computed and applied to the Target, so
  // that changes from different threads reach the node in their order.
  std::mutex apply_mu_;
  mutable std::mutex mu_;  // provider counters, state_
  DiscoveryState state_;
  std::mutex wake_mu_;
  std::condition_variable wake_;
};

}  // namespace kvidx::server
