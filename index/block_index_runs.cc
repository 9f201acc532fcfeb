// BlockIndex on the run core (IndexCore::kRuns; docs/RUN_CORE.md): each
// model's blocks in one RunStore, written under the model's writer lock
// and read without a lock inside the index's epoch guard. BlockIndex's
// calls (block_index.cc) keep their checks, counters and recency ranks and
// hand the blocks here; the owner identity is the per-block core's owner
// word (source, tier, group), so both cores count and answer alike.
#include <algorithm>

#include "index/internal/index_state.h"

namespace kvidx {
namespace {

using internal::KeyNote;
using internal::RunStore;

Status BytesFormKey(const BlockKey& key) {
  return Status::InvalidArgument("block hash " + key.ToString() +
                                 " is in bytes form: the run core keeps integer-form hashes only");
}

// `keys` as the run store takes them; nullopt-like failure (false) when one
// is in bytes form, which the run core does not keep yet.
bool ToWires(std::span<const BlockKey> keys, std::vector<uint64_t>* out, size_t* bad = nullptr) {
  out->resize(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i].is_bytes()) {
      if (bad != nullptr) *bad = i;
      return false;
    }
    (*out)[i] = keys[i].wire();
  }
  return true;
}

// A query's keys as the run store reads them, without a copy; a
// bytes-form key is never in a run store, so the walk ends before it.
struct StoreKeys {
  std::span<const BlockKey> keys;
  size_t size() const { return keys.size(); }
  uint64_t wire(size_t i) const { return keys[i].wire(); }
  bool integer(size_t i) const { return !keys[i].is_bytes(); }
};

std::vector<uint64_t>& WireScratch() {
  thread_local std::vector<uint64_t> wires;
  return wires;
}

OwnerRecord RecordOf(ModelId m, const RunStore::Holding& h) {
  return OwnerRecord{m,
                     BlockKey::FromU64(h.key),
                     OwnerSource(h.owner),
                     static_cast<Tier>(OwnerTier(h.owner)),
                     OwnerGroup(h.owner),
                     h.copies,
                     Saturating(h.hits),
                     h.stamp.value_or(0)};
}

}  // namespace

Status BlockIndex::Impl::StoreRuns(Model& model, SourceData& src, SourceId source, uint32_t okey,
                                   std::span<const BlockKey> hashes, const std::optional<BlockKey>& parent,
                                   bool hit_candidate, bool reused) {
  std::vector<uint64_t>& wires = WireScratch();
  size_t bad = 0;
  if (!ToWires(hashes, &wires, &bad)) return BytesFormKey(hashes[bad]);
  const uint64_t parent_wire = parent.has_value() ? parent->wire() : 0;
  const uint64_t* before = parent.has_value() && !parent->is_bytes() ? &parent_wire : nullptr;
  const uint32_t tier = OwnerTier(okey);
  thread_local std::vector<KeyNote> notes;
  // Steps as the per-block core takes them: one rebase always makes room.
  for (size_t lo = 0; lo < wires.size(); lo += kStoreStep) {
    const size_t n = std::min(kStoreStep, wires.size() - lo);
    MaybeRebase(src, source, n + 1);
    const uint64_t base = src.clock;
    src.clock += n;
    notes.resize(n);
    {
      MutexLock lock(model.runs->mu);
      model.runs->store.Store(okey, std::span(wires).subspan(lo, n), lo == 0 ? before : &wires[lo - 1],
                              static_cast<uint32_t>(base + n), {hit_candidate, reused}, notes.data());
    }
    for (size_t i = 0; i < n; ++i) {
      const KeyNote& note = notes[i];
      CountStore(src, tier, note.kind != KeyNote::kNew, note.kind == KeyNote::kHit, reused, note.stamp,
                 static_cast<uint32_t>(base + (n - i)));
    }
  }
  return Status::Ok();
}

Status BlockIndex::Impl::RemoveRuns(Model& model, SourceData& src, uint32_t okey, std::span<const BlockKey> hashes,
                                    std::span<uint32_t> removed) {
  std::vector<uint64_t>& wires = WireScratch();
  size_t bad = 0;
  if (!ToWires(hashes, &wires, &bad)) return BytesFormKey(hashes[bad]);
  thread_local std::vector<KeyNote> notes;
  notes.resize(wires.size());
  {
    MutexLock lock(model.runs->mu);
    model.runs->store.Remove(okey, wires, notes.data());
  }
  const uint32_t tier = OwnerTier(okey);
  for (size_t i = 0; i < notes.size(); ++i) {
    const KeyNote& note = notes[i];
    const bool held = note.kind == KeyNote::kRemovedCopy || note.kind == KeyNote::kRemovedLast;
    removed[i] = CountRemove(src, tier, held, note.kind == KeyNote::kRemovedLast, note.stamp);
  }
  return Status::Ok();
}

bool BlockIndex::Impl::HoldsRuns(Model& model, const BlockKey& key, uint32_t okey) {
  if (key.is_bytes()) return false;
  MutexLock lock(model.runs->mu);
  return model.runs->store.Copies(okey, key.wire()) > 0;
}

