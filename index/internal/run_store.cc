#include "index/internal/run_store.h"

#include <algorithm>

#include "index/internal/probe_key.h"

namespace kvidx::internal {
namespace {

constexpr size_t kGroupAhead = 8, kEntryAhead = 4;

}  // namespace

RunStore::RunStore(EpochDomain& epoch)
    : epoch_(epoch), table_(new Table(Table::GroupsFor(nullptr, 0))) {
  growth_left_ = table_.load(std::memory_order_relaxed)->max_load();
}

RunStore::~RunStore() {
  ForEachRun([](Run& run) {
    if (HolderBlock* h = run.block()) HolderBlock::Delete(h);
    if (const HitView* v = run.hits.load(std::memory_order_relaxed)) HitView::Delete(const_cast<HitView*>(v));
  });
  for (PageChunk* c : page_chunks_) {
    delete[] c->forms.load(std::memory_order_relaxed);
    delete c;
  }
  for (RunChunk* c : run_chunks_) delete c;
  for (auto& [p, deleter] : garbage_) deleter(p);
  delete table_.load(std::memory_order_relaxed);
}

// ---------------------------------------------------------------- readers

uint32_t RunStore::Find(uint64_t key, uint64_t hash, uint32_t* free_slot, const KeyForm* form) const {
  if (form != nullptr && form->code == 0) form = nullptr;
  uint32_t id = kNoId;
  table_.load(std::memory_order_acquire)->FindSlot(
      hash,
      [&](uint32_t candidate) {
        const std::atomic<uint64_t>* k = KeyWord(candidate);
        return k != nullptr && k->load(std::memory_order_relaxed) == key && SameForm(candidate, form);
      },
      &id, free_slot);
  return id;
}

KeyForm RunStore::FormAt(uint32_t id) const {
  KeyForm f;
  if (!has_forms_.load(std::memory_order_relaxed)) return f;
  const FormSlot* s = page_chunks_[id / kChunkEntries]->forms.load(std::memory_order_relaxed);
  if (s == nullptr) return f;
  f.code = s[id % kChunkEntries].w[0].load(std::memory_order_relaxed);
  for (int i = 0; i < 6; ++i) f.head[i] = s[id % kChunkEntries].w[1 + i].load(std::memory_order_relaxed);
  return f;
}

void RunStore::SetFormSlow(uint32_t id, const KeyForm* form) {
  PageChunk* c = page_chunks_[id / kChunkEntries];
  FormSlot* s = c->forms.load(std::memory_order_relaxed);
  if (s == nullptr) {
    if (form == nullptr) return;   // integer form: the chunk needs no forms
    s = new FormSlot[kChunkEntries]();
    c->forms.store(s, std::memory_order_release);
    has_forms_.store(true, std::memory_order_release);
  }
  FormSlot& slot = s[id % kChunkEntries];
  slot.w[0].store(form == nullptr ? 0 : form->code, std::memory_order_relaxed);
  for (int i = 0; i < 6; ++i) slot.w[1 + i].store(form == nullptr ? 0 : form->head[i], std::memory_order_relaxed);
}

void RunStore::LongestPrefixes(std::span<const uint64_t> keys, std::vector<OwnerPrefix>* out) const {
  // Per source with every owner its own source and GPU owner: the owner's
  // own prefix and hits.
  thread_local std::vector<SourcePrefix> per_owner;
  SourcePrefixes(
      keys, [](uint32_t owner) { return std::optional(OwnerClass{owner, true}); }, &per_owner);
  out->clear();
  for (const SourcePrefix& p : per_owner) out->push_back({p.source, p.any_blocks, p.hits, p.hit_blocks});
}

// ---------------------------------------------------------------- writer

void RunStore::Store(uint32_t owner, std::span<const uint64_t> keys, const uint64_t* parent, uint32_t top,
                     StoreRule rule, KeyNote* notes, std::span<const KeyForm> forms, const KeyForm* parent_form) {
  Place at;   // the last block stored or found: the chain continues after it
  Batch batch, extra, hits;
  if (parent != nullptr) {
    const uint32_t id = Find(*parent, parent_form);
    if (id != kNone) at = PlaceOf(id);
  }
  HashRing ring;
  for (size_t i = 0; i < keys.size(); ++i) {
    const uint64_t key = keys[i];
    const KeyForm* const form = forms.empty() || forms[i].code == 0 ? nullptr : &forms[i];
    const uint32_t stamp = top - static_cast<uint32_t>(i);
    KeyNote* const note = notes == nullptr ? nullptr : &notes[i];
    StartAhead(keys, i, ring);
    if (at.run != kNone && at.pos + 1 < RunAt(at.run).len()) {
      const Place next = Next(at);
      if (KeyOf(next.id) == key && SameForm(next.id, form)) {
        at = next;
        Count(at, owner, rule, batch, extra, hits, note);
        Batched(batch, at, stamp, owner, /*hit=*/false);
        continue;
      }
    }
    uint32_t free_slot = kNoId;
    const uint64_t hash = ring[i % kRing];
    const uint32_t id = Find(key, hash, &free_slot, form);
    if (id != kNone) {
      at = PlaceOf(id);
    } else {
      // A new block extends the run whose last entry is its parent.
      const bool extend = at.run != kNone && at.pos + 1 == RunAt(at.run).len();
      at = Append(extend ? at.run : NewRun(), key, hash, free_slot, form);
    }
    Count(at, owner, rule, batch, extra, hits, note, /*new_key=*/id == kNone);
    Batched(batch, at, stamp, owner, /*hit=*/false);
  }
  Apply(batch, owner, /*hit=*/false);
  ApplyCounts(extra, owner, &OwnerRanges::extra);
  ApplyCounts(hits, owner, &OwnerRanges::hits);
  Finish();
}

void RunStore::Count(const Place& at, uint32_t owner, StoreRule rule, const Batch& stamps, Batch& extra,
                     Batch& hits, KeyNote* note, bool new_key) {
  const bool fresh = Hold(RunAt(at.run), at, owner, new_key);
  if (note != nullptr) {
    if (fresh) {
      *note = KeyNote{KeyNote::kNew, 0};
    } else {
      // A key repeated within the store may still have its stamp pending.
      const bool pending = stamps.run == at.run && stamps.begin <= at.pos && at.pos < stamps.end;
      const OwnerRanges* r = pending ? nullptr : RangesOf(RunAt(at.run), owner);
      const uint32_t old = pending ? stamps.top - (at.pos - stamps.begin)
                                   : (r == nullptr ? 0 : r->stamps.At(at.pos).value_or(0));
      *note = KeyNote{rule.held_hit ? KeyNote::kHit : KeyNote::kCopy, old};
    }
  }
  if (fresh ? rule.new_hit : rule.held_hit) {
    AddTo(hits, at, owner, &OwnerRanges::hits);
  } else if (!fresh) {
    AddTo(extra, at, owner, &OwnerRanges::extra);
  }
}

void RunStore::AddTo(Batch& batch, const Place& at, uint32_t owner, HitRanges OwnerRanges::*which) {
  if (batch.run == at.run && at.pos == batch.end) {
    ++batch.end;
    return;
  }
  ApplyCounts(batch, owner, which);
  batch = Batch{at.run, at.pos, at.pos + 1, 0};
}

void RunStore::ApplyCounts(Batch& batch, uint32_t owner, HitRanges OwnerRanges::*which) {
  if (batch.run == kNone) return;
  (RangesFor(RunAt(batch.run), owner).*which).AddOne(batch.begin, batch.end);
  if (which == &OwnerRanges::hits) hits_dirty_.push_back(batch.run);
  batch.run = kNone;
}

bool RunStore::HoldGrowing(Run& run, const Place& at, uint32_t owner, uint32_t row, bool new_key) {
  Write(at.run);
  HolderBlock* h = run.block();
  const uint32_t words = at.pos / 64 + 1;
  const bool no_row_left = h != nullptr && row == HolderBlock::kNoRow && h->count() == h->capacity();
  if (h == nullptr || no_row_left || words > h->words()) {
    // Rows double and words grow by half when they run out: a run's block
    // is replaced a few times as it grows, not once per owner or word.
    HolderBlock* grown = h == nullptr ? HolderBlock::New(1, words)
                                      : HolderBlock::Grown(*h, no_row_left ? 2 * h->capacity() : 0,
                                                           words > h->words() ? std::max(words, h->words() * 3 / 2 + 1) : 0);
    run.holders.store(grown, std::memory_order_release);
    if (h != nullptr) Retire(h, &HolderBlock::Delete);
    h = grown;
  }
  if (row == HolderBlock::kNoRow) {
    row = h->Add(owner);
    Joined(owner, at.run);
  }
  if (!h->Set(row, at.pos)) return false;
  if (new_key || !h->HeldByOther(row, at.pos)) ++held_keys_;
  return true;
}

void RunStore::Joined(uint32_t owner, uint32_t run) {
  OwnerRuns& o = owner_runs_[owner];
  o.runs.push_back(run);
  if (o.runs.size() < o.compact_at) return;
  o.runs = RunsOf(owner);
  o.compact_at = std::max<size_t>(16, 2 * o.runs.size());
}

std::vector<uint32_t> RunStore::RunsOf(uint32_t owner) {
  auto it = owner_runs_.find(owner);
  if (it == owner_runs_.end()) return {};
  std::vector<uint32_t> runs = std::move(it->second.runs);
  std::sort(runs.begin(), runs.end());
  runs.erase(std::unique(runs.begin(), runs.end()), runs.end());
  std::erase_if(runs, [&](uint32_t r) {
    const HolderBlock* h = RunAt(r).block();
    return h == nullptr || h->Find(owner) == HolderBlock::kNoRow;
  });
  return runs;
}

size_t RunStore::Remove(uint32_t owner, std::span<const uint64_t> keys, KeyNote* notes,
                        std::span<const KeyForm> forms) {
  touched_.clear();
  size_t held = 0;
  HashRing ring;
  for (size_t i = 0; i < keys.size(); ++i) {
    KeyNote* const note = notes == nullptr ? nullptr : &notes[i];
    if (note != nullptr) *note = KeyNote{};
    StartAhead(keys, i, ring);
    const uint32_t id = Find(keys[i], ring[i % kRing], nullptr, forms.empty() ? nullptr : &forms[i]);
    if (id == kNone) continue;
    const Place at = PlaceOf(id);
    Run& run = RunAt(at.run);
    OwnerRanges* ranges = RangesOf(run, owner);
    if (ranges != nullptr && ranges->ExtraAt(at.pos) > 0) {
      ranges->extra.SubOne(at.pos);
      if (note != nullptr) *note = KeyNote{KeyNote::kRemovedCopy, ranges->stamps.At(at.pos).value_or(0)};
      ++held;
      continue;
    }
    if (!Unhold(run, at, owner)) continue;
    Forget(run, at.run, ranges, at.pos, note);
    ++held;
    if (touched_.empty() || touched_.back() != at.run) touched_.push_back(at.run);
  }
  std::sort(touched_.begin(), touched_.end());
  touched_.erase(std::unique(touched_.begin(), touched_.end()), touched_.end());
  for (uint32_t run : touched_) Prune(run);
  Finish();
  return held;
}

size_t RunStore::AddHits(uint32_t owner, std::span<const uint64_t> keys, uint32_t top) {
  Batch batch;
  size_t held = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    const uint32_t id = Find(keys[i]);
    if (id == kNone) continue;
    const Place at = PlaceOf(id);
    const HolderBlock* h = RunAt(at.run).block();
    const uint32_t row = h == nullptr ? HolderBlock::kNoRow : h->Find(owner);
    if (row == HolderBlock::kNoRow || !h->Has(row, at.pos)) continue;
    ++held;
    Batched(batch, at, top - static_cast<uint32_t>(i), owner, /*hit=*/true);
  }
  Apply(batch, owner, /*hit=*/true);
  Finish();
  return held;
}

