#include "server/discovery.h"

#include <algorithm>
#include <set>
#include <utility>

#include <spdlog/spdlog.h>

#include "ingest/source_config.h"
#include "server/node_metrics.h"

namespace kvidx::server {
namespace {

using std::chrono::milliseconds;

std::string HostPart(const DnsAddress& a) { return a.v6 ? "[" + a.ip + "]" : a.ip; }

EngineEntry MakeEngine(const DnsProviderConfig& p, std::string replica, const DnsAddress& addr, uint32_t port) {
  const std::string host = HostPart(addr);
  EngineEntry e;
  e.engine.replica = std::move(replica);
  e.engine.model = p.model;
  e.engine.endpoint = "tcp://" + host + ":" + std::to_string(port);
  if (p.replay_port != 0) e.engine.replay_endpoint = "tcp://" + host + ":" + std::to_string(p.replay_port);
  e.engine.data_parallel_size = p.data_parallel_size;
  if (p.metrics_port != 0) e.metrics_url = "http://" + host + ":" + std::to_string(p.metrics_port) + "/metrics";
  return e;
}

void NoteTtl(ResolvedEngines* out, uint32_t ttl) {
  out->ttl_seconds = std::min(out->ttl_seconds.value_or(ttl), ttl);
}

void FromAddresses(const DnsProviderConfig& p, DnsAnswer<DnsAddress> answer, ResolvedEngines* out) {
  std::set<std::string> seen;
  for (const DnsAddress& a : answer.records) {
    std::string replica = HostPart(a);
    if (!seen.insert(replica).second) {
      ++out->skipped[static_cast<size_t>(SkipReason::kDuplicate)];
      continue;
    }
    NoteTtl(out, a.ttl_seconds);
    out->engines.push_back(MakeEngine(p, std::move(replica), a, p.events_port));
  }
}

// The target's address kvidx connects to: the smallest, so a target with
// several addresses does not flap between answers.
const DnsAddress* PickAddress(const DnsAnswer<DnsAddress>& a) {
  auto it = std::min_element(a.records.begin(), a.records.end(),
                             [](const DnsAddress& x, const DnsAddress& y) { return x.ip < y.ip; });
  return it == a.records.end() ? nullptr : &*it;
}

void FromSrv(const DnsProviderConfig& p, const DnsAnswer<DnsSrv>& srv, DnsResolver* resolver,
             const std::atomic<bool>& stop, ResolvedEngines* out) {
  std::vector<std::string> targets;
  for (const DnsSrv& r : srv.records) targets.push_back(r.target);
  std::vector<DnsAnswer<DnsAddress>> addrs = resolver->LookupAddresses(targets, stop);
  std::set<std::string> seen;
  for (size_t i = 0; i < srv.records.size(); ++i) {
    const DnsAnswer<DnsAddress>& a = addrs[i];
    if (a.outcome != DnsOutcome::kOk && a.outcome != DnsOutcome::kNxdomain && a.outcome != DnsOutcome::kNoData) {
      // The target could not be looked up: the answer is incomplete, so it is
      // not a good answer (engines missing from it would enter their grace).
      out->outcome = a.outcome;
      out->detail = "address of SRV target " + targets[i] + ": " + a.detail;
      out->engines.clear();
      return;
    }
    std::string replica = targets[i];
    if (!replica.empty() && replica.back() == '.') replica.pop_back();
    const DnsAddress* addr = PickAddress(a);
    SkipReason why = SkipReason::kNoAddress;
    bool ok = addr != nullptr;
    if (ok && !ingest::CheckReplicaName(replica).ok()) ok = false, why = SkipReason::kBadName;
    if (ok && !seen.insert(replica).second) ok = false, why = SkipReason::kDuplicate;
    if (!ok) {
      ++out->skipped[static_cast<size_t>(why)];
      continue;
    }
    NoteTtl(out, addr->ttl_seconds);
    out->engines.push_back(MakeEngine(p, std::move(replica), *addr, srv.records[i].port));
  }
}

}  // namespace

ResolvedEngines ResolveEngines(const DnsProviderConfig& p, DnsResolver* resolver, const std::atomic<bool>& stop) {
  ResolvedEngines out;
  if (!p.host.empty()) {
    DnsAnswer<DnsAddress> a = resolver->LookupAddresses(p.host, stop);
    out.outcome = a.outcome;
    out.detail = a.detail;
    if (a.outcome == DnsOutcome::kOk) FromAddresses(p, std::move(a), &out);
    return out;
  }
  DnsAnswer<DnsSrv> srv = resolver->LookupSrv(p.srv, stop);
  out.outcome = srv.outcome;
  out.detail = srv.detail;
  if (srv.outcome == DnsOutcome::kOk) FromSrv(p, srv, resolver, stop, &out);
  return out;
}

Discovery::Discovery(DiscoveryConfig config, Target target) : target_(std::move(target)) {
  for (DnsProviderConfig& c : config.providers) {
    auto p = std::make_unique<Provider>();
    p->name = c.name;
    p->config = std::move(c);
    providers_.push_back(std::move(p));
  }
  for (KubernetesProviderConfig& c : config.kubernetes) {
    auto p = std::make_unique<Provider>();
    p->name = c.name;
    p->kubernetes = true;
    p->k8s = std::move(c);
    providers_.push_back(std::move(p));
  }
}

Discovery::~Discovery() { Stop(); }

Status Discovery::Start() {
  for (auto& p : providers_) {
    if (p->kubernetes) {
      Provider* raw = p.get();
      KubernetesWatcher::Sink sink{
          [this, raw](const std::vector<DiscoveredEngine>& engines) { Publish(raw, engines); },
          [this, raw](KubeOutcome o, const std::string& detail) { Report(raw, o, detail); },
          [this, raw](const SkipCounts& skipped) {
            std::lock_guard<std::mutex> lock(mu_);
            for (size_t i = 0; i < kNumSkipReasons; ++i) raw->skipped[i] += skipped[i];
          }};
      p->watcher = std::make_unique<KubernetesWatcher>(p->k8s, std::move(sink));
      continue;
    }
    DnsResolver::Options o;
    o.nameserver = p->config.nameserver;
    o.timeout = milliseconds(p->config.timeout_ms);
    Result<std::unique_ptr<DnsResolver>> r = DnsResolver::Create(o);
    if (!r.ok()) return r.status().WithPrefix("discovery provider " + p->name + ": ");
    p->resolver = std::move(r.value());
  }
  thread_ = std::thread([this] { Run(); });
  for (auto& p : providers_) {
    if (p->watcher == nullptr) continue;
    if (Status s = p->watcher->Start(); !s.ok()) {
      Stop();
      return s;
    }
  }
  return Status::Ok();
}

void Discovery::Stop() {
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    stop_.store(true);
  }
  wake_.notify_all();
  for (auto& p : providers_) {
    if (p->watcher != nullptr) p->watcher->Stop();
  }
  if (thread_.joinable()) thread_.join();
}

