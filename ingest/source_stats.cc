#include "ingest/source_stats.h"

#include <algorithm>
#include <chrono>

namespace kvidx::ingest {

std::string_view ReplayResultName(ReplayResult r) {
  switch (r) {
    case ReplayResult::kOk: return "ok";
    case ReplayResult::kPartial: return "partial";
    case ReplayResult::kTimeout: return "timeout";
    case ReplayResult::kUnavailable: return "unavailable";
  }
  return "unknown";
}

std::string_view ErrorReasonLabel(size_t reason) {
  if (reason < 8) return DecodeErrorReasonLabel(static_cast<DecodeErrorReason>(reason));
  switch (reason) {
    case static_cast<size_t>(IngestErrorReason::kTopicMismatch): return "topic_mismatch";
    case static_cast<size_t>(IngestErrorReason::kReplayFrame): return "replay_frame";
  }
  return "unknown";
}

uint64_t SourceStats::decode_error_total() const {
  uint64_t n = 0;
  for (const auto& c : decode_errors) n += c.load(std::memory_order_relaxed);
  return n;
}

double WallNowSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

const std::vector<MetricFamilyInfo>& IngestMetricFamilies() {
  using K = MetricSample::Kind;
  static const std::vector<MetricFamilyInfo> kFamilies = {
      {"kvidx_batches_total", K::kCounter, "KV-event batches applied, live and replayed."},
      {"kvidx_events_total", K::kCounter, "KV events applied, by type."},
      {"kvidx_seq_gaps_total", K::kCounter, "Live sequence gaps detected (seq > last + 1)."},
      {"kvidx_batches_replayed_total", K::kCounter, "Batches applied from a replay reply."},
      {"kvidx_replay_requests_total", K::kCounter,
       "Replay requests by result (ok | partial | timeout | unavailable)."},
      {"kvidx_batches_lost_total", K::kCounter, "Batches that could not be recovered."},
      {"kvidx_seq_implausible_total", K::kCounter,
       "Batches dropped as a protocol error: their seq jumped further ahead than any engine publishes."},
      {"kvidx_duplicate_batches_total", K::kCounter, "Batches dropped because already applied."},
      {"kvidx_engine_restarts_total", K::kCounter, "Engine restarts detected (sequence went backwards)."},
      {"kvidx_decode_errors_total", K::kCounter, "Messages that could not be decoded, by reason."},
      {"kvidx_unknown_events_total", K::kCounter, "Events with an unknown tag, skipped."},
      {"kvidx_dp_rank_mismatches_total", K::kCounter,
       "Batches whose data_parallel_rank differs from the source's rank."},
      {"kvidx_source_resyncs_total", K::kCounter, "Operator resyncs of the source."},
      {"kvidx_source_state", K::kGauge, "1 for the source's current state, 0 for the others."},
      {"kvidx_source_last_seq", K::kGauge, "Sequence number of the last applied batch (-1: none)."},
      {"kvidx_source_lag_seconds", K::kGauge, "Now minus the engine timestamp of the last applied batch."},
  };
  return kFamilies;
}

namespace {

uint64_t Load(const std::atomic<uint64_t>& c) { return c.load(std::memory_order_relaxed); }

}  // namespace

void RenderSourceStats(const SourceStats& s, double now_wall, std::vector<MetricSample>* out) {
  using K = MetricSample::Kind;
  auto add = [&](std::string_view name, double v, K kind,
                 std::initializer_list<std::pair<std::string_view, std::string_view>> extra = {}) {
    MetricSample m;
    m.name = std::string(name);
    m.labels.emplace_back("source", s.source);
    for (const auto& [k, val] : extra) m.labels.emplace_back(std::string(k), std::string(val));
    m.value = v;
    m.kind = kind;
    out->push_back(std::move(m));
  };
  add("kvidx_batches_total", Load(s.batches), K::kCounter);
  for (size_t t = 0; t < kNumEventTypes; ++t) {
    add("kvidx_events_total", Load(s.events[t]), K::kCounter,
        {{"type", EventTypeName(static_cast<EventType>(t))}});
  }
  add("kvidx_seq_gaps_total", Load(s.seq_gaps), K::kCounter);
  add("kvidx_batches_replayed_total", Load(s.batches_replayed), K::kCounter);
  for (size_t r = 0; r < kNumReplayResults; ++r) {
    add("kvidx_replay_requests_total", Load(s.replay_requests[r]), K::kCounter,
        {{"result", ReplayResultName(static_cast<ReplayResult>(r))}});
  }
  add("kvidx_batches_lost_total", Load(s.batches_lost), K::kCounter);
  add("kvidx_seq_implausible_total", Load(s.seq_implausible), K::kCounter);
  add("kvidx_duplicate_batches_total", Load(s.duplicate_batches), K::kCounter);
  add("kvidx_engine_restarts_total", Load(s.engine_restarts), K::kCounter);
  for (size_t r = 0; r < kNumErrorReasons; ++r) {
    add("kvidx_decode_errors_total", Load(s.decode_errors[r]), K::kCounter, {{"reason", ErrorReasonLabel(r)}});
  }
  add("kvidx_unknown_events_total", Load(s.unknown_events), K::kCounter);
  add("kvidx_dp_rank_mismatches_total", Load(s.dp_rank_mismatches), K::kCounter);
  add("kvidx_source_resyncs_total", Load(s.resyncs), K::kCounter);
  SourceState cur = s.current_state();
  for (size_t st = 0; st < kNumSourceStates; ++st) {
    auto state = static_cast<SourceState>(st);
    add("kvidx_source_state", state == cur ? 1 : 0, K::kGauge, {{"state", SourceStateName(state)}});
  }
  add("kvidx_source_last_seq", static_cast<double>(s.last_seq.load(std::memory_order_relaxed)), K::kGauge);
  double ts = s.last_batch_ts.load(std::memory_order_relaxed);
  if (ts > 0) add("kvidx_source_lag_seconds", std::max(0.0, now_wall - ts), K::kGauge);
}

void MetricsRegistry::Add(std::shared_ptr<const SourceStats> stats) {
  std::lock_guard<std::mutex> lock(mu_);
  sources_.push_back(std::move(stats));
}

void MetricsRegistry::Remove(const SourceStats* stats) {
  std::lock_guard<std::mutex> lock(mu_);
  std::erase_if(sources_, [&](const auto& p) { return p.get() == stats; });
}

std::vector<std::shared_ptr<const SourceStats>> MetricsRegistry::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sources_;
}

std::vector<MetricSample> MetricsRegistry::Render(double now_wall) const {
  if (now_wall <= 0) now_wall = WallNowSeconds();
  std::vector<MetricSample> out;
  for (const auto& s : Snapshot()) RenderSourceStats(*s, now_wall, &out);
  return out;
}

}  // namespace kvidx::ingest
