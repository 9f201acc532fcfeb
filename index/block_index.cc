#include "index/block_index.h"

#include <algorithm>
#include <array>
#include <bit>
#include <unordered_map>

#include "index/internal/index_state.h"

namespace kvidx {

BlockIndex::BlockIndex() : BlockIndex(IndexOptions{}) {}
BlockIndex::BlockIndex(const IndexOptions& options) : impl_(std::make_unique<Impl>(options)) {}
BlockIndex::~BlockIndex() = default;

// ------------------------------------------------------------------ models

Result<ModelId> BlockIndex::AddModel(std::string_view name, const ModelOptions& options) {
  MutexLock lock(impl_->admin_mu);
  auto it = impl_->model_ids.find(std::string(name));
  if (it != impl_->model_ids.end()) return it->second;
  uint32_t n = impl_->model_count.load(std::memory_order_relaxed);
  if (n >= kMaxModels) return Status::OutOfRange("too many models");
  if (options.max_query_blocks == 0) return Status::InvalidArgument("max_query_blocks must be > 0");
  auto* m = new Model();
  m->name = std::string(name);
  m->options = options;
  if (impl_->options.core == IndexCore::kRuns) m->runs = std::make_unique<RunModel>(impl_->epoch);
  impl_->models[n].store(m, std::memory_order_release);
  impl_->model_ids.emplace(std::string(name), n);
  impl_->model_count.store(n + 1, std::memory_order_release);
  return n;
}

std::optional<ModelId> BlockIndex::FindModel(std::string_view name) const {
  MutexLock lock(impl_->admin_mu);
  auto it = impl_->model_ids.find(std::string(name));
  if (it == impl_->model_ids.end()) return std::nullopt;
  return it->second;
}

// ------------------------------------------------------------------ ingest

namespace {

// The writer thread's scratch for grouping a write by shard.
ShardOrder& WriterOrder() {
  thread_local ShardOrder order;
  return order;
}

// fn(shard, j, key j) for every key of `keys` (a span or a ShardOrder
// view), in that order, under the key's shard writer lock, taken once per
// run of keys in one shard. The lookups are prefetched ahead in the same
// order.
template <typename Keys, typename Fn>
void ForEachRun(Model& model, Keys keys, Fn fn) {
  const size_t n = keys.size();
  if (n == 0) return;
  WritePipeline<Keys> pipe(model.shards, keys);
  pipe.Advance(0);
  size_t j = 0;
  while (j < n) {
    const uint32_t shard_idx = pipe.ShardIndexOf(j);
    Shard& sh = model.shards[shard_idx];
    Shard::WriteLock lock(sh);
    do {
      fn(sh, j, pipe.KeyOf(j));
      if (++j < n) pipe.Advance(j);
    } while (j < n && pipe.ShardIndexOf(j) == shard_idx);
  }
}

// fn(shard, i, key i) for every key of a write step (at most kGroupStep),
// grouped by shard when the step is long enough to gain from it
// (internal/shard_order.h); i is the key's position in `step`.
template <typename Fn>
void ForEachByShard(Model& model, std::span<const BlockKey> step, ShardOrder& order, Fn fn) {
  if (step.size() < internal::kMinGroupedBlocks) {
    ForEachRun(model, step, fn);
    return;
  }
  order.Build(step);
  ForEachRun(model, order.keys(),
             [&](Shard& sh, size_t j, const ProbeKey& pk) { fn(sh, order.index()[j], pk); });
}

}  // namespace

bool BlockIndex::Impl::Holds(Model& model, const BlockKey& key, uint32_t okey) {
  if (model.runs) return HoldsRuns(model, key, okey);
  ProbeKey pk(key);
  Shard& sh = model.shards[pk.shard()];
  Shard::WriteLock lock(sh);
  uint32_t id = sh.Find(pk);
  return id != kNoId && sh.FindOwner(id, okey) != nullptr;
}

void BlockIndex::Impl::ApplyStore(Shard& sh, ModelId m, SourceData& src, uint32_t okey, const ProbeKey& pk,
                                  uint32_t stamp, bool hit_candidate, bool reused) {
  sh.AssertWriteLocked();
  const uint32_t tier = OwnerTier(okey);
  internal::SourceCounters& c = src.counters;

  uint32_t slot, free_slot;
  uint32_t id = sh.Locate(pk, &slot, &free_slot);
  AWord* o = id == kNoId ? nullptr : sh.FindOwner(id, okey);
  if (o != nullptr) {
    uint32_t old_stamp = OwnerStamp(Ld(o[1]));
    OwnerCounts counts = sh.CountsOf(id, o);
    if (hit_candidate) {
      counts.hits = Saturating(uint64_t{counts.hits} + 1);
    } else {
      counts.ref = Saturating(uint64_t{counts.ref} + 1);
    }
    sh.BeginWrite();
    sh.SetOwner(id, o, stamp, counts);
    sh.EndWrite();
    CountStore(src, tier, /*held=*/true, hit_candidate, reused, old_stamp, stamp);
    return;
  }
  // A new owner. An engine-declared reuse of a block we never saw is a hit
  // on a block whose original store we missed.
  const OwnerCounts counts{1, reused ? 1u : 0u};
  if (id == kNoId) {
    id = sh.InsertRecord(pk, okey, stamp, counts, &epoch, free_slot);
  } else {
    sh.BeginWrite();
    const bool added = sh.AddOwner(id, okey, stamp, counts);
    sh.EndWrite();
    if (!added) {   // the block has kMaxOwners owners: see the header
      internal::SoleWriterAdd(c.unindexed_blocks, 1);
      return;
    }
  }
  src.Members(m, pk.shard()).Insert(id);   // no-op if the source owns the block in another tier
  CountStore(src, tier, /*held=*/false, hit_candidate, reused, 0, stamp);
}

void BlockIndex::Impl::CountStore(SourceData& src, uint32_t tier, bool held, bool hit, bool reused,
                                  uint32_t old_stamp, uint32_t stamp) {
  internal::SourceCounters& c = src.counters;
  const bool gpu = tier == static_cast<uint32_t>(Tier::kGpu);
  if (held) {
    if (hit) {
      internal::SoleWriterAdd(c.hits, 1);
    } else {
      internal::SoleWriterAdd(c.duplicate_copies, 1);
      if (gpu) AddGpuCopies(src, 1);
    }
    if (gpu) {
      src.gpu_hist.Remove(old_stamp);
      src.gpu_hist.Add(stamp);
    }
    return;
  }
  AdjustTierCount(src, tier, 1);
  if (reused) {
    c.hits.fetch_add(1, std::memory_order_relaxed);
    c.drift_reused_unknown.fetch_add(1, std::memory_order_relaxed);
  }
  if (gpu) {
    AddGpuCopies(src, 1);
    src.gpu_hist.Add(stamp);
  }
}

uint32_t BlockIndex::Impl::CountRemove(SourceData& src, uint32_t tier, bool held, bool last, uint32_t stamp) {
  if (!held) {
    internal::SoleWriterAdd(src.counters.drift_remove_unknown, 1);
    return 0;
  }
  if (tier == static_cast<uint32_t>(Tier::kGpu)) AddGpuCopies(src, -1);
  if (last) AdjustTierCount(src, tier, -1);
  return kRemovedCopy | (last ? kRemovedLast : 0) | stamp;
}

uint32_t BlockIndex::Impl::RemoveCopy(Shard& sh, ModelId m, SourceData& src, uint32_t okey, const ProbeKey& pk) {
  sh.AssertWriteLocked();
  uint32_t slot;
  const uint32_t id = sh.Locate(pk, &slot);
  AWord* o = id == kNoId ? nullptr : sh.FindOwner(id, okey);
  const uint32_t tier = OwnerTier(okey);
  if (o == nullptr) return CountRemove(src, tier, /*held=*/false, false, 0);
  const uint32_t stamp = OwnerStamp(Ld(o[1]));
  OwnerCounts counts = sh.CountsOf(id, o);
  const bool last = counts.ref <= 1;
  const uint32_t source = OwnerSource(okey);
  bool left_block = false;   // the source no longer owns the block in any tier
  sh.BeginWrite();
  if (last) {
    left_block = sh.RemoveOwner(id, okey, slot) || !sh.HasSource(id, source);
  } else {
    --counts.ref;
    sh.SetOwner(id, o, stamp, counts);
  }
  sh.EndWrite();
  if (left_block) src.Members(m, pk.shard()).Erase(id);
  return CountRemove(src, tier, /*held=*/true, last, stamp);
}

template <typename Fn>
void BlockIndex::Impl::ForEachSourceRecord(SourceData& src, ModelId m, Model& model, Fn fn) KVIDX_REQUIRES(src.mu) {
  auto* members = src.MembersOf(m);
  if (members == nullptr) return;
  std::vector<uint32_t> ids;
  for (uint32_t s = 0; s < kShards; ++s) {
    internal::RecordSet& set = (*members)[s];
    ids.clear();
    set.AppendTo(&ids);   // a copy: fn may shrink the set
    Shard& sh = model.shards[s];
    for (size_t i = 0; i < ids.size(); i += kClearBatch) {
      Shard::WriteLock lock(sh);
      size_t end = std::min(ids.size(), i + kClearBatch);
      for (size_t j = i; j < end; ++j) {
        if (fn(sh, ids[j])) set.Erase(ids[j]);
      }
    }
  }
}

void BlockIndex::Impl::MaybeRebase(SourceData& src, SourceId source, uint64_t needed) {
  if (src.clock + needed < kStampLimit) return;
  // Keeps the order of the newest kStampKeep ticks; older stamps become 0.
  const uint64_t base = src.clock - kStampKeep;
  src.gpu_hist.Clear();
  uint32_t n_models = model_count.load(std::memory_order_acquire);
  for (ModelId m = 0; m < n_models; ++m) {
    Model* model = GetModel(m);
    if (model == nullptr) continue;
    if (model->runs) {
      RebaseRuns(*model, src, source, static_cast<uint32_t>(base));
      continue;
    }
    ForEachSourceRecord(src, m, *model, [&](Shard& sh, uint32_t id) {
      sh.AssertWriteLocked();
      src.mu.AssertHeld();
      uint32_t n = 0;
      AWord* o = sh.Owners(sh.RecAt(id), &n);
      sh.BeginWrite();
      for (uint32_t k = 0; k < n; ++k) {
        AWord* w = &o[kOwnerWords * k];
        uint32_t okey = Ld(w[0]);
        if (OwnerSource(okey) != source) continue;
        uint32_t ns = RebaseStamp(OwnerStamp(Ld(w[1])), base);
        St(w[1], (Ld(w[1]) & ~internal::kStampMask) | ns);
        if (OwnerTier(okey) == static_cast<uint32_t>(Tier::kGpu)) src.gpu_hist.Add(ns);
      }
      sh.EndWrite();
      return false;
    });
  }
  src.clock -= base;
}

// Validates the ids of a Store/Remove before anything is touched.
static Status CheckWriteIds(const void* model, ModelId model_id, SourceId source, Tier tier) {
  if (model == nullptr) return Status::NotFound("unknown model id " + std::to_string(model_id));
  if (source >= kMaxSources) return Status::OutOfRange("source id out of range");
  if (static_cast<size_t>(tier) >= kMaxTiers) return Status::OutOfRange("tier id out of range");
  return Status::Ok();
}

Status BlockIndex::Store(ModelId model_id, SourceId source, Tier tier, KvGroup group,
                         std::span<const BlockKey> hashes, std::optional<BlockKey> parent,
                         StoreOrigin origin) {
  Model* model = impl_->GetModel(model_id);
  if (Status st = CheckWriteIds(model, model_id, source, tier); !st.ok()) return st;
  SourceData& src = *impl_->GetOrCreateSource(source);
  MutexLock lock(src.mu);
  internal::SourceCounters& c = src.counters;

  bool indexed = group.idx < kUnindexedGroup &&
                 (model->options.index_all_groups || group.kind == GroupKind::kFullAttention ||
                  (group.kind == GroupKind::kAbsent && group.idx == 0));
  if (!indexed) {
    c.unindexed_blocks.fetch_add(hashes.size(), std::memory_order_relaxed);
    return Status::Ok();
  }
  model->MarkIndexed(group.idx);
  if (group.kind == GroupKind::kFullAttention) {
    uint32_t expected = kNoPrimary;
    model->primary_group.compare_exchange_strong(expected, group.idx, std::memory_order_relaxed);
  }
  if (hashes.empty()) return Status::Ok();
  const uint32_t okey = OwnerKey(source, static_cast<uint32_t>(tier), group.idx);
  // See the header: which stores are hits.
  const bool reused = origin == StoreOrigin::kReused;
  const bool hit_candidate =
      reused || (origin == StoreOrigin::kUnknown && !parent.has_value() && tier == Tier::kGpu);
  if (parent.has_value() && !reused && !impl_->Holds(*model, *parent, okey)) {
    c.drift_orphan_store.fetch_add(1, std::memory_order_relaxed);
  }
  if (model->runs) {
    impl_->StoreRuns(*model, src, source, okey, hashes, parent, hit_candidate, reused);
    c.stored_blocks.fetch_add(hashes.size(), std::memory_order_relaxed);
    return Status::Ok();
  }
  // vLLM frees a finished request's blocks tail first, so its LRU evicts the
  // tail before the head: give earlier blocks of the chain newer stamps
  // (within each step of kStoreStep blocks; real events are far shorter).
  internal::EpochDomain::ReadGuard guard(impl_->epoch);   // the pipeline's peeks read shared tables
  ShardOrder& order = WriterOrder();
  for (size_t lo = 0; lo < hashes.size(); lo += kStoreStep) {
    const size_t n = std::min(kStoreStep, hashes.size() - lo);
    impl_->MaybeRebase(src, source, n + 1);
    const uint64_t base = src.clock;
    src.clock += n;
    for (size_t g = 0; g < n; g += internal::kGroupStep) {
      const auto step = hashes.subspan(lo + g, std::min(internal::kGroupStep, n - g));
      ForEachByShard(*model, step, order, [&](Shard& sh, size_t at, const ProbeKey& pk) {
        src.mu.AssertHeld();
        const size_t i = g + at;
        impl_->ApplyStore(sh, model_id, src, okey, pk, static_cast<uint32_t>(base + (n - i)), hit_candidate,
                          reused);
      });
    }
  }
  c.stored_blocks.fetch_add(hashes.size(), std::memory_order_relaxed);
  return Status::Ok();
}

Status BlockIndex::Remove(ModelId model_id, SourceId source, Tier tier, KvGroup group,
                          std::span<const BlockKey> hashes) {
  Model* model = impl_->GetModel(model_id);
  if (Status st = CheckWriteIds(model, model_id, source, tier); !st.ok()) return st;
  SourceData& src = *impl_->GetOrCreateSource(source);
  MutexLock lock(src.mu);
  internal::SourceCounters& c = src.counters;
  // BlockRemoved carries a group but no kind: it is indexed iff stores of
  // that group were (a removal in a group never stored is not drift).
  bool indexed = group.idx < kUnindexedGroup &&
                 (model->options.index_all_groups || group.kind == GroupKind::kFullAttention ||
                  model->WasIndexed(group.idx));
  if (!indexed) {
    c.unindexed_blocks.fetch_add(hashes.size(), std::memory_order_relaxed);
    return Status::Ok();
  }
  const uint32_t okey = OwnerKey(source, static_cast<uint32_t>(tier), group.idx);
  const bool gpu = tier == Tier::kGpu;
  internal::EpochDomain::ReadGuard guard(impl_->epoch);   // the pipeline's peeks read shared tables
  internal::RankHistogramBatch ranks;
  ShardOrder& order = WriterOrder();
  for (size_t lo = 0; lo < hashes.size(); lo += internal::kGroupStep) {
    const auto step = hashes.subspan(lo, std::min(internal::kGroupStep, hashes.size() - lo));
    std::span<uint32_t> removed = order.Notes(step.size());
    if (model->runs) {
      impl_->RemoveRuns(*model, src, okey, step, removed);
    } else {
      ForEachByShard(*model, step, order, [&](Shard& sh, size_t at, const ProbeKey& pk) {
        src.mu.AssertHeld();
        removed[at] = impl_->RemoveCopy(sh, model_id, src, okey, pk);
      });
    }
    // The recency ranks in event order: each removal is ranked among the
    // blocks the source still held when its turn came.
    for (uint32_t note : removed) {
      if ((note & kRemovedCopy) == 0 || !gpu) continue;
      const uint32_t stamp = OwnerStamp(note);
      ranks.Add(src.gpu_hist.Rank(stamp));
      if ((note & kRemovedLast) != 0) src.gpu_hist.Remove(stamp);
    }
  }
  impl_->eviction_rank.Add(ranks);
  c.removed_blocks.fetch_add(hashes.size(), std::memory_order_relaxed);
  return Status::Ok();
}

Status BlockIndex::ClearSource(SourceId source, std::optional<Tier> tier) {
  if (source >= kMaxSources) return Status::OutOfRange("source id out of range");
  SourceData& src = *impl_->GetOrCreateSource(source);
  MutexLock lock(src.mu);
  const bool all = !tier.has_value();
  const uint32_t want_tier = all ? 0 : static_cast<uint32_t>(*tier);
  uint32_t n_models = impl_->model_count.load(std::memory_order_acquire);
  for (ModelId m = 0; m < n_models; ++m) {
    Model* model = impl_->GetModel(m);
    if (model == nullptr) continue;
    if (model->runs) {
      impl_->ClearRuns(*model, source, all ? std::nullopt : std::optional(want_tier));
      continue;
    }
    impl_->ForEachSourceRecord(src, m, *model, [&](Shard& sh, uint32_t id) {
      sh.AssertWriteLocked();
      // Collect first: removing reshapes the owner array.
      uint32_t victims[8];
      uint32_t nv = 0;
      bool gone = false;
      do {
        nv = 0;
        uint32_t n = 0;
        AWord* o = sh.Owners(sh.RecAt(id), &n);
        for (uint32_t k = 0; k < n && nv < 8; ++k) {
          uint32_t okey = OwnerIdentity(Ld(o[kOwnerWords * k]));
          if (OwnerSource(okey) == source && (all || OwnerTier(okey) == want_tier)) victims[nv++] = okey;
        }
        if (nv == 0) break;
        sh.BeginWrite();
        for (uint32_t k = 0; k < nv; ++k) gone = sh.RemoveOwner(id, victims[k]) || gone;
        sh.EndWrite();
      } while (nv == 8 && !gone);
      return gone || !sh.HasSource(id, source);
    });
  }
  internal::SourceCounters& c = src.counters;
  for (size_t t = 0; t < kMaxTiers; ++t) {
    if (all || t == want_tier) c.blocks_per_tier[t].store(0, std::memory_order_relaxed);
  }
  if (all || want_tier == static_cast<uint32_t>(Tier::kGpu)) {
    c.gpu_copies.store(0, std::memory_order_relaxed);
    src.gpu_hist.Clear();
  }
  bool empty = true;
  for (size_t t = 0; t < kMaxTiers; ++t) empty = empty && c.blocks_per_tier[t].load(std::memory_order_relaxed) == 0;
  // No stamp is left to order against, so the clock restarts: replicas that
  // applied different histories before the clear (one was down while the
  // engine restarted) stamp identically after it.
  if (empty) src.clock = 0;
  c.clears.fetch_add(1, std::memory_order_relaxed);
  return Status::Ok();
}

Status BlockIndex::ReleaseSource(SourceId source) {
  if (Status s = ClearSource(source, std::nullopt); !s.ok()) return s;
  SourceData& src = *impl_->GetOrCreateSource(source);
  MutexLock lock(src.mu);
  src.gpu_hist.Release();
  src.members.clear();
  src.members.shrink_to_fit();
  src.restoring.clear();
  src.restoring.shrink_to_fit();
  src.counters.gpu_capacity.store(0, std::memory_order_relaxed);
  return Status::Ok();
}

Status BlockIndex::ResetSource(SourceId source) {
  if (source >= kMaxSources) return Status::OutOfRange("source id out of range");
  SourceData* src = impl_->GetSource(source);
  if (src == nullptr) return Status::Ok();
  MutexLock lock(src->mu);
  internal::SourceCounters& c = src->counters;
  for (const auto& n : c.blocks_per_tier) {
    if (n.load(std::memory_order_relaxed) != 0) {
      return Status::FailedPrecondition("source " + std::to_string(source) + " still holds blocks");
    }
  }
  for (std::atomic<uint64_t>* v : {&c.stored_blocks, &c.removed_blocks, &c.unindexed_blocks, &c.hits,
                                   &c.duplicate_copies, &c.drift_remove_unknown, &c.drift_orphan_store,
                                   &c.drift_reused_unknown, &c.clears, &c.gpu_copies, &c.gpu_capacity}) {
    v->store(0, std::memory_order_relaxed);
  }
  c.state.store(0, std::memory_order_relaxed);
  src->clock = 0;
  return Status::Ok();
}

IndexMemory BlockIndex::Memory() const {
  IndexMemory m;
  const uint32_t n_models = impl_->model_count.load(std::memory_order_acquire);
  for (ModelId id = 0; id < n_models; ++id) {
    Model* model = impl_->GetModel(id);
    if (model == nullptr) continue;
    if (model->runs) m.runs += Impl::MemoryRuns(*model);
    for (Shard& sh : model->shards) {
      Shard::WriteLock lock(sh);
      const Shard::Bytes b = sh.MemoryBytes();
      m.tables += b.table;
      m.records += b.records;
      m.owners += b.owners;
      m.spill += b.spill;
    }
  }
  for (SourceId s = 0; s < kMaxSources; ++s) m.sources += SourceMemoryBytes(s);
  return m;
}

size_t BlockIndex::SourceMemoryBytes(SourceId source) const {
  SourceData* src = impl_->GetSource(source);
  if (src == nullptr) return 0;
  MutexLock lock(src->mu);
  size_t bytes = sizeof(SourceData) + src->gpu_hist.MemoryBytes();
  bytes += (src->members.capacity() + src->restoring.capacity()) * sizeof(void*);
  for (const auto& per_shard : src->members) {
    if (!per_shard) continue;
    bytes += sizeof(*per_shard);
    for (const internal::RecordSet& set : *per_shard) bytes += set.MemoryBytes();
  }
  for (const auto& per_shard : src->restoring) {
    if (!per_shard) continue;
    bytes += sizeof(*per_shard);
    for (const std::vector<uint32_t>& v : *per_shard) bytes += v.capacity() * sizeof(uint32_t);
  }
  return bytes;
}

// ------------------------------------------------------------------ metadata

void BlockIndex::SetSourceState(SourceId source, SourceState state) {
  if (source >= kMaxSources) return;
  impl_->GetOrCreateSource(source)->counters.state.store(static_cast<uint8_t>(state), std::memory_order_relaxed);
}

SourceState BlockIndex::GetSourceState(SourceId source) const {
  SourceData* d = impl_->GetSource(source);
  return d == nullptr ? SourceState::kConnecting
                      : static_cast<SourceState>(d->counters.state.load(std::memory_order_relaxed));
}

void BlockIndex::SetSourceCapacity(SourceId source, uint64_t gpu_blocks) {
  if (source >= kMaxSources) return;
  impl_->GetOrCreateSource(source)->counters.gpu_capacity.store(gpu_blocks, std::memory_order_relaxed);
}

// ------------------------------------------------------------------ queries
//
// FindPrefix in stages: ClampQuery bounds the walk; a QueryPipeline
// prefetches each block's lookup ahead of the walk; SeedCandidates turns
// block 0's owners into the candidate sources; FewCandidates (up to 64,
// as bits of a mask) or ManyCandidates (a list) follow them block by block
// until none continues; StampStates adds each source's state.

namespace {

// Which owners of a block count for one query (group and admitted tiers).
struct OwnerFilter {
  uint32_t group;
  uint64_t tier_mask;

