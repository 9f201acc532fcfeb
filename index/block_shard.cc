#include "index/block_shard.h"

#include <sys/mman.h>

#include <bit>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KVIDX_PAUSE() _mm_pause()
#else
#define KVIDX_PAUSE() ((void)0)
#endif

namespace kvidx::internal {

namespace {

inline uint64_t MatchEmptyOrDeleted(uint64_t ctrl) { return ctrl & ~(ctrl << 7) & kMsbs; }

inline uint8_t CtrlByte(uint64_t word, uint32_t i) { return static_cast<uint8_t>(word >> (8 * i)); }
inline uint64_t WithCtrlByte(uint64_t word, uint32_t i, uint8_t b) {
  return (word & ~(uint64_t{0xFF} << (8 * i))) | (uint64_t{b} << (8 * i));
}


}  // namespace

void* MapZeroed(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) std::abort();
  return p;
}

void Unmap(void* p, size_t bytes) { munmap(p, bytes); }

void ProbeKey::SetBytes(const BlockKey& k) {
  size_t len = k.byte_len();
  code = len == 0 ? 0xFF : static_cast<uint32_t>(len);
  uint8_t buf[BlockKey::kMaxBytes + 8] = {};
  k.CopyBytes(buf);
  size_t head = len > 8 ? len - 8 : 0;
  uint8_t h[24] = {};
  std::memcpy(h, buf, head);
  std::memcpy(this->head, h, sizeof(h));
}

Table::Table(uint32_t g) : groups(g), bytes_(size_t{g} * (sizeof(std::atomic<uint64_t>) + 8 * sizeof(AWord))) {
  mem_ = bytes_ >= kMapBytes ? MapZeroed(bytes_) : ::operator new(bytes_, std::align_val_t{64});
  ctrl = static_cast<std::atomic<uint64_t>*>(mem_);
  slots = reinterpret_cast<AWord*>(ctrl + g);
  for (uint32_t i = 0; i < g; ++i) new (&ctrl[i]) std::atomic<uint64_t>(kLsbs * kCtrlEmpty);
  for (uint32_t i = 0; i < g * 8; ++i) new (&slots[i]) AWord(kNoId);
}

Table::~Table() {
  // The atomics are trivially destructible: only the memory goes.
  if (bytes_ >= kMapBytes) {
    Unmap(mem_, bytes_);
  } else {
    ::operator delete(mem_, std::align_val_t{64});
  }
}

Shard::Shard() {
  for (uint32_t& f : pool_free_) f = kNoId;
}

Shard::~Shard() {
  delete table_.load(std::memory_order_relaxed);
  for (size_t i = 0; i < rec_dir_.size(); ++i) {
    Rec* r = rec_dir_.Get(i);
    if (r == nullptr) break;
    std::free(r);
  }
  for (size_t i = 0; i < side_dir_.size(); ++i) std::free(side_dir_.Get(i));
  for (size_t i = 0; i < pool_dir_.size(); ++i) {
    AWord* p = pool_dir_.Get(i);
    if (p == nullptr) break;
    std::free(p);
  }
}

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

