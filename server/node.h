// Node: the data plane of one kvidx service and the control operations on
// it, without any RPC. It owns the block index, the registries, the ingest
// side (Ingester + IndexSink) and the snapshot store, and knows the
// configured models (with their block hashers) and engines.
//
// Create() restores the latest snapshot from the data directory (a corrupt
// or incompatible directory is an error unless on_corrupt is start-empty,
// which moves it aside and is logged and counted). Start() adds every
// configured engine: a rank the snapshot knows resumes from its watermark
// through replay, others cold-start; restored sources that are no longer
// configured (or whose model changed, or that never applied a batch) are
// dropped from the index first so nothing is counted twice.
//
// Snapshot() takes a consistent cut: batch application pauses (IndexSink::
// PauseApplies) while the index is dumped and the watermarks are read, then
// resumes before anything is written to disk. Queries never pause.
//
// Thread-safety: query-side accessors (index(), FindModel(), sink()) are
// safe from any thread at any time. Control calls (AddEngine, RemoveEngine,
// Resync, Snapshot) may come from any thread and are serialised internally.
// Models are fixed at Create().
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "index/block_hasher.h"
#include "index/block_index.h"
#include "index/source_registry.h"
#include "base/status.h"
#include "index/tier.h"
#include "ingest/index_sink.h"
#include "ingest/ingester.h"
#include "ingest/load_scraper.h"
#include "ingest/source_stats.h"
#include "server/config.h"
#include "server/discovery.h"
#include "server/prompt_encoder.h"
#include "server/query_engine.h"
#include "server/route_clock.h"
#include "server/route_engine.h"
#include "server/snapshot_outcome.h"
#include "server/snapshot_store.h"

namespace kvidx::server {

// A configured model as queries need it.
struct ModelRuntime {
  ModelConfig config;
  ModelId id = 0;
  // A template: BlockHasher keeps scratch buffers, so each querying thread
  // hashes with its own copy (keyed by uid, which no other ModelRuntime in
  // the process ever has).
  BlockHasher hasher;
  uint64_t uid = 0;
  // Text and chat prompts; null when the model has no `tokenizer`.
  std::unique_ptr<const PromptEncoder> prompt;
};

// What the restore on start found and did (logged, exported, tested).
struct RestoreReport {
  bool had_snapshot = false;
  uint64_t owners = 0;
  uint64_t sources_resumed = 0;  // ranks resuming from a watermark
  uint64_t sources_dropped = 0;  // restored sources no longer configured / not resumable
  double duration_seconds = 0;
  std::string corruption;        // start-empty: what was wrong ("" if nothing)
  std::string moved_aside_to;
};

class Node {
 public:
  static Result<std::unique_ptr<Node>> Create(const ServerConfig& config);
  ~Node();  // Stop()s
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // Starts ingest and adds the configured engines.
  Status Start();
  // Stops ingest (no more batches applied). Idempotent.
  void Stop();

  // --- Query side ------------------------------------------------------------
  const ModelRuntime* FindModel(std::string_view name) const;
  const std::vector<std::unique_ptr<ModelRuntime>>& models() const { return models_; }
  const BlockIndex& index() const { return index_; }
  const SourceRegistry& sources() const { return sources_; }
  const TierRegistry& tiers() const { return tiers_; }
  const ingest::IndexSink& sink() const { return sink_; }
  const ingest::Ingester& ingester() const { return *ingester_; }
  // Engines' /metrics readings (engines with a metrics_url), and how long
  // one stays trustworthy.
  const ingest::LoadScraper& load() const { return *scraper_; }
  const RoutingConfig& routing() const { return config_.routing; }
  // The time Route runs on (wall, or simulated: routing.clock).
  RouteClock& route_clock() { return route_clock_; }
  const RouteClock& route_clock() const { return route_clock_; }
  // The domain queries on this node (FindPrefix, GetBlock; Route, RouteDone).
  const QueryEngine& queries() const { return *queries_; }
  RouteEngine& routes() const { return *routes_; }