  // 0 = not admitted (other group or tier), else 1 | (GPU ? 2 | hits << 2 : 0).
  uint32_t Verdict(uint32_t okey, const AWord* o) const {
    if (OwnerGroup(okey) != group) return 0;
    uint32_t tier = OwnerTier(okey);
    if (tier >= 64 || ((tier_mask >> tier) & 1) == 0) return 0;   // >= 64 only in a torn read
    return tier == static_cast<uint32_t>(Tier::kGpu) ? 3 | (OwnerHitsView(Ld(o[1])) << 2) : 1;
  }
  // The verdicts of the owners o[p..] of `source` (p ends past them).
  uint32_t VerdictOfSource(const AWord* o, uint32_t& p, uint32_t cnt, uint32_t source) const {
    uint32_t v = 0;
    for (; p < cnt; ++p) {
      uint32_t okey = Ld(o[kOwnerWords * p]);
      if (OwnerSource(okey) != source) break;
      v |= Verdict(okey, &o[kOwnerWords * p]);
    }
    return v;
  }
};

// First owner index >= lo whose source is >= `source` (owners are sorted).
inline uint32_t LowerBoundSource(const AWord* o, uint32_t lo, uint32_t hi, uint32_t source) {
  const uint32_t want = source << 16;
  while (lo < hi) {
    uint32_t mid = (lo + hi) / 2;
    if (Ld(o[kOwnerWords * mid]) < want) lo = mid + 1; else hi = mid;
  }
  return lo;
}

// Block 0 makes the candidates: every source with an admitted owner, in
// ascending source order (owner arrays are sorted by source).
template <typename Pipeline>
void SeedCandidates(const Pipeline& pipe, const OwnerFilter& filter, std::vector<SourceMatch>* res) {
  pipe.ShardOf(0).Read([&] {
    res->clear();
    const AWord* o = nullptr;
    uint32_t cnt = 0;
    bool ok = pipe.Probe(0, &o, &cnt);
    for (uint32_t k = 0; k < cnt; ++k) {
      uint32_t okey = Ld(o[kOwnerWords * k]);
      uint32_t v = filter.Verdict(okey, &o[kOwnerWords * k]);
      if (v == 0) continue;
      uint32_t source = OwnerSource(okey);
      if (res->empty() || res->back().source != source) {
        res->push_back(SourceMatch{});
        res->back().source = source;
        res->back().blocks_with_lower_tiers = 1;
      }
      if (v & 2) {
        SourceMatch& e = res->back();
        e.gpu_blocks = 1;
        e.hits = v >> 2;
        e.hit_blocks = (v >> 2) > 0;
      }
    }
    return ok;
  });
}

// Blocks 1.. : only the sources still matching can continue, so only their
// owners matter -- a merge of two source-sorted lists (the block's owners,
// the candidates), or binary searches when few candidates remain among
// many owners. Work per block is O(min(owners, alive * log owners)), and
// the walk stops as soon as no candidate is left.
//
// FewCandidates: the fast path for up to 64 candidates, as bits of a
// 64-bit mask (bit q = res[q]).
class FewCandidates {
 public:
  FewCandidates(const OwnerFilter& filter, std::vector<SourceMatch>& res) : filter_(filter), res_(res) {
    nres_ = static_cast<uint32_t>(res.size());
    any_alive_ = nres_ == 64 ? ~uint64_t{0} : (uint64_t{1} << nres_) - 1;
    n_alive_ = nres_;
    for (uint32_t q = 0; q < nres_; ++q) {
      gpu_alive_ |= uint64_t{res[q].gpu_blocks} << q;
      srcs_[q] = res[q].source;
      uint8_t& m = slot_map_[srcs_[q] & 63];
      if (m != 0) direct_ = false;
      m = static_cast<uint8_t>(q + 1);
    }
  }