Discovery::Clock::time_point Discovery::NextWake() const {
  // Bounded: a far deadline would overflow the condition variable's clock.
  Clock::time_point wake = Clock::now() + std::chrono::hours(1);
  for (const auto& p : providers_) {
    if (!p->kubernetes) wake = std::min(wake, p->next_due);
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (auto d = state_.NextDeadline()) wake = std::min(wake, *d);
  return wake;
}

void Discovery::Run() {
  while (!stop_.load()) {
    for (auto& p : providers_) {
      if (stop_.load()) return;
      if (!p->kubernetes && Clock::now() >= p->next_due) Resolve(p.get());
    }
    {
      std::lock_guard<std::mutex> apply(apply_mu_);
      DiscoveryActions expired;
      {
        std::lock_guard<std::mutex> lock(mu_);
        expired = state_.Expire(Clock::now());
      }
      for (const DiscoveryRemoval& r : expired.remove) ApplyRemove(r);
    }
    std::unique_lock<std::mutex> lock(wake_mu_);
    wake_.wait_until(lock, NextWake(), [this] { return stop_.load(); });
  }
}

Discovery::Provider* Discovery::FindProvider(std::string_view name) {
  for (auto& p : providers_) {
    if (p->name == name) return p.get();
  }
  return nullptr;
}

void Discovery::Resolve(Provider* p) {
  const DnsProviderConfig& c = p->config;
  ResolvedEngines r = ResolveEngines(c, p->resolver.get(), stop_);
  if (stop_.load()) return;
  const Clock::time_point now = Clock::now();
  milliseconds wait(c.interval_ms);
  if (r.outcome == DnsOutcome::kOk && r.ttl_seconds) wait = std::min(wait, milliseconds(*r.ttl_seconds * 1000LL));
  if (r.outcome != DnsOutcome::kOk) wait = milliseconds(c.min_interval_ms);
  p->next_due = now + std::max(wait, milliseconds(c.min_interval_ms));
  std::lock_guard<std::mutex> apply(apply_mu_);
  DiscoveryActions actions;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++p->resolutions[static_cast<size_t>(r.outcome)];
    if (r.outcome != DnsOutcome::kOk) {
      if (!p->stale) spdlog::warn("discovery {}: {} ({}); keeping the last good engine set", c.name,
                                  DnsOutcomeName(r.outcome), r.detail);
      p->stale = true;
      return;
    }
    if (p->stale) spdlog::info("discovery {}: resolving again ({} engines)", c.name, r.engines.size());
    p->stale = false;
    p->last_success = now;
    for (size_t i = 0; i < kNumSkipReasons; ++i) p->skipped[i] += r.skipped[i];
    const uint64_t conflicts = state_.Counts(c.name).conflicts;
    actions = state_.Update(c.name, milliseconds(c.grace_ms), r.engines, now);
    p->skipped[static_cast<size_t>(SkipReason::kConflict)] += state_.Counts(c.name).conflicts - conflicts;
  }
  Apply(p, actions);
}

