// Internal to the block index: a block key hashed once, as the index's
// tables and shards look it up.
#pragma once

#include <cstdint>

#include "index/block_key.h"

namespace kvidx::internal {

inline constexpr uint32_t kShardBits = 6;
inline constexpr uint32_t kShards = 1u << kShardBits;

inline uint64_t MixKey(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

inline uint32_t ShardOfHash(uint64_t hash) { return static_cast<uint32_t>(hash >> (64 - kShardBits)); }
// The shard of the key whose wire form is `wire` (as ProbeKey computes it).
inline uint32_t ShardOfWire(uint64_t wire) { return ShardOfHash(MixKey(wire)); }

// A query or event key, hashed once. `head` is meaningful only when
// code != 0 (bytes form), so integer keys never touch it. The code and head
// are what a record's side key holds (see RecordArena).
struct ProbeKey {
  uint64_t wire = 0;
  uint64_t hash = 0;
  uint32_t code = 0;
  uint32_t head[6] = {};

  ProbeKey() = default;
  explicit ProbeKey(const BlockKey& k) { Set(k); }
  // Re-targets this key in place (the query pipeline reuses a small ring).
  // Inlined by force, as are Table::PeekId and PtrDir::Get: inside the
  // templated pipeline walk GCC 12 left all three as calls per block
  // (+3% instructions per W1 query).
  [[gnu::always_inline]] void Set(const BlockKey& k) {
    wire = k.wire();
    hash = MixKey(wire);
    code = 0;
    if (k.is_bytes()) SetBytes(k);
  }
  uint32_t shard() const { return ShardOfHash(hash); }

 private:
  void SetBytes(const BlockKey& k);
};

// The key a ProbeKey's parts stand for: `wire`, and for a bytes-form key
// its length code and leading bytes (code 0: integer form).
BlockKey KeyFromParts(uint64_t wire, uint32_t code, const uint32_t (&head)[6]);

}  // namespace kvidx::internal