  template <typename Pipeline>
  void Walk(Pipeline& pipe, size_t n) {
    uint32_t end = static_cast<uint32_t>(n);
    for (size_t i = 1; i < n; ++i) {
      pipe.Advance(i);
      Bits b;
      pipe.ShardOf(i).Read([&] {
        const AWord* o = nullptr;
        uint32_t cnt = 0;
        bool ok = pipe.Probe(i, &o, &cnt);
        b = Scan(o, cnt);
        return ok;
      });
      if (!Step(static_cast<uint32_t>(i), b)) {
        end = static_cast<uint32_t>(i);
        break;
      }
    }
    Finish(end);
  }

 private:
  // One probed block's verdicts, bit q per candidate. `repeat`: the block
  // has the memo's owners with the memo's hit counts, so its hits are the
  // previous block's (hits_of_ still holds them).
  struct Bits {
    uint64_t any = 0, gpu = 0, hit = 0;
    bool repeat = false;
  };

  [[gnu::always_inline]] void Mark(uint32_t q, uint32_t v, Bits& b) {
    const uint64_t bit = uint64_t{1} << q;
    if (v & 1) b.any |= bit;
    if (v & 2) b.gpu |= bit;
    if (v >> 2) {
      b.hit |= bit;
      hits_of_[q] = v >> 2;
    }
  }
  // The bits and the filter are locals of the scan, so the owner loops
  // keep them in registers: reached through the read section's closure or
  // a member reference, GCC reloads and stores them once per owner (41
  // instructions per owner on W1 instead of 35). A block with the memo's
  // owners takes the memo's verdicts and reads only its hit counts; one
  // whose hit counts are the memo's too is a repeat (Bits::repeat).
  [[gnu::always_inline]] Bits Scan(const AWord* o, uint32_t cnt) {
    Bits b;
    if (cnt == memo_.cnt && memo_.hit != 0 && SameAsMemo(o, cnt)) {
      b.any = memo_.any;
      b.gpu = memo_.gpu;
      b.hit = memo_.hit;
      b.repeat = true;
      return b;
    }
    ++hits_gen_;   // hits_of_ and the memo's hit fields may change below
    if (cnt == memo_.cnt && SameOwnersAsMemo(o, cnt)) {
      b.any = memo_.any;
      b.gpu = memo_.gpu;
      MarkMemoHits(o, b);
      return b;
    }
    memo_.cnt = kNoMemo;
    const OwnerFilter f = filter_;
    if (n_alive_ * 8 < cnt) {
      ScanBySearch(f, o, cnt, b);
    } else if (direct_) {
      if (cnt <= kMemoOwners) {
        ScanByMap<true>(f, o, cnt, b);
      } else {
        ScanByMap<false>(f, o, cnt, b);
      }
    } else {
      ScanByMerge(f, o, cnt, b);
    }
    return b;
  }
  // Whether owners o[0..cnt) have the identities the memo lists (cnt is
  // the memo's).
  [[gnu::always_inline]] bool SameOwnersAsMemo(const AWord* o, uint32_t cnt) const {
    for (uint32_t k = 0; k < cnt; ++k) {
      if (OwnerIdentity(Ld(o[kOwnerWords * k])) != memo_.ids[k]) return false;
    }
    return true;
  }
  // Whether a block has the memo's owners and, for those that count, the
  // memo's hit counts (along a prefix they usually do: a request that hit
  // block i hit the blocks before it too). One pass without early exits.
  [[gnu::always_inline]] bool SameAsMemo(const AWord* o, uint32_t cnt) const {
    uint32_t diff = 0;
    for (uint32_t k = 0; k < cnt; ++k) {
      diff |= ((Ld(o[kOwnerWords * k]) ^ memo_.ids[k]) & ~internal::kRefMask) |
              ((Ld(o[kOwnerWords * k + 1]) ^ memo_.w1[k]) & memo_.w1_mask[k]);
    }
    return diff == 0;
  }
  // The hit bits of a block whose owners match the memo: only the GPU
  // owners' hit counts can differ from the memo's block. They become the
  // memo's, written with hits_of_ so that the two always agree.
  [[gnu::always_inline]] void MarkMemoHits(const AWord* o, Bits& b) {
    for (uint32_t j = 0; j < memo_.n_gpu; ++j) {
      const uint32_t h = OwnerHitsView(Ld(o[kOwnerWords * memo_.gpu_owner[j] + 1]));
      memo_.w1[memo_.gpu_owner[j]] = h << internal::kStampBits;
      if (h == 0) continue;
      const uint32_t q = memo_.gpu_q[j];
      b.hit |= uint64_t{1} << q;
      hits_of_[q] = h;
    }
    memo_.hit = b.hit;
  }
  // Few candidates among many owners: a binary search per candidate.
  [[gnu::always_inline]] void ScanBySearch(const OwnerFilter& f, const AWord* o, uint32_t cnt, Bits& b) {
    uint32_t p = 0;
    for (uint64_t m = any_alive_; m != 0; m &= m - 1) {
      const uint32_t q = static_cast<uint32_t>(std::countr_zero(m));
      p = LowerBoundSource(o, p, cnt, srcs_[q]);
      Mark(q, f.VerdictOfSource(o, p, cnt, srcs_[q]), b);
    }
  }
  // Owner source -> candidate bit through a 64-entry direct map (entry =
  // q + 1, 0 = none), valid when no two candidates share source % 64
  // (always for up to 64 consecutive source ids). Fills the memo on the
  // way when the owners fit in it.
  // (Two instances: with the memo's stores in it, GCC 12 kept the loop of
  // blocks with too many owners for the memo ~5% slower at 64 replicas.)
  template <bool kFillMemo>
  [[gnu::always_inline]] void ScanByMap(const OwnerFilter& f, const AWord* o, uint32_t cnt, Bits& b) {
    constexpr bool memo = kFillMemo;
    uint32_t n_gpu = 0;
    for (uint32_t k = 0; k < cnt; ++k) {
      const uint32_t okey = Ld(o[kOwnerWords * k]);
      if (memo) {
        memo_.ids[k] = OwnerIdentity(okey);
        memo_.w1_mask[k] = 0;
      }
      const uint32_t source = OwnerSource(okey);
      const uint32_t q1 = slot_map_[source & 63];
      if (q1 == 0 || srcs_[q1 - 1] != source) continue;
      const uint32_t v = f.Verdict(okey, &o[kOwnerWords * k]);
      if (v == 0) continue;
      Mark(q1 - 1, v, b);
      if (memo && (v & 2)) {
        memo_.gpu_owner[n_gpu] = static_cast<uint8_t>(k);
        memo_.w1[k] = (v >> 2) << internal::kStampBits;
        memo_.w1_mask[k] = ~internal::kStampMask;
        memo_.gpu_q[n_gpu++] = static_cast<uint8_t>(q1 - 1);
      }
    }
    if (memo) {
      memo_.any = b.any;
      memo_.gpu = b.gpu;
      memo_.hit = b.hit;
      memo_.n_gpu = n_gpu;
      memo_.cnt = cnt;
    }
  }
  // Otherwise a merge of the owners with every candidate.
  [[gnu::always_inline]] void ScanByMerge(const OwnerFilter& f, const AWord* o, uint32_t cnt, Bits& b) {
    uint32_t q = 0;
    for (uint32_t k = 0; k < cnt; ++k) {
      const uint32_t okey = Ld(o[kOwnerWords * k]);
      const uint32_t v = f.Verdict(okey, &o[kOwnerWords * k]);
      if (v == 0) continue;
      const uint32_t source = OwnerSource(okey);
      while (q < nres_ && srcs_[q] < source) ++q;
      if (q == nres_) break;
      if (srcs_[q] == source) Mark(q, v, b);
    }
  }
  // Ends the prefixes of the candidates block `bi` does not continue;
  // false when none is left.
  bool Step(uint32_t bi, const Bits& b) {
    const uint64_t any_next = any_alive_ & b.any;
    const uint64_t gpu_next = gpu_alive_ & b.gpu;
    for (uint64_t m = any_alive_ & ~any_next; m != 0; m &= m - 1) {
      res_[static_cast<uint32_t>(std::countr_zero(m))].blocks_with_lower_tiers = bi;
      --n_alive_;
    }
    for (uint64_t m = gpu_alive_ & ~gpu_next; m != 0; m &= m - 1) {
      res_[static_cast<uint32_t>(std::countr_zero(m))].gpu_blocks = bi;
    }
    any_alive_ = any_next;
    gpu_alive_ = gpu_next;
    const uint64_t hit = gpu_next & b.hit;
    if ((hit | run_.repeats) != 0) AddHits(hit, b.repeat);
    return any_alive_ != 0;
  }
  // Adds a block's hits (`hit`: the candidates it adds to) to the sums, as
  // one more repeat of the current run when `repeat` allows.
  void AddHits(uint64_t hit, bool repeat) {
    if (repeat && hit == run_.mask && hits_gen_ == run_.gen) {
      if (run_.repeats++ == 0) {
        for (uint64_t m = hit; m != 0; m &= m - 1) {
          const uint32_t q = static_cast<uint32_t>(std::countr_zero(m));
          run_.hits[q] = hits_of_[q];
        }
      }
    } else {
      FlushRun();
      run_.mask = hit;
      run_.gen = hits_gen_;
      for (uint64_t m = hit; m != 0; m &= m - 1) {
        SourceMatch& e = res_[static_cast<uint32_t>(std::countr_zero(m))];
        e.hits += hits_of_[std::countr_zero(m)];
        ++e.hit_blocks;
      }
    }
  }
  // Adds the current run's repeats to the candidates' sums.
  void FlushRun() {
    if (run_.repeats == 0) return;
    for (uint64_t m = run_.mask; m != 0; m &= m - 1) {
      const uint32_t q = static_cast<uint32_t>(std::countr_zero(m));
      res_[q].hits += uint64_t{run_.hits[q]} * run_.repeats;
      res_[q].hit_blocks += run_.repeats;
    }
    run_.repeats = 0;
  }
  // The prefixes still running when the walk ended at block `end`.
  void Finish(uint32_t end) {
    FlushRun();
    for (uint64_t m = any_alive_; m != 0; m &= m - 1) {
      res_[static_cast<uint32_t>(std::countr_zero(m))].blocks_with_lower_tiers = end;
    }
    for (uint64_t m = gpu_alive_; m != 0; m &= m - 1) res_[static_cast<uint32_t>(std::countr_zero(m))].gpu_blocks = end;
  }

