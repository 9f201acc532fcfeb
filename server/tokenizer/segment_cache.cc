#include "server/tokenizer/segment_cache.h"

#include <algorithm>
#include <cstring>

namespace kvidx::tokenizer {
namespace {

// The map key: at_origin, then the text; built in a per-thread buffer.
std::string_view KeyOf(std::string_view text, bool at_origin) {
  thread_local std::string key;
  key.clear();
  key.push_back(at_origin ? '\1' : '\0');
  key.append(text);
  return key;
}

}  // namespace

SegmentCache::SegmentCache(SegmentCacheOptions options) : options_(options) {}

SegmentCache::Shard& SegmentCache::ShardOf(std::string_view key) const {
  // The map hashes the whole key; the shard only needs a cheap spread:
  // the length and the last bytes (the first ones are often a shared role
  // header).
  uint64_t tail = 0;
  const size_t n = std::min<size_t>(key.size(), sizeof(tail));
  std::memcpy(&tail, key.data() + key.size() - n, n);
  const uint64_t h = (tail ^ (key.size() * 0x9E3779B97F4A7C15ull)) * 0xBF58476D1CE4E5B9ull;
  return shards_[(h >> 59) % kShards];
}

bool SegmentCache::Lookup(std::string_view text, bool at_origin, std::vector<uint32_t>* ids) const {
  if (!Admits(text.size())) return false;
  const std::string_view key = KeyOf(text, at_origin);
  Shard& shard = ShardOf(key);
  std::shared_ptr<const Entry> entry;
  {
    MutexLock lock(shard.mu);
    auto it = shard.map.find(key);
    if (it == shard.map.end()) return false;
    entry = it->second;
  }
  ids->insert(ids->end(), entry->ids.begin(), entry->ids.end());
  return true;
}

void SegmentCache::Insert(std::string_view text, bool at_origin, std::span<const uint32_t> ids) const {
  if (!Admits(text.size())) return;
  const size_t bytes = EntryBytes(text.size() + 1, ids.size());
  const size_t budget = options_.max_bytes / kShards;
  if (bytes > budget) return;
  const std::string_view key = KeyOf(text, at_origin);
  auto entry = std::make_shared<const Entry>(Entry{std::vector<uint32_t>(ids.begin(), ids.end())});
  Shard& shard = ShardOf(key);
  MutexLock lock(shard.mu);
  if (shard.map.find(key) != shard.map.end()) return;
  while (shard.bytes + bytes > budget && !shard.map.empty()) {
    auto victim = shard.map.begin();
    shard.bytes -= EntryBytes(victim->first.size(), victim->second->ids.size());
    shard.map.erase(victim);
  }
  shard.map.emplace(std::string(key), std::move(entry));
  shard.bytes += bytes;
}

size_t SegmentCache::Entries() const {
  size_t n = 0;
  for (Shard& s : shards_) {
    MutexLock lock(s.mu);
    n += s.map.size();
  }
  return n;
}

size_t SegmentCache::Bytes() const {
  size_t n = 0;
  for (Shard& s : shards_) {
    MutexLock lock(s.mu);
    n += s.bytes;
  }
  return n;
}

}  // namespace kvidx::tokenizer
