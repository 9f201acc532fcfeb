// Internal to the block index: one shard of one model's blocks.
//
// A shard is a Swiss-style open-addressing table (8-slot groups of 1-byte
// control tags, SWAR matching, 4-byte record ids) over a chunked record
// arena and a chunked buddy pool of overflow owner arrays. Writers hold `mu`
// and wrap every mutation in `seq` (odd while writing); readers use relaxed
// atomic loads validated against `seq` (see block_index.h for the scheme).
// Every word a reader may load is a std::atomic so that concurrent reads are
// well-defined (and TSan-clean); on x86 a relaxed load is a plain mov.
//
// Record (16 bytes, 4 words): key low, key high, then either one inline
// owner (2 words) or, when the block has several owners, an overflow handle
// (marker | count, pool offset). Owner (8 bytes, 2 words):
//   w0 = source:16 | tier:6 | group:6 | ref:4   (identity, then refcount)
//   w1 = hits:8 | stamp:24                      (hit count, recency stamp)
// Owner arrays are kept sorted by w0, i.e. by source, tier, group. The
// refcount and hit fields hold exact values up to 14 and 254; beyond, the
// refcount field reads kRefSpilled, the hit field saturates at 255 (what a
// query sums) and the exact pair lives in the shard's writer-side spill map
// (rare: duplicate copies past 14, blocks hit 255+ times by one replica).
#pragma once

#include <atomic>
#include <bit>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "index/block_key.h"
#include "index/epoch.h"

// ThreadSanitizer does not model std::atomic_thread_fence (GCC rejects it
// under -Wtsan). In TSan builds the seqlock and epoch fences become
// read-modify-write operations with the same ordering guarantees; release
// builds keep the cheaper fences.
// KVIDX_TSAN comes from epoch.h.

