#include "server/tokenizer/pretoken_cache.h"

#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cstring>

namespace kvidx::tokenizer {
namespace {

uint64_t HashOf(std::string_view key) { return XXH3_64bits(key.data(), key.size()) | 1; }

}  // namespace

PretokenCache::PretokenCache(size_t shard_capacity)
    : shard_capacity_(std::max<size_t>(shard_capacity, 1)), max_slots_(std::bit_ceil(2 * shard_capacity_ + 1)) {}

PretokenCache::Slot* PretokenCache::Find(Shard& shard, uint64_t hash, std::string_view key) {
  const size_t mask = shard.slots.size() - 1;
  for (size_t i = (hash >> 1) & mask;; i = (i + 1) & mask) {
    Slot& s = shard.slots[i];
    if (s.hash == 0) return &s;
    if (s.hash == hash && s.key_size == key.size() && std::memcmp(shard.keys.data() + s.key_at, key.data(), key.size()) == 0) {
      return &s;
    }
  }
}

bool PretokenCache::Lookup(std::string_view key, std::vector<uint32_t>* ids) const {
  if (key.size() > kMaxKeyBytes) return false;
  const uint64_t hash = HashOf(key);
  Shard& shard = shards_[hash >> 58];
  MutexLock lock(shard.mu);
  if (shard.slots.empty()) return false;
  const Slot* s = Find(shard, hash, key);
  if (s->hash == 0) return false;
  const uint32_t* first = shard.ids.data() + s->ids_at;
  ids->insert(ids->end(), first, first + s->id_count);
  return true;
}

void PretokenCache::Reserve(Shard& shard) const {
  if (shard.size >= shard_capacity_) {
    // Emptied whole: the arenas have no holes to track.
    std::fill(shard.slots.begin(), shard.slots.end(), Slot{});
    shard.keys.clear();
    shard.ids.clear();
    shard.size = 0;
    return;
  }
  // At most half full, so probe runs stay short.
  if (2 * (shard.size + 1) <= shard.slots.size() || shard.slots.size() >= max_slots_) return;
  std::vector<Slot> old = std::move(shard.slots);
  shard.slots.assign(old.empty() ? 64 : 2 * old.size(), Slot{});
  const size_t mask = shard.slots.size() - 1;
  for (const Slot& s : old) {
    if (s.hash == 0) continue;
    size_t i = (s.hash >> 1) & mask;
    while (shard.slots[i].hash != 0) i = (i + 1) & mask;
    shard.slots[i] = s;
  }
}

void PretokenCache::Insert(std::string_view key, const uint32_t* ids, size_t count) const {
  if (key.size() > kMaxKeyBytes || count > UINT16_MAX) return;
  const uint64_t hash = HashOf(key);
  Shard& shard = shards_[hash >> 58];
  MutexLock lock(shard.mu);
  Reserve(shard);
  Slot* s = Find(shard, hash, key);
  if (s->hash != 0) return;
  *s = Slot{hash, static_cast<uint32_t>(shard.keys.size()), static_cast<uint32_t>(shard.ids.size()),
            static_cast<uint16_t>(key.size()), static_cast<uint16_t>(count)};
  shard.keys.append(key);
  shard.ids.insert(shard.ids.end(), ids, ids + count);
  ++shard.size;
}

}  // namespace kvidx::tokenizer
