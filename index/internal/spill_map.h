// Internal to the block index: exact owner counts that overflowed their
// inline fields (copies past 14, hits past 254; see words.h), by record id
// and owner key. Rare, so a plain hash map.
//
// Writer-side only: readers see the saturated inline fields, never this.
#pragma once

#include <cstdint>
#include <unordered_map>

#include "index/internal/words.h"

namespace kvidx::internal {

class SpillMap {
 public:
  // The counts of owner `okey` of record `id`; defaults when absent.
  OwnerCounts Get(uint32_t id, uint32_t okey) const {
    auto it = map_.find(Key(id, okey));
    return it == map_.end() ? OwnerCounts{} : it->second;
  }
  void Set(uint32_t id, uint32_t okey, OwnerCounts counts) { map_[Key(id, okey)] = counts; }
  void Erase(uint32_t id, uint32_t okey) { map_.erase(Key(id, okey)); }
  size_t size() const { return map_.size(); }
  // An estimate: a node per entry (key, counts, next pointer, allocator
  // overhead) and a pointer per bucket.
  size_t MemoryBytes() const { return map_.size() * 32 + map_.bucket_count() * sizeof(void*); }

 private:
  static uint64_t Key(uint32_t id, uint32_t okey) { return (uint64_t{id} << 32) | okey; }
  std::unordered_map<uint64_t, OwnerCounts> map_;
};

}  // namespace kvidx::internal
