#include "server/route_engine.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "base/bounded_text.h"
#include "index/prefix_match.h"
#include "server/node.h"

namespace kvidx::server {

RouteEngine::RouteEngine(const QueryEngine* queries, const RouteClock* clock, const RouteTracker::Options& tracker)
    : queries_(queries), clock_(clock), tracker_(tracker) {}

void RouteEngine::SetPolicies(const std::unordered_map<std::string, RoutePolicy>& by_model) {
  std::lock_guard<std::mutex> lock(policy_mu_);
  for (const auto& [model, policy] : by_model) policies_[model] = policy;
}

RoutePolicy RouteEngine::PolicyFor(const ModelRuntime& model) const {
  std::lock_guard<std::mutex> lock(policy_mu_);
  auto it = policies_.find(model.config.name);
  RoutePolicy p = it != policies_.end() ? it->second : model.config.route;
  if (p.mean_prompt_tokens <= 0) {
    auto mean = uncached_mean_.find(model.id);
    p.mean_prompt_tokens = mean != uncached_mean_.end() ? mean->second : kDefaultQueuedPromptTokens;
  }
  return p;
}

void RouteEngine::LearnUncachedTokens(ModelId model, double uncached_tokens) {
  // Weight 1/64: the mean follows a change of workload within a few hundred
  // requests and one huge prompt moves it little.
  constexpr double kWeight = 1.0 / 64;
  std::lock_guard<std::mutex> lock(policy_mu_);
  auto [it, first] = uncached_mean_.try_emplace(model, uncached_tokens);
  if (!first) it->second += kWeight * (uncached_tokens - it->second);
}

Status RouteEngine::CheckQuery(const RouteQuery& q) const {
  if (q.n > kMaxRouteSiblings) {
    return Status::InvalidArgument("n: " + std::to_string(q.n) + " siblings exceed the limit of " +
                                   std::to_string(kMaxRouteSiblings));
  }
  if (q.expected_output_tokens > kMaxExpectedOutputTokens) {
    return Status::InvalidArgument("expected_output_tokens: " + std::to_string(q.expected_output_tokens) +
                                   " exceeds the limit of " + std::to_string(kMaxExpectedOutputTokens));
  }
  return Status::Ok();
}

Status RouteEngine::Route(const RouteQuery& q, RouteAnswer* answer, Clock::time_point now) {
  *answer = RouteAnswer{};
  if (Status s = CheckQuery(q); !s.ok()) return s;
  thread_local PrefixAnswer found;
  if (Status s = queries_->FindPrefix(q.prompt, &found); !s.ok()) return s;
  const ModelRuntime& model = *queries_->node().FindModel(q.prompt.model);
  const uint64_t covered = static_cast<uint64_t>(found.keys.size()) * found.block_size;
  uint64_t prompt_tokens = q.prompt.form == PromptForm::kHashes ? q.prompt_tokens : found.prompt_tokens;
  if (q.prompt.form == PromptForm::kHashes && prompt_tokens == 0) prompt_tokens = covered;
  if (prompt_tokens < covered) {
    return Status::InvalidArgument("prompt_tokens: " + std::to_string(prompt_tokens) + " is fewer than the " +
                                   std::to_string(covered) + " tokens the hashes cover");
  }
  // The index walk below reuses the thread's key scratch: keep a copy.
  thread_local std::vector<BlockKey> keys;
  keys.assign(found.keys.begin(), found.keys.end());
  if (Status s = Candidates(q, model, found, &answer->candidates); !s.ok()) return s;
  AddLoadSignals(model.id, keys, &answer->candidates, now);
  std::vector<RouteSignals> signals;
  signals.reserve(answer->candidates.size());
  for (RouteCandidate& c : answer->candidates) {
    c.signals.inflight_requests += q.n > 1 ? q.n - 1 : 0;  // the siblings run together
    signals.push_back(c.signals);
  }
  const RouteChoice choice = ChooseRoute(PolicyFor(model), prompt_tokens, found.block_size, signals);
  for (size_t i = 0; i < answer->candidates.size(); ++i) answer->candidates[i].score = choice.scores[i];
  std::swap(answer->candidates[0], answer->candidates[choice.winner]);
  std::stable_sort(answer->candidates.begin() + 1, answer->candidates.end(),
                   [](const RouteCandidate& a, const RouteCandidate& b) { return a.score.cost < b.score.cost; });
  const RouteCandidate& w = answer->candidates[0];
  const uint32_t known = w.signals.gpu_blocks + w.signals.cpu_blocks + w.signals.storage_blocks;
  answer->route_id = tracker_.Add(w.source, keys, known + w.signals.predicted_blocks,
                                  static_cast<uint64_t>(std::llround(w.score.uncached_tokens)), now,
                                  static_cast<uint64_t>(std::llround(w.score.cached_tokens)));
  LearnUncachedTokens(model.id, w.score.uncached_tokens);
  answer->reason = choice.reason;
  decisions_[static_cast<size_t>(choice.reason)].fetch_add(1, std::memory_order_relaxed);
  answer->block_size = found.block_size;
  answer->prompt_tokens = prompt_tokens;
  return Status::Ok();
}

Status RouteEngine::Candidates(const RouteQuery& q, const ModelRuntime& model, const PrefixAnswer& found,
                               std::vector<RouteCandidate>* out) const {
  const Node& node = queries_->node();
  // GPU and GPU+CPU prefixes per source; `found` has GPU+any tier.
  thread_local PrefixMatch cpu;
  PrefixFilter filter;
  filter.tier_mask = (uint64_t{1} << static_cast<unsigned>(Tier::kGpu)) |
                     (uint64_t{1} << static_cast<unsigned>(Tier::kCpu));
  if (Status s = node.index().FindPrefix(model.id, found.keys, filter, &cpu); !s.ok()) return s;
  std::vector<bool> named(q.prompt.replicas.size(), false);
  for (const ingest::SourceStatus& st : node.ingester().ListSources()) {
    if (st.spec.model != model.config.name) continue;
    if (!q.prompt.replicas.empty()) {
      auto it = std::find(q.prompt.replicas.begin(), q.prompt.replicas.end(), st.spec.replica);
      if (it == q.prompt.replicas.end()) continue;
      named[it - q.prompt.replicas.begin()] = true;
    }
    // A not-ready engine (discovery) stays indexed but is not routed to.
    if (!node.EngineReady(st.spec.replica)) continue;
    const std::optional<SourceId> id = node.sink().FindSource(st.spec.replica, st.spec.dp_rank);
    if (!id) continue;
    RouteCandidate c{st.spec.replica, st.spec.dp_rank, *id, st.state,
                     st.stats ? st.stats->engine_restarts.load(std::memory_order_relaxed) : 0,
                     st.stats ? st.stats->incarnation : 0, {}, {}};
    for (const ReplicaPrefix& r : found.replicas) {
      if (r.source != *id) continue;
      const SourceMatch* m = cpu.Find(*id);
      const uint32_t with_cpu = m != nullptr ? m->blocks_with_lower_tiers : r.gpu_blocks;
      c.signals.gpu_blocks = r.gpu_blocks;
      c.signals.cpu_blocks = with_cpu - std::min(with_cpu, r.gpu_blocks);
      c.signals.storage_blocks = r.blocks_with_lower_tiers - std::min(r.blocks_with_lower_tiers, with_cpu);
      break;
    }
    out->push_back(c);
  }
  for (size_t i = 0; i < named.size(); ++i) {
    if (!named[i]) {
      return Status::NotFound("replicas[" + std::to_string(i) + "]: no source of model " +
                              Quote(model.config.name) + " on replica " + Quote(q.prompt.replicas[i]));
    }
  }
  if (out->empty()) {
    return Status::Unavailable("model: " + Quote(model.config.name) + " has no sources to route to (or none ready)");
  }
  return Status::Ok();
}

double ScrapeWeight(const RoutingConfig& r, std::chrono::steady_clock::duration age) {
  const double ms = std::chrono::duration<double, std::milli>(age).count();
  const double fresh = 2.0 * r.scrape_interval_ms;
  const double stale = r.stale_after_ms;
  if (ms >= stale) return 0;
  if (ms <= fresh || stale <= fresh) return 1;
  return (stale - ms) / (stale - fresh);
}

void RouteEngine::AddLoadSignals(ModelId model, std::span<const BlockKey> keys, std::vector<RouteCandidate>* c,
                                 Clock::time_point now) {
  const Node& node = queries_->node();
  thread_local PrefixMatch one;
  for (RouteCandidate& x : *c) {
    RouteSignals& s = x.signals;
    if (std::optional<ingest::LoadScraper::Reading> r = node.load().Get(x.replica, x.dp_rank, now)) {
      s.running = r->load.running.value_or(0);
      s.waiting = r->load.waiting.value_or(0);
      s.kv_usage = r->load.kv_usage.value_or(0);
      s.scrape_weight = ScrapeWeight(node.routing(), r->age);
    }
    const SourceId source = x.source;
    tracker_.ReleaseStored(
        source,
        [&](const BlockKey& key) {
          if (!node.index().FindPrefix(model, std::span<const BlockKey>(&key, 1), PrefixFilter{}, &one).ok()) return false;
          return one.Find(source) != nullptr;
        },
        now);
    const uint32_t known = s.gpu_blocks + s.cpu_blocks + s.storage_blocks;
    s.predicted_blocks = tracker_.PredictedRun(x.source, keys, known, now);
    const RouteTracker::InFlight f = tracker_.InFlightOn(x.source, now);
    s.inflight_requests = f.requests;
    s.inflight_uncached_tokens = static_cast<double>(f.uncached_tokens);
    s.age_seconds = AgeSeconds(x, now);
  }
}

double RouteEngine::AgeSeconds(const RouteCandidate& c, Clock::time_point now) {
  const Seen first{now, c.engine_restarts, c.incarnation};
  std::lock_guard<std::mutex> lock(seen_mu_);
  auto [it, fresh] = seen_.try_emplace(c.source, first);
  if (!fresh && (it->second.restarts != c.engine_restarts || it->second.incarnation != c.incarnation)) {
    it->second = first;
  }
  return std::chrono::duration<double>(now - it->second.since).count();
}

Result<RouteEnd> RouteEngine::RouteDone(uint64_t route_id, std::optional<uint64_t> cached_tokens,
                                        Clock::time_point now) {
  Result<RouteTracker::Route> r = tracker_.Done(route_id, now);
  if (!r.ok()) return r.status();
  if (cached_tokens) {
    std::lock_guard<std::mutex> lock(cached_mu_);
    CachedTokens& c = cached_[r->source];
    c.predicted += r->expected_cached_tokens;
    c.delivered += *cached_tokens;
  }
  return RouteEnd{r->expected_cached_tokens};
}

void RouteEngine::ForgetSource(SourceId source) {
  tracker_.ForgetSource(source);
  {
    std::lock_guard<std::mutex> lock(seen_mu_);
    seen_.erase(source);
  }
  std::lock_guard<std::mutex> lock(cached_mu_);
  cached_.erase(source);
}

std::unordered_map<SourceId, RouteEngine::CachedTokens> RouteEngine::cached_tokens_by_source() const {
  std::lock_guard<std::mutex> lock(cached_mu_);
  return cached_;
}

}  // namespace kvidx::server
