// Internal to the block index: a shard's overflow owner arrays.
//
// A buddy allocator over a chunked word space (u32 offsets). A block of
// class c holds 2^c owners (2^(c+1) words) at an offset aligned to its
// size; a chunk is one top-class block. Freeing merges a block with its
// buddy while the buddy is free, so space freed when owner arrays move up a
// class (every block gaining owners at once, as replicas warm up) becomes
// whole chunks again instead of piling up on per-class free lists. Chunks
// are mapped zero pages, committed as arrays are written, and never
// unmapped while the pool lives. A free block of a page or more keeps its
// free-list links beside the pool, not in its own words: splitting a fresh
// chunk down to a small class would otherwise write one header into each
// of the halves it frees, committing ~7 pages of a chunk that holds one
// array (64 shards of a model then cost ~2 MB before any sharing).
//
// Readers: any thread, lock-free (At). Writers: the shard's writer only.
#pragma once

#include <bit>
#include <cstdint>
#include <vector>

#include "index/internal/ptr_dir.h"
#include "index/internal/words.h"

namespace kvidx::internal {

inline constexpr uint32_t kPoolChunkBits = 16;                  // 256 KiB of words per chunk
inline constexpr uint32_t kPoolChunk = 1u << kPoolChunkBits;
inline constexpr uint32_t kPoolDirSize = 1u << 16;              // the whole u32 offset space
// Owner arrays hold 2^class owners (class >= 1); a chunk is one block of
// the top class, split and re-merged buddy-style.
inline constexpr uint32_t kTopPoolClass = kPoolChunkBits - 1;   // 2^15 owners = one chunk
inline constexpr uint32_t kMaxOwnerClass = 14;                  // up to 16384 owners per block
inline constexpr uint32_t kMaxOwners = 1u << kMaxOwnerClass;

// The smallest class that holds `n` owners.
inline uint32_t OwnerClassFor(uint32_t n) { return n <= 2 ? 1 : static_cast<uint32_t>(std::bit_width(n - 1)); }

class OwnerPool {
 public:
  OwnerPool();
  ~OwnerPool();
  OwnerPool(const OwnerPool&) = delete;
  OwnerPool& operator=(const OwnerPool&) = delete;

  // The words at `off`, or nullptr if its chunk does not exist (stale read).
  [[gnu::always_inline]] AWord* At(uint32_t off) const {
    AWord* chunk = dir_.Get(off >> kPoolChunkBits);
    return chunk == nullptr ? nullptr : &chunk[off & (kPoolChunk - 1)];
  }

  // The offset of a block of 2^cls owners (uninitialised words).
  uint32_t Alloc(uint32_t cls);
  // Returns the block of class `cls` at `off`.
  void Free(uint32_t off, uint32_t cls);
  uint32_t chunks() const { return chunks_; }
  // Bytes of the chunks allocated (used or free) and the free-block bitmap.
  size_t MemoryBytes() const {
    return size_t{chunks_} * kPoolChunk * sizeof(AWord) + free_bits_.capacity() * sizeof(uint64_t) +
           big_links_.capacity() * sizeof(FreeLinks);
  }

 private:
  // A free block's links. Blocks smaller than a page (2^kBigWordsBits
  // words) keep them in their own words ([0] next, [1] prev, [2] class);
  // larger ones in big_links_.
  struct FreeLinks {
    uint32_t next = kNoId, prev = kNoId, cls = 0;
  };
  static constexpr uint32_t kBigWordsBits = 10;   // 1024 words = one 4 KiB page
  static bool IsBig(uint32_t cls) { return (kOwnerWords << cls) >= (1u << kBigWordsBits); }
  FreeLinks LinksOf(uint32_t off, uint32_t cls) const;
  void SetLinks(uint32_t off, uint32_t cls, const FreeLinks& l);
  void Push(uint32_t off, uint32_t cls);
  void Unlink(uint32_t off, uint32_t cls);
  bool IsFree(uint32_t off, uint32_t cls) const;

  PtrDir<AWord> dir_{kPoolDirSize};
  uint32_t chunks_ = 0;
  uint32_t free_[kTopPoolClass + 1];   // free-list heads per class
  // Bit per 4 pool words: a free block starts there (its class is in its
  // links). Lets Free find a free buddy without trusting pool words.
  std::vector<uint64_t> free_bits_;
  std::vector<FreeLinks> big_links_;   // by off >> kBigWordsBits
};

}  // namespace kvidx::internal