BlockKey Shard::KeyOf(uint32_t id) const {
  Rec* r = RecAt(id);
  if (r == nullptr) return {};
  uint64_t wire = KeyWire(r);
  SideKey* side = side_dir_.Get(id >> kRecChunkBits);
  uint32_t code = side == nullptr ? 0 : Ld(side[id & (kRecChunk - 1)].w[0]);
  if (code == 0) return BlockKey::FromU64(wire);
  size_t len = code == 0xFF ? 0 : code;
  uint8_t head[24];
  for (int i = 0; i < 6; ++i) {
    uint32_t v = Ld(side[id & (kRecChunk - 1)].w[1 + i]);
    std::memcpy(head + 4 * i, &v, 4);
  }
  uint8_t buf[BlockKey::kMaxBytes];
  size_t tail = len < 8 ? len : 8;
  std::memcpy(buf, head, len - tail);
  StoreBigEndian(buf + len - tail, wire, tail);
  return BlockKey::FromBytes(buf, len);
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

namespace {
inline uint64_t SpillKey(uint32_t id, uint32_t okey) { return (uint64_t{id} << 32) | okey; }
}  // namespace

OwnerCounts Shard::CountsOf(uint32_t id, const AWord* o) const {
  uint32_t w0 = Ld(o[0]);
  if ((w0 & kRefMask) != kRefSpilled) return OwnerCounts{w0 & kRefMask, OwnerHitsView(Ld(o[1]))};
  auto it = spill_.find(SpillKey(id, OwnerIdentity(w0)));
  return it == spill_.end() ? OwnerCounts{} : it->second;
}

void Shard::EncodeOwner(uint32_t id, uint32_t okey, uint32_t stamp, OwnerCounts c, bool was_spilled,
                        uint32_t out[2]) {
  const bool fits = c.ref < kRefSpilled && c.hits <= kHitsInlineMax;
  if (!fits) {
    spill_[SpillKey(id, okey)] = c;
  } else if (was_spilled) {
    spill_.erase(SpillKey(id, okey));
  }
  out[0] = okey | (fits ? c.ref : kRefSpilled);
  out[1] = (stamp & kStampMask) | ((c.hits > 255 ? 255u : c.hits) << kStampBits);
}

void Shard::SetOwner(uint32_t id, AWord* o, uint32_t stamp, OwnerCounts counts) {
  uint32_t w[2];
  const uint32_t w0 = Ld(o[0]);
  EncodeOwner(id, OwnerIdentity(w0), stamp, counts, (w0 & kRefMask) == kRefSpilled, w);
  St(o[0], w[0]);
  St(o[1], w[1]);
}

uint32_t Shard::AllocRec() {
  if (free_rec_ != kNoId) {
    uint32_t id = free_rec_;
    free_rec_ = Ld(RecAt(id)->w[3]);
    return id;
  }
  uint32_t id = rec_top_.load(std::memory_order_relaxed);
  if ((id >> kRecChunkBits) >= kRecDirSize) std::abort();  // 2^26 blocks in one shard
  if ((id & (kRecChunk - 1)) == 0 && rec_dir_.Get(id >> kRecChunkBits) == nullptr) {
    // malloc, not new[]: pages are committed as records are written; ids at
    // or above rec_top_ are never read, so no initialisation is needed.
    Rec* chunk = static_cast<Rec*>(std::malloc(sizeof(Rec) * kRecChunk));
    if (chunk == nullptr) std::abort();
    rec_dir_.Set(id >> kRecChunkBits, chunk);
  }
  rec_top_.store(id + 1, std::memory_order_release);
  return id;
}

void Shard::FreeRec(uint32_t id) {
  Rec* r = RecAt(id);
  St(r->w[2], kSrcFree << 16);
  St(r->w[3], free_rec_);
  free_rec_ = id;
}

// ---------------------------------------------------------------- owner pool
//
// A buddy allocator over the pool's word space. A block of class c holds
// 2^c owners (2^(c+1) words) at an offset aligned to its size; a chunk is
// one top-class block. Freeing merges a block with its buddy while the
// buddy is free, so space freed when blocks move up a class (every block
// gaining owners at once, as replicas warm up) becomes whole chunks again
// instead of piling up on per-class free lists.
// Free block words: [0] next, [1] prev (kNoId ends), [2] class.

namespace {
inline uint32_t ClassWords(uint32_t cls) { return kOwnerWords << cls; }
inline uint32_t ClassFor(uint32_t n) { return n <= 2 ? 1 : static_cast<uint32_t>(std::bit_width(n - 1)); }
}  // namespace

bool Shard::PoolIsFree(uint32_t off, uint32_t cls) const {
  uint32_t bit = off >> 2;
  if (((pool_free_bits_[bit >> 6] >> (bit & 63)) & 1) == 0) return false;
  return Ld(PoolAt(off)[2]) == cls;
}

void Shard::PoolPush(uint32_t off, uint32_t cls) {
  AWord* p = PoolAt(off);
  St(p[0], pool_free_[cls]);
  St(p[1], kNoId);
  St(p[2], cls);
  if (pool_free_[cls] != kNoId) St(PoolAt(pool_free_[cls])[1], off);
  pool_free_[cls] = off;
  uint32_t bit = off >> 2;
  pool_free_bits_[bit >> 6] |= uint64_t{1} << (bit & 63);
}

void Shard::PoolUnlink(uint32_t off, uint32_t cls) {
  AWord* p = PoolAt(off);
  uint32_t next = Ld(p[0]);
  uint32_t prev = Ld(p[1]);
  if (prev == kNoId) {
    pool_free_[cls] = next;
  } else {
    St(PoolAt(prev)[0], next);
  }
  if (next != kNoId) St(PoolAt(next)[1], prev);
  uint32_t bit = off >> 2;
  pool_free_bits_[bit >> 6] &= ~(uint64_t{1} << (bit & 63));
}

uint32_t Shard::PoolAlloc(uint32_t cls) {
  uint32_t c = cls;
  while (c <= kTopPoolClass && pool_free_[c] == kNoId) ++c;
  if (c > kTopPoolClass) {
    if (pool_chunks_ >= kPoolDirSize) std::abort();
    // Uninitialised until written, so pages are committed only as used.
    AWord* chunk = static_cast<AWord*>(std::malloc(sizeof(AWord) * kPoolChunk));
    if (chunk == nullptr) std::abort();
    pool_dir_.Set(pool_chunks_, chunk);
    pool_free_bits_.resize(pool_free_bits_.size() + kPoolChunk / 4 / 64, 0);
    c = kTopPoolClass;
    PoolPush(pool_chunks_ << kPoolChunkBits, c);
    ++pool_chunks_;
  }
  uint32_t off = pool_free_[c];
  PoolUnlink(off, c);
  while (c > cls) {   // split: keep the lower half, free the upper
    --c;
    PoolPush(off + ClassWords(c), c);
  }
  return off;
}

void Shard::PoolFree(uint32_t off, uint32_t cls) {
  while (cls < kTopPoolClass) {
    uint32_t buddy = off ^ ClassWords(cls);
    if (!PoolIsFree(buddy, cls)) break;
    PoolUnlink(buddy, cls);
    off = off < buddy ? off : buddy;
    ++cls;
  }
  PoolPush(off, cls);
}

void Shard::WriteSideKey(uint32_t id, const ProbeKey& k) {
  SideKey* side = side_dir_.Get(id >> kRecChunkBits);
  if (side == nullptr) {
    if (k.code == 0) return;   // integer keys need no side entry
    // Zeroed: records created before this chunk existed are integer form.
    side = static_cast<SideKey*>(std::calloc(kRecChunk, sizeof(SideKey)));
    if (side == nullptr) std::abort();
    side_dir_.Set(id >> kRecChunkBits, side);
    has_side_.store(true, std::memory_order_relaxed);  // published by EndWrite's release
  }
  SideKey& s = side[id & (kRecChunk - 1)];
  St(s.w[0], k.code);
  for (int i = 0; i < 6; ++i) St(s.w[1 + i], k.head[i]);
}

void Shard::InsertId(Table* t, uint64_t hash, uint32_t id, bool* used_empty) {
  uint32_t mask = t->groups - 1;
  uint32_t g = GroupOf(hash, t->groups);
  for (uint32_t step = 0;; ++step) {
    uint64_t ctrl = t->ctrl[g].load(std::memory_order_relaxed);
    uint64_t m = MatchEmptyOrDeleted(ctrl);
    if (m != 0) {
      uint32_t i = LowestByte(m);
      *used_empty = CtrlByte(ctrl, i) == kCtrlEmpty;
      St(t->slots[g * 8 + i], id);
      t->ctrl[g].store(WithCtrlByte(ctrl, i, static_cast<uint8_t>(hash & 0x7F)), std::memory_order_relaxed);
      return;
    }
    g = (g + step + 1) & mask;
  }
}

void Shard::Resize(EpochDomain* epoch) {
  // Built on the side while readers keep using the old table; published by
  // one pointer store inside a write section. A table more than 7/16 full
  // doubles (so loads stay in 7/16..7/8); otherwise it is rebuilt at the
  // smallest size with load <= 7/16, which drops tombstones and shrinks a
  // table emptied by mass removal.
  Table* old = table_.load(std::memory_order_relaxed);
  uint32_t n = size_.load(std::memory_order_relaxed);
  uint32_t groups = 1;
  if (old != nullptr && uint64_t{n} * 16 > uint64_t{old->capacity()} * 7) {
    groups = old->groups * 2;
  } else {
    while (uint64_t{groups} * 8 * 7 < (uint64_t{n} + 1) * 16) groups <<= 1;
  }
  Table* t = new Table(groups);
  if (old != nullptr) {
    for (uint32_t g = 0; g < old->groups; ++g) {
      uint64_t ctrl = old->ctrl[g].load(std::memory_order_relaxed);
      for (uint32_t i = 0; i < 8; ++i) {
        uint8_t c = CtrlByte(ctrl, i);
        if (c & 0x80) continue;
        uint32_t id = Ld(old->slots[g * 8 + i]);
        bool unused;
        InsertId(t, MixKey(KeyWire(RecAt(id))), id, &unused);
      }
    }
  }
  growth_left_ = t->capacity() * 7 / 8 - n;
  BeginWrite();
  table_.store(t, std::memory_order_seq_cst);
  EndWrite();
  if (old != nullptr) epoch->Retire(old, [](void* p) { delete static_cast<Table*>(p); });
}

uint32_t Shard::InsertRecord(const ProbeKey& k, uint32_t okey, uint32_t stamp, OwnerCounts counts,
                             EpochDomain* epoch) {
  if (growth_left_ == 0) Resize(epoch);
  BeginWrite();
  uint32_t id = AllocRec();
  Rec* r = RecAt(id);
  uint32_t w[2];
  EncodeOwner(id, okey, stamp, counts, /*was_spilled=*/false, w);   // a new owner
  St(r->w[0], static_cast<uint32_t>(k.wire));
  St(r->w[1], static_cast<uint32_t>(k.wire >> 32));
  St(r->w[3], w[1]);
  St(r->w[2], w[0]);
  WriteSideKey(id, k);
  bool used_empty = false;
  InsertId(table_.load(std::memory_order_relaxed), k.hash, id, &used_empty);
  if (used_empty) --growth_left_;
  size_.store(size_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  EndWrite();
  return id;
}

void Shard::MoveOwners(uint32_t id, uint32_t off, uint32_t n, uint32_t cls, uint32_t pos, const uint32_t* add) {
  Rec* r = RecAt(id);
  const uint32_t m = add != nullptr ? n + 1 : n - 1;
  uint32_t noff = PoolAlloc(cls);
  AWord* q = PoolAt(noff);
  const AWord* p = PoolAt(off);
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
  PoolFree(off, ClassFor(n));
}

void Shard::AddOwner(uint32_t id, uint32_t okey, uint32_t stamp, OwnerCounts counts) {
  Rec* r = RecAt(id);
  uint32_t w[2];
  EncodeOwner(id, okey, stamp, counts, /*was_spilled=*/false, w);   // a new owner
  uint32_t a = Ld(r->w[2]);
  if (OwnerSource(a) != kSrcOverflow) {
    // One inline owner -> an array of class 1 (2 owners).
    uint32_t off = PoolAlloc(1);
    AWord* p = PoolAt(off);
    uint32_t first[2] = {a, Ld(r->w[3])};
    const uint32_t* lo = a < w[0] ? first : w;
    const uint32_t* hi = a < w[0] ? w : first;
    for (uint32_t i = 0; i < kOwnerWords; ++i) {
      St(p[i], lo[i]);
      St(p[kOwnerWords + i], hi[i]);
    }
    St(r->w[3], off);
    St(r->w[2], (kSrcOverflow << 16) | 2);
    return;
  }
  uint32_t off = Ld(r->w[3]);
  uint32_t n = a & kCountMask;
  AWord* p = PoolAt(off);
  uint32_t pos = 0;
  while (pos < n && Ld(p[kOwnerWords * pos]) < w[0]) ++pos;
  if (n < (1u << ClassFor(n))) {
    for (uint32_t i = n; i > pos; --i) {
      St(p[kOwnerWords * i], Ld(p[kOwnerWords * (i - 1)]));
      St(p[kOwnerWords * i + 1], Ld(p[kOwnerWords * (i - 1) + 1]));
    }
    St(p[kOwnerWords * pos], w[0]);
    St(p[kOwnerWords * pos + 1], w[1]);
    St(r->w[2], (kSrcOverflow << 16) | (n + 1));
    return;
  }
  if (ClassFor(n + 1) > kMaxOwnerClass) std::abort();  // 16384 owners of one block
  MoveOwners(id, off, n, ClassFor(n + 1), pos, w);
}

void Shard::EraseSlotOf(uint32_t id) {
  Table* t = table_.load(std::memory_order_relaxed);
  uint64_t hash = MixKey(KeyWire(RecAt(id)));
  uint32_t mask = t->groups - 1;
  uint32_t g = GroupOf(hash, t->groups);
  uint8_t tag = static_cast<uint8_t>(hash & 0x7F);
  for (uint32_t step = 0; step < t->groups; ++step) {
    uint64_t ctrl = t->ctrl[g].load(std::memory_order_relaxed);
    for (uint64_t m = MatchTag(ctrl, tag); m != 0; m &= m - 1) {
      uint32_t i = LowestByte(m);
      if (Ld(t->slots[g * 8 + i]) != id) continue;
      // A group that still has an empty slot never made a probe continue
      // past it, so the slot can become empty again; otherwise tombstone.
      bool empty_ok = MatchEmpty(ctrl) != 0;
      t->ctrl[g].store(WithCtrlByte(ctrl, i, empty_ok ? kCtrlEmpty : kCtrlDeleted), std::memory_order_relaxed);
      St(t->slots[g * 8 + i], kNoId);
      if (empty_ok) ++growth_left_;
      return;
    }
    if (MatchEmpty(ctrl) != 0) break;
    g = (g + step + 1) & mask;
  }
  std::abort();  // a live record must be in the table
}

bool Shard::RemoveOwner(uint32_t id, uint32_t okey) {
  Rec* r = RecAt(id);
  uint32_t a = Ld(r->w[2]);
  if (OwnerSource(a) != kSrcOverflow) {
    if (OwnerIdentity(a) != okey) return false;
    if ((a & kRefMask) == kRefSpilled) spill_.erase(SpillKey(id, okey));
    EraseSlotOf(id);
    FreeRec(id);
    size_.store(size_.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
    return true;
  }
  uint32_t off = Ld(r->w[3]);
  uint32_t n = a & kCountMask;
  AWord* p = PoolAt(off);
  uint32_t pos = 0;
  while (pos < n && OwnerIdentity(Ld(p[kOwnerWords * pos])) != okey) ++pos;
  if (pos == n) return false;
  if ((Ld(p[kOwnerWords * pos]) & kRefMask) == kRefSpilled) spill_.erase(SpillKey(id, okey));
  if (n == 2) {   // the survivor goes back inline
    const AWord* s = &p[kOwnerWords * (1 - pos)];
    St(r->w[3], Ld(s[1]));
    St(r->w[2], Ld(s[0]));
    PoolFree(off, 1);
    return false;
  }
  if (ClassFor(n - 1) < ClassFor(n)) {   // arrays stay in their smallest class
    MoveOwners(id, off, n, ClassFor(n - 1), pos, nullptr);
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