size_t RunStore::Clear(uint32_t owner, std::vector<uint32_t>* gone) {
  const std::vector<uint32_t> runs = RunsOf(owner);
  owner_runs_.erase(owner);
  size_t held = 0;
  for (uint32_t run_id : runs) {
    Run& run = RunAt(run_id);
    HolderBlock* h = run.block();
    const uint32_t row = h->Find(owner);
    held += h->held(row);
    held_keys_ -= h->HeldOnlyBy(row);
    if (OwnerRanges* r = RangesOf(run, owner)) {
      if (gone != nullptr) {
        h->ForEachHeld(row, [&](uint32_t pos) {
          if (const std::optional<uint32_t> stamp = r->stamps.At(pos)) gone->push_back(*stamp);
        });
      }
      *r = std::move(run.ranges.back());
      run.ranges.pop_back();
    }
    Write(run_id);
    h->Drop(row);
    // Its hits went, and rows moved: a run with a hit view needs a new one.
    if (run.hits.load(std::memory_order_relaxed) != nullptr) hits_dirty_.push_back(run_id);
    Prune(run_id);
  }
  Finish();
  return held;
}

void RunStore::Rebase(uint32_t owner, uint32_t base, std::vector<uint32_t>* stamps) {
  std::vector<uint32_t> runs = RunsOf(owner);
  for (uint32_t run_id : runs) {
    Run& run = RunAt(run_id);
    const HolderBlock* h = run.block();
    const uint32_t row = h->Find(owner);
    OwnerRanges* r = RangesOf(run, owner);
    if (r != nullptr) r->stamps.Rebase(base);
    h->ForEachHeld(row, [&](uint32_t pos) { stamps->push_back(r == nullptr ? 0 : r->stamps.At(pos).value_or(0)); });
  }
  owner_runs_[owner].runs = std::move(runs);
}

