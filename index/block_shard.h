// Internal to the block index: one shard of one model's blocks.
//
// A shard is a Swiss-style open-addressing table (8-slot groups of 1-byte
// control tags, SWAR matching, 4-byte record ids) over a chunked record
// arena and a chunked pool of overflow owner arrays. Writers hold `mu` and
// wrap every mutation in `seq` (odd while writing); readers use relaxed
// atomic loads validated against `seq` (see block_index.h for the scheme).
// Every word a reader may load is a std::atomic so that concurrent reads are
// well-defined (and TSan-clean); on x86 a relaxed load is a plain mov.
//
// Record (20 bytes, 5 words): key low, key high, then either one inline
// owner (3 words) or, when the block has several owners, an overflow handle
// (marker, pool offset, count|class). Owner (3 words): source<<16|tier<<8|
// group, recency stamp, refcount|hits<<16. Owner arrays are kept sorted by
// the first word, i.e. by source then tier then group.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>

#include "index/block_key.h"
#include "index/epoch.h"

// ThreadSanitizer does not model std::atomic_thread_fence (GCC rejects it
// under -Wtsan). In TSan builds the seqlock and epoch fences become
// read-modify-write operations with the same ordering guarantees; release
// builds keep the cheaper fences.
#if defined(__SANITIZE_THREAD__)
#define KVIDX_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define KVIDX_TSAN 1
#endif
#endif

namespace kvidx::internal {

inline constexpr uint32_t kShardBits = 6;
inline constexpr uint32_t kShards = 1u << kShardBits;
inline constexpr uint32_t kNoId = 0xFFFFFFFFu;

inline constexpr uint32_t kRecChunkBits = 12;                   // 4096 records (80 KiB) per chunk
inline constexpr uint32_t kRecChunk = 1u << kRecChunkBits;
inline constexpr uint32_t kRecDirSize = 1u << 14;               // 2^26 records per shard
inline constexpr uint32_t kPoolChunkBits = 16;                  // 256 KiB of words per chunk
inline constexpr uint32_t kPoolChunk = 1u << kPoolChunkBits;
inline constexpr uint32_t kPoolDirSize = 1u << 16;              // the whole u32 offset space
inline constexpr uint32_t kMaxOwnerClass = 14;                  // up to 16384 owners per block

inline constexpr uint32_t kSrcOverflow = 0xFFFF;   // record word 2 marker: owners are in the pool
inline constexpr uint32_t kSrcFree = 0xFFFE;       // record word 2 marker: record is free

inline constexpr uint8_t kCtrlEmpty = 0x80;
inline constexpr uint8_t kCtrlDeleted = 0xFE;

using AWord = std::atomic<uint32_t>;

inline uint32_t Ld(const AWord& w) { return w.load(std::memory_order_relaxed); }
inline void St(AWord& w, uint32_t v) { w.store(v, std::memory_order_relaxed); }

inline constexpr uint32_t OwnerKey(uint32_t source, uint32_t tier, uint32_t group) {
  return (source << 16) | (tier << 8) | group;
}
inline constexpr uint32_t OwnerSource(uint32_t okey) { return okey >> 16; }
inline constexpr uint32_t OwnerTier(uint32_t okey) { return (okey >> 8) & 0xFF; }
inline constexpr uint32_t OwnerGroup(uint32_t okey) { return okey & 0xFF; }

struct Rec {
  AWord w[5];
};
static_assert(sizeof(Rec) == 20);

// Bytes-form digest: w[0] = length code (0 = integer form, 0xFF = empty
// bytes, else byte count), w[1..6] = up to 24 leading digest bytes.
struct SideKey {
  AWord w[7];
};

// A query or event key, hashed once.
struct ProbeKey {
  uint64_t wire = 0;
  uint64_t hash = 0;
  uint32_t code = 0;
  uint32_t head[6] = {};

