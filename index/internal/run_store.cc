#include "index/internal/run_store.h"

#include <algorithm>

#include "index/internal/probe_key.h"

namespace kvidx::internal {
namespace {

constexpr size_t kGroupAhead = 8, kEntryAhead = 4;

}  // namespace

RunStore::RunStore() : table_(std::make_unique<Table>(Table::GroupsFor(nullptr, 0))) {
  growth_left_ = table_->max_load();
}

RunStore::~RunStore() = default;

void RunStore::Store(uint32_t owner, std::span<const uint64_t> keys, const uint64_t* parent, uint32_t top) {
  Place at;   // the last block stored or found: the chain continues after it
  Batch batch;
  if (parent != nullptr) {
    const uint32_t id = Find(*parent);
    if (id != kNone) at = PlaceOf(id);
  }
  HashRing ring;
  for (size_t i = 0; i < keys.size(); ++i) {
    const uint64_t key = keys[i];
    StartAhead(keys, i, ring);
    if (at.run != kNone && at.pos + 1 < runs_[at.run].length) {
      const Place next = Next(at);
      if (keys_[next.id] == key) {
        at = next;
        AddCopy(at, owner);
        Batched(batch, at, top - static_cast<uint32_t>(i), owner, /*hit=*/false);
        continue;
      }
    }
    uint32_t free_slot = kNoId;
    const uint64_t hash = ring[i % kRing];
    const uint32_t id = Find(key, hash, &free_slot);
    if (id != kNone) {
      at = PlaceOf(id);
    } else {
      // A new block extends the run whose last entry is its parent.
      const bool extend = at.run != kNone && at.pos + 1 == runs_[at.run].length;
      at = Append(extend ? at.run : NewRun(), key, hash, free_slot);
    }
    AddCopy(at, owner);
    Batched(batch, at, top - static_cast<uint32_t>(i), owner, /*hit=*/false);
  }
  Apply(batch, owner, /*hit=*/false);
}

void RunStore::AddCopy(const Place& at, uint32_t owner) {
  Run& run = runs_[at.run];
  if (HolderOf(run.holders, owner).Set(at.pos)) return;
  const size_t slot = ExtraSlot(run, at.pos, owner);
  if (slot < run.extra.size() && run.extra[slot].pos == at.pos && run.extra[slot].owner == owner) {
    ++run.extra[slot].count;
  } else {
    run.extra.insert(run.extra.begin() + static_cast<ptrdiff_t>(slot), ExtraCopies{at.pos, owner, 1});
  }
}

size_t RunStore::ExtraSlot(const Run& run, uint32_t pos, uint32_t owner) {
  auto it = std::lower_bound(run.extra.begin(), run.extra.end(), std::pair{pos, owner},
                             [](const ExtraCopies& e, std::pair<uint32_t, uint32_t> k) {
                               return std::pair{e.pos, e.owner} < k;
                             });
  return static_cast<size_t>(it - run.extra.begin());
}

uint32_t RunStore::FindExtra(const Run& run, uint32_t pos, uint32_t owner) {
  const size_t slot = ExtraSlot(run, pos, owner);
  const bool found = slot < run.extra.size() && run.extra[slot].pos == pos && run.extra[slot].owner == owner;
  return found ? static_cast<uint32_t>(slot) : kNone;
}

size_t RunStore::Remove(uint32_t owner, std::span<const uint64_t> keys, std::vector<uint32_t>* gone) {
  touched_.clear();
  size_t held = 0;
  HashRing ring;
  for (size_t i = 0; i < keys.size(); ++i) {
    StartAhead(keys, i, ring);
    const uint32_t id = Find(keys[i], ring[i % kRing]);
    if (id == kNone) continue;
    const Place at = PlaceOf(id);
    Run& run = runs_[at.run];
    if (const uint32_t e = FindExtra(run, at.pos, owner); e != kNone) {
      if (--run.extra[e].count == 0) run.extra.erase(run.extra.begin() + e);
      ++held;
      continue;
    }
    if (!Unhold(run.holders, owner, at.pos)) continue;
    Forget(run, owner, at.pos, gone);
    ++held;
    if (touched_.empty() || touched_.back() != at.run) touched_.push_back(at.run);
  }
  std::sort(touched_.begin(), touched_.end());
  touched_.erase(std::unique(touched_.begin(), touched_.end()), touched_.end());
  for (uint32_t run : touched_) Prune(run);
  return held;
}

RunStore::Segment RunStore::SegmentAt(std::span<const uint64_t> keys, size_t i) const {
  Segment seg;
  const uint32_t id = Find(keys[i]);
  if (id == kNone) return seg;
  seg.start = PlaceOf(id);
  const size_t limit = std::min<size_t>(runs_[seg.start.run].length - seg.start.pos, keys.size() - i);
  seg.k = 1;
  for (Place at = seg.start; seg.k < limit; ++seg.k) {
    at = Next(at);
    if (keys_[at.id] != keys[i + seg.k]) break;
  }
  return seg;
}

void RunStore::LongestPrefixes(std::span<const uint64_t> keys, std::vector<OwnerPrefix>* out) const {
  out->clear();
  size_t i = 0;
  while (i < keys.size()) {
    const Segment seg = SegmentAt(keys, i);
    if (seg.k == 0) break;
    const Place start = seg.start;
    const uint32_t k = seg.k;
    const Run& run = runs_[start.run];
    // Only owners that matched all of keys [0, i) can extend their match.
    uint32_t through = 0;
    for (const HeldBits& h : run.holders) {
      OwnerPrefix* e = nullptr;
      if (i > 0) {
        auto it = std::find_if(out->begin(), out->end(), [&](const OwnerPrefix& x) { return x.owner == h.owner; });
        if (it == out->end() || it->blocks != i) continue;
        e = &*it;
      }
      const uint32_t got = h.LeadingFrom(start.pos, k);
      if (got == 0) continue;
      if (e == nullptr) e = &out->emplace_back(OwnerPrefix{h.owner, 0});
      e->blocks += got;
      const OwnerRanges* r = run.hit_owners == 0 ? nullptr : RangesOf(run, h.owner);
      if (r != nullptr && !r->hits.empty()) {
        const HitRanges::Sum sum = r->hits.Over(start.pos, start.pos + got);
        e->hits += sum.hits;
        e->hit_blocks += sum.hit_blocks;
      }
      through += got == k;
    }
    if (through == 0) break;
    i += k;
  }
}

size_t RunStore::AddHits(uint32_t owner, std::span<const uint64_t> keys, uint32_t top) {
  Batch batch;
  size_t held = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    const uint32_t id = Find(keys[i]);
    if (id == kNone) continue;
    const Place at = PlaceOf(id);
    const Run& r = runs_[at.run];
    auto h = std::find_if(r.holders.begin(), r.holders.end(), [&](const HeldBits& x) { return x.owner == owner; });
    if (h == r.holders.end() || !h->Has(at.pos)) continue;
    ++held;
    Batched(batch, at, top - static_cast<uint32_t>(i), owner, /*hit=*/true);
  }
  Apply(batch, owner, /*hit=*/true);
  return held;
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
  Run& run = runs_[batch.run];
  OwnerRanges& r = RangesFor(run, owner);
  r.stamps.Set(batch.begin, batch.end, batch.top);
  if (hit) {
    run.hit_owners += r.hits.empty();
    r.hits.AddOne(batch.begin, batch.end);
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
  return run.ranges.emplace_back(OwnerRanges{owner, {}, {}});
}

void RunStore::Forget(Run& run, uint32_t owner, uint32_t pos, std::vector<uint32_t>* gone) {
  auto it = std::find_if(run.ranges.begin(), run.ranges.end(), [&](const OwnerRanges& r) { return r.owner == owner; });
  if (it == run.ranges.end()) return;
  if (gone != nullptr) {
    if (const std::optional<uint32_t> stamp = it->stamps.At(pos)) gone->push_back(*stamp);
  }
  it->stamps.Clear(pos);
  if (!it->hits.empty()) {
    it->hits.Clear(pos);
    run.hit_owners -= it->hits.empty();
  }
  if (it->stamps.empty() && it->hits.empty()) run.ranges.erase(it);
}

std::optional<uint32_t> RunStore::Stamp(uint32_t owner, uint64_t key) const {
  const uint32_t id = Find(key);
  if (id == kNone) return std::nullopt;
  const Place at = PlaceOf(id);
  const OwnerRanges* r = RangesOf(runs_[at.run], owner);
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

uint32_t RunStore::Copies(uint32_t owner, uint64_t key) const {
  const uint32_t id = Find(key);
  if (id == kNone) return 0;
  const Place at = PlaceOf(id);
  const Run& run = runs_[at.run];
  for (const HeldBits& h : run.holders) {
    if (h.owner != owner || !h.Has(at.pos)) continue;
    const uint32_t e = FindExtra(run, at.pos, owner);
    return 1 + (e == kNone ? 0 : run.extra[e].count);
  }
  return 0;
}

uint64_t RunStore::HeldBy(uint32_t owner) const { return CountHeld(runs_, owner); }

uint64_t RunStore::HeldByAll() const { return CountHeld(runs_, std::nullopt); }

size_t RunStore::MemoryBytes() const {
  size_t bytes = keys_.capacity() * sizeof(uint64_t) + pages_.capacity() * sizeof(Page) +
                 runs_.capacity() * sizeof(Run) + (free_pages_.capacity() + free_runs_.capacity()) * sizeof(uint32_t) +
                 table_->bytes();
  for (const Run& run : runs_) {
    bytes += run.holders.capacity() * sizeof(HeldBits) + run.extra.capacity() * sizeof(ExtraCopies) +
             run.ranges.capacity() * sizeof(OwnerRanges);
    for (const OwnerRanges& r : run.ranges) bytes += r.hits.bytes() + r.stamps.bytes();
    for (const HeldBits& h : run.holders) bytes += h.more.capacity() * sizeof(uint64_t);
  }
  return bytes;
}

void RunStore::StartAhead(std::span<const uint64_t> keys, size_t i, HashRing& ring) const {
  static_assert(kGroupAhead < kRing && kEntryAhead < kGroupAhead);
  if (i == 0) {
    for (size_t j = 0; j < std::min(keys.size(), kGroupAhead); ++j) {
      ring[j] = MixKey(keys[j]);
      table_->PrefetchGroup(ring[j]);
    }
  }
  if (i + kGroupAhead < keys.size()) {
    const uint64_t hash = ring[(i + kGroupAhead) % kRing] = MixKey(keys[i + kGroupAhead]);
    table_->PrefetchGroup(hash);
  }
  if (i + kEntryAhead < keys.size()) {
    const uint32_t id = table_->PeekId(ring[(i + kEntryAhead) % kRing]);
    if (id < keys_.size()) __builtin_prefetch(&keys_[id]);
  }
}

RunStore::Place RunStore::PlaceOf(uint32_t id) const {
  const Page& page = pages_[id >> kRunPageBits];
  return {id, page.run, page.base + (id & (kRunPage - 1))};
}

RunStore::Place RunStore::Next(const Place& at) const {
  const uint32_t id =
      (at.id & (kRunPage - 1)) != kRunPage - 1 ? at.id + 1 : pages_[at.id >> kRunPageBits].next << kRunPageBits;
  return {id, at.run, at.pos + 1};
}

uint32_t RunStore::EntryAt(uint32_t run, uint32_t pos) const {
  uint32_t page = runs_[run].first_page;
  for (uint32_t k = pos / kRunPage; k > 0; --k) page = pages_[page].next;
  return page << kRunPageBits | pos % kRunPage;
}

uint32_t RunStore::Find(uint64_t key, uint64_t hash, uint32_t* free_slot) const {
  uint32_t id = kNoId;
  table_->FindSlot(hash, [&](uint32_t candidate) { return keys_[candidate] == key; }, &id, free_slot);
  return id;
}

RunStore::Place RunStore::Append(uint32_t run, uint64_t key, uint64_t hash, uint32_t free_slot) {
  if (growth_left_ == 0) {
    GrowTable();
    free_slot = kNoId;   // a slot of the old table
  }
  const uint32_t slot = runs_[run].length % kRunPage;
  if (slot == 0) {
    const uint32_t page = NewPage(run, runs_[run].length);
    Run& r = runs_[run];
    if (r.last_page == kNone) {
      r.first_page = page;
    } else {
      pages_[r.last_page].next = page;
    }
    r.last_page = page;
  }
  Run& r = runs_[run];
  const uint32_t id = r.last_page << kRunPageBits | slot;
  keys_[id] = key;
  if (free_slot != kNoId ? table_->InsertAt(free_slot, hash, id) : table_->Insert(hash, id)) --growth_left_;
  ++size_;
  return {id, run, r.length++};
}

uint32_t RunStore::NewRun() {
  if (!free_runs_.empty()) {
    const uint32_t run = free_runs_.back();
    free_runs_.pop_back();
    return run;
  }
  runs_.emplace_back();
  return static_cast<uint32_t>(runs_.size() - 1);
}

uint32_t RunStore::NewPage(uint32_t run, uint32_t base) {
  uint32_t page;
  if (!free_pages_.empty()) {
    page = free_pages_.back();
    free_pages_.pop_back();
  } else {
    page = static_cast<uint32_t>(pages_.size());
    pages_.emplace_back();
    keys_.resize(keys_.size() + kRunPage);
  }
  pages_[page] = Page{run, base, kNone};
  return page;
}

void RunStore::GrowTable() {
  auto grown = std::make_unique<Table>(Table::GroupsFor(table_.get(), static_cast<uint32_t>(size_)));
  table_->ForEachId([&](uint32_t id) { grown->Insert(MixKey(keys_[id]), id); });
  table_ = std::move(grown);
  growth_left_ = table_->max_load() - static_cast<uint32_t>(size_);
}

void RunStore::Prune(uint32_t run) {
  Run& r = runs_[run];
  uint32_t end = 0;
  for (const HeldBits& h : r.holders) end = std::max(end, h.End());
  if (end == r.length) return;
  for (Place at{EntryAt(run, end), run, end};; at = Next(at)) {
    if (table_->Erase(MixKey(keys_[at.id]), at.id)) ++growth_left_;
    --size_;
    if (at.pos + 1 == r.length) break;
  }
  // Pages past the last one that still holds a position below `end` go.
  uint32_t last = kNone, page = r.first_page;
  for (uint32_t k = (end + kRunPage - 1) / kRunPage; k > 0; --k) {
    last = page;
    page = pages_[page].next;
  }
  while (page != kNone) {
    const uint32_t next = pages_[page].next;
    pages_[page] = Page{};
    free_pages_.push_back(page);
    page = next;
  }
  if (last == kNone) {
    r.first_page = kNone;
  } else {
    pages_[last].next = kNone;
  }
  r.last_page = last;
  r.length = end;
  if (end == 0) {
    r = Run{};
    free_runs_.push_back(run);
  }
}

}  // namespace kvidx::internal
