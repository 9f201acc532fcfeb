#include "tools/sim/timed_run.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <memory>
#include <queue>
#include <span>
#include <thread>
#include <unordered_map>

#include "tools/sim/fidelity.h"
#include "tools/sim/fleet_policies.h"
#include "tools/sim/metrics_endpoint.h"

namespace kvidx::sim {
namespace {

using Clock = std::chrono::steady_clock;

enum class EvKind : uint8_t { kArrival, kEnqueue, kStepEnd, kJoin, kScrapeTick };

struct Ev {
  double t = 0;
  uint64_t seq = 0;
  EvKind kind = EvKind::kArrival;
  size_t a = 0;  // request index (arrival), flight id (enqueue), rank (step end)
  bool operator>(const Ev& o) const { return t != o.t ? t > o.t : seq > o.seq; }
};

// One routed request.
struct Flight {
  size_t req = 0;
  size_t rank = 0;
  RouteDecision decision;
  uint64_t blocks = 0;
  uint64_t uncached_blocks = 0;   // the router's estimate (Dynamo's prefill blocks)
  bool first_token = false;
  uint32_t cached_tokens = 0;     // the engine's hit at scheduling (vLLM's usage.cached_tokens)
  // The prompt, generated and hashed once at routing for the engine's use.
  std::vector<int64_t> tokens;
  std::vector<BlockKey> keys;
};

bool NeedsKvidx(const std::string& policy) {
  return policy != "random" && policy != "round-robin" && policy != "least-loaded";
}

// Only Route reads the load kvidx scrapes; the peers' policies get their
// engine numbers as fleet_policies.h states.
bool ScrapesLoad(const TimedRunOptions& o) { return o.policy == "kvidx" && o.scrape_interval_s > 0; }

class Loop {
 public:
  Loop(const TimedRunOptions& o, const std::vector<TimedRequest>& reqs, const client::Client& kvidx)
      : o_(o), reqs_(reqs), kvidx_(kvidx) {}

  Result<TimedReport> Run();

 private:
  class RankAdapter : public EngineModelDelegate {
   public:
    RankAdapter(Loop* loop, size_t rank) : loop_(loop), rank_(rank) {}
    uint32_t Schedule(const EngineRequest& r) override { return loop_->OnSchedule(rank_, r); }
    void Computing(const EngineRequest& r, uint32_t through) override { loop_->OnComputing(rank_, r, through); }
    void StepEnded() override { loop_->OnStepEnded(rank_); }
    void FirstToken(const EngineRequest& r, double now, uint32_t cached) override { loop_->OnFirstToken(r, now, cached); }
    void Finished(const EngineRequest& r, double now) override { loop_->OnFinished(r, now); }

   private:
    Loop* loop_;
    size_t rank_;
  };

  Status Setup();
  Status Teardown();
  void Push(double t, EvKind kind, size_t a) { events_.push({t, next_seq_++, kind, a}); }
  Status Handle(const Ev& e);
  Status OnArrival(size_t req, double now);
  Status OnJoin(double now);
  void StartStepIfIdle(size_t rank, double now);
  Status CatchUp();
  Status ProbeServerClock();
  Status SyncClock(double now);
  Status PublishGauges(double now);
  Status OnScrapeTick(double now);
  Status AwaitScrape();
  std::vector<CandidateView> Candidates() const;
  void TrackShare(size_t rank, double now);

  uint32_t OnSchedule(size_t rank, const EngineRequest& r);
  void OnComputing(size_t rank, const EngineRequest& r, uint32_t through);
  void OnStepEnded(size_t rank);
  void OnFirstToken(const EngineRequest& r, double now, uint32_t cached);
  void OnFinished(const EngineRequest& r, double now);