void BlockIndex::Impl::ClearRuns(Model& model, SourceId source, std::optional<uint32_t> tier) {
  MutexLock lock(model.runs->mu);
  std::vector<uint32_t> owners;
  model.runs->store.Owners(&owners);
  for (uint32_t okey : owners) {
    if (OwnerSource(okey) != source || (tier.has_value() && OwnerTier(okey) != *tier)) continue;
    model.runs->store.Clear(okey);
  }
}

void BlockIndex::Impl::RebaseRuns(Model& model, SourceData& src, SourceId source, uint32_t base) {
  MutexLock lock(model.runs->mu);
  std::vector<uint32_t> owners, stamps;
  model.runs->store.Owners(&owners);
  for (uint32_t okey : owners) {
    if (OwnerSource(okey) != source) continue;
    stamps.clear();
    model.runs->store.Rebase(okey, base, &stamps);
    if (OwnerTier(okey) != static_cast<uint32_t>(Tier::kGpu)) continue;
    for (uint32_t stamp : stamps) src.gpu_hist.Add(stamp);
  }
}

void BlockIndex::Impl::FindRuns(const Model& model, std::span<const BlockKey> keys, uint32_t group,
                                uint64_t tier_mask, std::vector<SourceMatch>* res) const {
  thread_local std::vector<RunStore::SourcePrefix> got;
  // Admits the query's group and tiers; any value (a torn read's) is safe.
  auto classify = [group, tier_mask](uint32_t okey) -> std::optional<RunStore::OwnerClass> {
    const uint32_t tier = OwnerTier(okey);
    if (OwnerGroup(okey) != group || ((tier_mask >> tier) & 1) == 0) return std::nullopt;
    return RunStore::OwnerClass{OwnerSource(okey), tier == static_cast<uint32_t>(Tier::kGpu)};
  };
  model.runs->store.SourcePrefixes(StoreKeys{keys}, classify, &got);
  // In ascending source order (PrefixMatch's contract): sorted as 8-byte
  // (source, index) keys, not as 40-byte matches.
  thread_local std::vector<uint64_t> order;
  order.clear();
  for (size_t j = 0; j < got.size(); ++j) order.push_back(uint64_t{got[j].source} << 32 | j);
  std::sort(order.begin(), order.end());
  res->clear();
  for (uint64_t o : order) {
    const RunStore::SourcePrefix& p = got[o & 0xFFFFFFFFu];
    SourceMatch m;
    m.source = p.source;
    m.gpu_blocks = p.gpu_blocks;
    m.blocks_with_lower_tiers = p.any_blocks;
    m.hit_blocks = p.hit_blocks;
    m.hits = p.hits;
    res->push_back(m);
  }
}

void BlockIndex::Impl::StampedRuns(Model& model, SourceId source,
                                   std::vector<std::pair<uint32_t, BlockKey>>* gpu) const {
  MutexLock lock(model.runs->mu);
  model.runs->store.ForEachHolding([&](const RunStore::Holding& h) {
    if (OwnerSource(h.owner) != source || OwnerTier(h.owner) != static_cast<uint32_t>(Tier::kGpu)) return;
    gpu->emplace_back(h.stamp.value_or(0), BlockKey::FromU64(h.key));
  });
}

void BlockIndex::Impl::LookupRuns(Model& model, ModelId m, const BlockKey& key, std::vector<OwnerRecord>* out) const {
  if (key.is_bytes()) return;
  thread_local std::vector<RunStore::Holding> rows;
  {
    MutexLock lock(model.runs->mu);
    model.runs->store.HoldingsOf(key.wire(), &rows);
  }
  // Owner order: source, tier, group (the owner word's order).
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.owner < b.owner; });
  for (const RunStore::Holding& h : rows) out->push_back(RecordOf(m, h));
}

void BlockIndex::Impl::DumpRuns(Model& model, ModelId m, std::vector<OwnerRecord>* out) const {
  MutexLock lock(model.runs->mu);
  model.runs->store.ForEachHolding([&](const RunStore::Holding& h) { out->push_back(RecordOf(m, h)); });
}

Status BlockIndex::Impl::RestoreRuns(Model& model, const OwnerRecord& o, uint32_t okey, uint32_t stamp) {
  if (o.key.is_bytes()) return BytesFormKey(o.key);
  const RunStore::Holding row{o.key.wire(), okey, o.refcount, o.hits, stamp, std::nullopt};
  MutexLock lock(model.runs->mu);
  if (model.runs->store.Restore(std::span(&row, 1)) == 0) {
    return Status::Corruption("duplicate owner record for " + o.key.ToString());
  }
  return Status::Ok();
}

uint64_t BlockIndex::Impl::BlockCountRuns(Model& model) {
  MutexLock lock(model.runs->mu);
  return model.runs->store.HeldKeys();
}

size_t BlockIndex::Impl::MemoryRuns(Model& model) {
  MutexLock lock(model.runs->mu);
  return model.runs->store.MemoryBytes();
}

}  // namespace kvidx