void Discovery::ApplyRemove(const DiscoveryRemoval& r) {
  Status s = target_.remove(r.replica, r.provider);
  Provider* p = FindProvider(r.provider);
  if (!s.ok()) {
    // NotFound: an operator removed it meanwhile; FailedPrecondition: not
    // one discovery added. Either way nothing of discovery's is left.
    spdlog::info("discovery {}: engine {} not removed: {}", r.provider, r.replica, s.ToString());
    return;
  }
  spdlog::info("discovery {}: engine {} removed (gone from its provider for the grace period, or redefined)",
               r.provider, r.replica);
  std::lock_guard<std::mutex> lock(mu_);
  if (p == nullptr) return;
  ++p->removed;
  if (auto it = p->not_ready.find(r.replica); it != p->not_ready.end()) p->not_ready.erase(it);
  p->not_ready_count = p->not_ready.size();
}

void Discovery::Publish(Provider* p, const std::vector<DiscoveredEngine>& engines) {
  std::vector<EngineEntry> entries;
  entries.reserve(engines.size());
  std::unordered_set<std::string> not_ready;
  for (const DiscoveredEngine& e : engines) {
    entries.push_back(e.entry);
    if (!e.ready) not_ready.insert(e.entry.engine.replica);
  }
  std::lock_guard<std::mutex> apply(apply_mu_);
  DiscoveryActions actions;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const uint64_t conflicts = state_.Counts(p->name).conflicts;
    actions = state_.Update(p->name, milliseconds(p->k8s.grace_ms), entries, Clock::now());
    p->skipped[static_cast<size_t>(SkipReason::kConflict)] += state_.Counts(p->name).conflicts - conflicts;
  }
  Apply(p, actions, not_ready);
  SyncReadiness(p, engines);
  // A grace period may have started: the DNS thread ends it.
  wake_.notify_all();
}

void Discovery::SyncReadiness(Provider* p, const std::vector<DiscoveredEngine>& engines) {
  for (const DiscoveredEngine& e : engines) {
    const std::string& replica = e.entry.engine.replica;
    const bool marked = p->not_ready.contains(replica);
    if (marked != e.ready) continue;  // the node already has it so
    // Refused when the engine is not the provider's (a conflict, a refused add).
    if (!target_.ready(replica, p->name, e.ready).ok()) continue;
    if (e.ready) {
      p->not_ready.erase(p->not_ready.find(replica));
    } else {
      p->not_ready.insert(replica);
    }
    spdlog::info("discovery {}: engine {} is {}", p->name, replica, e.ready ? "ready" : "not ready");
  }
  std::lock_guard<std::mutex> lock(mu_);
  p->not_ready_count = p->not_ready.size();
}

