// PretokenCache: pre-token -> ids, so that text seen before (a system
// prompt repeated across requests) skips the BPE merges.
//
// A pre-token's ids depend on nothing but the pre-token and the immutable
// model, so a hit returns exactly what a miss computes. Bounded: 64 shards
// of at most `shard_capacity` entries of at most kMaxKeyBytes; a full shard
// is emptied before it takes a new entry. Thread-safe: one mutex per shard,
// held only for a hash lookup or an insertion.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "server/tokenizer/bpe_model.h"

namespace kvidx::tokenizer {

class PretokenCache {
 public:
  static constexpr size_t kMaxKeyBytes = 128;
  explicit PretokenCache(size_t shard_capacity = 2048) : shard_capacity_(shard_capacity) {}

  // Appends the cached ids of `key` to *ids; false on a miss.
  bool Lookup(std::string_view key, std::vector<uint32_t>* ids) const;
  void Insert(std::string_view key, const uint32_t* ids, size_t count) const;

 private:
  struct Shard {
    mutable std::mutex mu;
    std::unordered_map<std::string, std::vector<uint32_t>, StringHash, std::equal_to<>> map;
  };
  Shard& ShardOf(std::string_view key, size_t* hash) const;
  size_t shard_capacity_;
  mutable std::array<Shard, 64> shards_;
};

}  // namespace kvidx::tokenizer