  // The last block ScanByMap read, for the next block to compare with:
  // consecutive blocks of a prefix are usually held by the same owners
  // (the replicas that cached block i cached block i - 1 too), and then
  // admit the same candidates; only their hit counts need reading, and
  // often not even those (see SameAsMemo). `any`, `gpu` and the owner and
  // candidate indexes are functions of the identities in `ids`, so a memo
  // filled by a read section that turned out torn is still right for
  // blocks with those identities. The hit fields (`w1`, `hit`) are
  // written together with hits_of_ from the same loads, so a validated
  // block that matches them has exactly the hits hits_of_ holds.
  static constexpr uint32_t kMemoOwners = 32;
  static constexpr uint32_t kNoMemo = ~0u;
  struct Memo {
    uint32_t cnt = kNoMemo;            // owners listed, or kNoMemo
    uint32_t ids[kMemoOwners];         // their OwnerIdentity words
    uint64_t any = 0, gpu = 0;         // the candidates they admit
    uint64_t hit = 0;                  // those with hits on the last memo block
    uint32_t n_gpu = 0;                // GPU owners of candidates:
    uint8_t gpu_owner[kMemoOwners];    //   owner index
    uint8_t gpu_q[kMemoOwners];        //   candidate index
    // Per owner: its hit field on the last memo block, and the mask of
    // what must match in its word 1 (the hit field for GPU owners of
    // candidates, else nothing).
    uint32_t w1[kMemoOwners];
    uint32_t w1_mask[kMemoOwners];
  };

