// W2's simulated fleet (../shared/bench/workload.md, steps 3-5): replicas
// with an LRU block cache each, the routing rule, and the events a routed
// request causes. It knows nothing of the index under test; the replay
// driver turns the runs and evictions it reports into BlockStored and
// BlockRemoved events, so every index sees the same stream.
//
// Sizing: each replica's cache is allocated up front for capacity +
// max_request_blocks blocks (see LruBlockSet), ~32 bytes per block, so a
// fleet costs about replicas * (capacity + max_request_blocks) * 32 bytes;
// capacity + max_request_blocks must stay below 2^32 - 1.
// Single-threaded.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "bench/w2_lru.h"

namespace kvidx::bench {

// Blocks [begin, end) of a request that the routed replica lacked, stored
// as one BlockStored whose parent is block begin - 1 (none when begin = 0).
struct BlockRun {
  uint32_t begin = 0, end = 0;
};

class W2Fleet {
 public:
  W2Fleet(uint32_t replicas, uint32_t capacity, uint32_t max_request_blocks);

  uint32_t replicas() const { return static_cast<uint32_t>(caches_.size()); }
  uint32_t held_blocks(uint32_t replica) const { return caches_[replica].size(); }
  uint64_t held_blocks() const;

  // Step 3: the replica with the longest match[r]; ties go to the replica
  // holding the fewest blocks, then to the lowest index.
  uint32_t Route(std::span<const uint32_t> match) const;

  // Step 4: walks the request's blocks in order on `replica`, making each
  // most recently used (adding the ones it lacked). `runs` is set to the
  // maximal runs of added blocks, in request order.
  void Apply(uint32_t replica, std::span<const uint64_t> hashes, std::vector<BlockRun>* runs);

  // Step 5: removes least recently used blocks while `replica` holds more
  // than the capacity. `evicted` is set to them, oldest first (one
  // BlockRemoved when not empty).
  void Evict(uint32_t replica, std::vector<uint64_t>* evicted);

 private:
  uint32_t capacity_;
  std::vector<LruBlockSet> caches_;
};

}  // namespace kvidx::bench