void RunStore::Owners(std::vector<uint32_t>* out) const {
  out->clear();
  for (const auto& [owner, runs] : owner_runs_) out->push_back(owner);
}

void RunStore::HoldingsOf(uint64_t key, std::vector<Holding>* out, const KeyForm* form) const {
  out->clear();
  const uint32_t id = Find(key, form);
  if (id == kNone) return;
  const Place at = PlaceOf(id);
  const Run& run = RunAt(at.run);
  const HolderBlock* h = run.block();
  const uint32_t before = at.pos == 0 ? kNone : EntryAt(at.run, at.pos - 1);
  const std::optional<uint64_t> parent = before == kNone ? std::nullopt : std::optional(KeyOf(before));
  const KeyForm entry_form = FormAt(id), parent_form = before == kNone ? KeyForm{} : FormAt(before);
  for (uint32_t row = 0; h != nullptr && row < h->count(); ++row) {
    if (!h->Has(row, at.pos)) continue;
    out->push_back(HoldingAt(run, h->owner(row), at.pos, key, parent));
    out->back().form = entry_form;
    out->back().parent_form = parent_form;
  }
}

size_t RunStore::Restore(std::span<const Holding> rows, bool pack) {
  size_t applied = 0;
  // The previous row's entry: in ForEachHolding's order, the next row's
  // key (another owner of it) or its parent, found without a lookup. With
  // `pack`, the last call's last row.
  Place last = pack ? LastRestored() : Place{};
  uint64_t last_key = packed_key_;
  KeyForm last_form = packed_form_;
  for (const Holding& row : rows) {
    Place at;
    if (last.id != kNone && last_key == row.key && last_form == row.form) {
      at = last;
    } else {
      uint32_t before = kNone;
      if (row.parent) {
        before = last.id != kNone && last_key == *row.parent && last_form == row.parent_form
                     ? last.id
                     : Find(*row.parent, &row.parent_form);
      } else if (pack && last.id != kNone && last.pos + 1 < kPackedRun) {
        before = last.id;
      }
      at = Locate(row.key, &row.form, before);
    }
    Run& run = RunAt(at.run);
    if (!Hold(run, at, row.owner)) break;   // a duplicate
    if (row.copies > 1 || row.hits > 0 || row.stamp) {
      OwnerRanges& r = RangesFor(run, row.owner);
      r.extra.Add(at.pos, at.pos + 1, std::max(row.copies, 1u) - 1);
      if (row.hits > 0) {
        r.hits.Add(at.pos, at.pos + 1, static_cast<uint32_t>(std::min<uint64_t>(row.hits, ~0u)));
        if (hits_dirty_.empty() || hits_dirty_.back() != at.run) hits_dirty_.push_back(at.run);
      }
      if (row.stamp) r.stamps.Set(at.pos, at.pos + 1, *row.stamp);
    }
    last = at;
    last_key = row.key;
    last_form = row.form;
    if (pack) {
      packed_ = at;
      packed_key_ = row.key;
      packed_form_ = row.form;
    }
    ++applied;
  }
  Finish();
  return applied;
}

