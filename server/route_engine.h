// RouteEngine: the Route and RouteDone queries, without any RPC.
//
// Route gathers, for every candidate rank of the model (every source of the
// named replicas, or of the whole model), what the index holds of the
// prompt (GPU, CPU and storage prefixes, via QueryEngine and the index),
// what RouteTracker predicts and counts in flight there, the engine's
// scraped load (Node::load(), weighted by its age), and how long ago the
// rank joined or its engine restarted; RoutePolicy picks the rank; the
// route is recorded (predictions, in-flight) and its id returned.
// RouteDone ends a route and returns what was expected of it.
//
// Errors (Status, the message starting with the field):
//   InvalidArgument  a malformed prompt (as FindPrefix), n or
//                    expected_output_tokens out of range, prompt_tokens
//                    below what the hashes cover;
//   NotFound         an unknown model, a named replica with no source, an
//                    unknown or finished route_id;
//   Unavailable      no candidate rank (the model has no sources, or only
//                    ones of engines discovery reports not ready).
//
// Thread-safety: every method may be called from any thread at once.
// `queries` (and the node under it) outlives the engine.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "index/block_index.h"
#include "server/config.h"
#include "server/prefix_query.h"
#include "server/query_engine.h"
#include "server/route_clock.h"
#include "server/route_policy.h"
#include "server/route_tracker.h"

namespace kvidx::server {

inline constexpr uint32_t kMaxRouteSiblings = 1024;

// How much a load reading of this age counts (1 fresh .. 0 stale): full up
// to twice the scrape interval, fading linearly to nothing at stale_after.
double ScrapeWeight(const RoutingConfig& routing, std::chrono::steady_clock::duration age);
inline constexpr uint32_t kMaxExpectedOutputTokens = 1u << 24;

struct RouteQuery {
  PrefixQuery prompt;              // model, prompt form, candidate replicas
  uint64_t prompt_tokens = 0;      // see RouteRequest.prompt_tokens
  uint32_t expected_output_tokens = 0;
  uint32_t n = 1;
};

struct RouteCandidate {
  std::string replica;
  uint32_t dp_rank = 0;
  SourceId source = 0;
  SourceState state = SourceState::kConnecting;
  // A change of either makes the rank young again (warm-up): an engine
  // restart seen by ingest, or the source removed and added again.
  uint64_t engine_restarts = 0;
  uint64_t incarnation = 0;
  RouteSignals signals;
  RouteScore score;
};

struct RouteAnswer {
  uint64_t route_id = 0;
  RouteReason reason = RouteReason::kNoPrefix;
  std::vector<RouteCandidate> candidates;  // lowest cost first: [0] is the choice
  uint32_t block_size = 0;
  uint64_t prompt_tokens = 0;
};

struct RouteEnd {
  uint64_t predicted_cached_tokens = 0;
};

class RouteEngine {
 public:
  using Clock = RouteTracker::Clock;

  // Each model routes by its config's policy (ModelConfig::route) until
  // SetPolicies replaces it.
  // `clock` (the node's; it outlives this) is the time of Route and
  // RouteDone calls that do not pass one.
  RouteEngine(const QueryEngine* queries, const RouteClock* clock, const RouteTracker::Options& tracker);

  // Replaces the policies of the named models (a SIGHUP reload); a Route
  // already running keeps the one it read.
  void SetPolicies(const std::unordered_map<std::string, RoutePolicy>& by_model);

  Status Route(const RouteQuery& q, RouteAnswer* answer) { return Route(q, answer, clock_->Now()); }
  Status Route(const RouteQuery& q, RouteAnswer* answer, Clock::time_point now);
  // `cached_tokens`: what the engine reported reusing, if it reported usage.
  Result<RouteEnd> RouteDone(uint64_t route_id, std::optional<uint64_t> cached_tokens) {
    return RouteDone(route_id, cached_tokens, clock_->Now());
  }
  Result<RouteEnd> RouteDone(uint64_t route_id, std::optional<uint64_t> cached_tokens, Clock::time_point now);
  // Drops what Route keeps of `source` (routes in flight, first sighting,
  // cached-token counters): its id now names another source.
  void ForgetSource(SourceId source);

  // Counters for /metrics (node_metrics.h).
  struct CachedTokens {
    uint64_t predicted = 0;   // over routes reported done with cached_tokens
    uint64_t delivered = 0;
  };
  RouteTracker::Stats tracker_stats() const { return tracker_.stats(); }
  size_t in_flight() const { return tracker_.size(); }
  std::vector<std::pair<SourceId, RouteTracker::InFlight>> in_flight_by_source() const {
    return tracker_.InFlightBySource();
  }
  uint64_t decisions(RouteReason r) const { return decisions_[static_cast<size_t>(r)].load(std::memory_order_relaxed); }
  std::unordered_map<SourceId, CachedTokens> cached_tokens_by_source() const;

 private:
  Status CheckQuery(const RouteQuery& q) const;
  // Every candidate source with its cache signals, from `found`.
  Status Candidates(const RouteQuery& q, const ModelRuntime& model, const PrefixAnswer& found,
                    std::vector<RouteCandidate>* out) const;
  void AddLoadSignals(ModelId model, std::span<const BlockKey> keys, std::vector<RouteCandidate>* c,
                      Clock::time_point now);
  double AgeSeconds(const RouteCandidate& c, Clock::time_point now);

  // The model's policy, with a learned mean_prompt_tokens filled in.
  RoutePolicy PolicyFor(const ModelRuntime& model) const;
  void LearnUncachedTokens(ModelId model, double uncached_tokens);

  const QueryEngine* queries_;
  const RouteClock* clock_;
  RouteTracker tracker_;
  mutable std::mutex policy_mu_;
  std::unordered_map<std::string, RoutePolicy> policies_;  // reloaded ones, by model name
  // Per model, the exponential mean of the uncached tokens of the requests
  // routed: a scraped waiting request's prefill, as far as kvidx can tell.
  std::unordered_map<ModelId, double> uncached_mean_;

  // When each source was first seen, with its engine-restart count and
  // incarnation then: a restart or a re-addition (an empty cache) makes it
  // young again.
  struct Seen {
    Clock::time_point since;
    uint64_t restarts = 0;
    uint64_t incarnation = 0;
  };
  std::mutex seen_mu_;
  std::unordered_map<SourceId, Seen> seen_;
  std::array<std::atomic<uint64_t>, kNumRouteReasons> decisions_{};
  mutable std::mutex cached_mu_;
  std::unordered_map<SourceId, CachedTokens> cached_;
};

}  // namespace kvidx::server
