// Internal to the block index: a shard's records, by id.
//
// A chunked arena of 16-byte records (see words.h) that is never unmapped
// while the shard lives, so a reader holding a stale id reads at worst
// garbage that its read section rejects. Freed records are chained through
// word 3 and reused. Bytes-form keys keep their leading digest bytes in a
// side arena allocated only for chunks that need one (vLLM's integer keys
// never do).
//
// Readers: any thread, lock-free (At, Holds, KeyOf, top). Writers: the
// shard's writer only (Alloc, Free, WriteSideKey).
#pragma once

#include <atomic>
#include <cstdint>

#include "index/block_key.h"
#include "index/internal/probe_key.h"
#include "index/internal/ptr_dir.h"
#include "index/internal/words.h"

namespace kvidx::internal {

inline constexpr uint32_t kRecChunkBits = 12;                   // 4096 records (64 KiB) per chunk
inline constexpr uint32_t kRecChunk = 1u << kRecChunkBits;
inline constexpr uint32_t kRecDirSize = 1u << 14;               // 2^26 records per shard

// Bytes-form digest: w[0] = length code (0 = integer form, 0xFF = empty
// bytes, else byte count), w[1..6] = up to 24 leading digest bytes.
struct SideKey {
  AWord w[7];
};

class RecordArena {
 public:
  RecordArena() = default;
  ~RecordArena();
  RecordArena(const RecordArena&) = delete;
  RecordArena& operator=(const RecordArena&) = delete;

  // Record `id`'s words, or nullptr if `id` is out of bounds (stale read).
  // Inlined by force: the query walk peeks a record per block (see
  // Shard's reader side).
  [[gnu::always_inline]] Rec* At(uint32_t id) const {
    if (id >= top_.load(std::memory_order_acquire)) return nullptr;
    Rec* chunk = rec_dir_.Get(id >> kRecChunkBits);
    return chunk == nullptr ? nullptr : &chunk[id & (kRecChunk - 1)];
  }
  // Whether record `r` (id `id`) holds key `k` and is live. Inlined by
  // force, like At: the query walk checks one record per block.
  [[gnu::always_inline]] inline bool Holds(const Rec* r, uint32_t id, const ProbeKey& k) const;
  BlockKey KeyOf(uint32_t id) const;
  // Ids below this have been handed out (live or free).
  uint32_t top() const { return top_.load(std::memory_order_acquire); }
  // Bytes of the chunks allocated (records and side keys), live or free.
  size_t MemoryBytes() const;

  // A record id, reused or fresh; its words are the caller's to write.
  uint32_t Alloc();
  // Marks `id` free (readers see kSrcFree) and chains it for reuse.
  void Free(uint32_t id);
  // Records the leading digest bytes of a bytes-form key for record `id`.
  // Inline for the usual case, an integer key in an arena without side
  // keys: every insert calls it.
  void WriteSideKey(uint32_t id, const ProbeKey& k) {
    if (k.code == 0 && !has_side_.load(std::memory_order_relaxed)) return;
    WriteSideKeySlow(id, k);
  }

 private:
  void WriteSideKeySlow(uint32_t id, const ProbeKey& k);

  std::atomic<uint32_t> top_{0};
  PtrDir<Rec> rec_dir_{kRecDirSize};
  PtrDir<SideKey> side_dir_{kRecDirSize};
  // False while every key in the arena is integer form (vLLM's usual
  // case): Holds then skips the side directory.
  std::atomic<bool> has_side_{false};
  uint32_t free_ = kNoId;   // the writer's free list
};

inline bool RecordArena::Holds(const Rec* r, uint32_t id, const ProbeKey& k) const {
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

}  // namespace kvidx::internal
