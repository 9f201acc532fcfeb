// Discovery: the thread that follows each DNS provider's engines (issue 19).
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
// One thread for all providers; a resolution blocks it for at most about
// 2 x timeout. Stop() interrupts a resolution and joins. Metrics may be
// rendered from any thread. Thread-safe.
#pragma once

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "base/metric.h"
#include "base/status.h"
#include "server/config.h"
#include "server/discovery_state.h"
#include "server/dns_resolver.h"

namespace kvidx::server {

// Records a provider answered but no engine came of, by reason.
enum class SkipReason : uint8_t { kNoAddress, kBadName, kDuplicate, kConflict };
inline constexpr size_t kNumSkipReasons = 4;
std::string_view SkipReasonName(SkipReason r);

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
    std::function<Status(const EngineEntry&, std::string_view provider)> add;
    std::function<Status(std::string_view replica, std::string_view provider)> remove;
  };

  Discovery(std::vector<DnsProviderConfig> providers, Target target);
  ~Discovery();  // Stop()s
  Discovery(const Discovery&) = delete;
  Discovery& operator=(const Discovery&) = delete;

  // Creates the resolvers and starts the thread (the first resolutions run
  // at once). InvalidArgument for a nameserver c-ares refuses.
  Status Start();
  void Stop();

  // kvidx_discovery_* samples (node_metrics.h).
  void RenderMetrics(std::vector<MetricSample>* out) const;

 private:
  struct Provider {
    DnsProviderConfig config;
    std::unique_ptr<DnsResolver> resolver;
    Clock::time_point next_due{};
    // Guarded by mu_:
    std::array<uint64_t, kNumDnsOutcomes> resolutions{};
    std::array<uint64_t, kNumSkipReasons> skipped{};
    std::optional<Clock::time_point> last_success;
    bool stale = false;
    uint64_t added = 0;
    uint64_t removed = 0;
    uint64_t add_errors = 0;
  };

  void Run();
  void Resolve(Provider* p);
  void Apply(Provider* p, const DiscoveryActions& actions);
  void ApplyRemove(const DiscoveryRemoval& removal);
  Clock::time_point NextWake() const;
  Provider* FindProvider(std::string_view name);

  std::vector<std::unique_ptr<Provider>> providers_;
  const Target target_;
  std::atomic<bool> stop_{false};
  std::thread thread_;

  mutable std::mutex mu_;  // provider counters, state_
  DiscoveryState state_;
  std::mutex wake_mu_;
  std::condition_variable wake_;
};

}  // namespace kvidx::server
