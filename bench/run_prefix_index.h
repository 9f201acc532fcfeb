// Runs of block hashes without a tree: the layout docs/RUN_CORE.md proposes
// for kvidx's core, as a bench yardstick beside the peer's tree
// (radix_prefix_index.h). Bench-only, like the tree: no tiers, groups,
// refcounts, hits, snapshots or concurrent readers.
//
// A run is an array of consecutive chain hashes. A chained hash names its
// whole prefix, so a run needs no parent: a query locates keys[0] in the
// block map, compares the following keys with the run's entries, and at a
// mismatch or the run's end locates the next key again. A store extends
// the run its parent ends, gains holdings in place for blocks already
// indexed, and opens a new run for anything else; it never splits a run.
// Unlike the tree it accepts every store: a parent that is not indexed (a
// lost event, an offloaded chunk announced without its parent) just starts
// a new run.
//
// Exact per-block holdings: one bit per run position per replica. A block
// stored twice by one replica is held once (neither workload removes such a
// block). Single-threaded.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "bench/held_bits.h"

namespace kvidx::bench {

class RunPrefixIndex {
 public:
  RunPrefixIndex() = default;
  RunPrefixIndex(const RunPrefixIndex&) = delete;   // the block map points back at the runs
  RunPrefixIndex& operator=(const RunPrefixIndex&) = delete;

  // One BlockStored of `replica`: `blocks` follow `parent` (nullptr: none).
  void Store(uint32_t replica, std::span<const uint64_t> blocks, const uint64_t* parent = nullptr);
  // One BlockRemoved of `replica`; blocks it does not hold are skipped.
  void Remove(uint32_t replica, std::span<const uint64_t> blocks);

  // match[r] = leading blocks of `keys` replica r holds (0 if none; match
  // must have a slot per replica). Returns the longest of them.
  uint32_t Match(std::span<const uint64_t> keys, std::span<uint32_t> match) const;

  uint64_t HeldBlocks(uint32_t replica) const;   // O(runs)
  uint64_t OwnerEntries() const;                 // (block, replica) pairs; O(runs)
  // Block hashes in runs, held or kept as structure (a run's unheld
  // positions before a held one).
  size_t IndexedBlocks() const { return blocks_.size(); }

 private:
  static constexpr uint32_t kNone = ~0u;
  struct Run {
    std::vector<uint64_t> keys;
    std::vector<HeldBits> holders;
  };
  struct KeyAt {
    const RunPrefixIndex* index;
    uint64_t operator()(RunPlace p) const { return index->runs_[p.run].keys[p.pos]; }
  };

  uint32_t NewRun();
  // Drops the run's unheld tail, and the run if nothing is left.
  void Prune(uint32_t run);

  std::vector<Run> runs_;
  std::vector<uint32_t> free_;
  RunBlockMap<KeyAt> blocks_{KeyAt{this}};
  std::vector<uint32_t> touched_;   // Remove's scratch
};

}  // namespace kvidx::bench