RunStore::Place RunStore::LastRestored() const {
  if (packed_.id == kNone) return {};
  // The entry must still be live (below its run's length: its run may have
  // been freed and the page reused) and hold the key.
  const Place was = PlaceOf(packed_.id);
  const bool live = was.run == packed_.run && was.pos < RunAt(was.run).len() && KeyOf(packed_.id) == packed_key_ &&
                    FormAt(packed_.id) == packed_form_;
  return live ? was : Place{};
}

void RunStore::Batched(Batch& batch, const Place& at, uint32_t stamp, uint32_t owner, bool hit) {
  if (batch.run == at.run && at.pos == batch.end && stamp + (batch.end - batch.begin) == batch.top) {
    ++batch.end;
    return;
  }
  Apply(batch, owner, hit);
  batch = Batch{at.run, at.pos, at.pos + 1, stamp};
}

void RunStore::Apply(Batch& batch, uint32_t owner, bool hit) {
  if (batch.run == kNone) return;
  OwnerRanges& r = RangesFor(RunAt(batch.run), owner);
  r.stamps.Set(batch.begin, batch.end, batch.top);
  if (hit) {
    r.hits.AddOne(batch.begin, batch.end);
    hits_dirty_.push_back(batch.run);
  }
  batch.run = kNone;
}

