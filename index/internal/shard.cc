#include "index/internal/shard.h"

#include <cstdlib>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KVIDX_PAUSE() _mm_pause()
#else
#define KVIDX_PAUSE() ((void)0)
#endif

namespace kvidx::internal {

Shard::~Shard() { delete table_.load(std::memory_order_relaxed); }

// ---------------------------------------------------------------- readers

uint64_t Shard::ReadBeginSlow() const {
  for (int spins = 0;; ++spins) {
    uint64_t s = seq_.load(std::memory_order_acquire);
    if ((s & 1) == 0) return s;
    // A write section covers one block's mutation: spin briefly, then yield
    // in case the writer was preempted inside it.
    if (spins < 64) {
      KVIDX_PAUSE();
    } else {
      std::this_thread::yield();
    }
  }
}

// ---------------------------------------------------------------- writers

void Shard::BeginWrite() {
#ifdef KVIDX_TSAN
  seq_.fetch_add(1, std::memory_order_acq_rel);
#else
  seq_.store(seq_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
#endif
}

void Shard::EndWrite() { seq_.store(seq_.load(std::memory_order_relaxed) + 1, std::memory_order_release); }

bool Shard::IsLive(uint32_t id) const {
  Rec* r = RecAt(id);
  return r != nullptr && OwnerSource(Ld(r->w[2])) != kSrcFree;
}

bool Shard::HasSource(uint32_t id, uint32_t source) const {
  if (!IsLive(id)) return false;
  uint32_t n = 0;
  const AWord* o = Owners(RecAt(id), &n);
  for (uint32_t k = 0; o != nullptr && k < n; ++k) {
    uint32_t s = OwnerSource(Ld(o[kOwnerWords * k]));
    if (s >= source) return s == source;   // sorted by source
  }
  return false;
}

AWord* Shard::FindOwner(uint32_t id, uint32_t okey) const {
  Rec* r = RecAt(id);
  if (r == nullptr) return nullptr;
  uint32_t n = 0;
  AWord* o = Owners(r, &n);
  if (o == nullptr) return nullptr;
  if (n <= 8) {
    for (uint32_t i = 0; i < n; ++i) {
      if (OwnerIdentity(Ld(o[kOwnerWords * i])) == okey) return &o[kOwnerWords * i];
    }
    return nullptr;
  }
  uint32_t lo = 0, hi = n;
  while (lo < hi) {
    uint32_t mid = (lo + hi) / 2;
    if (OwnerIdentity(Ld(o[kOwnerWords * mid])) < okey) lo = mid + 1; else hi = mid;
  }
  return lo < n && OwnerIdentity(Ld(o[kOwnerWords * lo])) == okey ? &o[kOwnerWords * lo] : nullptr;
}

OwnerCounts Shard::CountsOf(uint32_t id, const AWord* o) const {
  uint32_t w0 = Ld(o[0]);
  if ((w0 & kRefMask) != kRefSpilled) return OwnerCounts{w0 & kRefMask, OwnerHitsView(Ld(o[1]))};
  return spill_.Get(id, OwnerIdentity(w0));
}

void Shard::UpdateSpill(uint32_t id, uint32_t okey, OwnerCounts counts, bool fits) {
  if (!fits) {
    spill_.Set(id, okey, counts);
  } else {
    spill_.Erase(id, okey);
  }
}

void Shard::SetOwner(uint32_t id, AWord* o, uint32_t stamp, OwnerCounts counts) {
  uint32_t w[2];
  const uint32_t w0 = Ld(o[0]);
  EncodeOwner(id, OwnerIdentity(w0), stamp, counts, (w0 & kRefMask) == kRefSpilled, w);
  St(o[0], w[0]);
  St(o[1], w[1]);
}

void Shard::Resize(EpochDomain* epoch) {
  // Built on the side while readers keep using the old table; published by
  // one pointer store inside a write section.
  Table* old = table_.load(std::memory_order_relaxed);
  uint32_t n = size_.load(std::memory_order_relaxed);
  Table* t = new Table(Table::GroupsFor(old, n));
  if (old != nullptr) old->ForEachId([&](uint32_t id) { t->Insert(MixKey(KeyWire(RecAt(id))), id); });
  growth_left_ = t->max_load() - n;
  BeginWrite();
  table_.store(t, std::memory_order_seq_cst);
  EndWrite();
  if (old != nullptr) epoch->Retire(old, [](void* p) { delete static_cast<Table*>(p); });
}

uint32_t Shard::InsertRecord(const ProbeKey& k, uint32_t okey, uint32_t stamp, OwnerCounts counts,
                             EpochDomain* epoch, uint32_t free_slot) {
  if (growth_left_ == 0) {
    Resize(epoch);
    free_slot = kNoId;   // a slot of the old table
  }
  BeginWrite();
  uint32_t id = records_.Alloc();
  Rec* r = RecAt(id);
  uint32_t w[2];
  EncodeOwner(id, okey, stamp, counts, /*was_spilled=*/false, w);   // a new owner
  St(r->w[0], static_cast<uint32_t>(k.wire));
  St(r->w[1], static_cast<uint32_t>(k.wire >> 32));
  St(r->w[3], w[1]);
  St(r->w[2], w[0]);
  records_.WriteSideKey(id, k);
  Table* t = table_.load(std::memory_order_relaxed);
  if (free_slot != kNoId ? t->InsertAt(free_slot, k.hash, id) : t->Insert(k.hash, id)) --growth_left_;
  size_.store(size_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  EndWrite();
  return id;
}

void Shard::MoveOwners(uint32_t id, uint32_t off, uint32_t n, uint32_t cls, uint32_t pos, const uint32_t* add) {
  Rec* r = RecAt(id);
  const uint32_t m = add != nullptr ? n + 1 : n - 1;
  uint32_t noff = pool_.Alloc(cls);
  AWord* q = pool_.At(noff);
  const AWord* p = pool_.At(off);
  for (uint32_t i = 0, j = 0; i < m; ++i) {
    if (add != nullptr && i == pos) {
      St(q[kOwnerWords * i], add[0]);
      St(q[kOwnerWords * i + 1], add[1]);
      continue;
    }
    if (add == nullptr && j == pos) ++j;
    St(q[kOwnerWords * i], Ld(p[kOwnerWords * j]));
    St(q[kOwnerWords * i + 1], Ld(p[kOwnerWords * j + 1]));
    ++j;
  }
  St(r->w[3], noff);
  St(r->w[2], (kSrcOverflow << 16) | m);
  pool_.Free(off, OwnerClassFor(n));
}

bool Shard::AddOwner(uint32_t id, uint32_t okey, uint32_t stamp, OwnerCounts counts) {
  Rec* r = RecAt(id);
  uint32_t a = Ld(r->w[2]);
  if (OwnerSource(a) == kSrcOverflow && (a & kCountMask) >= kMaxOwners) return false;
  uint32_t w[2];
  EncodeOwner(id, okey, stamp, counts, /*was_spilled=*/false, w);   // a new owner
  if (OwnerSource(a) != kSrcOverflow) {
    // One inline owner -> an array of class 1 (2 owners).
    uint32_t off = pool_.Alloc(1);
    AWord* p = pool_.At(off);
    uint32_t first[2] = {a, Ld(r->w[3])};
    const uint32_t* lo = a < w[0] ? first : w;
    const uint32_t* hi = a < w[0] ? w : first;
    for (uint32_t i = 0; i < kOwnerWords; ++i) {
      St(p[i], lo[i]);
      St(p[kOwnerWords + i], hi[i]);
    }
    St(r->w[3], off);
    St(r->w[2], (kSrcOverflow << 16) | 2);
    return true;
  }
  uint32_t off = Ld(r->w[3]);
  uint32_t n = a & kCountMask;
  AWord* p = pool_.At(off);
  uint32_t pos = 0;
  while (pos < n && Ld(p[kOwnerWords * pos]) < w[0]) ++pos;
  if (n < (1u << OwnerClassFor(n))) {
    for (uint32_t i = n; i > pos; --i) {
      St(p[kOwnerWords * i], Ld(p[kOwnerWords * (i - 1)]));
      St(p[kOwnerWords * i + 1], Ld(p[kOwnerWords * (i - 1) + 1]));
    }
    St(p[kOwnerWords * pos], w[0]);
    St(p[kOwnerWords * pos + 1], w[1]);
    St(r->w[2], (kSrcOverflow << 16) | (n + 1));
    return true;
  }
  MoveOwners(id, off, n, OwnerClassFor(n + 1), pos, w);
  return true;
}

void Shard::EraseSlotOf(uint32_t id, uint32_t slot) {
  Table* t = table_.load(std::memory_order_relaxed);
  if (slot != kNoId ? t->EraseSlot(slot) : t->Erase(MixKey(KeyWire(RecAt(id))), id)) ++growth_left_;
}

bool Shard::RemoveOwner(uint32_t id, uint32_t okey, uint32_t slot) {
  Rec* r = RecAt(id);
  uint32_t a = Ld(r->w[2]);
  if (OwnerSource(a) != kSrcOverflow) {
    if (OwnerIdentity(a) != okey) return false;
    if ((a & kRefMask) == kRefSpilled) spill_.Erase(id, okey);
    EraseSlotOf(id, slot);
    records_.Free(id);
    size_.store(size_.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
    return true;
  }
  uint32_t off = Ld(r->w[3]);
  uint32_t n = a & kCountMask;
  AWord* p = pool_.At(off);
  uint32_t pos = 0;
  while (pos < n && OwnerIdentity(Ld(p[kOwnerWords * pos])) != okey) ++pos;
  if (pos == n) return false;
  if ((Ld(p[kOwnerWords * pos]) & kRefMask) == kRefSpilled) spill_.Erase(id, okey);
  if (n == 2) {   // the survivor goes back inline
    const AWord* s = &p[kOwnerWords * (1 - pos)];
    St(r->w[3], Ld(s[1]));
    St(r->w[2], Ld(s[0]));
    pool_.Free(off, 1);
    return false;
  }
  if (OwnerClassFor(n - 1) < OwnerClassFor(n)) {   // arrays stay in their smallest class
    MoveOwners(id, off, n, OwnerClassFor(n - 1), pos, nullptr);
    return false;
  }
  for (uint32_t i = pos; i + 1 < n; ++i) {
    St(p[kOwnerWords * i], Ld(p[kOwnerWords * (i + 1)]));
    St(p[kOwnerWords * i + 1], Ld(p[kOwnerWords * (i + 1) + 1]));
  }
  St(r->w[2], (kSrcOverflow << 16) | (n - 1));
  return false;
}

}  // namespace kvidx::internal
