// The index's own run store (index/internal/run_store.h, docs/RUN_CORE.md)
// in the shape W1 and W2 drive their reference indexes with: replica r is
// owner r. Single-threaded, but a query pins the epoch as a concurrent
// reader must, so it pays what BlockIndex's readers will.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "index/epoch.h"
#include "index/internal/run_store.h"

namespace kvidx::bench {

class CoreRunIndex {
 public:
  void Store(uint32_t replica, std::span<const uint64_t> blocks, const uint64_t* parent = nullptr) {
    clock_ += static_cast<uint32_t>(blocks.size());   // one clock for all replicas: enough for a bench
    store_.Store(replica, blocks, parent, clock_);
  }
  void Remove(uint32_t replica, std::span<const uint64_t> blocks) { store_.Remove(replica, blocks); }

  // match[r] = leading blocks of `keys` replica r holds; the longest.
  // Asked the way FindPrefix will ask it: per source, through the owner
  // classifier (every owner here is its replica's GPU owner).
  uint32_t Match(std::span<const uint64_t> keys, std::span<uint32_t> match) const {
    std::fill(match.begin(), match.end(), 0);
    internal::EpochDomain::ReadGuard guard(epoch_);
    store_.SourcePrefixes(
        keys, [](uint32_t owner) { return std::optional(internal::RunStore::OwnerClass{owner, true}); }, &found_);
    uint32_t best = 0;
    for (const internal::RunStore::SourcePrefix& p : found_) {
      match[p.source] = p.gpu_blocks;
      best = std::max(best, p.gpu_blocks);
    }
    return best;
  }

  uint64_t HeldBlocks(uint32_t replica) const { return store_.HeldBy(replica); }
  uint64_t OwnerEntries() const { return store_.HeldByAll(); }

 private:
  mutable internal::EpochDomain epoch_;
  internal::RunStore store_{epoch_};
  uint32_t clock_ = 0;
  mutable std::vector<internal::RunStore::SourcePrefix> found_;   // warm across queries
};

}  // namespace kvidx::bench
