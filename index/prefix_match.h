// PrefixMatch: the answer to "which replicas hold how much of this prompt".
//
// FindPrefix walks a query's block keys from block 0 and, for every source
// (replica, DP rank) that holds block 0 in some tier the filter admits,
// reports:
//   gpu_blocks               leading blocks held on GPU (what the engine can
//                            reuse without any load);
//   blocks_with_lower_tiers  leading blocks held on GPU *or* any other admitted
//                            tier (CPU, STORAGE, opaque media): the prefix the
//                            replica can serve if its connector loads copies;
//   hit stats                over the GPU prefix: how many of those blocks
//                            the engine has confirmed as cache hits, and the
//                            sum of their hit counts;
//   state                    the source's SourceState (set by ingest).
//
// The structure is flat and meant to be reused: Reset() keeps capacity, so a
// warm PrefixMatch makes FindPrefix allocation-free.
//
// Thread-compatible: one PrefixMatch per querying thread.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "index/source_registry.h"
#include "index/tier.h"

namespace kvidx {

struct PrefixFilter {
  // KV-cache group to match. nullopt = the model's primary group (its
  // full-attention group, or group 0 when the engine sends no kinds).
  std::optional<uint32_t> group;
  // Bit t admits tier t. GPU must be admitted for gpu_blocks to be non-zero.
  uint64_t tier_mask = ~uint64_t{0};
};

struct SourceMatch {
  SourceId source = 0;
  uint32_t gpu_blocks = 0;
  uint32_t blocks_with_lower_tiers = 0;
  uint32_t hit_blocks = 0;   // blocks of the GPU prefix with >= 1 confirmed hit
  uint64_t hits = 0;         // sum of confirmed hits over the GPU prefix, each block's
                             // count saturated at 255 (LookupBlock has exact counts)
  SourceState state = SourceState::kConnecting;
};

class PrefixMatch {
 public:
  // One entry per source holding block 0, in ascending SourceId order.
  std::vector<SourceMatch> sources;
  uint32_t query_blocks = 0;   // blocks considered (after the model's cap)
  bool truncated = false;      // the query was longer than the model's cap

  // The longest gpu_blocks over all sources (0 when none).
  uint32_t BestGpuBlocks() const {
    uint32_t best = 0;
    for (const SourceMatch& m : sources) best = m.gpu_blocks > best ? m.gpu_blocks : best;
    return best;
  }
  const SourceMatch* Find(SourceId s) const {
    for (const SourceMatch& m : sources) {
      if (m.source == s) return &m;
    }
    return nullptr;
  }

  void Reset() {
    sources.clear();
    query_blocks = 0;
    truncated = false;
  }

 private:
  friend class BlockIndex;
  // Scratch reused across queries (capacity kept: warm queries allocate
  // nothing). Nothing here is indexed by SourceId, so no per-query work is
  // proportional to the number of sources that exist.
  std::vector<uint32_t> alive_;   // indexes into `sources` still matching, ascending source
  std::vector<uint32_t> step_;    // per alive_ entry: the probed block's verdict
};

}  // namespace kvidx