const RunStore::OwnerRanges* RunStore::RangesOf(const Run& run, uint32_t owner) {
  for (const OwnerRanges& r : run.ranges) {
    if (r.owner == owner) return &r;
  }
  return nullptr;
}

RunStore::OwnerRanges& RunStore::RangesFor(Run& run, uint32_t owner) {
  for (OwnerRanges& r : run.ranges) {
    if (r.owner == owner) return r;
  }
  return run.ranges.emplace_back(OwnerRanges{owner, {}, {}, {}});
}

void RunStore::Forget(Run& run, uint32_t run_id, OwnerRanges* ranges, uint32_t pos, KeyNote* note) {
  if (note != nullptr) *note = KeyNote{KeyNote::kRemovedLast, 0};
  if (ranges == nullptr) return;
  if (note != nullptr) note->stamp = ranges->stamps.At(pos).value_or(0);
  ranges->stamps.Clear(pos);
  if (!ranges->hits.empty()) {
    ranges->hits.Clear(pos);
    hits_dirty_.push_back(run_id);
  }
  if (ranges->empty()) {
    *ranges = std::move(run.ranges.back());
    run.ranges.pop_back();
  }
}

std::optional<uint32_t> RunStore::Stamp(uint32_t owner, uint64_t key) const {
  const uint32_t id = Find(key);
  if (id == kNone) return std::nullopt;
  const Place at = PlaceOf(id);
  const OwnerRanges* r = RangesOf(RunAt(at.run), owner);
  return r == nullptr ? std::nullopt : r->stamps.At(at.pos);
}

void RunStore::Coldest(uint32_t owner, size_t n, std::vector<uint64_t>* out) const {
  std::vector<std::pair<uint32_t, uint64_t>> aged;   // (stamp, key)
  ForEachHolding([&](const Holding& h) {
    if (h.owner == owner) aged.emplace_back(h.stamp.value_or(0), h.key);
  });
  n = std::min(n, aged.size());
  std::partial_sort(aged.begin(), aged.begin() + static_cast<ptrdiff_t>(n), aged.end());
  out->clear();
  for (size_t j = 0; j < n; ++j) out->push_back(aged[j].second);
}

uint32_t RunStore::Copies(uint32_t owner, uint64_t key, const KeyForm* form) const {
  const uint32_t id = Find(key, form);
  if (id == kNone) return 0;
  const Place at = PlaceOf(id);
  const Run& run = RunAt(at.run);
  const HolderBlock* h = run.block();
  const uint32_t row = h == nullptr ? HolderBlock::kNoRow : h->Find(owner);
  if (row == HolderBlock::kNoRow || !h->Has(row, at.pos)) return 0;
  const OwnerRanges* r = RangesOf(run, owner);
  return 1 + (r == nullptr ? 0 : r->ExtraAt(at.pos));
}

