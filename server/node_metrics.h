// The metric families the Node exports beyond ingest's: the index per model
// and per source, the apply path, persistence. Node::RenderMetrics fills the
// counters and gauges; the eviction-rank histogram is rendered by the
// server from BlockIndex::GetEvictionRankHistogram.
#pragma once

#include "base/metric.h"

namespace kvidx::server::metric {

using K = MetricKind;

inline constexpr MetricFamily kIndexBlocks{"kvidx_index_blocks", K::kGauge,
                                           "Distinct blocks held by any source, per model."};
inline constexpr MetricFamily kIndexMemory{
    "kvidx_index_memory_bytes", K::kGauge,
    "Heap bytes the block index has allocated, by part (tables, records, owners, spill, sources; runs: the "
    "run core's stores); pages are committed as written, so resident memory can be less."};
inline constexpr MetricFamily kSourceIdsFree{
    "kvidx_source_ids_free", K::kGauge,
    "Source ids a new (replica, DP rank) pair can take: never used, or released by a removed source (reusable "
    "ingest.source_id_reuse_after_s after the removal)."};
inline constexpr MetricFamily kSourceBlocks{"kvidx_source_blocks", K::kGauge,
                                            "Distinct blocks a source holds, per tier."};
inline constexpr MetricFamily kGpuCopies{"kvidx_source_gpu_copies", K::kGauge,
                                         "Physical GPU block copies a source is believed to hold."};
inline constexpr MetricFamily kGpuCapacity{"kvidx_source_gpu_capacity_blocks", K::kGauge,
                                           "Configured num_gpu_blocks of the source (0: unknown)."};
inline constexpr MetricFamily kOverCapacity{"kvidx_source_over_capacity", K::kGauge,
                                            "1 if the index believes more GPU copies than the capacity."};
inline constexpr MetricFamily kStoredBlocks{"kvidx_stored_blocks_total", K::kCounter,
                                            "Block entries of indexed BlockStored events."};
inline constexpr MetricFamily kRemovedBlocks{"kvidx_removed_blocks_total", K::kCounter,
                                             "Block entries of indexed BlockRemoved events."};
inline constexpr MetricFamily kUnindexedBlocks{"kvidx_unindexed_blocks_total", K::kCounter,
                                               "Block entries of KV-cache groups the model does not index."};
inline constexpr MetricFamily kBlockHits{"kvidx_block_hits_total", K::kCounter,
                                         "Engine-confirmed cache hits (full-report re-announcements)."};
inline constexpr MetricFamily kDuplicateCopies{"kvidx_duplicate_copies_total", K::kCounter,
                                               "Stores that raised a block's reference count above 1."};
inline constexpr MetricFamily kDriftRemoveUnknown{"kvidx_drift_remove_unknown_total", K::kCounter,
                                                  "Removals of blocks the index did not hold (missed store)."};
inline constexpr MetricFamily kDriftOrphanStore{"kvidx_drift_orphan_store_total", K::kCounter,
                                                "Stores whose parent the source did not hold (missed store)."};
inline constexpr MetricFamily kDriftReusedUnknown{"kvidx_drift_reused_unknown_total", K::kCounter,
                                                  "Re-announced (reused) blocks the index did not hold."};
inline constexpr MetricFamily kSourceClears{"kvidx_source_clears_total", K::kCounter,
                                            "Times a source's blocks were cleared."};
inline constexpr MetricFamily kEvictionRank{
    "kvidx_eviction_recency_rank", K::kHistogram,
    "Recency rank (0 = coldest, 1 = hottest) in kvidx's order of each GPU block the engines evicted."};
inline constexpr MetricFamily kAppliedBatches{"kvidx_applied_batches_total", K::kCounter,
                                              "Batches applied to the index, all sources."};
inline constexpr MetricFamily kApplyErrors{"kvidx_apply_errors_total", K::kCounter,
                                           "Index calls that returned an error while applying batches."};
inline constexpr MetricFamily kUnboundBatches{"kvidx_unbound_batches_total", K::kCounter,
                                              "Batches for a source that was not bound (removed meanwhile)."};
inline constexpr MetricFamily kBlockSizeMismatch{
    "kvidx_block_size_mismatch_events_total", K::kCounter,
    "BlockStored events not indexed: their block_size is not the model's block_size."};
inline constexpr MetricFamily kUnknownTopic{"kvidx_unknown_topic_messages_total", K::kCounter,
                                            "Messages on bound sockets whose topic no source claims."};
inline constexpr MetricFamily kSnapshots{"kvidx_snapshots_total", K::kCounter, "Snapshot attempts by result."};
inline constexpr MetricFamily kSnapshotDuration{"kvidx_snapshot_duration_seconds", K::kGauge,
                                                "Duration of the last snapshot."};
inline constexpr MetricFamily kSnapshotBytes{"kvidx_snapshot_bytes", K::kGauge, "Size of the last snapshot file."};
inline constexpr MetricFamily kSnapshotAge{"kvidx_snapshot_age_seconds", K::kGauge,
                                           "Age of the newest complete snapshot (-1: none)."};
inline constexpr MetricFamily kRestoreDuration{"kvidx_restore_duration_seconds", K::kGauge,
                                               "Duration of the restore at start."};
inline constexpr MetricFamily kRestoredBlocks{"kvidx_restored_blocks", K::kGauge, "Owner records restored at start."};
inline constexpr MetricFamily kRestoreDroppedSources{
    "kvidx_restore_dropped_sources", K::kGauge, "Restored sources dropped at start (unconfigured or not resumable)."};
inline constexpr MetricFamily kCorruptDataDir{"kvidx_corrupt_data_dir_total", K::kCounter,
                                              "Corrupt data directories moved aside (on_corrupt: start-empty)."};

inline constexpr MetricFamily kRouteDecisions{"kvidx_route_decisions_total", K::kCounter,
                                              "Route answers by reason (affinity | load | warmup | no_prefix)."};
inline constexpr MetricFamily kRoutesInFlight{"kvidx_routes_in_flight", K::kGauge,
                                              "Routes neither reported done nor expired, per source."};
inline constexpr MetricFamily kRoutePredictions{
    "kvidx_route_predictions_total", K::kCounter,
    "Sibling predictions by how they ended (confirmed: the engine published the blocks | expired)."};
inline constexpr MetricFamily kRoutesEnded{"kvidx_routes_ended_total", K::kCounter,
                                           "Routes that left the tracker, by how (done | expired | evicted)."};
inline constexpr MetricFamily kRoutePredictedCached{
    "kvidx_route_predicted_cached_tokens_total", K::kCounter,
    "Cached tokens Route expected on the chosen source, over routes whose RouteDone reported usage."};
inline constexpr MetricFamily kRouteDeliveredCached{
    "kvidx_route_delivered_cached_tokens_total", K::kCounter,
    "Cached tokens the engine reported for the same routes (usage.prompt_tokens_details.cached_tokens)."};
inline constexpr MetricFamily kEngineScrapes{"kvidx_engine_scrapes_total", K::kCounter,
                                             "Engine /metrics scrapes by replica and result (ok | error)."};
inline constexpr MetricFamily kEngineScrapeAge{"kvidx_engine_scrape_age_seconds", K::kGauge,
                                               "Age of each engine's last good /metrics reading on Route's clock "
                                               "(simulated seconds with routing.clock: simulated; -1: none yet)."};
inline constexpr MetricFamily kEngineLoadInvalid{
    "kvidx_engine_load_invalid_total", K::kCounter,
    "Unusable parts of engine /metrics answers per replica: impossible gauge values and malformed lines."};

inline constexpr MetricFamily kDiscoveryEngines{
    "kvidx_discovery_engines", K::kGauge,
    "Engines a discovery provider holds, by state (active: in its last good answer | not_ready: listed, not "
    "ready, not routed to | grace: missing, kept)."};
inline constexpr MetricFamily kDiscoveryResolutions{
    "kvidx_discovery_resolutions_total", K::kCounter,
    "Resolutions of a discovery provider by result (DNS: ok | nxdomain | nodata | servfail | refused | timeout | "
    "unreachable | malformed | error; Kubernetes lists and watches: ok | gone | unauthorized | forbidden | "
    "http_error | unreachable | tls | timeout | malformed | error)."};
inline constexpr MetricFamily kDiscoveryLastSuccessAge{
    "kvidx_discovery_last_success_age_seconds", K::kGauge,
    "Age of a discovery provider's last good answer (-1: none yet)."};
inline constexpr MetricFamily kDiscoveryStale{
    "kvidx_discovery_stale", K::kGauge,
    "1 while a discovery provider's last resolution failed (its last good engine set is kept)."};
inline constexpr MetricFamily kDiscoveryEnginesAdded{"kvidx_discovery_engines_added_total", K::kCounter,
                                                     "Engines a discovery provider added."};
inline constexpr MetricFamily kDiscoveryEnginesRemoved{
    "kvidx_discovery_engines_removed_total", K::kCounter,
    "Engines a discovery provider removed (missing past the grace period, or redefined)."};
inline constexpr MetricFamily kDiscoveryAddErrors{
    "kvidx_discovery_add_errors_total", K::kCounter,
    "Discovered engines the node refused (e.g. the replica or stream of a configured engine)."};
inline constexpr MetricFamily kDiscoverySkippedRecords{
    "kvidx_discovery_skipped_records_total", K::kCounter,
    "Records (DNS records, EndpointSlice endpoints, watch events) no engine came of, by reason (no_address | "
    "bad_name | duplicate | conflict | no_port | malformed | bad_annotation)."};

}  // namespace kvidx::server::metric

