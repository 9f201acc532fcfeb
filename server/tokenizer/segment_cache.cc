#include "server/tokenizer/segment_cache.h"

#include <xxhash.h>

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

size_t SegmentCache::KeyHash::operator()(std::string_view key) const noexcept {
  return static_cast<size_t>(XXH3_64bits(key.data(), key.size()));
}

SegmentCache::Shard& SegmentCache::ShardOf(std::string_view key) const {
  // Another hash than the map's bucket choice would be wasted work: the
  // top bits of the same one pick the shard.
  return shards_[(KeyHash{}(key) >> 60) % kShards];
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
  const uint64_t hash = KeyHash{}(key);
  std::atomic<uint64_t>& seen = seen_[hash % kSeenSlots];
  if (seen.load(std::memory_order_relaxed) != hash) {
    seen.store(hash, std::memory_order_relaxed);
    return;
  }
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
