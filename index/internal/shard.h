// Internal to the block index: one shard of one model's blocks.
//
// A shard composes a Table (key hash -> record id), a RecordArena (the
// records), an OwnerPool (overflow owner arrays) and a SpillMap (exact
// counts past the inline fields), and owns the concurrency protocol over
// them (see block_index.h for the scheme): one writer at a time holds the
// shard's WriteLock and wraps every single-block mutation in `seq` (odd
// while writing); readers take no lock, load words relaxed inside Read,
// which retries them when a write overlapped. A grown table is built on
// the side and swapped in by one pointer store; the old one is retired to
// an EpochDomain.
#pragma once

#include <atomic>
#include <cstdint>

#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "index/block_key.h"
#include "index/epoch.h"
#include "index/internal/owner_pool.h"
#include "index/internal/probe_key.h"
#include "index/internal/record_arena.h"
#include "index/internal/spill_map.h"
#include "index/internal/table.h"
#include "index/internal/words.h"

// ThreadSanitizer does not model std::atomic_thread_fence (GCC rejects it
// under -Wtsan). In TSan builds the seqlock and epoch fences become
// read-modify-write operations with the same ordering guarantees; release
// builds keep the cheaper fences. KVIDX_TSAN comes from epoch.h.

namespace kvidx::internal {

class Shard {
 public:
  Shard() = default;
  ~Shard();
  Shard(const Shard&) = delete;
  Shard& operator=(const Shard&) = delete;

  // --- Reader side (no lock; only inside Read) ---
  // The calls FindPrefix makes once per query block (RecAt, Owners,
  // PrefetchGroup, PeekRecord, RecHolds, PrefetchOwnersOf) are inlined by
  // force: FindPrefix's stages inline into one large function, in which
  // GCC's inliner leaves some of them as calls -- which ones depends on
  // that function's size -- costing ~5% of W1's query instructions. A
  // prefetching helper they call must be forced too (Table::PrefetchGroup
  // says why); check that the prefetches are still emitted after a change.

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
  [[gnu::always_inline]] Rec* RecAt(uint32_t id) const { return records_.At(id); }
  // The owner words of record `r`: sets *count and returns a pointer to
  // kOwnerWords * count words (sorted by word 0), or nullptr if the handle
  // is out of bounds (stale read).
  [[gnu::always_inline]] inline AWord* Owners(const Rec* r, uint32_t* count) const;
  bool KeyEquals(uint32_t id, const ProbeKey& k) const {
    const Rec* r = RecAt(id);
    return r != nullptr && RecHolds(r, id, k);
  }
  BlockKey KeyOf(uint32_t id) const { return records_.KeyOf(id); }
  // Prefetch helpers for a query pipeline: unvalidated, never fault, never
  // change results. Group of `k` -> its control word and slots.
  [[gnu::always_inline]] inline void PrefetchGroup(const ProbeKey& k) const;
  // Batched pipeline (FindPrefix): after PrefetchGroup(k), the record the
  // first tag match points to (prefetched), or nullptr; then its overflow
  // owner array. Unvalidated like the above: only a hint.
  // `*id` = the record's id (kNoId with nullptr).
  [[gnu::always_inline]] inline const Rec* PeekRecord(const ProbeKey& k, uint32_t* id) const;
  // Whether record `r` (id `id`) holds key `k` and is live. A PeekRecord
  // result checked this way inside a read section is k's record (a key has
  // one record at a time), which saves the table walk when the peek was
  // right.
  [[gnu::always_inline]] bool RecHolds(const Rec* r, uint32_t id, const ProbeKey& k) const {
    return records_.Holds(r, id, k);
  }
  [[gnu::always_inline]] inline void PrefetchOwnersOf(const Rec* r) const;
  uint32_t size() const { return size_.load(std::memory_order_relaxed); }

  // --- Writer side (hold a WriteLock) ---
  // The shard's writer mutex, held for the scope (or until Unlock). It
  // excludes other writers only: readers never wait on it.
  class KVIDX_SCOPED_CAPABILITY WriteLock {
   public:
    explicit WriteLock(Shard& shard) KVIDX_ACQUIRE(shard.mu_) : lock_(shard.mu_) {}
    ~WriteLock() KVIDX_RELEASE() {}
    void Unlock() KVIDX_RELEASE() { lock_.Unlock(); }