namespace kvidx::internal {

inline constexpr uint32_t kShardBits = 6;
inline constexpr uint32_t kShards = 1u << kShardBits;
inline constexpr uint32_t kNoId = 0xFFFFFFFFu;

inline constexpr uint32_t kRecChunkBits = 12;                   // 4096 records (64 KiB) per chunk
inline constexpr uint32_t kRecChunk = 1u << kRecChunkBits;
inline constexpr uint32_t kRecDirSize = 1u << 14;               // 2^26 records per shard
inline constexpr uint32_t kPoolChunkBits = 16;                  // 256 KiB of words per chunk
inline constexpr uint32_t kPoolChunk = 1u << kPoolChunkBits;
inline constexpr uint32_t kPoolDirSize = 1u << 16;              // the whole u32 offset space
inline constexpr uint32_t kOwnerWords = 2;
// Owner arrays hold 2^class owners (class >= 1); a chunk is one block of
// the top class, split and re-merged buddy-style.
inline constexpr uint32_t kTopPoolClass = kPoolChunkBits - 1;   // 2^15 owners = one chunk
inline constexpr uint32_t kMaxOwnerClass = 14;                  // up to 16384 owners per block

inline constexpr uint32_t kSrcOverflow = 0xFFFF;   // record word 2 marker: owners are in the pool
inline constexpr uint32_t kSrcFree = 0xFFFE;       // record word 2 marker: record is free

inline constexpr uint8_t kCtrlEmpty = 0x80;
inline constexpr uint8_t kCtrlDeleted = 0xFE;

using AWord = std::atomic<uint32_t>;

inline uint32_t Ld(const AWord& w) { return w.load(std::memory_order_relaxed); }
inline void St(AWord& w, uint32_t v) { w.store(v, std::memory_order_relaxed); }

// Owner word 0. An owner key (okey) is the identity with a zero ref field.
inline constexpr uint32_t kMaxOwnerGroups = 63;    // groups 0..62 fit the 6-bit field
inline constexpr uint32_t kRefMask = 0xF;
inline constexpr uint32_t kRefSpilled = 0xF;       // exact counts are in the spill map
inline constexpr uint32_t OwnerKey(uint32_t source, uint32_t tier, uint32_t group) {
  return (source << 16) | (tier << 10) | (group << 4);
}
inline constexpr uint32_t OwnerSource(uint32_t w0) { return w0 >> 16; }
inline constexpr uint32_t OwnerTier(uint32_t w0) { return (w0 >> 10) & 0x3F; }
inline constexpr uint32_t OwnerGroup(uint32_t w0) { return (w0 >> 4) & 0x3F; }
inline constexpr uint32_t OwnerIdentity(uint32_t w0) { return w0 & ~kRefMask; }
// Owner word 1.
inline constexpr uint32_t kStampBits = 24;
inline constexpr uint32_t kStampMask = (1u << kStampBits) - 1;
inline constexpr uint32_t kHitsInlineMax = 254;    // 255 = "255 or more"
inline constexpr uint32_t OwnerStamp(uint32_t w1) { return w1 & kStampMask; }
inline constexpr uint32_t OwnerHitsView(uint32_t w1) { return w1 >> kStampBits; }

// A block owner's copy count and engine-confirmed hit count, exact.
struct OwnerCounts {
  uint32_t ref = 1;
  uint32_t hits = 0;
};

struct Rec {
  AWord w[4];
};
static_assert(sizeof(Rec) == 16);

// Bytes-form digest: w[0] = length code (0 = integer form, 0xFF = empty
// bytes, else byte count), w[1..6] = up to 24 leading digest bytes.
struct SideKey {
  AWord w[7];
};

inline uint64_t MixKey(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

// A query or event key, hashed once. `head` is meaningful only when
// code != 0 (bytes form), so integer keys never touch it.
struct ProbeKey {
  uint64_t wire = 0;
  uint64_t hash = 0;
  uint32_t code = 0;
  uint32_t head[6] = {};

  ProbeKey() = default;
  explicit ProbeKey(const BlockKey& k) { Set(k); }
  // Re-targets this key in place (the query pipeline reuses a small ring).
  void Set(const BlockKey& k) {
    wire = k.wire();
    hash = MixKey(wire);
    code = 0;
    if (k.is_bytes()) SetBytes(k);
  }
  uint32_t shard() const { return static_cast<uint32_t>(hash >> (64 - kShardBits)); }
  uint8_t tag() const { return static_cast<uint8_t>(hash & 0x7F); }

 private:
  void SetBytes(const BlockKey& k);
};

// Control words and slots live in one allocation. Large tables are mapped
// directly: a grown-out table is then returned to the kernel when retired,
// where from the heap glibc would keep it resident (its dynamic mmap
// threshold rises past table sizes after the first large free).
struct Table {
  explicit Table(uint32_t groups);
  ~Table();
  Table(const Table&) = delete;
  Table& operator=(const Table&) = delete;
  uint32_t groups;   // power of two
  std::atomic<uint64_t>* ctrl;   // 8 control bytes per group
  AWord* slots;                  // record ids, 8 per group
  uint32_t capacity() const { return groups * 8; }

 private:
  static constexpr size_t kMapBytes = 64 * 1024;
  size_t bytes_;
  void* mem_;
};

// Anonymous zero pages from mmap directly; calloc would memset them
// whenever glibc serves it from the heap (e.g. after its dynamic mmap
// threshold rose), committing every directory up front.
void* MapZeroed(size_t bytes);
void Unmap(void* p, size_t bytes);

// Zero-initialised, lazily committed array of atomic pointers: a large
// directory costs nothing until used.
template <typename T>
class PtrDir {
 public:
  explicit PtrDir(size_t n) : n_(n), p_(static_cast<std::atomic<T*>*>(MapZeroed(n * sizeof(std::atomic<T*>)))) {}
  ~PtrDir() { Unmap(p_, n_ * sizeof(std::atomic<T*>)); }
  PtrDir(const PtrDir&) = delete;
  PtrDir& operator=(const PtrDir&) = delete;
  T* Get(size_t i) const {
    if (i < kHead) return head_[i].load(std::memory_order_acquire);
    return i < n_ ? p_[i].load(std::memory_order_acquire) : nullptr;
  }
  void Set(size_t i, T* v) {
    if (i < kHead) {
      head_[i].store(v, std::memory_order_release);
    } else {
      p_[i].store(v, std::memory_order_release);
    }
  }
  size_t size() const { return n_; }

 private:
  // The first entries live in the owning object, hot in cache: a lookup
  // in a small index then touches no directory page (one per shard and
  // kind, which otherwise cost a TLB entry each on the query walk).
  static constexpr size_t kHead = 16;
  size_t n_;
  std::atomic<T*>* p_;
  std::atomic<T*> head_[kHead] = {};
};

class Shard {
 public:
  Shard();
  ~Shard();
  Shard(const Shard&) = delete;
  Shard& operator=(const Shard&) = delete;

  // --- Reader side (no lock; only inside Read) ---
  // The read section: runs `fn` until it ran while no writer touched the
  // shard. `fn` may see torn words, so it reads through the bounds-checked
  // accessors below only, returns false when what it read was visibly stale
  // (a handle out of bounds), and starts its output afresh on every run.
  // Every lock-free reader of a shard goes through here.
  template <typename Fn>
  [[gnu::always_inline]] void Read(Fn&& fn) const {
    for (;;) {
      const uint64_t s = ReadBegin();
      const bool ok = fn();
      if (ReadValid(s) && ok) return;
    }
  }
  // Record id of `k` or kNoId, using relaxed loads and bounds checks only.
  uint32_t Find(const ProbeKey& k) const;
  // Record words, or nullptr if `id` is out of bounds (stale read).
  Rec* RecAt(uint32_t id) const;
  // The owner words of record `r`: sets *count and returns a pointer to
  // kOwnerWords * count words (sorted by word 0), or nullptr if the handle
  // is out of bounds (stale read).
  AWord* Owners(const Rec* r, uint32_t* count) const;
  bool KeyEquals(uint32_t id, const ProbeKey& k) const;
  BlockKey KeyOf(uint32_t id) const;
  // Prefetch helpers for a query pipeline: unvalidated, never fault, never
  // change results. Group of `k` -> its control word and slots; the record
  // the first tag match points to; a record's overflow owner array.
  void PrefetchGroup(const ProbeKey& k) const;
  // Batched pipeline (FindPrefix): after PrefetchGroup(k), the record the
  // first tag match points to (prefetched), or nullptr; then its overflow
  // owner array. Unvalidated like the above: only a hint.
  // `*id` = the record's id (kNoId with nullptr).
  const Rec* PeekRecord(const ProbeKey& k, uint32_t* id) const;
  // Whether record `r` (id `id`) holds key `k` and is live. A PeekRecord
  // result checked this way inside a read section is k's record (a key has
  // one record at a time), which saves the table walk when the peek was
  // right.
  bool RecHolds(const Rec* r, uint32_t id, const ProbeKey& k) const;
  void PrefetchOwnersOf(const Rec* r) const;
  const Table* table() const { return table_.load(std::memory_order_acquire); }
  uint32_t size() const { return size_.load(std::memory_order_relaxed); }

  // --- Writer side (hold a WriteLock) ---
  // The shard's writer mutex, held for the scope (or until Unlock). It
  // excludes other writers only: readers never wait on it.
  class WriteLock {
   public:
    explicit WriteLock(Shard& shard) : lock_(shard.mu_) {}
    void Unlock() { lock_.unlock(); }

   private:
    std::unique_lock<std::mutex> lock_;
  };
  // A write section: one block's mutation between BeginWrite and EndWrite,
  // which readers that overlap it retry.
  void BeginWrite();
  void EndWrite();
  // The owner (kOwnerWords words) with identity `okey` in record `id`, or
  // nullptr.
  AWord* FindOwner(uint32_t id, uint32_t okey) const;
  // Exact counts of owner `o` of record `id` (reads the spill map when the
  // inline fields overflowed).
  OwnerCounts CountsOf(uint32_t id, const AWord* o) const;
  // Creates a record for `k` with one owner; returns its id. Grows the table
  // first if needed (publishing it with its own short write section) -- so
  // call it *outside* a BeginWrite/EndWrite pair.
  uint32_t InsertRecord(const ProbeKey& k, uint32_t okey, uint32_t stamp, OwnerCounts counts,
                        EpochDomain* epoch);
  // The following must run inside BeginWrite/EndWrite.
  void AddOwner(uint32_t id, uint32_t okey, uint32_t stamp, OwnerCounts counts);
  // Rewrites owner `o` of record `id` (stamp and counts; identity kept).
  void SetOwner(uint32_t id, AWord* o, uint32_t stamp, OwnerCounts counts);
  // Removes owner `okey`; frees the record (and its table slot) when it was
  // the last. Returns true if the record is gone.
  bool RemoveOwner(uint32_t id, uint32_t okey);
  bool IsLive(uint32_t id) const;
  // Whether live record `id` has an owner of `source` (any tier or group).
  bool HasSource(uint32_t id, uint32_t source) const;
  uint32_t records_allocated() const { return rec_top_.load(std::memory_order_acquire); }

 private:
  uint64_t ReadBegin() const {
    uint64_t s = seq_.load(std::memory_order_acquire);
    return (s & 1) == 0 ? s : ReadBeginSlow();
  }
  uint64_t ReadBeginSlow() const;   // a writer is inside its section: wait
  bool ReadValid(uint64_t s) const;
  uint32_t AllocRec();
  void FreeRec(uint32_t id);
  // Owner words for `okey` with `stamp` and `counts`; spills the counts of
  // record `id` when they do not fit inline (and drops a spill entry that
  // is no longer needed when `was_spilled`).
  void EncodeOwner(uint32_t id, uint32_t okey, uint32_t stamp, OwnerCounts counts, bool was_spilled,
                   uint32_t out[2]);
  // Buddy pool: blocks of 2^cls owners at offsets aligned to their size.
  uint32_t PoolAlloc(uint32_t cls);
  void PoolFree(uint32_t off, uint32_t cls);
  void PoolPush(uint32_t off, uint32_t cls);
  void PoolUnlink(uint32_t off, uint32_t cls);
  bool PoolIsFree(uint32_t off, uint32_t cls) const;
  // Moves record `id`'s owner array (count `n`, at `off`) to a new block of
  // class `cls`, inserting `add` at position `pos` (when add != nullptr) or
  // dropping position `pos` (add == nullptr).
  void MoveOwners(uint32_t id, uint32_t off, uint32_t n, uint32_t cls, uint32_t pos, const uint32_t* add);
  AWord* PoolAt(uint32_t off) const;
  void WriteSideKey(uint32_t id, const ProbeKey& k);
  void EraseSlotOf(uint32_t id);
  void InsertId(Table* t, uint64_t hash, uint32_t id, bool* used_empty);
  void Resize(EpochDomain* epoch);

  std::mutex mu_;
  alignas(64) std::atomic<uint64_t> seq_{0};
  std::atomic<Table*> table_{nullptr};
  std::atomic<uint32_t> rec_top_{0};
  std::atomic<uint32_t> size_{0};
  PtrDir<Rec> rec_dir_{kRecDirSize};
  PtrDir<SideKey> side_dir_{kRecDirSize};
  // False while every key in the shard is integer form (vLLM's usual
  // case): KeyEquals then skips the side directory.
  std::atomic<bool> has_side_{false};
  PtrDir<AWord> pool_dir_{kPoolDirSize};
  // Writer-only state.
  uint32_t growth_left_ = 0;
  uint32_t free_rec_ = kNoId;
  uint32_t pool_chunks_ = 0;
  uint32_t pool_free_[kTopPoolClass + 1];   // free-list heads per class
  // Bit per 4 pool words: a free block starts there (its class is in its
  // word 2). Lets PoolFree find a free buddy without trusting pool words.
  std::vector<uint64_t> pool_free_bits_;
  // Exact counts of owners whose inline fields overflowed, by (record id,
  // owner key).
  std::unordered_map<uint64_t, OwnerCounts> spill_;
};

// ---- Reader fast path, inline (FindPrefix runs it once per query block).

inline constexpr uint64_t kLsbs = 0x0101010101010101ULL;
inline constexpr uint64_t kMsbs = 0x8080808080808080ULL;
inline constexpr uint32_t kCountMask = 0xFFFF;   // overflow handle word 2: marker << 16 | count

// Bit 7 of byte i set where ctrl byte i == tag (may report false positives
// after a true match; callers verify the key).
inline uint64_t MatchTag(uint64_t ctrl, uint8_t tag) {
  uint64_t x = ctrl ^ (kLsbs * tag);
  return (x - kLsbs) & ~x & kMsbs;
}
inline uint64_t MatchEmpty(uint64_t ctrl) { return ctrl & ~(ctrl << 6) & kMsbs; }
inline uint32_t LowestByte(uint64_t m) { return static_cast<uint32_t>(std::countr_zero(m)) >> 3; }
inline uint32_t GroupOf(uint64_t hash, uint32_t groups) { return static_cast<uint32_t>(hash >> 7) & (groups - 1); }
inline uint64_t KeyWire(const Rec* r) { return Ld(r->w[0]) | (uint64_t{Ld(r->w[1])} << 32); }

inline bool Shard::ReadValid(uint64_t s) const {
#ifdef KVIDX_TSAN
  // Read-dont-modify-write: orders the data loads before it like the fence.
  return const_cast<std::atomic<uint64_t>&>(seq_).fetch_add(0, std::memory_order_acq_rel) == s;
#else
  std::atomic_thread_fence(std::memory_order_acquire);
  return seq_.load(std::memory_order_relaxed) == s;
#endif
}

inline void Shard::PrefetchGroup(const ProbeKey& k) const {
  const Table* t = table_.load(std::memory_order_acquire);
  if (t == nullptr) return;
  uint32_t g = GroupOf(k.hash, t->groups);
  __builtin_prefetch(&t->ctrl[g]);
  __builtin_prefetch(&t->slots[g * 8]);
}

inline const Rec* Shard::PeekRecord(const ProbeKey& k, uint32_t* id) const {
  *id = kNoId;
  const Table* t = table_.load(std::memory_order_acquire);
  if (t == nullptr) return nullptr;
  uint32_t g = GroupOf(k.hash, t->groups);
  uint64_t m = MatchTag(t->ctrl[g].load(std::memory_order_relaxed), k.tag());
  if (m == 0) return nullptr;
  uint32_t cand = Ld(t->slots[g * 8 + LowestByte(m)]);
  const Rec* r = RecAt(cand);
  if (r != nullptr) {
    __builtin_prefetch(r);
    *id = cand;
  }
  return r;
}

inline void Shard::PrefetchOwnersOf(const Rec* r) const {
  if (OwnerSource(Ld(r->w[2])) != kSrcOverflow) return;
  const AWord* p = PoolAt(Ld(r->w[3]));
  if (p == nullptr) return;
  uint32_t n = Ld(r->w[2]) & kCountMask;
  // The first few lines (up to 16 owners); longer arrays are read
  // sequentially and the hardware prefetcher follows.
  uintptr_t a = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{63};
  uintptr_t end = reinterpret_cast<uintptr_t>(p) + 4 * kOwnerWords * uintptr_t{n > 16 ? 16 : n};
  for (; a < end; a += 64) __builtin_prefetch(reinterpret_cast<const void*>(a));
}

inline Rec* Shard::RecAt(uint32_t id) const {
  if (id >= rec_top_.load(std::memory_order_acquire)) return nullptr;
  Rec* chunk = rec_dir_.Get(id >> kRecChunkBits);
  return chunk == nullptr ? nullptr : &chunk[id & (kRecChunk - 1)];
}

inline AWord* Shard::PoolAt(uint32_t off) const {
  AWord* chunk = pool_dir_.Get(off >> kPoolChunkBits);
  return chunk == nullptr ? nullptr : &chunk[off & (kPoolChunk - 1)];
}

inline AWord* Shard::Owners(const Rec* r, uint32_t* count) const {
  uint32_t a = Ld(r->w[2]);
  if (OwnerSource(a) != kSrcOverflow) {
    *count = OwnerSource(a) == kSrcFree ? 0 : 1;
    return const_cast<AWord*>(&r->w[2]);   // the shard's words; writers mutate them under mu
  }
  uint32_t off = Ld(r->w[3]);
  uint32_t n = a & kCountMask;
  if (n < 2 || n > (1u << kMaxOwnerClass) || (off & (kPoolChunk - 1)) + kOwnerWords * n > kPoolChunk) return nullptr;
  AWord* p = PoolAt(off);
  if (p == nullptr) return nullptr;
  *count = n;
  return p;
}

inline bool Shard::KeyEquals(uint32_t id, const ProbeKey& k) const {
  const Rec* r = RecAt(id);
  return r != nullptr && RecHolds(r, id, k);
}

inline bool Shard::RecHolds(const Rec* r, uint32_t id, const ProbeKey& k) const {
  if (KeyWire(r) != k.wire) return false;
  if (OwnerSource(Ld(r->w[2])) == kSrcFree) return false;
  if (!has_side_.load(std::memory_order_relaxed)) return k.code == 0;
  SideKey* side = side_dir_.Get(id >> kRecChunkBits);
  uint32_t code = side == nullptr ? 0 : Ld(side[id & (kRecChunk - 1)].w[0]);
  if (code != k.code) return false;
  if (code == 0) return true;
  const SideKey& s = side[id & (kRecChunk - 1)];
  for (int i = 0; i < 6; ++i) {
    if (Ld(s.w[1 + i]) != k.head[i]) return false;
  }
  return true;
}

inline uint32_t Shard::Find(const ProbeKey& k) const {
  const Table* t = table_.load(std::memory_order_acquire);
  if (t == nullptr) return kNoId;
  uint32_t mask = t->groups - 1;
  uint32_t g = GroupOf(k.hash, t->groups);
  uint8_t tag = k.tag();
  for (uint32_t step = 0; step < t->groups; ++step) {
    uint64_t ctrl = t->ctrl[g].load(std::memory_order_relaxed);
    for (uint64_t m = MatchTag(ctrl, tag); m != 0; m &= m - 1) {
      uint32_t id = Ld(t->slots[g * 8 + LowestByte(m)]);
      if (KeyEquals(id, k)) return id;
    }
    if (MatchEmpty(ctrl) != 0) return kNoId;
    g = (g + step + 1) & mask;
  }
  return kNoId;
}

}  // namespace kvidx::internal
