#include "server/node.h"

#include <algorithm>
#include <chrono>

#include <spdlog/spdlog.h>

#include "base/clock.h"
#include "server/node_metrics.h"
#include "server/snapshot_format.h"

namespace kvidx::server {

namespace {

using Clock = std::chrono::steady_clock;

std::atomic<uint64_t> g_next_model_uid{1};

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

namespace {

ingest::LoadScraper::Options ScrapeOptions(const RoutingConfig& r, const RouteClock* clock) {
  ingest::LoadScraper::Options o;
  o.interval = std::chrono::milliseconds(r.scrape_interval_ms);
  o.timeout = std::chrono::milliseconds(r.scrape_timeout_ms);
  o.now = [clock] { return clock->Now(); };
  return o;
}

}  // namespace

namespace {

SourceRegistry::Options RegistryOptions(const IngestConfig& c) {
  SourceRegistry::Options o;
  o.reuse_after = std::chrono::seconds(c.source_id_reuse_after_s);
  return o;
}

}  // namespace

Node::Node(const ServerConfig& config)
    : config_(config),
      sources_(RegistryOptions(config.ingest)),
      index_(IndexOptions{config.index_core}),
      sink_(&index_, &sources_, &tiers_),
      route_clock_(config.routing.simulated_clock),
      scraper_(std::make_unique<ingest::LoadScraper>(ScrapeOptions(config.routing, &route_clock_))),
      queries_(std::make_unique<QueryEngine>(this, QueryLimits{config.grpc.max_query_tokens,
                                                                config.grpc.max_query_hashes,
                                                                config.grpc.max_query_text_bytes})),
      routes_(std::make_unique<RouteEngine>(queries_.get(), &route_clock_, RouteTracker::Options{})) {}

Node::~Node() { Stop(); }

Result<std::unique_ptr<Node>> Node::Create(const ServerConfig& config) {
  std::unique_ptr<Node> node(new Node(config));
  if (Status s = node->Restore(); !s.ok()) return s;
  // Models after the restore: Restore() needs an empty index, and AddModel
  // returns the restored id for a model the snapshot already had.
  for (const ModelConfig& mc : config.models) {
    Result<HashAlgo> algo = ParseHashAlgo(mc.hash_algo);
    if (!algo.ok()) return Status::InvalidArgument("models." + mc.name + ".hash_algo: " + algo.status().message());
    BlockHasherOptions ho;
    ho.algo = algo.value();
    ho.seed = mc.hash_seed;
    ho.block_size = mc.block_size;
    Result<BlockHasher> hasher = BlockHasher::Create(ho);
    if (!hasher.ok()) return Status::InvalidArgument("models." + mc.name + ": " + hasher.status().message());
    ModelOptions mo;
    mo.max_query_blocks = mc.max_query_blocks;
    mo.index_all_groups = mc.index_all_groups;
    Result<ModelId> id = node->index_.AddModel(mc.name, mo);
    if (!id.ok()) return id.status();
    node->sink_.SetModelBlockSize(mc.name, mc.block_size);
    auto runtime = std::make_unique<ModelRuntime>(
        ModelRuntime{mc, id.value(), std::move(hasher.value()), g_next_model_uid.fetch_add(1), nullptr});
    if (!mc.tokenizer.empty()) {
      Result<std::unique_ptr<PromptEncoder>> prompt = PromptEncoder::Load(mc.tokenizer, mc.chat_template);
      if (!prompt.ok()) return prompt.status().WithPrefix("models." + mc.name + ".");
      runtime->prompt = std::move(prompt.value());
    }
    node->models_.push_back(std::move(runtime));
  }
  node->ingester_ = std::make_unique<ingest::Ingester>(ToIngestOptions(config), &node->sink_);
  if (!config.discovery.providers.empty() || !config.discovery.kubernetes.empty()) {
    Node* n = node.get();
    Discovery::Target target{
        [n](const EngineEntry& e, std::string_view provider, bool ready) {
          return n->AddDiscoveredEngine(e, provider, ready);
        },
        [n](std::string_view replica, std::string_view provider) {
          return n->RemoveDiscoveredEngine(replica, provider);
        },
        [n](std::string_view replica, std::string_view provider, bool ready) {
          return n->SetDiscoveredEngineReady(replica, provider, ready);
        }};
    node->discovery_ = std::make_unique<Discovery>(config.discovery, std::move(target));
  }
  return node;
}

Status Node::Restore() {
  if (config_.data_dir.empty()) return Status::Ok();
  snapshot::StoreOptions so;
  so.on_corrupt = config_.on_corrupt == OnCorruptData::kStartEmpty ? snapshot::OnCorrupt::kStartEmpty
                                                                    : snapshot::OnCorrupt::kFail;
  so.sync = config_.snapshot.sync;
  Result<std::unique_ptr<snapshot::SnapshotStore>> store = snapshot::SnapshotStore::Open(config_.data_dir, so);
  if (!store.ok()) return store.status();
  store_ = std::move(store.value());
  const Clock::time_point t0 = Clock::now();
  Result<std::optional<snapshot::SnapshotData>> loaded = store_->LoadLatest();
  if (!loaded.ok()) return loaded.status();
  if (!store_->corruption().ok()) {
    restore_.corruption = store_->corruption().ToString();
    restore_.moved_aside_to = store_->moved_aside_to();
    spdlog::error("data directory {} was unreadable ({}); moved aside to {} and starting empty (on_corrupt: "
                  "start-empty)",
                  config_.data_dir, restore_.corruption, restore_.moved_aside_to);
  }
  if (!loaded.value().has_value()) {
    // Said even when expected: an empty start must never be mistaken for a restore.
    if (store_->corruption().ok()) {
      spdlog::info("data directory {} holds no snapshot; starting empty", config_.data_dir);
    }
    return Status::Ok();
  }
  const snapshot::SnapshotData& data = *loaded.value();
  if (Status s = snapshot::ApplySnapshot(data, &tiers_, &sources_, &index_, &store_->stats()); !s.ok()) return s;
  restore_.had_snapshot = true;
  restore_.owners = data.index.owners.size();
  for (const ingest::SourceWatermark& w : data.sources) {
    restored_[ingest::SourceName(w.replica, w.dp_rank)] = w;
  }
  restore_.duration_seconds = Seconds(Clock::now() - t0);
  store_->stats().restore_duration_us.store(static_cast<uint64_t>(restore_.duration_seconds * 1e6));
  spdlog::info("restored snapshot generation {} ({} owners, {} sources) in {:.3f} s", store_->current_generation(),
               restore_.owners, data.sources.size(), restore_.duration_seconds);
  return Status::Ok();
}

Status Node::Start() {
  std::lock_guard<std::mutex> lock(control_mu_);
  if (started_) return Status::FailedPrecondition("node already started");
  if (Status s = ingester_->Start(); !s.ok()) return s;
  started_ = true;
  // Restored sources that no configured engine rank resumes are dropped now,
  // before any engine is added; resumable ones are taken by AddEngineLocked.
  std::map<std::string, bool> configured;  // source name -> same model
  for (const EngineEntry& e : config_.engines) {
    for (uint32_t r = 0; r < e.engine.data_parallel_size; ++r) configured[ingest::SourceName(e.engine.replica, r)] = true;
  }
  for (auto it = restored_.begin(); it != restored_.end();) {
    const ingest::SourceWatermark& w = it->second;
    bool keep = configured.count(it->first) > 0 && w.has_seq;
    if (keep) {
      const EngineEntry* e = nullptr;
      for (const EngineEntry& c : config_.engines) {
        if (c.engine.replica == w.replica) e = &c;
      }
      keep = e != nullptr && e->engine.model == w.model;
    }
    if (!keep) {
      (void)sink_.EndSource(w.source_id);  // a failed release is counted and logged there
      ++restore_.sources_dropped;
      spdlog::info("restored source {} dropped ({})", it->first,
                   configured.count(it->first) == 0 ? "no longer configured"
                   : !w.has_seq                      ? "no batch applied before the snapshot"
                                                     : "model changed");
      it = restored_.erase(it);
    } else {
      ++it;
    }
  }
  for (const EngineEntry& e : config_.engines) {
    std::vector<std::string> names;
    if (Status s = AddEngineLocked(e, &names); !s.ok()) return s;
    configured_.insert(e.engine.replica);
  }
  // A simulated clock's scrapes come from ScrapeLoads, at simulated times.
  if (!route_clock_.simulated()) scraper_->Start();
  // Last: the static engines own their replicas before any answer arrives.
  if (discovery_ != nullptr) return discovery_->Start();
  return Status::Ok();
}

void Node::Stop() {
  // First: discovery calls into the node until its thread is joined.
  if (discovery_) discovery_->Stop();
  if (scraper_) scraper_->Stop();
  if (ingester_) ingester_->Stop();
}

Result<ingest::LoadScraper::Round> Node::ScrapeLoads() {
  if (!route_clock_.simulated()) {
    return Status::FailedPrecondition("engines are scraped in the background every routing.scrape_interval_ms; "
                                      "ScrapeLoads is for a server with routing.clock: simulated");
  }
  std::lock_guard<std::mutex> lock(scrape_round_mu_);
  return scraper_->ScrapeOnce();
}

void Node::UpdateScrapeTargetsLocked() {
  std::vector<ingest::ScrapeTarget> targets;
  for (const auto& [replica, entry] : engines_) {
    if (!entry.metrics_url.empty()) targets.push_back({replica, entry.metrics_url});
  }
  scraper_->SetTargets(std::move(targets));
}

const ModelRuntime* Node::FindModel(std::string_view name) const {
  for (const auto& m : models_) {
    if (m->config.name == name) return m.get();
  }
  return nullptr;
}

Status Node::AddEngineLocked(const EngineEntry& entry, std::vector<std::string>* names) {
  const ingest::EngineConfig& e = entry.engine;
  EngineClaims claims = claims_;
  std::string field;
  if (Status s = ValidateEngine(entry, config_, "engine " + e.replica, &claims, &field); !s.ok()) {
    return s.WithPrefix("engine" + (field.empty() ? std::string() : "." + field) + ": ");
  }
  std::map<uint32_t, ingest::Ingester::ResumePoint> watermarks;
  std::vector<SourceId> ids;
  std::vector<bool> first_seen;   // the pair had no id before: it holds no blocks
  auto retire_all = [&] {
    for (size_t i = 0; i < ids.size(); ++i) {
      if (first_seen[i]) {
        sources_.Release(ids[i]);
      } else {
        sources_.Retire(ids[i]);
      }
    }
  };
  for (uint32_t r = 0; r < e.data_parallel_size; ++r) {
    const std::string name = ingest::SourceName(e.replica, r);
    names->push_back(name);
    SourceRegistry::Origin origin;
    Result<SourceId> id = sources_.Register(e.replica, r, &origin);
    if (!id.ok()) {
      retire_all();
      return id.status();
    }
    ids.push_back(id.value());
    first_seen.push_back(origin != SourceRegistry::Origin::kOwn);
    if (origin == SourceRegistry::Origin::kReused) {
      // The id named a removed source: nothing of it may show on this one.
      if (Status s = index_.ResetSource(id.value()); !s.ok()) {
        retire_all();
        return s;
      }
      routes_->ForgetSource(id.value());
    }
    index_.SetSourceCapacity(id.value(), entry.gpu_blocks);
    auto it = restored_.find(name);
    if (it == restored_.end()) continue;
    ingest::Ingester::ResumePoint rp;
    rp.last_seq = it->second.last_seq;
    if (it->second.last_batch_fingerprint != 0) rp.fingerprint = it->second.last_batch_fingerprint;
    watermarks[r] = rp;
    sink_.SeedWatermark(name, it->second.last_seq, it->second.last_batch_ts, it->second.last_batch_fingerprint);
    ++restore_.sources_resumed;
    restored_.erase(it);
  }
  if (Status s = ingester_->AddEngine(e, watermarks); !s.ok()) {
    retire_all();
    return s;
  }
  engines_[e.replica] = entry;
  claims_ = std::move(claims);
  UpdateScrapeTargetsLocked();
  return Status::Ok();
}

Result<std::vector<std::string>> Node::AddEngine(const EngineEntry& engine, bool from_config) {
  std::lock_guard<std::mutex> lock(control_mu_);
  if (!started_) return Status::FailedPrecondition("node not started");
  std::vector<std::string> names;
  if (Status s = AddEngineLocked(engine, &names); !s.ok()) return s;
  if (from_config) {
    configured_.insert(engine.engine.replica);
    return names;
  }
  spdlog::warn("engine {} added at run time ({} source{}); it is not in the config file, so after a restart it "
               "is gone and its restored blocks are dropped: add it to the config to keep it",
               engine.engine.replica, names.size(), names.size() == 1 ? "" : "s");
  return names;
}

Status Node::RemoveEngine(std::string_view replica) {
  std::lock_guard<std::mutex> lock(control_mu_);
  return RemoveEngineLocked(replica);
}

Status Node::AddDiscoveredEngine(const EngineEntry& engine, std::string_view provider, bool ready) {
  std::lock_guard<std::mutex> lock(control_mu_);
  if (!started_) return Status::FailedPrecondition("node not started");
  const std::string& replica = engine.engine.replica;
  // Marked before the engine exists, so no Route sees it ready meanwhile.
  if (!ready) MarkReady(replica, false);
  std::vector<std::string> names;
  if (Status s = AddEngineLocked(engine, &names); !s.ok()) {
    if (!ready) MarkReady(replica, true);
    return s;
  }
  discovered_[replica] = std::string(provider);
  spdlog::info("engine {} added by discovery provider {} ({} source{})", replica, provider,
               names.size(), names.size() == 1 ? "" : "s");
  return Status::Ok();
}

Status Node::RemoveDiscoveredEngine(std::string_view replica, std::string_view provider) {
  std::lock_guard<std::mutex> lock(control_mu_);
  auto it = discovered_.find(replica);
  if (it == discovered_.end() || it->second != provider) {
    return Status::FailedPrecondition("engine \"" + std::string(replica) + "\" was not added by discovery provider " +
                                      std::string(provider));
  }
  return RemoveEngineLocked(replica);
}

Status Node::SetDiscoveredEngineReady(std::string_view replica, std::string_view provider, bool ready) {
  std::lock_guard<std::mutex> lock(control_mu_);
  auto it = discovered_.find(replica);
  if (it == discovered_.end() || it->second != provider) {
    return Status::FailedPrecondition("engine \"" + std::string(replica) + "\" was not added by discovery provider " +
                                      std::string(provider));
  }
  MarkReady(replica, ready);
  return Status::Ok();
}

void Node::MarkReady(std::string_view replica, bool ready) {
  std::lock_guard<std::mutex> ready_lock(ready_mu_);
  if (ready) {
    if (auto r = not_ready_.find(replica); r != not_ready_.end()) not_ready_.erase(r);
  } else {
    not_ready_.emplace(replica);
  }
  not_ready_count_.store(not_ready_.size());
}

bool Node::EngineReady(std::string_view replica) const {
  if (not_ready_count_.load() == 0) return true;
  std::lock_guard<std::mutex> lock(ready_mu_);
  return !not_ready_.contains(replica);
}

Status Node::RemoveEngineLocked(std::string_view replica) {
  auto it = engines_.find(replica);
  if (it == engines_.end()) return Status::NotFound("replica \"" + std::string(replica) + "\" is not configured");
  if (Status s = ingester_->RemoveEngine(replica); !s.ok()) return s;
  engines_.erase(it);
  if (auto d = discovered_.find(replica); d != discovered_.end()) discovered_.erase(d);
  if (auto c = configured_.find(replica); c != configured_.end()) configured_.erase(c);
  {
    std::lock_guard<std::mutex> ready_lock(ready_mu_);
    if (auto r = not_ready_.find(replica); r != not_ready_.end()) not_ready_.erase(r);
    not_ready_count_.store(not_ready_.size());
  }
  UpdateScrapeTargetsLocked();
  // Rebuilt rather than edited: a claim does not record which engine's
  // stream it is, and removal is rare.
  claims_ = EngineClaims();
  for (const auto& [name, entry] : engines_) {
    (void)ValidateEngine(entry, config_, "engine " + name, &claims_);
  }
  spdlog::info("engine {} removed", replica);
  return Status::Ok();
}

Status Node::Resync(std::string_view source_or_replica) { return ingester_->Resync(source_or_replica); }

std::vector<EngineEntry> Node::Engines() const {
  std::lock_guard<std::mutex> lock(control_mu_);
  std::vector<EngineEntry> out;
  for (const auto& [name, e] : engines_) out.push_back(e);
  return out;
}

std::map<std::string, std::string, std::less<>> Node::EngineOrigins() const {
  std::set<std::string, std::less<>> kubernetes;
  for (const KubernetesProviderConfig& k : config_.discovery.kubernetes) kubernetes.insert(k.name);
  std::lock_guard<std::mutex> lock(control_mu_);
  std::map<std::string, std::string, std::less<>> out;
  for (const auto& [replica, entry] : engines_) {
    if (auto d = discovered_.find(replica); d != discovered_.end()) {
      out[replica] = (kubernetes.contains(d->second) ? "kubernetes:" : "dns:") + d->second;
    } else {
      out[replica] = configured_.contains(replica) ? "config" : "admin";
    }
  }
  return out;
}

uint64_t Node::batches_since_snapshot() const {
  return sink_.stats().applied_batches.load(std::memory_order_relaxed) -
         batches_at_last_snapshot_.load(std::memory_order_relaxed);
}

Result<SnapshotOutcome> Node::Snapshot() {
  if (store_ == nullptr) return Status::FailedPrecondition("no data_dir configured: snapshots are off");
  std::lock_guard<std::mutex> lock(snapshot_mu_);
  const Clock::time_point t0 = Clock::now();
  snapshot::SnapshotData data;
  std::vector<ingest::SourceWatermark> marks;
  uint64_t applied = 0;
  {
    // The cut: no batch is applied between the dump and the watermarks.
    auto pause = sink_.PauseApplies();
    index_.DumpUnsorted(&data.index);
    marks = sink_.Watermarks();
    applied = sink_.stats().applied_batches.load(std::memory_order_relaxed);
    // Identities in the cut too: a released id may name another source later.
    const SourceRegistry::Reader names(sources_);
    const size_t n = sources_.size();
    for (SourceId id = 0; id < n; ++id) {
      ingest::SourceWatermark w;
      w.source_id = id;
      if (const SourceInfo* info = names.Get(id)) {
        w.replica = info->replica;
        w.dp_rank = info->dp_rank;
      }
      data.sources.push_back(std::move(w));
    }
  }
  // After the pause: ingest is already moving again. The run core's dump
  // stays in run order: its restore packs keys in snapshot order, so the
  // runs come back (in pieces of up to 64 blocks) instead of keys sorted
  // by hash.
  if (config_.index_core == IndexCore::kBlocks) SortSnapshot(&data.index);
  std::map<SourceId, const ingest::SourceWatermark*> by_id;
  for (const ingest::SourceWatermark& w : marks) by_id[w.source_id] = &w;
  for (size_t i = 0; i < tiers_.size(); ++i) data.tier_names.emplace_back(tiers_.Name(static_cast<Tier>(i)));
  for (ingest::SourceWatermark& w : data.sources) {
    const SourceId id = w.source_id;
    if (auto it = by_id.find(id); it != by_id.end()) {
      // Model and stream position from the sink; identity from the registry.
      ingest::SourceWatermark mark = *it->second;
      mark.replica = std::move(w.replica);
      mark.dp_rank = w.dp_rank;
      w = std::move(mark);
    }
    w.source_id = id;
    w.state = static_cast<uint8_t>(index_.GetSourceState(id));
    w.gpu_capacity_blocks = index_.GetSourceStats(id).gpu_capacity;
  }
  data.created_unix_ms = WallMillis();
  if (Status s = store_->Write(data); !s.ok()) return s;
  batches_at_last_snapshot_.store(applied, std::memory_order_relaxed);
  SnapshotOutcome out;
  out.generation = store_->current_generation();
  out.bytes = store_->stats().last_bytes.load(std::memory_order_relaxed);
  out.owners = data.index.owners.size();
  out.duration_seconds = Seconds(Clock::now() - t0);
  spdlog::info("snapshot generation {}: {} owners, {} bytes, {:.3f} s", out.generation, out.owners, out.bytes,
               out.duration_seconds);
  return out;
}

std::map<SourceId, std::string> Node::LiveSourceNames() const {
  std::map<SourceId, std::string> out;
  const SourceRegistry::Reader names(sources_);
  for (SourceId id = 0; id < sources_.size(); ++id) {
    if (names.IsLive(id)) out.emplace(id, ingest::SourceName(names.Get(id)->replica, names.Get(id)->dp_rank));
  }
  return out;
}

std::vector<MetricSample> Node::RenderMetrics() const {
  namespace m = metric;
  std::vector<MetricSample> out = ingester_->RenderMetrics();
  auto add = [&](const MetricFamily& family, double v, std::vector<std::pair<std::string, std::string>> labels = {}) {
    out.push_back(MetricSample{&family, std::move(labels), v});
  };
  auto d = [](uint64_t v) { return static_cast<double>(v); };
  for (const auto& model : models_) {
    add(m::kIndexBlocks, d(index_.BlockCount(model->id)), {{"model", model->config.name}});
  }
  const IndexMemory mem = index_.Memory();
  for (const auto& [part, bytes] : {std::pair{"tables", mem.tables}, std::pair{"records", mem.records},
                                    std::pair{"owners", mem.owners}, std::pair{"spill", mem.spill},
                                    std::pair{"sources", mem.sources}, std::pair{"runs", mem.runs}}) {
    add(m::kIndexMemory, d(bytes), {{"part", part}});
  }
  add(m::kSourceIdsFree, d(sources_.ids_free()));
  const std::map<SourceId, std::string> live = LiveSourceNames();
  for (const auto& [id, src] : live) {
    SourceIndexStats st = index_.GetSourceStats(id);
    for (const auto& [tier, blocks] : st.blocks_per_tier) {
      add(m::kSourceBlocks, d(blocks), {{"source", src}, {"tier", std::string(tiers_.Name(tier))}});
    }
    add(m::kGpuCopies, d(st.gpu_copies), {{"source", src}});
    add(m::kGpuCapacity, d(st.gpu_capacity), {{"source", src}});
    add(m::kOverCapacity, st.over_capacity ? 1 : 0, {{"source", src}});
    add(m::kStoredBlocks, d(st.stored_blocks), {{"source", src}});
    add(m::kRemovedBlocks, d(st.removed_blocks), {{"source", src}});
    add(m::kUnindexedBlocks, d(st.unindexed_blocks), {{"source", src}});
    add(m::kBlockHits, d(st.hits), {{"source", src}});
    add(m::kDuplicateCopies, d(st.duplicate_copies), {{"source", src}});
    add(m::kDriftRemoveUnknown, d(st.drift_remove_unknown), {{"source", src}});
    add(m::kDriftOrphanStore, d(st.drift_orphan_store), {{"source", src}});
    add(m::kDriftReusedUnknown, d(st.drift_reused_unknown), {{"source", src}});
    add(m::kSourceClears, d(st.clears), {{"source", src}});
  }
  const ingest::IndexSinkStats& ss = sink_.stats();
  add(m::kAppliedBatches, d(ss.applied_batches.load()));
  add(m::kApplyErrors, d(ss.apply_errors.load()));
  add(m::kUnboundBatches, d(ss.unbound_batches.load()));
  add(m::kBlockSizeMismatch, d(ss.block_size_mismatch_events.load()));
  add(m::kUnknownTopic, d(ingester_->unknown_topic_messages()));
  if (store_ != nullptr) {
    snapshot::SnapshotStats& st = store_->stats();
    add(m::kSnapshots, d(st.snapshots_ok.load()), {{"result", "ok"}});
    add(m::kSnapshots, d(st.snapshots_failed.load()), {{"result", "error"}});
    add(m::kSnapshotDuration, d(st.last_duration_us.load()) / 1e6);
    add(m::kSnapshotBytes, d(st.last_bytes.load()));
    add(m::kSnapshotAge, st.AgeSeconds(WallMillis()));
    add(m::kRestoreDuration, d(st.restore_duration_us.load()) / 1e6);
    add(m::kRestoredBlocks, d(st.restored_blocks.load()));
    add(m::kCorruptDataDir, d(st.corrupt_start_empty_total.load()));
  }
  add(m::kRestoreDroppedSources, d(restore_.sources_dropped));
  RenderRouteMetrics(&out);
  if (discovery_ != nullptr) discovery_->RenderMetrics(&out);
  return out;
}

void Node::RenderRouteMetrics(std::vector<MetricSample>* out) const {
  namespace m = metric;
  auto add = [&](const MetricFamily& family, double v, std::vector<std::pair<std::string, std::string>> labels = {}) {
    out->push_back(MetricSample{&family, std::move(labels), v});
  };
  auto d = [](uint64_t v) { return static_cast<double>(v); };
  const std::map<SourceId, std::string> live = LiveSourceNames();
  for (size_t r = 0; r < kNumRouteReasons; ++r) {
    const auto reason = static_cast<RouteReason>(r);
    add(m::kRouteDecisions, d(routes_->decisions(reason)), {{"reason", std::string(RouteReasonName(reason))}});
  }
  for (const auto& [id, f] : routes_->in_flight_by_source()) {
    if (auto it = live.find(id); it != live.end()) add(m::kRoutesInFlight, d(f.requests), {{"source", it->second}});
  }
  const RouteTracker::Stats ts = routes_->tracker_stats();
  add(m::kRoutePredictions, d(ts.predictions_confirmed), {{"how", "confirmed"}});
  add(m::kRoutePredictions, d(ts.predictions_expired), {{"how", "expired"}});
  add(m::kRoutesEnded, d(ts.done), {{"how", "done"}});
  add(m::kRoutesEnded, d(ts.expired), {{"how", "expired"}});
  add(m::kRoutesEnded, d(ts.evicted), {{"how", "evicted"}});
  for (const auto& [id, c] : routes_->cached_tokens_by_source()) {
    auto it = live.find(id);
    if (it == live.end()) continue;
    const std::string& src = it->second;
    add(m::kRoutePredictedCached, d(c.predicted), {{"source", src}});
    add(m::kRouteDeliveredCached, d(c.delivered), {{"source", src}});
  }
  const auto now = route_clock_.Now();
  for (const auto& [replica, st] : scraper_->stats()) {
    add(m::kEngineScrapes, d(st.scrapes_ok), {{"replica", replica}, {"result", "ok"}});
    add(m::kEngineScrapes, d(st.scrapes_failed), {{"replica", replica}, {"result", "error"}});
    add(m::kEngineScrapeAge, st.last_ok ? std::chrono::duration<double>(now - *st.last_ok).count() : -1.0,
        {{"replica", replica}});
    add(m::kEngineLoadInvalid, d(st.invalid_values + st.bad_lines), {{"replica", replica}});
  }
}

}  // namespace kvidx::server
