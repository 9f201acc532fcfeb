// The naive baseline W1 and W2 set kvidx beside (../shared/bench/workload.md):
// a hash map from block hash to the vector of its owners (replica, tier,
// refcount), probed once per query block. Deliberately plain: what a first
// implementation would write, so that "N x the naive baseline" means the
// same thing in every driver. GPU tier only. Single-threaded.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace kvidx::bench {

class NaivePrefixIndex {
 public:
  // One BlockStored / BlockRemoved of `replica` (one copy per block).
  void Store(uint32_t replica, std::span<const uint64_t> blocks);
  void Remove(uint32_t replica, std::span<const uint64_t> blocks);

  // match[r] = leading blocks of `keys` replica r holds (0 if none; match
  // must have a slot per replica). Returns the longest of them.
  uint32_t Match(std::span<const uint64_t> keys, std::span<uint32_t> match) const;

  uint64_t HeldBlocks(uint32_t replica) const;   // O(index)
  uint64_t OwnerEntries() const;                 // (block, replica) pairs; O(index)

 private:
  struct Owner {
    uint32_t replica;
    uint8_t tier;
    uint32_t refcount;
  };
  std::unordered_map<uint64_t, std::vector<Owner>> owners_;
};

}  // namespace kvidx::bench