uint64_t RunStore::HeldBy(uint32_t owner) const {
  uint64_t n = 0;
  ForEachRun([&](const Run& run) {
    const HolderBlock* h = run.block();
    const uint32_t row = h == nullptr ? HolderBlock::kNoRow : h->Find(owner);
    if (row != HolderBlock::kNoRow) n += h->held(row);
  });
  return n;
}

uint64_t RunStore::HeldByAll() const {
  uint64_t n = 0;
  ForEachRun([&](const Run& run) {
    const HolderBlock* h = run.block();
    for (uint32_t row = 0; h != nullptr && row < h->count(); ++row) n += h->held(row);
  });
  return n;
}

size_t RunStore::MemoryBytes() const {
  size_t bytes = 0;
  for (const PageChunk* c : page_chunks_) {
    bytes += sizeof(PageChunk) + (c->forms.load(std::memory_order_relaxed) != nullptr ? kChunkEntries * sizeof(FormSlot) : 0);
  }
  bytes += run_chunks_.size() * sizeof(RunChunk) +
                 (page_chunks_.capacity() + run_chunks_.capacity()) * sizeof(void*) +
                 (free_pages_.capacity() + free_runs_.capacity()) * sizeof(uint32_t) +
                 table_.load(std::memory_order_relaxed)->bytes();
  ForEachRun([&](const Run& run) {
    if (const HolderBlock* h = run.block()) bytes += h->bytes();
    if (const HitView* v = run.hits.load(std::memory_order_relaxed)) bytes += v->bytes();
    bytes += run.ranges.capacity() * sizeof(OwnerRanges);
    for (const OwnerRanges& r : run.ranges) bytes += r.hits.bytes() + r.stamps.bytes() + r.extra.bytes();
  });
  // The owner lists: their arrays, and the map's nodes and buckets (as
  // libstdc++ lays them out).
  bytes += owner_runs_.bucket_count() * sizeof(void*);
  for (const auto& [owner, o] : owner_runs_) {
    bytes += sizeof(std::pair<const uint32_t, OwnerRuns>) + 2 * sizeof(void*) + o.runs.capacity() * sizeof(uint32_t);
  }
  return bytes;
}

// ----------------------------------------------------- writer internals

RunStore::Run& RunStore::OpenSection(uint32_t run) {
  CloseSection();
  RunAt(run).lock.BeginWrite();
  open_run_ = run;
  return RunAt(run);
}

void RunStore::CloseSection() {
  if (open_run_ != kNone) RunAt(open_run_).lock.EndWrite();
  open_run_ = kNone;
  open_changes_ = 0;
}

void RunStore::Finish() {
  std::sort(hits_dirty_.begin(), hits_dirty_.end());
  hits_dirty_.erase(std::unique(hits_dirty_.begin(), hits_dirty_.end()), hits_dirty_.end());
  for (uint32_t run : hits_dirty_) PublishHits(run);
  hits_dirty_.clear();
  CloseSection();
  if (garbage_.empty()) return;
  // One retirement for the call: the domain's bookkeeping runs per item.
  auto* batch = new std::vector<std::pair<void*, void (*)(void*)>>();
  batch->swap(garbage_);
  epoch_.Retire(batch, [](void* p) {
    auto* items = static_cast<std::vector<std::pair<void*, void (*)(void*)>>*>(p);
    for (auto& [item, deleter] : *items) deleter(item);
    delete items;
  });
}