  const OwnerFilter& filter_;
  std::vector<SourceMatch>& res_;
  Memo memo_;
  uint32_t nres_;
  uint64_t any_alive_;
  uint64_t gpu_alive_ = 0;
  uint32_t n_alive_;
  uint32_t hits_of_[64];
  // The last block's hits (`mask`: the candidates it added to) and how
  // many blocks since repeated them exactly, added once per run instead of
  // once per block. `hits` is copied from hits_of_ at the first repeat.
  // `gen`: hits_gen_ when the run's first block was added. A repeat
  // continues the run only if no Scan has written hits_of_ since: a torn
  // read section may rewrite hits_of_ and the memo with the block's new
  // counts, and its validated retry then repeats those, not the run's.
  struct HitRun {
    uint64_t mask = 0;
    uint32_t repeats = 0;
    uint32_t gen = 0;
    uint32_t hits[64];
  };
  HitRun run_;
  uint32_t hits_gen_ = 0;   // bumped by every Scan that may write hits_of_
  uint32_t srcs_[64];
  uint8_t slot_map_[64] = {};
  bool direct_ = true;
};

// The general path, for more than 64 candidates: the candidates are a list
// of indexes into `res` (`alive`), `step` the probed block's verdict per
// alive entry. Both are the PrefixMatch's reused scratch.
class ManyCandidates {
 public:
  ManyCandidates(const OwnerFilter& filter, std::vector<SourceMatch>& res, std::vector<uint32_t>& alive,
                 std::vector<uint32_t>& step)
      : filter_(filter), res_(res), alive_(alive), step_(step) {
    alive_.clear();
    for (uint32_t q = 0; q < res_.size(); ++q) alive_.push_back(q);
  }

