#include "tools/sim/runner.h"

#include <algorithm>
#include <cmath>
#include <thread>

namespace kvidx::sim {

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

constexpr double kLoadDecay = 0.99;  // per request routed anywhere

}  // namespace

Result<std::vector<ScaleStep>> ParseScaleSteps(const std::string& text) {
  std::vector<ScaleStep> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    std::string step = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    size_t colon = step.find(':');
    auto digits = [](const std::string& s) {
      return !s.empty() && s.size() <= 18 && s.find_first_not_of("0123456789") == std::string::npos;
    };
    if (colon == std::string::npos || !digits(step.substr(0, colon)) || !digits(step.substr(colon + 1))) {
      return Status::InvalidArgument("scale step \"" + step + "\": expected AT:REPLICAS (two integers)");
    }
    ScaleStep s;
    s.at = std::stoull(step.substr(0, colon));
    uint64_t replicas = std::stoull(step.substr(colon + 1));
    if (replicas < 1 || replicas > 1000) {
      return Status::InvalidArgument("scale step \"" + step + "\": replicas must be in [1, 1000]");
    }
    s.replicas = static_cast<int>(replicas);
    if (!out.empty() && s.at <= out.back().at) {
      return Status::InvalidArgument("scale step \"" + step + "\": steps must be in increasing order of AT");
    }
    out.push_back(s);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

const char* RoutingName(Routing r) { return r == Routing::kKvidx ? "kvidx" : "random"; }

Runner::Runner(Fleet* fleet, const client::Client* kvidx)
    : fleet_(fleet),
      kvidx_(kvidx),
      rng_(fleet->options().seed * 7919 + 17),
      sampler_(512, static_cast<uint32_t>(fleet->options().hasher.block_size), fleet->options().seed + 99),
      load_(fleet->size(), 0.0),
      load_tick_(fleet->size(), 0) {}

double Runner::Load(size_t i) const {
  return load_[i] * std::pow(kLoadDecay, static_cast<double>(tick_ - load_tick_[i]));
}

void Runner::AddLoad(size_t i) {
  load_[i] = Load(i) + 1.0;
  load_tick_[i] = tick_;
}

size_t Runner::Route(const std::vector<int64_t>& tokens, Routing routing, PhaseReport* report) {
  const size_t n = fleet_->size();
  if (routing == Routing::kRandom) return static_cast<size_t>(rng_() % n);

  auto t0 = Clock::now();
  resp_.Clear();
  grpc::Status s = kvidx_->FindPrefixTokens(fleet_->options().model, tokens, client::TokenOptions{}, &resp_);
  report->query_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  ++report->routing_queries;
  if (!s.ok()) {
    ++report->routing_errors;
    return static_cast<size_t>(rng_() % n);
  }
  uint32_t best = 0;
  candidates_.clear();
  for (const v1::ReplicaMatch& m : resp_.replicas()) {
    std::optional<size_t> i = fleet_->IndexOf(m.replica(), m.dp_rank());
    if (!i || m.matched_blocks() == 0 || m.matched_blocks() < best) continue;
    if (m.matched_blocks() > best) {
      best = m.matched_blocks();
      candidates_.clear();
    }
    candidates_.push_back(*i);
  }
  if (candidates_.empty()) {
    candidates_.resize(n);
    for (size_t i = 0; i < n; ++i) candidates_[i] = i;
  }
  // Least loaded among the candidates, ties at random.
  double low = 0;
  size_t pick = candidates_[0], ties = 0;
  for (size_t c : candidates_) {
    double l = Load(c);
    if (ties == 0 || l < low - 1e-9) {
      low = l;
      pick = c;
      ties = 1;
    } else if (std::abs(l - low) <= 1e-9 && rng_() % ++ties == 0) {
      pick = c;
    }
  }
  return pick;
}

Status Runner::Scale(int replicas) {
  if (Status s = fleet_->ScaleTo(replicas); !s.ok()) return s;
  // Ranks were renumbered: the load estimate starts over.
  load_.assign(fleet_->size(), 0.0);
  load_tick_.assign(fleet_->size(), tick_);
  return on_scale_ ? on_scale_() : Status::Ok();
}

Status Runner::Checkpoint(size_t samples, std::chrono::milliseconds timeout, PhaseReport* report) {
  Result<size_t> settled = fleet_->Settle();
  if (!settled.ok()) return settled.status();
  report->settle_requests += settled.value();
  Status caught = WaitCaughtUp(*fleet_, *kvidx_, timeout);
  if (!caught.ok() && report->catch_up_error.empty()) report->catch_up_error = caught.ToString();
  ++report->checks;
  if (samples == 0) return Status::Ok();
  Result<FidelityResult> f = MeasureFidelity(*fleet_, *kvidx_, sampler_.Draw(samples));
  if (!f.ok()) return f.status();
  report->fidelity_queries += f->queries;
  report->fidelity.Add(f.value());
  return Status::Ok();
}

Result<PhaseReport> Runner::Run(const PhaseOptions& o, const ProgressFn& progress) {
  if (o.requests == 0 && o.duration_seconds <= 0) return Status::InvalidArgument("a phase needs requests or a duration");
  if (Status s = ValidateWorkload(o.workload); !s.ok()) return s;
  PhaseReport rep;
  rep.name = o.name;
  rep.routing = o.routing;
  Workload workload(o.workload);
  std::mt19937_64 frng(o.seed);
  std::uniform_real_distribution<double> u(0, 1);

  const uint64_t batches0 = fleet_->batches_published(), events0 = fleet_->events_published();
  const uint64_t dropped0 = fleet_->batches_dropped(), restarts0 = fleet_->restarts();
  const auto start = Clock::now();
  Clock::duration excluded{0};  // checkpoints and pauses
  auto last_progress = start;
  uint64_t last_events = events0, last_queries = 0;

  auto report_progress = [&](bool force) {
    auto now = Clock::now();
    if (!progress || (!force && now - last_progress < std::chrono::seconds(1))) return;
    double dt = std::max(Seconds(now - last_progress), 1e-6);
    uint64_t ev = fleet_->events_published();
    uint64_t q = rep.routing_queries + rep.fidelity_queries;
    PhaseReport snap = rep;
    if (!force) {
      snap.events_published = ev - events0;
      snap.seconds = Seconds(now - start - excluded);
    }
    progress(snap, static_cast<double>(ev - last_events) / dt, static_cast<double>(q - last_queries) / dt);
    last_progress = now;
    last_events = ev;
    last_queries = q;
  };

  for (uint64_t i = 0;; ++i) {
    auto now = Clock::now();
    if (o.requests != 0 && i >= o.requests) break;
    if (o.duration_seconds > 0 && Seconds(now - start - excluded) >= o.duration_seconds) break;
    const uint64_t global = o.first_request + i;

    if (o.pause_at && *o.pause_at == global && o.pause_seconds > 0) {
      auto p0 = Clock::now();
      while (Seconds(Clock::now() - p0) < o.pause_seconds) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        report_progress(false);
      }
      excluded += Clock::now() - p0;
      ++rep.pauses;
    }
    for (const ScaleStep& step : o.scale_at) {
      if (step.at != global) continue;
      if (Status s = Scale(step.replicas); !s.ok()) return s;
      ++rep.scale_steps;
    }
    if (o.restart_at && *o.restart_at == global) {
      if (Status s = fleet_->Restart(o.restart_rank % fleet_->size()); !s.ok()) return s;
    }
    if (o.rate > 0) {
      auto due = start + excluded + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(static_cast<double>(i) / o.rate));
      if (due > Clock::now()) std::this_thread::sleep_until(due);
    }

    const std::vector<int64_t>& tokens = workload.Next();
    size_t target = Route(tokens, o.routing, &rep);
    ++tick_;
    AddLoad(target);
    bool drop = o.drop_rate > 0 && u(frng) < o.drop_rate;
    bool full = o.full_report > 0 && u(frng) < o.full_report;
    Result<ServeResult> r = fleet_->Serve(target, tokens, full, drop);
    if (!r.ok()) return r.status();
    rep.prompt_blocks += r->full_blocks;
    rep.hit_blocks += std::min(r->hit_blocks, r->full_blocks);
    ++rep.requests;
    sampler_.Observe(tokens);

    if (o.check_every != 0 && (i + 1) % o.check_every == 0) {
      auto c0 = Clock::now();
      if (Status s = Checkpoint(o.samples, o.catch_up_timeout, &rep); !s.ok()) return s;
      excluded += Clock::now() - c0;
    }
    report_progress(false);
  }
  rep.seconds = Seconds(Clock::now() - start - excluded);
  if (o.final_check && (o.check_every == 0 || rep.requests % o.check_every != 0)) {
    if (Status s = Checkpoint(o.samples, o.catch_up_timeout, &rep); !s.ok()) return s;
  }
  rep.batches_published = fleet_->batches_published() - batches0;
  rep.events_published = fleet_->events_published() - events0;
  rep.batches_dropped = fleet_->batches_dropped() - dropped0;
  rep.restarts = fleet_->restarts() - restarts0;
  rep.wall_seconds = Seconds(Clock::now() - start);
  report_progress(true);
  return rep;
}

}  // namespace kvidx::sim
