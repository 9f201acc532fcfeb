#include "ingest/source_stats.h"

#include <algorithm>
#include <chrono>

#include "base/clock.h"
#include "ingest/ingest_metrics.h"

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

namespace {

uint64_t Load(const std::atomic<uint64_t>& c) { return c.load(std::memory_order_relaxed); }

}  // namespace

void RenderSourceStats(const SourceStats& s, double now_wall, std::vector<MetricSample>* out) {
  auto add = [&](const MetricFamily& family, double v,
                 std::initializer_list<std::pair<std::string_view, std::string_view>> extra = {}) {
    MetricSample m;
    m.family = &family;
    m.labels.emplace_back("source", s.source);
    for (const auto& [k, val] : extra) m.labels.emplace_back(std::string(k), std::string(val));
    m.value = v;
    out->push_back(std::move(m));
  };
  add(metric::kBatches, Load(s.batches));
  for (size_t t = 0; t < kNumEventTypes; ++t) {
    add(metric::kEvents, Load(s.events[t]), {{"type", EventTypeName(static_cast<EventType>(t))}});
  }
  add(metric::kSeqGaps, Load(s.seq_gaps));
  add(metric::kBatchesReplayed, Load(s.batches_replayed));
  for (size_t r = 0; r < kNumReplayResults; ++r) {
    add(metric::kReplayRequests, Load(s.replay_requests[r]),
        {{"result", ReplayResultName(static_cast<ReplayResult>(r))}});
  }
  add(metric::kBatchesLost, Load(s.batches_lost));
  add(metric::kSeqImplausible, Load(s.seq_implausible));
  add(metric::kDuplicateBatches, Load(s.duplicate_batches));
  add(metric::kEngineRestarts, Load(s.engine_restarts));
  for (size_t r = 0; r < kNumErrorReasons; ++r) {
    add(metric::kDecodeErrors, Load(s.decode_errors[r]), {{"reason", ErrorReasonLabel(r)}});
  }
  add(metric::kUnknownEvents, Load(s.unknown_events));
  add(metric::kDpRankMismatches, Load(s.dp_rank_mismatches));
  add(metric::kResyncs, Load(s.resyncs));
  SourceState cur = s.current_state();
  for (size_t st = 0; st < kNumSourceStates; ++st) {
    auto state = static_cast<SourceState>(st);
    add(metric::kState, state == cur ? 1 : 0, {{"state", SourceStateName(state)}});
  }
  add(metric::kLastSeq, static_cast<double>(s.last_seq.load(std::memory_order_relaxed)));
  double ts = s.last_batch_ts.load(std::memory_order_relaxed);
  if (ts > 0) add(metric::kLag, std::max(0.0, now_wall - ts));
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
  if (now_wall <= 0) now_wall = WallSeconds();
  std::vector<MetricSample> out;
  for (const auto& s : Snapshot()) RenderSourceStats(*s, now_wall, &out);
  return out;
}

}  // namespace kvidx::ingest