   private:
    MutexLock lock_;
  };
  // For a callback run under a WriteLock (the analysis does not follow a
  // lock into a lambda): declares the lock held.
  void AssertWriteLocked() const KVIDX_ASSERT_CAPABILITY(mu_) {}
  // A write section: one block's mutation between BeginWrite and EndWrite,
  // which readers that overlap it retry.
  void BeginWrite() KVIDX_REQUIRES(mu_);
  void EndWrite() KVIDX_REQUIRES(mu_);
  // The owner (kOwnerWords words) with identity `okey` in record `id`, or
  // nullptr.
  AWord* FindOwner(uint32_t id, uint32_t okey) const KVIDX_REQUIRES(mu_);
  // Exact counts of owner `o` of record `id` (reads the spill map when the
  // inline fields overflowed).
  OwnerCounts CountsOf(uint32_t id, const AWord* o) const KVIDX_REQUIRES(mu_);
  // Creates a record for `k` with one owner; returns its id. Grows the table
  // first if needed (publishing it with its own short write section) -- so
  // call it *outside* a BeginWrite/EndWrite pair. `free_slot`: from a
  // Locate that missed under the same lock hold, or kNoId.
  uint32_t InsertRecord(const ProbeKey& k, uint32_t okey, uint32_t stamp, OwnerCounts counts, EpochDomain* epoch,
                        uint32_t free_slot = kNoId) KVIDX_REQUIRES(mu_);
  // The following must run inside BeginWrite/EndWrite.
  // Adds owner `okey`; false, changing nothing, when the block already has
  // kMaxOwners owners.
  [[nodiscard]] bool AddOwner(uint32_t id, uint32_t okey, uint32_t stamp, OwnerCounts counts) KVIDX_REQUIRES(mu_);
  // Rewrites owner `o` of record `id` (stamp and counts; identity kept).
  void SetOwner(uint32_t id, AWord* o, uint32_t stamp, OwnerCounts counts) KVIDX_REQUIRES(mu_);
  // Removes owner `okey`; frees the record (and its table slot) when it was
  // the last. Returns true if the record is gone. `slot` is the record's
  // table slot from Locate under the same lock hold, or kNoId (the table is
  // then searched for it).
  bool RemoveOwner(uint32_t id, uint32_t okey, uint32_t slot = kNoId) KVIDX_REQUIRES(mu_);
  // Find for the writer: the record id or kNoId, its table slot (*slot, for
  // RemoveOwner), and with `free_slot` on a miss the slot an insert would
  // take (for InsertRecord).
  uint32_t Locate(const ProbeKey& k, uint32_t* slot, uint32_t* free_slot = nullptr) const KVIDX_REQUIRES(mu_) {
    uint32_t id = kNoId;
    *slot = kNoId;
    if (free_slot != nullptr) *free_slot = kNoId;
    const Table* t = table_.load(std::memory_order_relaxed);
    if (t != nullptr) {
      *slot = t->FindSlot(
          k.hash, [this, &k](uint32_t candidate) { return KeyEquals(candidate, k); }, &id, free_slot);
    }
    return id;
  }
  bool IsLive(uint32_t id) const KVIDX_REQUIRES(mu_);
  // Whether live record `id` has an owner of `source` (any tier or group).
  bool HasSource(uint32_t id, uint32_t source) const KVIDX_REQUIRES(mu_);
  uint32_t records_allocated() const KVIDX_REQUIRES(mu_) { return records_.top(); }
  // Bytes allocated by part (see BlockIndex::Memory).
  struct Bytes {
    size_t table = 0, records = 0, owners = 0, spill = 0;
  };
  Bytes MemoryBytes() const KVIDX_REQUIRES(mu_) {
    const Table* t = table_.load(std::memory_order_acquire);
    return {t == nullptr ? 0 : t->bytes(), records_.MemoryBytes(), pool_.MemoryBytes(), spill_.MemoryBytes()};
  }

