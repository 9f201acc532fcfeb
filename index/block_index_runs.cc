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

using internal::KeyForm;
using internal::KeyNote;
using internal::RunStore;

// A bytes-form key's form (its length code and leading digest bytes), as
// the per-block core's side keys hold it; code 0 for integer form.
KeyForm FormOf(const BlockKey& key) {
  KeyForm f;
  if (!key.is_bytes()) return f;
  const ProbeKey pk(key);
  f.code = pk.code;
  std::copy(std::begin(pk.head), std::end(pk.head), f.head);
  return f;
}

// The BlockKey a run store entry (wire, form) stands for.
BlockKey KeyOf(uint64_t wire, const KeyForm& form) { return internal::KeyFromParts(wire, form.code, form.head); }

// `keys` as the run store takes them: wires, and forms when one is in
// bytes form (empty otherwise: integer-form writes and queries pay no
// form). The calling thread's scratch.
struct Converted {
  std::vector<uint64_t> wires;
  std::vector<KeyForm> forms;
};
Converted& Convert(std::span<const BlockKey> keys) {
  thread_local Converted c;
  c.wires.resize(keys.size());
  c.forms.clear();
  bool bytes = false;
  for (size_t i = 0; i < keys.size(); ++i) {
    c.wires[i] = keys[i].wire();
    bytes = bytes || keys[i].is_bytes();
  }
  if (bytes) {
    c.forms.resize(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) c.forms[i] = FormOf(keys[i]);
  }
  return c;
}

// A query's keys as the run store reads them, without a copy of the
// integer-form ones; `forms` is set when one is in bytes form.
struct StoreKeys {
  std::span<const BlockKey> keys;
  const KeyForm* forms = nullptr;
  size_t size() const { return keys.size(); }
  uint64_t wire(size_t i) const { return keys[i].wire(); }
  const KeyForm* form(size_t i) const { return forms != nullptr && forms[i].code != 0 ? &forms[i] : nullptr; }
  bool any_form() const { return forms != nullptr; }
};

OwnerRecord RecordOf(ModelId m, const RunStore::Holding& h) {
  return OwnerRecord{m,
                     KeyOf(h.key, h.form),
                     OwnerSource(h.owner),
                     static_cast<Tier>(OwnerTier(h.owner)),
                     OwnerGroup(h.owner),
                     h.copies,
                     Saturating(h.hits),
                     h.stamp.value_or(0)};
}

}  // namespace

void BlockIndex::Impl::StoreRuns(Model& model, SourceData& src, SourceId source, uint32_t okey,
                                 std::span<const BlockKey> hashes, const std::optional<BlockKey>& parent,
                                 bool hit_candidate, bool reused) {
  const Converted& keys = Convert(hashes);
  const std::vector<uint64_t>& wires = keys.wires;
  const uint64_t parent_wire = parent.has_value() ? parent->wire() : 0;
  const KeyForm parent_form = parent.has_value() ? FormOf(*parent) : KeyForm{};
  const uint64_t* before = parent.has_value() ? &parent_wire : nullptr;
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
      const std::span<const KeyForm> forms =
          keys.forms.empty() ? std::span<const KeyForm>() : std::span(keys.forms).subspan(lo, n);
      model.runs->store.Store(okey, std::span(wires).subspan(lo, n), lo == 0 ? before : &wires[lo - 1],
                              static_cast<uint32_t>(base + n), {hit_candidate, reused}, notes.data(), forms,
                              lo == 0 ? &parent_form : (keys.forms.empty() ? nullptr : &keys.forms[lo - 1]));
    }
    for (size_t i = 0; i < n; ++i) {
      const KeyNote& note = notes[i];
      CountStore(src, tier, note.kind != KeyNote::kNew, note.kind == KeyNote::kHit, reused, note.stamp,
                 static_cast<uint32_t>(base + (n - i)));
    }
  }
}

void BlockIndex::Impl::RemoveRuns(Model& model, SourceData& src, uint32_t okey, std::span<const BlockKey> hashes,
                                  std::span<uint32_t> removed) {
  const Converted& keys = Convert(hashes);
  thread_local std::vector<KeyNote> notes;
  notes.resize(keys.wires.size());
  {
    MutexLock lock(model.runs->mu);
    model.runs->store.Remove(okey, keys.wires, notes.data(), keys.forms);
  }
  const uint32_t tier = OwnerTier(okey);
  for (size_t i = 0; i < notes.size(); ++i) {
    const KeyNote& note = notes[i];
    const bool held = note.kind == KeyNote::kRemovedCopy || note.kind == KeyNote::kRemovedLast;
    removed[i] = CountRemove(src, tier, held, note.kind == KeyNote::kRemovedLast, note.stamp);
  }
}

bool BlockIndex::Impl::HoldsRuns(Model& model, const BlockKey& key, uint32_t okey) {
  const KeyForm form = FormOf(key);
  MutexLock lock(model.runs->mu);
  return model.runs->store.Copies(okey, key.wire(), &form) > 0;
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
  // Forms only when a key is in bytes form: an integer query reads the
  // BlockKeys in place.
  const KeyForm* forms = nullptr;
  if (std::any_of(keys.begin(), keys.end(), [](const BlockKey& k) { return k.is_bytes(); })) {
    forms = Convert(keys).forms.data();
  }
  model.runs->store.SourcePrefixes(StoreKeys{keys, forms}, classify, &got);
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
    gpu->emplace_back(h.stamp.value_or(0), KeyOf(h.key, h.form));
  });
}

void BlockIndex::Impl::LookupRuns(Model& model, ModelId m, const BlockKey& key, std::vector<OwnerRecord>* out) const {
  thread_local std::vector<RunStore::Holding> rows;
  const KeyForm form = FormOf(key);
  {
    MutexLock lock(model.runs->mu);
    model.runs->store.HoldingsOf(key.wire(), &rows, &form);
  }
  // Owner order: source, tier, group (the owner word's order).
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.owner < b.owner; });
  for (const RunStore::Holding& h : rows) out->push_back(RecordOf(m, h));
}

void BlockIndex::Impl::DumpRuns(Model& model, ModelId m, std::vector<OwnerRecord>* out) const {
  MutexLock lock(model.runs->mu);
  const size_t first = out->size();
  model.runs->store.ForEachHolding([&](const RunStore::Holding& h) {
    // Run order lists a key's owners together, then the next position's:
    // a key follows the previous record's when that is its parent.
    const OwnerRecord* prev = out->size() > first ? &out->back() : nullptr;
    const bool follows = h.parent && prev != nullptr && prev->key.wire() == *h.parent &&
                         FormOf(prev->key) == h.parent_form;
    out->push_back(RecordOf(m, h));
    out->back().follows = follows;
  });
}

Status BlockIndex::Impl::RestoreRuns(Model& model, const OwnerRecord& o, uint32_t okey, uint32_t stamp,
                                     const OwnerRecord* after) {
  RunStore::Holding row{o.key.wire(), okey, o.refcount, o.hits, stamp, std::nullopt};
  row.form = FormOf(o.key);
  if (after != nullptr) {
    row.parent = after->key.wire();
    row.parent_form = FormOf(after->key);
  }
  MutexLock lock(model.runs->mu);
  // Packed: a key with no parent joins the previous restored key's run
  // (up to 64), as snapshots in key order carry no chains.
  if (model.runs->store.Restore(std::span(&row, 1), /*pack=*/true) == 0) {
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
