#include "server/tokenizer/pretoken_cache.h"

namespace kvidx::tokenizer {

PretokenCache::Shard& PretokenCache::ShardOf(std::string_view key, size_t* hash) const {
  *hash = StringHash{}(key);
  return shards_[(*hash >> 7) % shards_.size()];
}

bool PretokenCache::Lookup(std::string_view key, std::vector<uint32_t>* ids) const {
  if (key.size() > kMaxKeyBytes) return false;
  size_t hash;
  Shard& shard = ShardOf(key, &hash);
  std::lock_guard<std::mutex> lock(shard.mu);
  auto it = shard.map.find(key);
  if (it == shard.map.end()) return false;
  ids->insert(ids->end(), it->second.begin(), it->second.end());
  return true;
}

void PretokenCache::Insert(std::string_view key, const uint32_t* ids, size_t count) const {
  if (key.size() > kMaxKeyBytes) return;
  size_t hash;
  Shard& shard = ShardOf(key, &hash);
  std::lock_guard<std::mutex> lock(shard.mu);
  if (shard.map.size() >= shard_capacity_) shard.map.clear();
  shard.map.try_emplace(std::string(key), ids, ids + count);
}

}  // namespace kvidx::tokenizer