  // --- Control ---------------------------------------------------------------
  // Adds an engine (all DP ranks); returns the source names. Run-time
  // engines are not persisted: the config file is the source of truth for
  // what exists after a restart (a Kubernetes ConfigMap, SIGHUP reloads it).
  // The entry passes the config loader's ValidateEngine against the present
  // engines first (InvalidArgument / NotFound / FailedPrecondition, the
  // message starting with the field, e.g. "engine.replica: ").
  // `from_config`: the engine is in the config file (a SIGHUP reload), not
  // an admin call; only what EngineOrigins reports differs.
  Result<std::vector<std::string>> AddEngine(const EngineEntry& engine, bool from_config = false);
  // Stops the engine's sources and releases them: their blocks, index state
  // and metric series go; adding the same replica again gets their ids
  // back, and after ingest.source_id_reuse_after_s a new replica may take
  // them (SourceRegistry::Release).
  Status RemoveEngine(std::string_view replica);
  // Discovery's forms of the two (server/discovery.h): an engine found by
  // `provider` is added the same way, and only an engine that provider
  // added is removed -- never one from the config file or the admin API
  // (FailedPrecondition).
  Status AddDiscoveredEngine(const EngineEntry& engine, std::string_view provider, bool ready = true);
  Status RemoveDiscoveredEngine(std::string_view replica, std::string_view provider);
  // A discovered engine's readiness (Kubernetes: its endpoint's
  // conditions.ready). A not-ready engine keeps its sources, but Route does
  // not pick it. FailedPrecondition for an engine
  // `provider` did not add.
  Status SetDiscoveredEngineReady(std::string_view replica, std::string_view provider, bool ready);
  // false only for an engine discovery reported not ready. Any thread; no
  // lock taken while every engine is ready.
  bool EngineReady(std::string_view replica) const;
  Status Resync(std::string_view source_or_replica);
  // One round of /metrics scrapes on this thread, stamped with the route
  // clock's time. Only with a simulated route clock (no background
  // scraping then); FAILED_PRECONDITION otherwise. Rounds are serialised.
  Result<ingest::LoadScraper::Round> ScrapeLoads();
  std::vector<EngineEntry> Engines() const;
  // Where each engine came from, by replica: "config" (the config file),
  // "admin" (AddEngine through the admin API), "dns:<provider>" or
  // "kubernetes:<provider>" (discovery). Takes the control mutex.
  std::map<std::string, std::string, std::less<>> EngineOrigins() const;
  // A consistent snapshot to the data directory. FailedPrecondition without one.
  Result<SnapshotOutcome> Snapshot();
  bool persistent() const { return store_ != nullptr; }
  snapshot::SnapshotStats* snapshot_stats() const { return store_ ? &store_->stats() : nullptr; }
  const RestoreReport& restore_report() const { return restore_; }
  // Batches applied since the last snapshot (the every_batches trigger).
  uint64_t batches_since_snapshot() const;

  // Every exported sample of ingest, the index and persistence (families:
  // ingest_metrics.h, node_metrics.h).
  std::vector<MetricSample> RenderMetrics() const;

 private:
  explicit Node(const ServerConfig& config);
  Status Restore();
  Status AddEngineLocked(const EngineEntry& engine, std::vector<std::string>* names);
  Status RemoveEngineLocked(std::string_view replica);
  // Takes `replica` out of the not-ready set, or puts it in.
  void MarkReady(std::string_view replica, bool ready);
  void RenderRouteMetrics(std::vector<MetricSample>* out) const;
  // Live sources' ids and "<replica>/dp<rank>" names.
  std::map<SourceId, std::string> LiveSourceNames() const;
  void UpdateScrapeTargetsLocked();

  const ServerConfig config_;
  TierRegistry tiers_;
  SourceRegistry sources_;
  BlockIndex index_;
  ingest::IndexSink sink_;
  std::unique_ptr<ingest::Ingester> ingester_;
  std::unique_ptr<snapshot::SnapshotStore> store_;
  RouteClock route_clock_;
  std::mutex scrape_round_mu_;   // ScrapeLoads rounds, one at a time
  std::unique_ptr<ingest::LoadScraper> scraper_;
  std::unique_ptr<QueryEngine> queries_;
  std::unique_ptr<RouteEngine> routes_;
  std::unique_ptr<Discovery> discovery_;  // null without discovery providers
  std::vector<std::unique_ptr<ModelRuntime>> models_;

  mutable std::mutex control_mu_;  // engines_, restored_, started_; serialises control calls
  std::map<std::string, EngineEntry, std::less<>> engines_;
  EngineClaims claims_;  // replicas and streams of engines_ (ValidateEngine)
  // Engines discovery added: replica -> provider.
  std::map<std::string, std::string, std::less<>> discovered_;
  // Engines from the config file (at start or by a reload); the rest of
  // engines_ not in discovered_ came through the admin API.
  std::set<std::string, std::less<>> configured_;
  // Discovered engines reported not ready, and how many (read without the lock).
  mutable std::mutex ready_mu_;
  std::set<std::string, std::less<>> not_ready_;
  std::atomic<size_t> not_ready_count_{0};
  // Watermarks from the restored snapshot, by "<replica>/dp<rank>", until
  // Start() has consumed them.
  std::map<std::string, ingest::SourceWatermark> restored_;
  bool started_ = false;
  RestoreReport restore_;

  std::mutex snapshot_mu_;  // one snapshot at a time
  std::atomic<uint64_t> batches_at_last_snapshot_{0};
};

}  // namespace kvidx::server
