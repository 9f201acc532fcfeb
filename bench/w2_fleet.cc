#include "bench/w2_fleet.h"

namespace kvidx::bench {

W2Fleet::W2Fleet(uint32_t replicas, uint32_t capacity, uint32_t max_request_blocks) : capacity_(capacity) {
  caches_.reserve(replicas);
  for (uint32_t r = 0; r < replicas; ++r) caches_.emplace_back(capacity + max_request_blocks);
}

uint64_t W2Fleet::held_blocks() const {
  uint64_t n = 0;
  for (const LruBlockSet& c : caches_) n += c.size();
  return n;
}

uint32_t W2Fleet::Route(std::span<const uint32_t> match) const {
  uint32_t best = 0;
  for (uint32_t r = 1; r < replicas(); ++r) {
    if (match[r] > match[best] || (match[r] == match[best] && caches_[r].size() < caches_[best].size())) best = r;
  }
  return best;
}

void W2Fleet::Apply(uint32_t replica, std::span<const uint64_t> hashes, std::vector<BlockRun>* runs) {
  runs->clear();
  LruBlockSet& cache = caches_[replica];
  for (uint32_t j = 0; j < hashes.size(); ++j) {
    if (cache.Touch(hashes[j])) continue;
    if (!runs->empty() && runs->back().end == j) {
      runs->back().end = j + 1;
    } else {
      runs->push_back({j, j + 1});
    }
  }
}

void W2Fleet::Evict(uint32_t replica, std::vector<uint64_t>* evicted) {
  evicted->clear();
  LruBlockSet& cache = caches_[replica];
  while (cache.size() > capacity_) evicted->push_back(cache.PopOldest());
}

}  // namespace kvidx::bench
