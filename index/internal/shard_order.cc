#include "index/internal/shard_order.h"

#include <array>
#include <cstdlib>

#include "index/internal/probe_key.h"

namespace kvidx::internal {

void ShardOrder::Build(std::span<const BlockKey> keys) {
  const size_t n = keys.size();
  if (n > kGroupStep) std::abort();   // callers step through longer writes
  if (index_.size() < n) {
    shard_.resize(n);
    index_.resize(n);
  }
  keys_ = keys;
  std::array<uint32_t, kShards + 1> start{};
  for (size_t i = 0; i < n; ++i) {
    shard_[i] = static_cast<uint8_t>(ShardOfWire(keys[i].wire()));
    ++start[shard_[i] + 1];
  }
  for (size_t s = 0; s < kShards; ++s) start[s + 1] += start[s];
  for (size_t i = 0; i < n; ++i) index_[start[shard_[i]]++] = static_cast<uint32_t>(i);
}

std::span<uint32_t> ShardOrder::Notes(size_t n) {
  if (n > kGroupStep) std::abort();
  if (notes_.size() < n) notes_.resize(n);
  std::fill_n(notes_.begin(), n, 0u);
  return {notes_.data(), n};
}

}  // namespace kvidx::internal
