// PretokenCache: pre-token -> ids, so that words seen before (in any
// request) skip the BPE merges.
//
// A pre-token's ids depend on nothing but the pre-token and the immutable
// model, so a hit returns exactly what a miss computes (keys are compared
// in full, not by hash). Bounded: 64 shards of at most `shard_capacity`
// entries, keys of at most kMaxKeyBytes; a full shard is emptied before it
// takes a new entry. Each shard is one flat open-addressing table over two
// arenas (key bytes, ids): a lookup is one hash (XXH3), one probe run and a
// copy, with no allocation.
//
// Thread-safe: one mutex per shard, held for a probe or an insertion.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/mutex.h"

namespace kvidx::tokenizer {

class PretokenCache {
 public:
  static constexpr size_t kMaxKeyBytes = 128;
  explicit PretokenCache(size_t shard_capacity = 2048);
  PretokenCache(const PretokenCache&) = delete;
  PretokenCache& operator=(const PretokenCache&) = delete;

  // Appends the cached ids of `key` to *ids; false on a miss.
  bool Lookup(std::string_view key, std::vector<uint32_t>* ids) const;
  void Insert(std::string_view key, const uint32_t* ids, size_t count) const;

 private:
  struct Slot {
    uint64_t hash = 0;  // 0: empty (hashes are forced odd)
    uint32_t key_at = 0;
    uint32_t ids_at = 0;
    uint16_t key_size = 0;
    uint16_t id_count = 0;
  };
  struct Shard {
    mutable Mutex mu;
    // A power of two, grown by doubling up to 2 x capacity (a shard that
    // sees few pre-tokens stays small).
    std::vector<Slot> slots KVIDX_GUARDED_BY(mu);
    std::string keys KVIDX_GUARDED_BY(mu);
    std::vector<uint32_t> ids KVIDX_GUARDED_BY(mu);
    size_t size KVIDX_GUARDED_BY(mu) = 0;
  };
  static constexpr size_t kShards = 64;
  // The slot holding `key`, or the empty slot where it would go.
  static Slot* Find(Shard& shard, uint64_t hash, std::string_view key) KVIDX_REQUIRES(shard.mu);
  // Makes room for one more entry: first slots, growth, or emptying.
  void Reserve(Shard& shard) const KVIDX_REQUIRES(shard.mu);

  size_t shard_capacity_;
  size_t max_slots_;
  mutable std::array<Shard, kShards> shards_;
};

}  // namespace kvidx::tokenizer