  template <typename Pipeline>
  void Walk(Pipeline& pipe, size_t n) {
    for (size_t i = 1; i < n; ++i) {
      pipe.Advance(i);
      step_.resize(alive_.size());
      pipe.ShardOf(i).Read([&] {
        const AWord* o = nullptr;
        uint32_t cnt = 0;
        bool ok = pipe.Probe(i, &o, &cnt);
        Scan(o, cnt);
        return ok;
      });
      if (!Step(static_cast<uint32_t>(i))) break;
    }
  }

 private:
  // step_[a] = the verdicts of alive candidate a's owners: binary searches
  // when few candidates remain among many owners, else a merge.
  [[gnu::always_inline]] void Scan(const AWord* o, uint32_t cnt) {
    const OwnerFilter f = filter_;   // in registers, as in FewCandidates::Scan
    const uint32_t na = static_cast<uint32_t>(alive_.size());
    const bool search = na * 8 < cnt;
    uint32_t p = 0;
    for (uint32_t a = 0; a < na; ++a) {
      const uint32_t source = res_[alive_[a]].source;
      if (search) {
        p = LowerBoundSource(o, p, cnt, source);
      } else {
        while (p < cnt && OwnerSource(Ld(o[kOwnerWords * p])) < source) ++p;
      }
      step_[a] = f.VerdictOfSource(o, p, cnt, source);
    }
  }
  // Extends the prefixes block `bi` continues and drops the other
  // candidates; false when none is left.
  bool Step(uint32_t bi) {
    const uint32_t na = static_cast<uint32_t>(alive_.size());
    uint32_t keep = 0;
    for (uint32_t a = 0; a < na; ++a) {
      const uint32_t v = step_[a];
      SourceMatch& e = res_[alive_[a]];
      if ((v & 2) && e.gpu_blocks == bi) {
        e.gpu_blocks = bi + 1;
        e.hits += v >> 2;
        e.hit_blocks += (v >> 2) > 0;
      }
      if (v & 1) {
        e.blocks_with_lower_tiers = bi + 1;
        alive_[keep++] = alive_[a];
      }
    }
    alive_.resize(keep);
    return keep != 0;
  }

  const OwnerFilter& filter_;
  std::vector<SourceMatch>& res_;
  std::vector<uint32_t>& alive_;
  std::vector<uint32_t>& step_;
};

// The blocks the walk considers (the model's cap applied, recorded in
// `out`), and the group it matches; nullopt when there is nothing to walk.
// Seeds the candidates at block 0 and follows them through the `n` keys
// the pipeline was made for; inside an epoch guard. `alive` and `step` are
// the PrefixMatch's scratch.
template <typename Pipeline>
void WalkQuery(Pipeline&& pipe, size_t n, const OwnerFilter& owners, std::vector<SourceMatch>& res,
               std::vector<uint32_t>& alive, std::vector<uint32_t>& step) {
  pipe.Advance(0);
  SeedCandidates(pipe, owners, &res);
  if (!res.empty() && res.size() <= 64) {
    FewCandidates(owners, res).Walk(pipe, n);
  } else if (res.size() > 64) {
    ManyCandidates(owners, res, alive, step).Walk(pipe, n);
  }
}

std::optional<OwnerFilter> ClampQuery(const Model& model, std::span<const BlockKey>* keys, const PrefixFilter& filter,
                                      PrefixMatch* out) {
  if (keys->size() > model.options.max_query_blocks) {
    *keys = keys->first(model.options.max_query_blocks);
    out->truncated = true;
  }
  out->query_blocks = static_cast<uint32_t>(keys->size());
  const uint32_t group = filter.group.has_value() ? *filter.group : model.PrimaryGroup();
  if (keys->empty() || group >= kUnindexedGroup) return std::nullopt;
  return OwnerFilter{group, filter.tier_mask};
}

}  // namespace

inline void BlockIndex::Impl::StampStates(std::vector<SourceMatch>* res) const {
  for (SourceMatch& e : *res) {
    SourceData* d = GetSource(e.source);
    e.state = d == nullptr ? SourceState::kConnecting
                           : static_cast<SourceState>(d->counters.state.load(std::memory_order_relaxed));
  }
}

Status BlockIndex::FindPrefix(ModelId model_id, std::span<const BlockKey> keys, const PrefixFilter& filter,
                              PrefixMatch* out) const {
  out->Reset();
  const Model* model = impl_->GetModel(model_id);
  if (model == nullptr) return Status::NotFound("unknown model id " + std::to_string(model_id));
  const std::optional<OwnerFilter> owners = ClampQuery(*model, &keys, filter, out);
  if (!owners.has_value()) return Status::Ok();
  std::vector<SourceMatch>& res = out->sources;

  internal::EpochDomain::ReadGuard guard(impl_->epoch);
  if (model->runs) {
    impl_->FindRuns(*model, keys, owners->group, owners->tier_mask, &res);
  } else if (keys.size() <= kShortQueryBlocks) {
    WalkQuery(QueryPipeline(model->shards, keys), keys.size(), *owners, res, out->alive_, out->step_);
  } else {
    WalkQuery(LongQueryPipeline(model->shards, keys), keys.size(), *owners, res, out->alive_, out->step_);
  }
  impl_->StampStates(&res);
  return Status::Ok();
}

Status BlockIndex::PeekEvictionOrder(ModelId model_id, SourceId source, size_t n,
                                     std::vector<BlockKey>* out) const {
  out->clear();
  Model* model = impl_->GetModel(model_id);
  if (model == nullptr) return Status::NotFound("unknown model id " + std::to_string(model_id));
  SourceData* src = impl_->GetSource(source);
  if (src == nullptr) return Status::Ok();
  MutexLock lock(src->mu);
  std::vector<std::pair<uint32_t, BlockKey>> all;
  if (model->runs) impl_->StampedRuns(*model, source, &all);
  impl_->ForEachSourceRecord(*src, model_id, *model, [&](Shard& sh, uint32_t id) {
    uint32_t cnt = 0;
    AWord* o = sh.Owners(sh.RecAt(id), &cnt);
    for (uint32_t k = 0; k < cnt; ++k) {
      uint32_t okey = Ld(o[kOwnerWords * k]);
      if (OwnerSource(okey) == source && OwnerTier(okey) == static_cast<uint32_t>(Tier::kGpu)) {
        all.emplace_back(OwnerStamp(Ld(o[kOwnerWords * k + 1])), sh.KeyOf(id));
      }
    }
    return false;
  });
  auto less = [](const auto& a, const auto& b) {
    if (a.first != b.first) return a.first < b.first;
    return a.second.ToString() < b.second.ToString();
  };
  size_t k = std::min(n, all.size());
  std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(k), all.end(), less);
  for (size_t i = 0; i < k; ++i) out->push_back(all[i].second);
  return Status::Ok();
}