  explicit ProbeKey(const BlockKey& k);
  uint32_t shard() const { return static_cast<uint32_t>(hash >> (64 - kShardBits)); }
  uint8_t tag() const { return static_cast<uint8_t>(hash & 0x7F); }
};

inline uint64_t MixKey(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

struct Table {
  explicit Table(uint32_t groups);
  uint32_t groups;   // power of two
  std::unique_ptr<std::atomic<uint64_t>[]> ctrl;   // 8 control bytes per group
  std::unique_ptr<AWord[]> slots;                  // record ids
  uint32_t capacity() const { return groups * 8; }
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
  T* Get(size_t i) const { return i < n_ ? p_[i].load(std::memory_order_acquire) : nullptr; }
  void Set(size_t i, T* v) { p_[i].store(v, std::memory_order_release); }
  size_t size() const { return n_; }

 private:
  size_t n_;
  std::atomic<T*>* p_;
};

class Shard {
 public:
  Shard();
  ~Shard();
  Shard(const Shard&) = delete;
  Shard& operator=(const Shard&) = delete;

  // --- Reader side (no lock; call between ReadBegin and ReadValid) ---
  uint64_t ReadBegin() const;
  bool ReadValid(uint64_t s) const;
  // Record id of `k` or kNoId, using relaxed loads and bounds checks only.
  uint32_t Find(const ProbeKey& k) const;
  // Record words, or nullptr if `id` is out of bounds (stale read).
  Rec* RecAt(uint32_t id) const;
  // The owner words of record `r`: sets *count and returns a pointer to
  // 3*count words, or nullptr if the handle is out of bounds (stale read).
  AWord* Owners(Rec* r, uint32_t* count) const;
  bool KeyEquals(uint32_t id, const ProbeKey& k) const;
  BlockKey KeyOf(uint32_t id) const;
  // Prefetch helpers for a query pipeline: unvalidated, never fault, never
  // change results. Group of `k` -> its control word and slots; the record
  // the first tag match points to; a record's overflow owner array.
  void PrefetchGroup(const ProbeKey& k) const;
  void PrefetchRecord(const ProbeKey& k) const;
  void PrefetchOwners(const ProbeKey& k) const;
  const Table* table() const { return table_.load(std::memory_order_acquire); }
  uint32_t size() const { return size_.load(std::memory_order_relaxed); }

  // --- Writer side (hold mu) ---
  std::mutex mu;
  void BeginWrite();
  void EndWrite();
  // Owner words (3) of `okey` in record `id`, or nullptr.
  AWord* FindOwner(uint32_t id, uint32_t okey) const;
  // Creates a record for `k` with one owner; returns its id. Grows the table
  // first if needed (publishing it with its own short write section) -- so
  // call it *outside* a BeginWrite/EndWrite pair.
  uint32_t InsertRecord(const ProbeKey& k, uint32_t okey, uint32_t stamp, uint32_t ref_hits,
                        EpochDomain* epoch);
  // The following must run inside BeginWrite/EndWrite.
  void AddOwner(uint32_t id, uint32_t okey, uint32_t stamp, uint32_t ref_hits);
  // Removes owner `okey`; frees the record (and its table slot) when it was
  // the last. Returns true if the record is gone.
  bool RemoveOwner(uint32_t id, uint32_t okey);
  bool IsLive(uint32_t id) const;
  uint32_t records_allocated() const { return rec_top_.load(std::memory_order_acquire); }

 private:
  uint32_t AllocRec();
  void FreeRec(uint32_t id);
  uint32_t PoolAlloc(uint32_t cls);
  void PoolFree(uint32_t off, uint32_t cls);
  AWord* PoolAt(uint32_t off) const;
  void WriteSideKey(uint32_t id, const ProbeKey& k);
  void EraseSlotOf(uint32_t id);
  void InsertId(Table* t, uint64_t hash, uint32_t id, bool* used_empty);
  void Resize(EpochDomain* epoch);

  alignas(64) std::atomic<uint64_t> seq_{0};
  std::atomic<Table*> table_{nullptr};
  std::atomic<uint32_t> rec_top_{0};
  std::atomic<uint32_t> size_{0};
  PtrDir<Rec> rec_dir_{kRecDirSize};
  PtrDir<SideKey> side_dir_{kRecDirSize};
  PtrDir<AWord> pool_dir_{kPoolDirSize};
  // Writer-only state.
  uint32_t growth_left_ = 0;
  uint32_t free_rec_ = kNoId;
  uint32_t pool_top_ = 0;
  uint32_t pool_free_[kMaxOwnerClass + 1];
};

}  // namespace kvidx::internal
