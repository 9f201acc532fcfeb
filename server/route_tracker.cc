#include "server/route_tracker.h"

#include <algorithm>

namespace kvidx::server {

uint64_t RouteTracker::Add(SourceId source, std::span<const BlockKey> keys, uint32_t cached_blocks,
                           uint64_t uncached_tokens, Clock::time_point now, uint64_t expected_cached_tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  ExpireLocked(now);
  while (routes_.size() >= opts_.max_routes && !routes_.empty()) {
    EraseLocked(routes_.begin());
    ++stats_.evicted;
  }
  const uint64_t id = next_id_++;
  Route& r = routes_[id];
  r.id = id;
  r.source = source;
  r.created = now;
  r.uncached_tokens = uncached_tokens;
  r.cached_blocks = cached_blocks;
  r.expected_cached_tokens = expected_cached_tokens;
  const size_t from = std::min<size_t>(cached_blocks, keys.size());
  const size_t n = std::min(keys.size() - from, opts_.max_predicted_blocks);
  r.predicted.assign(keys.begin() + from, keys.begin() + from + n);
  for (const BlockKey& k : r.predicted) ++predicted_[PredKey{source, k}];
  live_predictions_.push_back(id);
  pending_[source].push_back(id);
  InFlight& f = inflight_[source];
  ++f.requests;
  f.uncached_tokens += uncached_tokens;
  ++stats_.added;
  return id;
}

Result<RouteTracker::Route> RouteTracker::Done(uint64_t route_id, Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  ExpireLocked(now);
  auto it = routes_.find(route_id);
  if (it == routes_.end()) {
    return Status::NotFound("route_id: " + std::to_string(route_id) +
                            " is not in flight (never issued, already done, or expired)");
  }
  Route r = it->second;
  EraseLocked(it);
  ++stats_.done;
  return r;
}

uint32_t RouteTracker::PredictedRun(SourceId source, std::span<const BlockKey> keys, uint32_t from,
                                    Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  ExpireLocked(now);
  if (predicted_.empty()) return 0;
  uint32_t n = 0;
  for (size_t i = from; i < keys.size() && predicted_.contains(PredKey{source, keys[i]}); ++i) ++n;
  return n;
}

RouteTracker::InFlight RouteTracker::InFlightOn(SourceId source, Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  ExpireLocked(now);
  auto it = inflight_.find(source);
  return it == inflight_.end() ? InFlight{} : it->second;
}

std::vector<std::pair<SourceId, RouteTracker::InFlight>> RouteTracker::InFlightBySource() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {inflight_.begin(), inflight_.end()};
}

RouteTracker::Stats RouteTracker::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

size_t RouteTracker::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return routes_.size();
}

void RouteTracker::ForgetSource(SourceId source) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = routes_.begin(); it != routes_.end();) {
    if (it->second.source != source) {
      ++it;
      continue;
    }
    EraseLocked(it++);
    ++stats_.evicted;
  }
}

void RouteTracker::ReleasePrediction(Route& r) {
  if (!r.prediction_live) return;
  r.prediction_live = false;
  ForgetPending(r);
  for (const BlockKey& k : r.predicted) {
    auto it = predicted_.find(PredKey{r.source, k});
    if (it != predicted_.end() && --it->second == 0) predicted_.erase(it);
  }
  auto f = inflight_.find(r.source);
  if (f != inflight_.end()) f->second.uncached_tokens -= std::min(f->second.uncached_tokens, r.uncached_tokens);
}

void RouteTracker::ForgetPending(const Route& r) {
  auto p = pending_.find(r.source);
  if (p == pending_.end()) return;
  std::vector<uint64_t>& ids = p->second;
  ids.erase(std::remove(ids.begin(), ids.end(), r.id), ids.end());
  if (ids.empty()) pending_.erase(p);
}

void RouteTracker::EraseLocked(std::map<uint64_t, Route>::iterator it) {
  Route& r = it->second;
  ReleasePrediction(r);
  auto f = inflight_.find(r.source);
  if (f != inflight_.end() && --f->second.requests == 0) inflight_.erase(f);
  routes_.erase(it);
}

// Routes are created in id order with one TTL each, so both expiries only
// ever look at the oldest entries.
void RouteTracker::ExpireLocked(Clock::time_point now) {
  while (!live_predictions_.empty()) {
    auto it = routes_.find(live_predictions_.front());
    if (it != routes_.end()) {
      if (now - it->second.created < opts_.prediction_ttl) break;
      if (it->second.prediction_live) ++stats_.predictions_expired;
      ReleasePrediction(it->second);
    }
    live_predictions_.pop_front();
  }
  while (!routes_.empty() && now - routes_.begin()->second.created >= opts_.route_ttl) {
    EraseLocked(routes_.begin());
    ++stats_.expired;
  }
}

}  // namespace kvidx::server
