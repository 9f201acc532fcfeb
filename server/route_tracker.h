// RouteTracker: the routes kvidx handed out and has not yet heard the end
// of, and what they imply before any engine event says so.
//
// A route is a request sent to one source (replica, DP rank). Until the
// router reports it done (or route_ttl passes) it counts as in flight on
// that source; until the engine publishes the route's blocks (ReleaseStored)
// or prediction_ttl passes, its uncached tokens count as queued there, and
// the prompt's blocks past the source's cached prefix count as *predicted*
// there: a sibling request arriving before the engine publishes BlockStored
// sees them (PredictedRun) and follows instead of computing the prefix
// again. Predictions live only here; FindPrefix never reports them.
//
// Bounded: at most max_routes routes (the oldest is evicted and counted)
// and max_predicted_blocks per route. Time comes from the caller, so tests
// drive it with a fake clock.
//
// Thread-safety: every method may be called from any thread; one mutex,
// held for map updates only (no I/O, no callbacks).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/status.h"
#include "index/block_key.h"
#include "index/source_registry.h"

namespace kvidx::server {

class RouteTracker {
 public:
  using Clock = std::chrono::steady_clock;

  struct Options {
    size_t max_routes = 100000;
    size_t max_predicted_blocks = 8192;
    Clock::duration route_ttl = std::chrono::minutes(10);
    Clock::duration prediction_ttl = std::chrono::seconds(10);
  };

  // A route as it was recorded.
  struct Route {
    uint64_t id = 0;
    SourceId source = 0;
    Clock::time_point created;
    uint64_t uncached_tokens = 0;
    uint32_t cached_blocks = 0;       // the source's prefix when routed
    uint64_t expected_cached_tokens = 0;
    std::vector<BlockKey> predicted;  // blocks after it, predicted there
    bool prediction_live = true;
  };

  struct InFlight {
    uint32_t requests = 0;
    uint64_t uncached_tokens = 0;   // of routes still within prediction_ttl
  };

  struct Stats {
    uint64_t added = 0;
    uint64_t done = 0;
    uint64_t expired = 0;   // route_ttl passed without RouteDone
    uint64_t evicted = 0;   // pushed out by max_routes
    uint64_t predictions_confirmed = 0;  // the engine published the route's last predicted block
    uint64_t predictions_expired = 0;    // prediction_ttl passed first
  };

  explicit RouteTracker(const Options& options) : opts_(options) {}

  // Records a route of the prompt `keys` to `source`, which holds its first
  // `cached_blocks`; returns the route id (never 0).
  uint64_t Add(SourceId source, std::span<const BlockKey> keys, uint32_t cached_blocks, uint64_t uncached_tokens,
               Clock::time_point now, uint64_t expected_cached_tokens = 0);
  // Ends a route: its record, or NotFound for an id never issued, already
  // done, expired or evicted.
  Result<Route> Done(uint64_t route_id, Clock::time_point now);

  // How many of keys[from..] are predicted on `source`, consecutively.
  uint32_t PredictedRun(SourceId source, std::span<const BlockKey> keys, uint32_t from, Clock::time_point now);
  InFlight InFlightOn(SourceId source, Clock::time_point now);
  // Every source with a route in flight.
  std::vector<std::pair<SourceId, InFlight>> InFlightBySource() const;
  // Ends the prediction of every route on `source` whose last predicted
  // block `stored(key)` says the engine has published: vLLM publishes a
  // block when it schedules it, so that prompt's prefill is under way and no
  // longer queued, and its blocks are in the index. `stored` runs under the
  // tracker's mutex: it must be a lock-free index read, no I/O.
  template <typename StoredFn>
  void ReleaseStored(SourceId source, StoredFn&& stored, Clock::time_point now);
  // Ends every route on `source` unreported (counted as evicted): its id
  // now names another source.
  void ForgetSource(SourceId source);
  Stats stats() const;
  size_t size() const;

 private:
  struct PredKey {
    SourceId source;
    BlockKey key;
    friend bool operator==(const PredKey&, const PredKey&) = default;
  };
  struct PredKeyHash {
    size_t operator()(const PredKey& k) const {
      return BlockKeyHash()(k.key) ^ (size_t{k.source} * 0x9E3779B97F4A7C15ull);
    }
  };

  void ExpireLocked(Clock::time_point now);
  void ReleasePrediction(Route& r);
  void ForgetPending(const Route& r);
  void EraseLocked(std::map<uint64_t, Route>::iterator it);

  const Options opts_;
  mutable std::mutex mu_;
  uint64_t next_id_ = 1;
  std::map<uint64_t, Route> routes_;                   // by id = by creation time
  std::deque<uint64_t> live_predictions_;              // route ids, oldest first
  std::unordered_map<PredKey, uint32_t, PredKeyHash> predicted_;  // -> routes predicting it
  std::unordered_map<SourceId, InFlight> inflight_;
  std::unordered_map<SourceId, std::vector<uint64_t>> pending_;  // routes with a live prediction
  Stats stats_;
};

template <typename StoredFn>
void RouteTracker::ReleaseStored(SourceId source, StoredFn&& stored, Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  ExpireLocked(now);
  auto p = pending_.find(source);
  if (p == pending_.end()) return;
  std::vector<uint64_t> ids = p->second;
  for (uint64_t id : ids) {
    auto it = routes_.find(id);
    if (it == routes_.end()) continue;
    Route& r = it->second;
    if (r.predicted.empty() || stored(r.predicted.back())) {
      ReleasePrediction(r);
      ++stats_.predictions_confirmed;
    }
  }
}

}  // namespace kvidx::server