void Discovery::Report(Provider* p, KubeOutcome outcome, const std::string& detail) {
  (void)detail;  // logged by the watcher, once per outage
  std::lock_guard<std::mutex> lock(mu_);
  ++p->resolutions[static_cast<size_t>(outcome)];
  if (outcome == KubeOutcome::kOk) {
    p->stale = false;
    p->last_success = Clock::now();
  } else if (outcome != KubeOutcome::kGone) {
    p->stale = true;
  }
}

void Discovery::Apply(Provider* p, const DiscoveryActions& actions, const std::unordered_set<std::string>& not_ready) {
  for (const DiscoveryRemoval& r : actions.remove) ApplyRemove(r);
  for (const EngineEntry& e : actions.add) {
    const std::string& replica = e.engine.replica;
    const bool ready = !not_ready.contains(replica);
    Status s = target_.add(e, p->name, ready);
    std::lock_guard<std::mutex> lock(mu_);
    if (s.ok()) {
      ++p->added;
      if (ready) {
        p->not_ready.erase(replica);
      } else {
        p->not_ready.insert(replica);
        spdlog::info("discovery {}: engine {} is not ready", p->name, replica);
      }
      p->not_ready_count = p->not_ready.size();
      continue;
    }
    // Refused (its replica or stream belongs to a configured engine, ...):
    // forgotten, so the next answer listing it tries again.
    if (p->add_errors++ == 0 || s.code() != StatusCode::kFailedPrecondition) {
      spdlog::warn("discovery {}: engine {} not added: {}", p->name, e.engine.replica, s.ToString());
    }
    state_.Forget(e.engine.replica);
  }
}

void Discovery::RenderMetrics(std::vector<MetricSample>* out) const {
  namespace m = metric;
  auto add = [&](const MetricFamily& f, double v, std::vector<std::pair<std::string, std::string>> labels) {
    out->push_back(MetricSample{&f, std::move(labels), v});
  };
  auto d = [](uint64_t v) { return static_cast<double>(v); };
  const Clock::time_point now = Clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& p : providers_) {
    const std::string& name = p->name;
    const DiscoveryState::ProviderCounts c = state_.Counts(name);
    const size_t not_ready = std::min(p->not_ready_count, c.active + c.grace);
    add(m::kDiscoveryEngines, d(c.active - std::min(c.active, not_ready)), {{"provider", name}, {"state", "active"}});
    add(m::kDiscoveryEngines, d(not_ready), {{"provider", name}, {"state", "not_ready"}});
    add(m::kDiscoveryEngines, d(c.grace), {{"provider", name}, {"state", "grace"}});
    const size_t outcomes = p->kubernetes ? kNumKubeOutcomes : kNumDnsOutcomes;
    for (size_t i = 0; i < outcomes; ++i) {
      const std::string_view result = p->kubernetes ? KubeOutcomeName(static_cast<KubeOutcome>(i))
                                                    : DnsOutcomeName(static_cast<DnsOutcome>(i));
      add(m::kDiscoveryResolutions, d(p->resolutions[i]), {{"provider", name}, {"result", std::string(result)}});
    }
    for (size_t i = 0; i < kNumSkipReasons; ++i) {
      add(m::kDiscoverySkippedRecords, d(p->skipped[i]),
          {{"provider", name}, {"reason", std::string(SkipReasonName(static_cast<SkipReason>(i)))}});
    }
    const double age = p->last_success ? std::chrono::duration<double>(now - *p->last_success).count() : -1.0;
    add(m::kDiscoveryLastSuccessAge, age, {{"provider", name}});
    add(m::kDiscoveryStale, p->stale ? 1 : 0, {{"provider", name}});
    add(m::kDiscoveryEnginesAdded, d(p->added), {{"provider", name}});
    add(m::kDiscoveryEnginesRemoved, d(p->removed), {{"provider", name}});
    add(m::kDiscoveryAddErrors, d(p->add_errors), {{"provider", name}});
  }
}

}  // namespace kvidx::server