void RunStore::PublishHits(uint32_t run_id) {
  hit_owners_.clear();
  Run& run = RunAt(run_id);
  // By holder row (a reader looks an owner up at its row first). Each
  // owner's ranges remember its row, so a run of a large fleet (tens of
  // owners) is not scanned once per owner; rows rarely move.
  const HolderBlock* h = run.block();
  bool any = false;
  const uint32_t rows = h == nullptr ? 0 : h->count();
  for (uint32_t row = 0; row < rows; ++row) hit_owners_.emplace_back(h->owner(row), nullptr);
  for (OwnerRanges& r : run.ranges) {
    if (r.hits.empty()) continue;
    if (r.row >= rows || h->owner(r.row) != r.owner) r.row = h == nullptr ? HolderBlock::kNoRow : h->Find(r.owner);
    if (r.row == HolderBlock::kNoRow) continue;   // no row: holds nothing (hits go with holds)
    hit_owners_[r.row].second = &r.hits;
    any = true;
  }
  const HitView* old = run.hits.load(std::memory_order_relaxed);
  if (old == nullptr && !any) return;
  Write(run_id).hits.store(HitView::Build(hit_owners_), std::memory_order_release);
  if (old != nullptr) Retire(const_cast<HitView*>(old), &HitView::Delete);
}

void RunStore::StartAhead(std::span<const uint64_t> keys, size_t i, HashRing& ring) const {
  static_assert(kGroupAhead < kRing && kEntryAhead < kGroupAhead);
  const Table* table = table_.load(std::memory_order_relaxed);
  if (i == 0) {
    for (size_t j = 0; j < std::min(keys.size(), kGroupAhead); ++j) {
      ring[j] = MixKey(keys[j]);
      table->PrefetchGroup(ring[j]);
    }
  }
  if (i + kGroupAhead < keys.size()) {
    const uint64_t hash = ring[(i + kGroupAhead) % kRing] = MixKey(keys[i + kGroupAhead]);
    table->PrefetchGroup(hash);
  }
  if (i + kEntryAhead < keys.size()) {
    const uint32_t id = table->PeekId(ring[(i + kEntryAhead) % kRing]);
    if (const std::atomic<uint64_t>* k = id == kNoId ? nullptr : KeyWord(id)) __builtin_prefetch(k);
  }
}

RunStore::Place RunStore::PlaceOf(uint32_t id) const {
  const PageMeta& page = MetaAt(id >> kRunPageBits);
  return {id, page.run.load(std::memory_order_relaxed),
          page.base.load(std::memory_order_relaxed) + (id & (kRunPage - 1))};
}

RunStore::Place RunStore::Next(const Place& at) const {
  const uint32_t id = (at.id & (kRunPage - 1)) != kRunPage - 1
                          ? at.id + 1
                          : MetaAt(at.id >> kRunPageBits).next.load(std::memory_order_relaxed) << kRunPageBits;
  return {id, at.run, at.pos + 1};
}

uint32_t RunStore::EntryAt(uint32_t run, uint32_t pos) const {
  uint32_t page = RunAt(run).first_page;
  for (uint32_t k = pos / kRunPage; k > 0; --k) page = MetaAt(page).next.load(std::memory_order_relaxed);
  return page << kRunPageBits | pos % kRunPage;
}

RunStore::Place RunStore::Append(uint32_t run, uint64_t key, uint64_t hash, uint32_t free_slot,
                                 const KeyForm* form) {
  if (growth_left_ == 0) {
    GrowTable();
    free_slot = kNoId;   // a slot of the old table
  }
  Run& r = Write(run);
  const uint32_t length = r.len();
  const uint32_t slot = length % kRunPage;
  if (slot == 0) {
    const uint32_t page = NewPage(run, length);
    if (r.last_page == kNone) {
      r.first_page = page;
    } else {
      MetaAt(r.last_page).next.store(page, std::memory_order_relaxed);
    }
    r.last_page = page;
  }
  const uint32_t id = r.last_page << kRunPageBits | slot;
  KeyAt(id).store(key, std::memory_order_relaxed);
  SetForm(id, form);   // before the table publishes the entry
  Table* table = table_.load(std::memory_order_relaxed);
  if (free_slot != kNoId ? table->InsertAt(free_slot, hash, id) : table->Insert(hash, id)) --growth_left_;
  ++size_;
  r.length.store(length + 1, std::memory_order_relaxed);
  return {id, run, length};
}

RunStore::Place RunStore::Locate(uint64_t key, const KeyForm* form, uint32_t before) {
  if (form != nullptr && form->code == 0) form = nullptr;
  const uint64_t hash = MixKey(key);
  uint32_t free_slot = kNoId;
  const uint32_t id = Find(key, hash, &free_slot, form);
  if (id != kNone) return PlaceOf(id);
  const Place b = before == kNone ? Place{} : PlaceOf(before);
  const bool extend = b.run != kNone && b.pos + 1 == RunAt(b.run).len();
  return Append(extend ? b.run : NewRun(), key, hash, free_slot, form);
}

