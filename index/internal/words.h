// Internal to the block index: the words a lock-free reader loads, and the
// layout of records and owners in them.
//
// Every word a reader may load is a std::atomic so that concurrent reads
// are well-defined (and TSan-clean); on x86 a relaxed load is a plain mov.
//
// Record (16 bytes, 4 words): key low, key high, then either one inline
// owner (2 words) or, when the block has several owners, an overflow handle
// (marker | count, pool offset). Owner (8 bytes, 2 words):
//   w0 = source:16 | tier:6 | group:6 | ref:4   (identity, then refcount)
//   w1 = hits:8 | stamp:24                      (hit count, recency stamp)
// Owner arrays are kept sorted by w0, i.e. by source, tier, group. The
// refcount and hit fields hold exact values up to 14 and 254; beyond, the
// refcount field reads kRefSpilled, the hit field saturates at 255 (what a
// query sums) and the exact pair lives in the shard's SpillMap (rare:
// duplicate copies past 14, blocks hit 255+ times by one replica).
#pragma once

#include <atomic>
#include <cstdint>

namespace kvidx::internal {

using AWord = std::atomic<uint32_t>;

inline uint32_t Ld(const AWord& w) { return w.load(std::memory_order_relaxed); }
inline void St(AWord& w, uint32_t v) { w.store(v, std::memory_order_relaxed); }

inline constexpr uint32_t kNoId = 0xFFFFFFFFu;
inline constexpr uint32_t kOwnerWords = 2;

inline constexpr uint32_t kSrcOverflow = 0xFFFF;   // record word 2 marker: owners are in the pool
inline constexpr uint32_t kSrcFree = 0xFFFE;       // record word 2 marker: record is free
inline constexpr uint32_t kCountMask = 0xFFFF;     // overflow handle word 2: marker << 16 | count

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

inline uint64_t KeyWire(const Rec* r) { return Ld(r->w[0]) | (uint64_t{Ld(r->w[1])} << 32); }

}  // namespace kvidx::internal