// ------------------------------------------------------------------ stats

SourceIndexStats BlockIndex::GetSourceStats(SourceId source) const {
  SourceIndexStats s;
  SourceData* d = impl_->GetSource(source);
  if (d == nullptr) return s;
  const internal::SourceCounters& c = d->counters;
  auto ld = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  s.state = static_cast<SourceState>(c.state.load(std::memory_order_relaxed));
  s.stored_blocks = ld(c.stored_blocks);
  s.removed_blocks = ld(c.removed_blocks);
  s.unindexed_blocks = ld(c.unindexed_blocks);
  s.hits = ld(c.hits);
  s.duplicate_copies = ld(c.duplicate_copies);
  s.drift_remove_unknown = ld(c.drift_remove_unknown);
  s.drift_orphan_store = ld(c.drift_orphan_store);
  s.drift_reused_unknown = ld(c.drift_reused_unknown);
  s.clears = ld(c.clears);
  s.gpu_copies = ld(c.gpu_copies);
  s.gpu_capacity = ld(c.gpu_capacity);
  s.over_capacity = s.gpu_capacity != 0 && s.gpu_copies > s.gpu_capacity;
  for (size_t t = 0; t < kMaxTiers; ++t) {
    uint64_t v = ld(c.blocks_per_tier[t]);
    if (v != 0) s.blocks_per_tier.emplace_back(static_cast<Tier>(t), v);
  }
  return s;
}

RecencyRankHistogram BlockIndex::GetEvictionRankHistogram() const {
  RecencyRankHistogram h;
  const internal::RankHistogramCounters& c = impl_->eviction_rank;
  for (size_t i = 0; i < RecencyRankHistogram::kBuckets; ++i) h.counts[i] = c.counts[i].load(std::memory_order_relaxed);
  h.count = c.count.load(std::memory_order_relaxed);
  h.sum = static_cast<double>(c.sum_micro.load(std::memory_order_relaxed)) / 1e6;
  return h;
}

uint64_t BlockIndex::BlockCount(ModelId model_id) const {
  const Model* model = impl_->GetModel(model_id);
  if (model == nullptr) return 0;
  if (model->runs) return Impl::BlockCountRuns(*const_cast<Model*>(model));
  uint64_t n = 0;
  for (const Shard& sh : model->shards) n += sh.size();
  return n;
}

// ------------------------------------------------------------------ persistence

namespace {
bool KeyLess(const BlockKey& a, const BlockKey& b) {
  if (a.wire() != b.wire()) return a.wire() < b.wire();
  if (a.is_bytes() != b.is_bytes()) return !a.is_bytes();
  if (a.byte_len() != b.byte_len()) return a.byte_len() < b.byte_len();
  uint8_t x[BlockKey::kMaxBytes] = {}, y[BlockKey::kMaxBytes] = {};
  a.CopyBytes(x);
  b.CopyBytes(y);
  return std::memcmp(x, y, a.byte_len()) < 0;
}
bool OwnerLess(const OwnerRecord& a, const OwnerRecord& b) {
  if (a.model != b.model) return a.model < b.model;
  if (!(a.key == b.key)) return KeyLess(a.key, b.key);
  if (a.source != b.source) return a.source < b.source;
  if (a.tier != b.tier) return a.tier < b.tier;
  return a.group < b.group;
}
}  // namespace

Status BlockIndex::LookupBlock(ModelId m, const BlockKey& key, std::vector<OwnerRecord>* out) const {
  out->clear();
  Model* model = impl_->GetModel(m);
  if (model == nullptr) return Status::NotFound("model id " + std::to_string(m));
  if (model->runs) {
    impl_->LookupRuns(*model, m, key, out);
    return Status::Ok();
  }
  ProbeKey pk(key);
  Shard& sh = model->shards[pk.shard()];
  Shard::WriteLock lock(sh);
  uint32_t id = sh.Find(pk);
  if (id == kNoId) return Status::Ok();
  uint32_t cnt = 0;
  AWord* o = sh.Owners(sh.RecAt(id), &cnt);
  for (uint32_t k = 0; o != nullptr && k < cnt; ++k) {
    const AWord* w = &o[kOwnerWords * k];
    uint32_t okey = Ld(w[0]);
    OwnerCounts counts = sh.CountsOf(id, w);
    out->push_back(OwnerRecord{m, key, OwnerSource(okey), static_cast<Tier>(OwnerTier(okey)), OwnerGroup(okey),
                               counts.ref, counts.hits, OwnerStamp(Ld(w[1]))});
  }
  return Status::Ok();
}

void BlockIndex::Dump(IndexSnapshot* out) const {
  DumpUnsorted(out);
  SortSnapshot(out);
}

void SortSnapshot(IndexSnapshot* snapshot) {
  std::sort(snapshot->owners.begin(), snapshot->owners.end(), OwnerLess);
  for (OwnerRecord& o : snapshot->owners) o.follows = false;
}

void BlockIndex::DumpUnsorted(IndexSnapshot* out) const {
  out->models.clear();
  out->source_clocks.clear();
  out->owners.clear();
  uint32_t n_models = impl_->model_count.load(std::memory_order_acquire);
  {
    // One allocation instead of log2(n) doublings of a vector that may reach
    // hundreds of MB while writers are held back. Records undercount owners
    // (blocks with several owners), so add a margin.
    size_t records = 0;
    for (ModelId m = 0; m < n_models; ++m) {
      Model* model = impl_->GetModel(m);
      records += model->runs ? Impl::BlockCountRuns(*model) : 0;
      for (const Shard& sh : model->shards) records += sh.size();
    }
    out->owners.reserve(records + records / 2 + 1024);
  }
  for (ModelId m = 0; m < n_models; ++m) {
    Model* model = impl_->GetModel(m);
    out->models.emplace_back(model->name, model->options);
    if (model->runs) impl_->DumpRuns(*model, m, &out->owners);
    for (Shard& sh : model->shards) {
      Shard::WriteLock lock(sh);
      uint32_t top = sh.records_allocated();
      for (uint32_t id = 0; id < top; ++id) {
        if (!sh.IsLive(id)) continue;
        BlockKey key = sh.KeyOf(id);
        uint32_t cnt = 0;
        AWord* o = sh.Owners(sh.RecAt(id), &cnt);
        for (uint32_t k = 0; k < cnt; ++k) {
          const AWord* w = &o[kOwnerWords * k];
          uint32_t okey = Ld(w[0]);
          OwnerCounts counts = sh.CountsOf(id, w);
          out->owners.push_back(OwnerRecord{m, key, OwnerSource(okey), static_cast<Tier>(OwnerTier(okey)),
                                            OwnerGroup(okey), counts.ref, counts.hits, OwnerStamp(Ld(w[1]))});
        }
      }
    }
  }
  for (SourceId s = 0; s < kMaxSources; ++s) {
    SourceData* d = impl_->GetSource(s);
    if (d == nullptr) continue;
    MutexLock lock(d->mu);
    if (d->clock != 0) out->source_clocks.emplace_back(s, d->clock);
  }
}