uint32_t RunStore::NewRun() {
  if (!free_runs_.empty()) {
    const uint32_t run = free_runs_.back();
    free_runs_.pop_back();
    return run;
  }
  const uint32_t run = runs_top_.load(std::memory_order_relaxed);
  if (run % kRunChunk == 0) {
    run_chunks_.push_back(new RunChunk());
    runs_.Set(run >> kRunChunkBits, run_chunks_.back());
  }
  runs_top_.store(run + 1, std::memory_order_release);
  return run;
}

uint32_t RunStore::NewPage(uint32_t run, uint32_t base) {
  uint32_t page;
  if (!free_pages_.empty()) {
    page = free_pages_.back();
    free_pages_.pop_back();
  } else {
    page = pages_top_.load(std::memory_order_relaxed);
    if (page % kChunkPages == 0) {
      page_chunks_.push_back(new PageChunk());
      pages_.Set(page >> kChunkPageBits, page_chunks_.back());
    }
    pages_top_.store(page + 1, std::memory_order_release);
  }
  PageMeta& meta = MetaAt(page);
  meta.run.store(run, std::memory_order_relaxed);
  meta.base.store(base, std::memory_order_relaxed);
  meta.next.store(kNone, std::memory_order_relaxed);
  return page;
}

void RunStore::GrowTable() {
  const Table* old = table_.load(std::memory_order_relaxed);
  auto* grown = new Table(Table::GroupsFor(old, static_cast<uint32_t>(size_)));
  // Every position below a run's length is indexed: walking the runs reads
  // keys a page at a time, where the old table's order reads each at random.
  ForEachRun([&](const Run& run) {
    ForEachEntry(run, [&](uint32_t, uint32_t id) { grown->Insert(MixKey(KeyOf(id)), id); });
  });
  table_.store(grown, std::memory_order_release);
  Retire(const_cast<Table*>(old), [](void* p) { delete static_cast<Table*>(p); });
  growth_left_ = grown->max_load() - static_cast<uint32_t>(size_);
}

void RunStore::Prune(uint32_t run) {
  Run& r = RunAt(run);
  const HolderBlock* h = r.block();
  uint32_t end = 0;
  for (uint32_t row = 0; h != nullptr && row < h->count(); ++row) end = std::max(end, h->End(row));
  if (end == r.len()) return;
  Write(run);
  Table* table = table_.load(std::memory_order_relaxed);
  for (Place at{EntryAt(run, end), run, end};; at = Next(at)) {
    if (table->Erase(MixKey(KeyOf(at.id)), at.id)) ++growth_left_;
    --size_;
    if (at.pos + 1 == r.len()) break;
  }
  // Pages past the last one that still holds a position below `end` go.
  uint32_t last = kNone, page = r.first_page;
  for (uint32_t k = (end + kRunPage - 1) / kRunPage; k > 0; --k) {
    last = page;
    page = MetaAt(page).next.load(std::memory_order_relaxed);
  }
  while (page != kNone) {
    PageMeta& meta = MetaAt(page);
    const uint32_t next = meta.next.load(std::memory_order_relaxed);
    meta.run.store(kNone, std::memory_order_relaxed);
    meta.next.store(kNone, std::memory_order_relaxed);
    free_pages_.push_back(page);
    page = next;
  }
  if (last == kNone) {
    r.first_page = kNone;
  } else {
    MetaAt(last).next.store(kNone, std::memory_order_relaxed);
  }
  r.last_page = last;
  r.length.store(end, std::memory_order_relaxed);
  if (end == 0) {
    if (h != nullptr) Retire(const_cast<HolderBlock*>(h), &HolderBlock::Delete);
    r.holders.store(nullptr, std::memory_order_release);
    r.first_page = r.last_page = kNone;
    std::vector<OwnerRanges>().swap(r.ranges);
    free_runs_.push_back(run);
  }
}

}  // namespace kvidx::internal