 private:
  uint64_t ReadBegin() const {
    uint64_t s = seq_.load(std::memory_order_acquire);
    return (s & 1) == 0 ? s : ReadBeginSlow();
  }
  uint64_t ReadBeginSlow() const;   // a writer is inside its section: wait
  bool ReadValid(uint64_t s) const;
  // Owner words for `okey` with `stamp` and `counts`; spills the counts of
  // record `id` when they do not fit inline (and drops a spill entry that
  // is no longer needed when `was_spilled`). Inline: every stored block
  // encodes an owner, and spills are rare.
  void EncodeOwner(uint32_t id, uint32_t okey, uint32_t stamp, OwnerCounts counts, bool was_spilled,
                   uint32_t out[2]) KVIDX_REQUIRES(mu_) {
    const bool fits = counts.ref < kRefSpilled && counts.hits <= kHitsInlineMax;
    if (!fits || was_spilled) [[unlikely]] UpdateSpill(id, okey, counts, fits);
    out[0] = okey | (fits ? counts.ref : kRefSpilled);
    out[1] = (stamp & kStampMask) | ((counts.hits > 255 ? 255u : counts.hits) << kStampBits);
  }
  void UpdateSpill(uint32_t id, uint32_t okey, OwnerCounts counts, bool fits) KVIDX_REQUIRES(mu_);
  // Moves record `id`'s owner array (count `n`, at `off`) to a new block of
  // class `cls`, inserting `add` at position `pos` (when add != nullptr) or
  // dropping position `pos` (add == nullptr).
  void MoveOwners(uint32_t id, uint32_t off, uint32_t n, uint32_t cls, uint32_t pos, const uint32_t* add)
      KVIDX_REQUIRES(mu_);
  void EraseSlotOf(uint32_t id, uint32_t slot) KVIDX_REQUIRES(mu_);
  void Resize(EpochDomain* epoch) KVIDX_REQUIRES(mu_);

  Mutex mu_;
  // Read lock-free by Read sections; written only under mu_ (seq_ and
  // table_ inside write sections).
  alignas(64) std::atomic<uint64_t> seq_{0};
  std::atomic<Table*> table_{nullptr};
  std::atomic<uint32_t> size_{0};
  // Read lock-free too; their writer-side state (free lists) is reached
  // only through the KVIDX_REQUIRES(mu_) methods above, which the analysis checks.
  RecordArena records_;
  OwnerPool pool_;
  // Writer-only state.
  uint32_t growth_left_ KVIDX_GUARDED_BY(mu_) = 0;   // inserts into empty slots before the table must be rebuilt
  SpillMap spill_ KVIDX_GUARDED_BY(mu_);
};

// ---- Reader fast path, inline (FindPrefix runs it once per query block).

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
  if (t != nullptr) t->PrefetchGroup(k.hash);
}

inline const Rec* Shard::PeekRecord(const ProbeKey& k, uint32_t* id) const {
  *id = kNoId;
  const Table* t = table_.load(std::memory_order_acquire);
  if (t == nullptr) return nullptr;
  uint32_t cand = t->PeekId(k.hash);
  if (cand == kNoId) return nullptr;
  const Rec* r = RecAt(cand);
  if (r != nullptr) {
    __builtin_prefetch(r);
    *id = cand;
  }
  return r;
}

inline void Shard::PrefetchOwnersOf(const Rec* r) const {
  if (OwnerSource(Ld(r->w[2])) != kSrcOverflow) return;
  const AWord* p = pool_.At(Ld(r->w[3]));
  if (p == nullptr) return;
  uint32_t n = Ld(r->w[2]) & kCountMask;
  // The first few lines (up to 16 owners); longer arrays are read
  // sequentially and the hardware prefetcher follows.
  uintptr_t a = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{63};
  uintptr_t end = reinterpret_cast<uintptr_t>(p) + 4 * kOwnerWords * uintptr_t{n > 16 ? 16 : n};
  for (; a < end; a += 64) __builtin_prefetch(reinterpret_cast<const void*>(a));
}

inline AWord* Shard::Owners(const Rec* r, uint32_t* count) const {
  uint32_t a = Ld(r->w[2]);
  if (OwnerSource(a) != kSrcOverflow) {
    *count = OwnerSource(a) == kSrcFree ? 0 : 1;
    return const_cast<AWord*>(&r->w[2]);   // the shard's words; writers mutate them under the lock
  }
  uint32_t off = Ld(r->w[3]);
  uint32_t n = a & kCountMask;
  if (n < 2 || n > (1u << kMaxOwnerClass) || (off & (kPoolChunk - 1)) + kOwnerWords * n > kPoolChunk) return nullptr;
  AWord* p = pool_.At(off);
  if (p == nullptr) return nullptr;
  *count = n;
  return p;
}

inline uint32_t Shard::Find(const ProbeKey& k) const {
  const Table* t = table_.load(std::memory_order_acquire);
  if (t == nullptr) return kNoId;
  return t->Find(k.hash, [this, &k](uint32_t id) { return KeyEquals(id, k); });
}

}  // namespace kvidx::internal