void BlockIndex::Impl::BuildRestoredMembership() {
  for (SourceId s = 0; s < kMaxSources; ++s) {
    SourceData* src = GetSource(s);
    if (src == nullptr) continue;
    MutexLock lock(src->mu);
    if (src->restoring.empty()) continue;
    for (ModelId m = 0; m < src->restoring.size(); ++m) {
      if (!src->restoring[m]) continue;
      for (uint32_t shard = 0; shard < kShards; ++shard) {
        std::vector<uint32_t>& ids = (*src->restoring[m])[shard];
        // Ascending already for Dump()-ordered input (fresh record ids are
        // handed out in order); other orders, and a source owning a block
        // in several tiers, need the sort and dedupe.
        if (!std::is_sorted(ids.begin(), ids.end())) std::sort(ids.begin(), ids.end());
        ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
        src->Members(m, shard).InsertSorted(ids);
      }
    }
    src->restoring.clear();
    src->restoring.shrink_to_fit();
  }
}

Status BlockIndex::Restore(const IndexSnapshot& snap) {
  if (impl_->model_count.load(std::memory_order_acquire) != 0) {
    return Status::FailedPrecondition("Restore needs an empty index");
  }
  for (const auto& [name, options] : snap.models) {
    Result<ModelId> r = AddModel(name, options);
    if (!r.ok()) return r.status();
  }
  // Sorted input (what Dump writes): owners of one block are adjacent and
  // every block appears in one run, so a new key needs no lookup and a
  // repeat of the previous key goes straight to its record. The order is
  // checked as we go; out-of-order input takes the lookup path.
  // Snapshots written before stamps became 24-bit may carry larger clocks
  // and stamps: such a source is rebased as a Store would (newest ticks
  // kept, older ones folded into 0); a stamp still too large is clamped.
  std::unordered_map<SourceId, uint64_t> stamp_base;
  for (const auto& [s, clock] : snap.source_clocks) {
    if (s >= kMaxSources) return Status::Corruption("bad source id in clocks");
    if (clock > internal::kStampMask) stamp_base[s] = clock - kStampKeep;
  }
  auto restored_stamp = [&stamp_base](SourceId s, uint32_t stamp) -> uint32_t {
    auto it = stamp_base.find(s);
    uint32_t v = it == stamp_base.end() ? stamp : RebaseStamp(stamp, it->second);
    return v > internal::kStampMask ? internal::kStampMask : v;
  };
  const OwnerRecord* prev = nullptr;
  uint32_t prev_id = kNoId;
  bool sorted_so_far = true;
  // Every owner applied before an error still gets its membership.
  Status applied = [&]() -> Status {
    for (const OwnerRecord& o : snap.owners) {
      if (prev != nullptr && !OwnerLess(*prev, o)) sorted_so_far = false;
      const bool same_block = sorted_so_far && prev != nullptr && prev->model == o.model && prev->key == o.key;
      Model* model = impl_->GetModel(o.model);
      if (model == nullptr) return Status::Corruption("owner of unknown model " + std::to_string(o.model));
      if (o.source >= kMaxSources || static_cast<size_t>(o.tier) >= kMaxTiers || o.refcount == 0) {
        return Status::Corruption("bad owner record for " + o.key.ToString());
      }
      if (o.group >= kUnindexedGroup) {
        return Status::Corruption("owner record of group " + std::to_string(o.group) + " (groups >= " +
                                  std::to_string(kUnindexedGroup) + " are not indexed) for " + o.key.ToString());
      }
      const uint32_t stamp = restored_stamp(o.source, o.stamp);
      SourceData& src = *impl_->GetOrCreateSource(o.source);
      MutexLock lock(src.mu);
      uint32_t okey = OwnerKey(o.source, static_cast<uint32_t>(o.tier), o.group);
      // The source's counters and recency for a restored owner (both cores).
      auto count_owner = [&] {
        src.mu.AssertHeld();
        impl_->AdjustTierCount(src, static_cast<uint32_t>(o.tier), 1);
        if (o.tier == Tier::kGpu) {
          impl_->AddGpuCopies(src, o.refcount);
          src.gpu_hist.Add(stamp);
        }
      };
      if (model->runs) {
        const OwnerRecord* after = o.follows && prev != nullptr && prev->model == o.model ? prev : nullptr;
        if (Status st = impl_->RestoreRuns(*model, o, okey, stamp, after); !st.ok()) return st;
        if (!model->WasIndexed(o.group)) model->MarkIndexed(o.group);
        count_owner();
        prev = &o;
        continue;
      }
      ProbeKey pk(o.key);
      Shard& sh = model->shards[pk.shard()];
      uint32_t id;
      {
        Shard::WriteLock slock(sh);
        if (same_block) {
          id = prev_id;            // strictly greater owner of the same block: not a duplicate
        } else if (sorted_so_far) {
          id = kNoId;              // keys only grow: this one cannot exist yet
        } else {
          id = sh.Find(pk);
          if (id != kNoId && sh.FindOwner(id, okey) != nullptr) {
            return Status::Corruption("duplicate owner record for " + o.key.ToString());
          }
        }
        const OwnerCounts counts{o.refcount, o.hits};
        if (id == kNoId) {
          id = sh.InsertRecord(pk, okey, stamp, counts, &impl_->epoch);
        } else {
          sh.BeginWrite();
          const bool added = sh.AddOwner(id, okey, stamp, counts);
          sh.EndWrite();
          if (!added) {
            return Status::Corruption("block " + o.key.ToString() + " has more than " +
                                      std::to_string(internal::kMaxOwners) + " owners");
          }
        }
      }
      prev = &o;
      prev_id = id;
      // An owner exists only because a store of its group was indexed; a
      // model that forgot that would file the group's next removals as
      // unindexed and keep the copies.
      if (!model->WasIndexed(o.group)) model->MarkIndexed(o.group);
      // Membership is built in bulk at the end: one append per owner instead
      // of a set insert that touches several cold lines.
      src.Restoring(o.model, pk.shard()).push_back(id);
      count_owner();
    }
    return Status::Ok();
  }();
  impl_->BuildRestoredMembership();
  if (!applied.ok()) return applied;
  for (ModelId m = 0; m < snap.models.size(); ++m) impl_->GetModel(m)->InferPrimaryGroup();
  for (const auto& [s, clock] : snap.source_clocks) {
    SourceData& src = *impl_->GetOrCreateSource(s);
    MutexLock lock(src.mu);
    auto it = stamp_base.find(s);
    src.clock = it == stamp_base.end() ? clock : clock - it->second;
  }
  return Status::Ok();
}

bool SameContents(const IndexSnapshot& a, const IndexSnapshot& b) {
  auto same_owner = [](OwnerRecord x, OwnerRecord y) {
    x.follows = y.follows = false;
    return x == y;
  };
  if (a.models.size() != b.models.size() || a.source_clocks != b.source_clocks ||
      !std::equal(a.owners.begin(), a.owners.end(), b.owners.begin(), b.owners.end(), same_owner)) {
    return false;
  }
  for (size_t i = 0; i < a.models.size(); ++i) {
    const ModelOptions& x = a.models[i].second;
    const ModelOptions& y = b.models[i].second;
    if (a.models[i].first != b.models[i].first || x.max_query_blocks != y.max_query_blocks ||
        x.index_all_groups != y.index_all_groups) {
      return false;
    }
  }
  return true;
}

void BlockIndex::TestOnlySetClock(SourceId source, uint64_t clock) {
  if (source >= kMaxSources) return;
  SourceData& src = *impl_->GetOrCreateSource(source);
  MutexLock lock(src.mu);
  src.clock = clock;
}

}  // namespace kvidx
