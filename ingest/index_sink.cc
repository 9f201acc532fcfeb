#include "ingest/index_sink.h"

#include <mutex>

#include <spdlog/spdlog.h>

#include "base/sampled_log.h"

namespace kvidx::ingest {
namespace {

KvGroup GroupOf(const KvEvent& e) {
  KvGroup g;
  g.idx = e.group_idx ? static_cast<uint32_t>(*e.group_idx) : 0;
  if (!e.kv_cache_spec_kind) {
    g.kind = GroupKind::kAbsent;
  } else if (*e.kv_cache_spec_kind == "full_attention" || *e.kv_cache_spec_kind == "mla_attention") {
    g.kind = GroupKind::kFullAttention;
  } else {
    g.kind = GroupKind::kOther;
  }
  return g;
}

StoreOrigin OriginOf(const KvEvent& e) {
  if (!e.origin) return StoreOrigin::kUnknown;
  if (*e.origin == "REUSED") return StoreOrigin::kReused;
  if (*e.origin == "NEW") return StoreOrigin::kNew;
  return StoreOrigin::kUnknown;
}

}  // namespace

IndexSink::IndexSink(BlockIndex* index, SourceRegistry* sources, TierRegistry* tiers)
    : index_(index), sources_(sources), tiers_(tiers), last_seq_by_id_(new std::atomic<int64_t>[kMaxSources]) {
  for (SourceId i = 0; i < kMaxSources; ++i) last_seq_by_id_[i].store(-1, std::memory_order_relaxed);
}

IndexSink::Binding* IndexSink::Find(uint64_t spec_id) const {
  std::shared_lock lock(mu_);
  auto it = bindings_.find(spec_id);
  return it == bindings_.end() ? nullptr : it->second.get();
}

void IndexSink::Count(const Status& s) {
  if (s.ok()) return;
  uint64_t n = stats_.apply_errors.fetch_add(1, std::memory_order_relaxed);
  // Power-of-two sampling keeps a persistent fault visible without flooding.
  if (ShouldLogSampled(n + 1)) spdlog::warn("index apply failed ({} so far): {}", n + 1, s.ToString());
}

bool IndexSink::BlockSizeMatches(const Binding& b, const KvEvent& e) {
  if (b.block_size == 0 || e.block_size == static_cast<int64_t>(b.block_size)) return true;
  if (e.kv_cache_spec_kind && GroupOf(e).kind == GroupKind::kOther) return true;
  uint64_t n = stats_.block_size_mismatch_events.fetch_add(1, std::memory_order_relaxed);
  if ((n & (n + 1)) == 0) {
    spdlog::warn("source {}: BlockStored with block_size {} on model {} (block_size {}) not indexed ({} such "
                 "events so far): check models[].block_size against the engine's --block-size",
                 b.name, e.block_size, b.model_name, b.block_size, n + 1);
  }
  return false;
}

Tier IndexSink::TierOf(const std::optional<std::string_view>& medium) {
  if (!medium || *medium == "GPU") return Tier::kGpu;
  if (auto t = tiers_->Find(*medium)) return *t;
  Result<Tier> t = tiers_->Intern(*medium);
  if (!t.ok()) {
    Count(t.status());
    return Tier::kStorage;  // the registry is full: the least wrong place for an unknown medium
  }
  return t.value();
}

void IndexSink::OnSourceAdded(const SourceSpec& spec) {
  SourceRegistry::Origin origin;
  Result<SourceId> id = sources_->Register(spec.replica, spec.dp_rank, &origin);
  Result<ModelId> model = index_->AddModel(spec.model);
  if (!id.ok() || !model.ok()) {
    Count(!id.ok() ? id.status() : model.status());
    return;
  }
  if (origin == SourceRegistry::Origin::kReused) {
    if (Status s = index_->ResetSource(id.value()); !s.ok()) {
      Count(s);
      return;
    }
  }
  auto b = std::make_unique<Binding>();
  b->source = id.value();
  b->model = model.value();
  b->name = spec.name;
  b->replica = spec.replica;
  b->model_name = spec.model;
  b->dp_rank = spec.dp_rank;
  std::unique_lock lock(mu_);
  if (auto it = block_sizes_.find(spec.model); it != block_sizes_.end()) b->block_size = it->second;
  if (auto it = seeds_.find(spec.name); it != seeds_.end()) {
    b->last_seq.store(it->second.seq, std::memory_order_relaxed);
    b->last_ts.store(it->second.ts, std::memory_order_relaxed);
    b->last_fp.store(it->second.fingerprint, std::memory_order_relaxed);
    b->has_seq.store(true, std::memory_order_release);
    last_seq_by_id_[b->source].store(static_cast<int64_t>(it->second.seq), std::memory_order_relaxed);
    seeds_.erase(it);
  } else {
    last_seq_by_id_[b->source].store(-1, std::memory_order_relaxed);
  }
  bindings_[spec.id] = std::move(b);
}

void IndexSink::OnBatch(const SourceSpec& spec, uint64_t seq, const EventBatch& batch, bool /*replayed*/) {
  std::shared_lock gate(gate_);
  Binding* b = Find(spec.id);
  if (b == nullptr) {
    stats_.unbound_batches.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  for (const KvEvent& e : batch.events) {
    switch (e.type) {
      case EventType::kBlockStored:
        if (!BlockSizeMatches(*b, e)) break;
        Count(index_->Store(b->model, b->source, TierOf(e.medium), GroupOf(e), batch.HashesOf(e),
                            e.parent_block_hash, OriginOf(e)));
        break;
      case EventType::kBlockRemoved:
        Count(index_->Remove(b->model, b->source, TierOf(e.medium), GroupOf(e), batch.HashesOf(e)));
        break;
      case EventType::kAllBlocksCleared:
        Count(index_->ClearSource(b->source, Tier::kGpu));
        break;
    }
  }
  b->last_seq.store(seq, std::memory_order_relaxed);
  b->last_ts.store(batch.ts, std::memory_order_relaxed);
  b->last_fp.store(batch.fingerprint, std::memory_order_relaxed);
  b->has_seq.store(true, std::memory_order_release);
  last_seq_by_id_[b->source].store(static_cast<int64_t>(seq), std::memory_order_relaxed);
  stats_.applied_events.fetch_add(batch.events.size(), std::memory_order_relaxed);
  stats_.applied_batches.fetch_add(1, std::memory_order_relaxed);
}

void IndexSink::OnSourceReset(const SourceSpec& spec, ResetReason /*reason*/) {
  std::shared_lock gate(gate_);
  Binding* b = Find(spec.id);
  if (b == nullptr) return;
  Count(index_->ClearSource(b->source, std::nullopt));
  b->has_seq.store(false, std::memory_order_release);
  last_seq_by_id_[b->source].store(-1, std::memory_order_relaxed);
}

void IndexSink::SeedWatermark(const std::string& source_name, uint64_t last_seq, double last_batch_ts,
                              uint64_t last_batch_fingerprint) {
  std::unique_lock lock(mu_);
  seeds_[source_name] = Seed{last_seq, last_batch_ts, last_batch_fingerprint};
}

void IndexSink::SetModelBlockSize(const std::string& model, uint32_t block_size) {
  std::unique_lock lock(mu_);
  block_sizes_[model] = block_size;
}

void IndexSink::OnSourceStateChanged(const SourceSpec& spec, SourceState /*from*/, SourceState to) {
  Binding* b = Find(spec.id);
  if (b != nullptr) index_->SetSourceState(b->source, to);
}

void IndexSink::OnSourceRemoved(const SourceSpec& spec) {
  std::shared_lock gate(gate_);
  std::unique_ptr<Binding> b;
  {
    std::unique_lock lock(mu_);
    auto it = bindings_.find(spec.id);
    if (it == bindings_.end()) return;
    b = std::move(it->second);
    bindings_.erase(it);
  }
  last_seq_by_id_[b->source].store(-1, std::memory_order_relaxed);
  (void)EndSource(b->source);  // counted there
}

Status IndexSink::EndSource(SourceId id) {
  const Status released = index_->ReleaseSource(id);
  Count(released);
  index_->SetSourceState(id, SourceState::kDisconnected);
  if (released.ok()) {
    sources_->Release(id);
  } else {
    sources_->Retire(id);
  }
  return released;
}

std::vector<SourceWatermark> IndexSink::Watermarks() const {
  std::vector<SourceWatermark> out;
  std::shared_lock lock(mu_);
  out.reserve(bindings_.size());
  for (const auto& [id, b] : bindings_) {
    SourceWatermark w;
    w.source_id = b->source;
    w.replica = b->replica;
    w.dp_rank = b->dp_rank;
    w.model = b->model_name;
    w.has_seq = b->has_seq.load(std::memory_order_acquire);
    w.last_seq = b->last_seq.load(std::memory_order_relaxed);
    w.last_batch_ts = b->last_ts.load(std::memory_order_relaxed);
    w.last_batch_fingerprint = b->last_fp.load(std::memory_order_relaxed);
    out.push_back(std::move(w));
  }
  return out;
}

std::optional<SourceId> IndexSink::FindSource(const std::string& replica, uint32_t dp_rank) const {
  return sources_->Find(replica, dp_rank);
}

}  // namespace kvidx::ingest