namespace kvidx::server {

inline MetricFamilyTable NodeMetricFamilies() {
  using namespace metric;  // NOLINT: the table reads as the list it is
  static constexpr const MetricFamily* kTable[] = {
      &kIndexBlocks,      &kIndexMemory,       &kSourceIdsFree,     &kSourceBlocks,
      &kGpuCopies,        &kGpuCapacity,       &kOverCapacity,
      &kStoredBlocks,     &kRemovedBlocks,     &kUnindexedBlocks,    &kBlockHits,       &kDuplicateCopies,
      &kDriftRemoveUnknown, &kDriftOrphanStore, &kDriftReusedUnknown, &kSourceClears,    &kEvictionRank,
      &kAppliedBatches,   &kApplyErrors,       &kUnboundBatches,     &kBlockSizeMismatch, &kUnknownTopic,
      &kSnapshots,        &kSnapshotDuration,  &kSnapshotBytes,      &kSnapshotAge,     &kRestoreDuration,
      &kRestoredBlocks,   &kRestoreDroppedSources, &kCorruptDataDir,
      &kRouteDecisions,   &kRoutesInFlight,    &kRoutesEnded,        &kRoutePredictions,  &kRoutePredictedCached,
      &kRouteDeliveredCached, &kEngineScrapes, &kEngineScrapeAge,    &kEngineLoadInvalid,
      &kDiscoveryEngines, &kDiscoveryResolutions, &kDiscoveryLastSuccessAge, &kDiscoveryStale,
      &kDiscoveryEnginesAdded, &kDiscoveryEnginesRemoved, &kDiscoveryAddErrors, &kDiscoverySkippedRecords,
  };
  return kTable;
}

}  // namespace kvidx::server