  const TimedRunOptions& o_;
  const std::vector<TimedRequest>& reqs_;
  const client::Client& kvidx_;
  std::unique_ptr<Fleet> fleet_;
  std::unique_ptr<FleetPolicy> policy_;
  std::unique_ptr<MetricsEndpoint> metrics_;  // ScrapesLoad only
  bool scrape_pending_ = false;               // published since the last AwaitScrape
  // routing.clock: simulated (rep_.server_clock): the server's simulated
  // microseconds when the run began (the first arrival's time), and the
  // last time sent to it.
  uint64_t clock_base_us_ = 0, clock_sent_us_ = 0;
  std::vector<std::unique_ptr<RankAdapter>> adapters_;
  std::vector<std::unique_ptr<EngineModel>> engines_;
  std::vector<uint32_t> in_flight_;
  std::vector<uint64_t> prefill_blocks_, active_blocks_;
  std::vector<uint64_t> published_next_;   // per rank: next seq after the last publication
  bool unsynced_ = false;                  // published since the last catch-up
  size_t late_first_rank_ = SIZE_MAX;      // first rank of the replica that joins late
  bool joined_ = true;
  double join_time_ = 0;
  std::deque<bool> recent_;                // routed to the late replica? (sliding window)
  size_t recent_late_ = 0;
  std::unordered_map<uint64_t, Flight> flights_;
  uint64_t next_flight_ = 1;
  std::map<uint32_t, uint32_t> burst_computed_;
  std::priority_queue<Ev, std::vector<Ev>, std::greater<Ev>> events_;
  uint64_t next_seq_ = 0;
  std::vector<BlockKey> keys_;
  Status failure_;
  TimedReport rep_;
};

Status Loop::Setup() {
  FleetOptions fo = o_.fleet;
  fo.replica_prefix = o_.policy + "-";
  Result<std::unique_ptr<Fleet>> fleet = Fleet::Create(fo);
  if (!fleet.ok()) return fleet.status();
  fleet_ = std::move(fleet).value();
  std::function<std::string(const std::string&)> metrics_url;
  if (ScrapesLoad(o_)) {
    Result<std::unique_ptr<MetricsEndpoint>> m = MetricsEndpoint::Start(fo.model);
    if (!m.ok()) return m.status();
    metrics_ = std::move(m).value();
    metrics_url = [this](const std::string& replica) { return metrics_->Url(replica); };
  }
  if (o_.policy == "kvidx") {
    if (Status s = ProbeServerClock(); !s.ok()) return s;
  }
  if (Status s = RegisterEngines(*fleet_, kvidx_, true, metrics_url); !s.ok()) return s;
  if (Status s = WarmUp(*fleet_, kvidx_, o_.catch_up_timeout); !s.ok()) return s;
  Result<std::unique_ptr<FleetPolicy>> p = MakeFleetPolicy(o_.policy, &kvidx_, fo.model, o_.seed);
  if (!p.ok()) return p.status();
  policy_ = std::move(p).value();
  EngineModelOptions eo = o_.engine;
  eo.block_size = static_cast<uint32_t>(fo.hasher.block_size);
  eo.kv_blocks = fo.blocks_per_rank;
  const size_t n = fleet_->size();
  for (size_t i = 0; i < n; ++i) {
    fleet_->rank(i).HoldBatches(true);
    adapters_.push_back(std::make_unique<RankAdapter>(this, i));
    engines_.push_back(std::make_unique<EngineModel>(eo, adapters_.back().get()));
    published_next_.push_back(fleet_->rank(i).publisher().next_seq());
  }
  in_flight_.assign(n, 0);
  prefill_blocks_.assign(n, 0);
  active_blocks_.assign(n, 0);
  rep_.rank_requests.assign(n, 0);
  rep_.rank_prefill_tokens.assign(n, 0);
  if (o_.join_at >= 0 && fo.replicas > 1) {
    late_first_rank_ = n - static_cast<size_t>(fo.dp);
    joined_ = false;
    Push(o_.join_at, EvKind::kJoin, 0);
  }
  return Status::Ok();
}

Status Loop::Teardown() {
  Status first;
  for (const EngineDesc& e : fleet_->engines()) {
    if (grpc::Status s = kvidx_.RemoveEngine(e.replica); !s.ok() && first.ok()) first = FromGrpc(s, "RemoveEngine");
  }
  return first;
}

std::vector<CandidateView> Loop::Candidates() const {
  std::vector<CandidateView> out;
  for (size_t i = 0; i < fleet_->size(); ++i) {
    if (!joined_ && i >= late_first_rank_) continue;
    CandidateView v;
    v.rank = i;
    v.replica = fleet_->engines()[fleet_->replica_of(i)].replica;
    v.dp_rank = fleet_->dp_of(i);
    v.waiting = engines_[i]->waiting();
    v.running = engines_[i]->running();
    v.kv_usage = engines_[i]->kv_usage();
    v.in_flight = in_flight_[i];
    v.prefill_blocks = prefill_blocks_[i];
    v.active_blocks = active_blocks_[i];
    out.push_back(std::move(v));
  }
  return out;
}

// Waits until kvidx has applied every batch published so far.
Status Loop::CatchUp() {
  if (!unsynced_) return Status::Ok();
  ++rep_.kvidx_waits;
  const auto deadline = Clock::now() + o_.catch_up_timeout;
  for (;;) {
    Result<std::map<std::string, SourceView>> src = ListSources(*fleet_, kvidx_);
    if (!src.ok()) return src.status();
    bool behind = false;
    for (size_t i = 0; i < fleet_->size() && !behind; ++i) {
      if (published_next_[i] == 0) continue;
      auto it = src->find(fleet_->source_name(i));
      behind = it == src->end() || !it->second.has_seq || it->second.last_seq + 1 < published_next_[i];
    }
    if (!behind) break;
    if (Clock::now() >= deadline) return Status::Unavailable("kvidx did not catch up with the simulated fleet");
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  unsynced_ = false;
  return Status::Ok();
}

// A server with routing.clock: simulated answers AdvanceClock; one on the
// wall clock refuses it (a server older than the call does not know it),
// and Route then runs on wall time.
Status Loop::ProbeServerClock() {
  uint64_t now_us = 0;
  grpc::Status s = kvidx_.AdvanceClock(0, &now_us);
  if (s.error_code() == grpc::StatusCode::FAILED_PRECONDITION ||
      s.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
    return Status::Ok();
  }
  if (!s.ok()) return FromGrpc(s, "AdvanceClock");
  rep_.server_clock = true;
  clock_base_us_ = clock_sent_us_ = now_us;
  return Status::Ok();
}

// Moves the server's route clock to simulated time `now` (whole
// microseconds since the first arrival, so every run sends the same steps).
Status Loop::SyncClock(double now) {
  if (!rep_.server_clock) return Status::Ok();
  const double since = std::max(0.0, now - reqs_.front().arrival);
  const uint64_t target = clock_base_us_ + static_cast<uint64_t>(std::llround(since * 1e6));
  if (target <= clock_sent_us_) return Status::Ok();
  if (grpc::Status s = kvidx_.AdvanceClock(target - clock_sent_us_, nullptr); !s.ok()) {
    return FromGrpc(s, "AdvanceClock");
  }
  clock_sent_us_ = target;
  return Status::Ok();
}

// The engines' gauges as /metrics shows them until the next publication.
// On simulated time kvidx scrapes them at once, stamped `now`; otherwise
// the next decision waits for its background scraper (AwaitScrape).
Status Loop::PublishGauges(double now) {
  std::map<std::string, std::vector<RankGauges>> pages;
  for (size_t i = 0; i < fleet_->size(); ++i) {
    if (!joined_ && i >= late_first_rank_) continue;
    const std::string& replica = fleet_->engines()[fleet_->replica_of(i)].replica;
    pages[replica].push_back({static_cast<uint32_t>(fleet_->dp_of(i)), engines_[i]->running(),
                              engines_[i]->waiting(), engines_[i]->kv_usage()});
  }
  metrics_->Publish(pages);
  if (!rep_.server_clock) {
    scrape_pending_ = true;
    return Status::Ok();
  }
  if (Status s = SyncClock(now); !s.ok()) return s;
  v1::ScrapeLoadsResponse resp;
  if (grpc::Status s = kvidx_.ScrapeLoads(&resp); !s.ok()) return FromGrpc(s, "ScrapeLoads");
  // A replica that has not joined yet has no page (kvidx counts the
  // failure); none scraped at all means kvidx cannot reach the pages.
  if (resp.targets() > 0 && resp.failed() == resp.targets()) {
    return Status::Unavailable("kvidx failed to scrape all " + std::to_string(resp.targets()) +
                               " simulated /metrics pages");
  }
  return Status::Ok();
}

Status Loop::OnScrapeTick(double now) {
  // Ticks only while something else is due: the last one ends the run.
  if (!events_.empty()) Push(now + o_.scrape_interval_s, EvKind::kScrapeTick, 0);
  return PublishGauges(now);
}

// kvidx decides on the latest published gauges, whatever the wall clock.
Status Loop::AwaitScrape() {
  if (!metrics_ || !scrape_pending_) return Status::Ok();
  ++rep_.scrape_waits;
  if (Status s = metrics_->WaitScraped(o_.catch_up_timeout); !s.ok()) return s;
  scrape_pending_ = false;
  return Status::Ok();
}

Status Loop::OnArrival(size_t ri, double now) {
  const TimedRequest& r = reqs_[ri];
  std::vector<int64_t> tokens = PromptTokens(r);
  std::vector<BlockKey> keys = fleet_->Keys(tokens);
  const uint64_t blocks = keys.size();
  keys_.assign(keys.begin(), keys.begin() + std::min<size_t>(keys.size(), o_.max_query_blocks));
  if (NeedsKvidx(o_.policy)) {
    if (Status s = CatchUp(); !s.ok()) return s;
    if (Status s = AwaitScrape(); !s.ok()) return s;
    if (Status s = SyncClock(now); !s.ok()) return s;
  }
  const std::vector<CandidateView> cands = Candidates();
  RouteInput in;
  in.keys = &keys_;
  in.prompt_tokens = r.prompt_tokens;
  in.output_tokens = r.output_tokens;
  in.n = r.n;
  in.block_size = static_cast<uint32_t>(fleet_->options().hasher.block_size);
  in.request_id = ri;
  Result<RouteDecision> d = policy_->Choose(in, cands);
  if (!d.ok()) return d.status();
  Flight f;
  f.req = ri;
  f.rank = cands[d->candidate].rank;
  f.decision = d.value();
  f.blocks = blocks;
  f.uncached_blocks = blocks - std::min<uint64_t>(blocks, d->overlap_blocks);
  f.tokens = std::move(tokens);
  f.keys = std::move(keys);
  ++in_flight_[f.rank];
  prefill_blocks_[f.rank] += f.uncached_blocks;
  active_blocks_[f.rank] += f.blocks;
  ++rep_.rank_requests[f.rank];
  TrackShare(f.rank, now);
  const uint64_t id = next_flight_++;
  flights_.emplace(id, f);
  Push(now + o_.ingress_s, EvKind::kEnqueue, id);
  return Status::Ok();
}

// The late replica's share of the last few decisions (one per rank).
void Loop::TrackShare(size_t rank, double now) {
  if (late_first_rank_ == SIZE_MAX || !joined_ || rep_.join_to_half_share_s >= 0) return;
  const size_t window = 4 * fleet_->size();
  const bool late = rank >= late_first_rank_;
  recent_.push_back(late);
  recent_late_ += late;
  if (recent_.size() > window) {
    recent_late_ -= recent_.front();
    recent_.pop_front();
  }
  const double fair = 1.0 / fleet_->options().replicas;
  if (recent_.size() == window && static_cast<double>(recent_late_) / window >= fair / 2) {
    rep_.join_to_half_share_s = now - join_time_;
  }
}

Status Loop::OnJoin(double now) {
  // A scaled-up replica is a new engine to kvidx: registered when it comes up.
  const EngineDesc& e = fleet_->engines().back();
  if (grpc::Status s = kvidx_.RemoveEngine(e.replica); !s.ok()) return FromGrpc(s, "RemoveEngine " + e.replica);
  const std::string url = metrics_ ? metrics_->Url(e.replica) : std::string();
  if (Status s = RegisterEngine(e, kvidx_, true, url); !s.ok()) return s;
  joined_ = true;
  join_time_ = now;
  if (metrics_) {
    if (Status s = PublishGauges(now); !s.ok()) return s;
  }
  for (size_t i = late_first_rank_; i < fleet_->size(); ++i) published_next_[i] = 0;
  return WaitConnected(*fleet_, kvidx_, o_.catch_up_timeout);
}

void Loop::StartStepIfIdle(size_t rank, double now) {
  EngineModel& e = *engines_[rank];
  if (e.busy() || !e.has_work()) return;
  Push(e.StartStep(now), EvKind::kStepEnd, rank);
}

uint32_t Loop::OnSchedule(size_t rank, const EngineRequest& r) {
  return static_cast<uint32_t>(fleet_->rank(rank).CachedPrefix(flights_.at(r.id).keys));
}

// The chunk's blocks are cached (and their events held for the step's end)
// by serving the prompt up to it: what is already cached is a hit, the rest
// is stored with the last hit as parent, as vLLM announces a chunk.
void Loop::OnComputing(size_t rank, const EngineRequest& r, uint32_t through) {
  const std::vector<int64_t>& tokens = flights_.at(r.id).tokens;
  const std::span<const int64_t> chunk(tokens.data(), std::min<size_t>(tokens.size(), through));
  Result<ServeResult> served = fleet_->rank(rank).Serve(chunk, false);
  if (!served.ok() && failure_.ok()) failure_ = served.status();
}

void Loop::OnStepEnded(size_t rank) {
  if (fleet_->rank(rank).PublishHeld()) {
    published_next_[rank] = fleet_->rank(rank).publisher().next_seq();
    unsynced_ = true;
  }
}

void Loop::OnFirstToken(const EngineRequest& r, double now, uint32_t cached) {
  Flight& f = flights_.at(r.id);
  const TimedRequest& req = reqs_[f.req];
  f.first_token = true;
  f.cached_tokens = cached;
  prefill_blocks_[f.rank] -= f.uncached_blocks;
  rep_.ttft_s.push_back(now - req.arrival);
  rep_.prompt_tokens += req.prompt_tokens;
  rep_.cached_tokens += cached;
  rep_.rank_prefill_tokens[f.rank] += req.prompt_tokens - cached;
  if (req.burst != 0) {
    const uint32_t bs = static_cast<uint32_t>(fleet_->options().hasher.block_size);
    const uint32_t usable = (req.prompt_tokens - 1) / bs * bs;
    if (cached < usable) ++burst_computed_[req.burst];
    else burst_computed_.emplace(req.burst, 0);
  }
}

void Loop::OnFinished(const EngineRequest& r, double now) {
  auto it = flights_.find(r.id);
  const Flight& f = it->second;
  const TimedRequest& req = reqs_[f.req];
  --in_flight_[f.rank];
  active_blocks_[f.rank] -= f.blocks;
  rep_.output_tokens += req.output_tokens;
  rep_.makespan_s = std::max(rep_.makespan_s, now - reqs_.front().arrival);
  ++rep_.requests;
  Status s = SyncClock(now);
  if (s.ok()) s = policy_->Done(f.decision, req.prompt_tokens, f.cached_tokens);
  if (!s.ok() && failure_.ok()) failure_ = s;
  flights_.erase(it);
}

Status Loop::Handle(const Ev& e) {
  switch (e.kind) {
    case EvKind::kArrival:
      return OnArrival(e.a, e.t);
    case EvKind::kJoin:
      return OnJoin(e.t);
    case EvKind::kScrapeTick:
      return OnScrapeTick(e.t);
    case EvKind::kEnqueue: {
      const Flight& f = flights_.at(e.a);
      const TimedRequest& r = reqs_[f.req];
      engines_[f.rank]->Enqueue({e.a, r.prompt_tokens, r.output_tokens}, e.t);
      StartStepIfIdle(f.rank, e.t);
      return Status::Ok();
    }
    case EvKind::kStepEnd:
      engines_[e.a]->FinishStep(e.t);
      StartStepIfIdle(e.a, e.t);
      return Status::Ok();
  }
  return Status::Ok();
}

Result<TimedReport> Loop::Run() {
  const auto wall0 = Clock::now();
  rep_.policy = o_.policy;
  if (Status s = Setup(); !s.ok()) return s;
  for (size_t i = 0; i < reqs_.size(); ++i) Push(reqs_[i].arrival, EvKind::kArrival, i);
  Status s;
  if (metrics_) s = OnScrapeTick(reqs_.front().arrival);
  while (!events_.empty() && s.ok() && failure_.ok()) {
    const Ev e = events_.top();
    events_.pop();
    s = Handle(e);
  }
  if (s.ok()) s = failure_;
  Status down = Teardown();
  if (!s.ok()) return s;
  if (!down.ok()) return down;
  for (const auto& [burst, computed] : burst_computed_) {
    ++rep_.bursts;
    rep_.burst_computations += computed;
  }
  rep_.wall_s = std::chrono::duration<double>(Clock::now() - wall0).count();
  return rep_;
}

}  // namespace

double TimedReport::Percentile(double p) const {
  if (ttft_s.empty()) return 0;
  std::vector<double> v = ttft_s;
  const size_t k = std::min(v.size() - 1, static_cast<size_t>(p / 100.0 * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<ptrdiff_t>(k), v.end());
  return v[k];
}

double TimedReport::imbalance() const {
  if (rank_prefill_tokens.empty()) return 0;
  uint64_t sum = 0, max = 0;
  for (uint64_t t : rank_prefill_tokens) {
    sum += t;
    max = std::max(max, t);
  }
  return sum == 0 ? 0 : static_cast<double>(max) * static_cast<double>(rank_prefill_tokens.size()) / sum;
}

Result<TimedReport> RunTimed(const TimedRunOptions& options, const std::vector<TimedRequest>& requests,
                             const client::Client& kvidx) {
  if (requests.empty()) return Status::InvalidArgument("no requests");
  Loop loop(options, requests, kvidx);
  return loop.Run();
}

}  // namespace kvidx::sim
