// The metric families ingest exports per source (RenderSourceStats fills
// them from SourceStats). A new per-source metric is a constant here, an
// entry in IngestMetricFamilies(), a field in SourceStats and a line in
// RenderSourceStats; the deploy check then requires it in the README table.
#pragma once

#include "base/metric.h"

namespace kvidx::ingest::metric {

using K = MetricKind;

inline constexpr MetricFamily kBatches{"kvidx_batches_total", K::kCounter,
                                       "KV-event batches applied, live and replayed."};
inline constexpr MetricFamily kEvents{"kvidx_events_total", K::kCounter, "KV events applied, by type."};
inline constexpr MetricFamily kSeqGaps{"kvidx_seq_gaps_total", K::kCounter,
                                       "Live sequence gaps detected (seq > last + 1)."};
inline constexpr MetricFamily kBatchesReplayed{"kvidx_batches_replayed_total", K::kCounter,
                                               "Batches applied from a replay reply."};
inline constexpr MetricFamily kReplayRequests{"kvidx_replay_requests_total", K::kCounter,
                                              "Replay requests by result (ok | partial | timeout | unavailable)."};
inline constexpr MetricFamily kBatchesLost{"kvidx_batches_lost_total", K::kCounter,
                                           "Batches that could not be recovered."};
inline constexpr MetricFamily kSeqImplausible{
    "kvidx_seq_implausible_total", K::kCounter,
    "Batches dropped as a protocol error: their seq jumped further ahead than any engine publishes."};
inline constexpr MetricFamily kDuplicateBatches{"kvidx_duplicate_batches_total", K::kCounter,
                                                "Batches dropped because already applied."};
inline constexpr MetricFamily kEngineRestarts{"kvidx_engine_restarts_total", K::kCounter,
                                              "Engine restarts detected (sequence went backwards)."};
inline constexpr MetricFamily kDecodeErrors{"kvidx_decode_errors_total", K::kCounter,
                                            "Messages that could not be decoded, by reason."};
inline constexpr MetricFamily kUnknownEvents{"kvidx_unknown_events_total", K::kCounter,
                                             "Events with an unknown tag, skipped."};
inline constexpr MetricFamily kDpRankMismatches{"kvidx_dp_rank_mismatches_total", K::kCounter,
                                                "Batches whose data_parallel_rank differs from the source's rank."};
inline constexpr MetricFamily kResyncs{"kvidx_source_resyncs_total", K::kCounter, "Operator resyncs of the source."};
inline constexpr MetricFamily kState{"kvidx_source_state", K::kGauge,
                                     "1 for the source's current state, 0 for the others."};
inline constexpr MetricFamily kLastSeq{"kvidx_source_last_seq", K::kGauge,
                                       "Sequence number of the last applied batch (-1: none)."};
inline constexpr MetricFamily kLag{"kvidx_source_lag_seconds", K::kGauge,
                                   "Now minus the engine timestamp of the last applied batch."};

}  // namespace kvidx::ingest::metric

namespace kvidx::ingest {

inline MetricFamilyTable IngestMetricFamilies() {
  using namespace metric;  // NOLINT: the table reads as the list it is
  static constexpr const MetricFamily* kTable[] = {
      &kBatches,      &kEvents,        &kSeqGaps,       &kBatchesReplayed, &kReplayRequests, &kBatchesLost,
      &kSeqImplausible, &kDuplicateBatches, &kEngineRestarts, &kDecodeErrors, &kUnknownEvents, &kDpRankMismatches,
      &kResyncs,      &kState,         &kLastSeq,       &kLag,
  };
  return kTable;
}

}  // namespace kvidx::ingest
