// A compressed radix tree over block-hash chains: the layout of the fastest
// peer index (Dynamo's single-thread tree, lib/kv-router/src/indexer/
// compressed_radix.rs in ai-dynamo/dynamo), written here from its design so
// that W1 and W2 can set kvidx beside that layout on the same machine, in
// the same run, as they set it beside the naive baseline. Bench-only: a
// yardstick for the layout, not a candidate index (no tiers, groups,
// refcounts, hits, snapshots or concurrent readers).
//
// The layout: each node holds a run of consecutive block hashes (an edge);
// a query finds the next node by one hash-map probe and then compares the
// rest of the run in one array, and reads each holder of the node once per
// node, not once per block. Every block hash is in one SwissTable
// (absl::flat_hash_set, the family of the peer's FxHashMap) giving its node
// and position, for stores that start below the root, removals, and the
// child lookups (a chained block hash names its whole prefix, so the first
// hash of an edge names its node).
//
// Where it departs from the peer: its map holds (node, position) only and
// reads the key from the edge, 8 bytes a slot instead of 16 (W1 20 B per
// block instead of 29, W2 37.7 B per held block instead of 69.6; see
// docs/BENCHMARKS.md). And the peer keeps a replica's holding on an
// edge as a prefix length, so removing block 5 forgets blocks 6.. of that
// replica although it still holds them; on W2, whose LRU fleet evicts the
// heads of chains first, that would answer shorter matches than an exact
// index. Here a holder keeps one bit per edge position, so answers are
// exact and W2's checksum is kvidx's. A block stored twice by one replica
// is held once (neither workload removes such a block).
//
// Single-threaded.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "bench/held_bits.h"

namespace kvidx::bench {

class RadixPrefixIndex {
 public:
  RadixPrefixIndex();
  RadixPrefixIndex(const RadixPrefixIndex&) = delete;   // the block map points back at the tree
  RadixPrefixIndex& operator=(const RadixPrefixIndex&) = delete;

  // One BlockStored of `replica`: `blocks` continue the chain of `parent`
  // (nullptr: from the root). False if `parent` is not in the index
  // (nothing is stored) or a block is in it under another parent (the
  // blocks before that one stay stored).
  bool Store(uint32_t replica, std::span<const uint64_t> blocks, const uint64_t* parent = nullptr);
  // One BlockRemoved of `replica`; blocks it does not hold are skipped.
  void Remove(uint32_t replica, std::span<const uint64_t> blocks);

  // match[r] = leading blocks of `keys` replica r holds (0 if none; match
  // must have a slot per replica). Returns the longest of them.
  uint32_t Match(std::span<const uint64_t> keys, std::span<uint32_t> match) const;

  uint64_t HeldBlocks(uint32_t replica) const;   // O(nodes)
  uint64_t OwnerEntries() const;                 // (block, replica) pairs; O(nodes)
  // Block hashes in the tree, held or kept as structure (a node's unheld
  // positions before a held one, or before children).
  size_t IndexedBlocks() const { return blocks_.size(); }

 private:
  static constexpr uint32_t kNone = ~0u;
  static constexpr uint32_t kRoot = 0;
  struct Node {
    std::vector<uint64_t> edge;
    std::vector<HeldBits> holders;
    std::vector<uint32_t> kids;
    uint32_t parent = kNone;
    bool live = false;
  };
  // The block map's view of the edges (RunPlace::run is a node id).
  struct KeyAt {
    const RadixPrefixIndex* tree;
    uint64_t operator()(RunPlace p) const { return tree->nodes_[p.run].edge[p.pos]; }
  };

  uint32_t NewNode(uint32_t parent);
  // Node `id` keeps edge[0, at); a new child takes edge[at, end), the bits
  // past `at` and the children.
  void Split(uint32_t id, uint32_t at);
  // Appends `blocks`, held by `replica`, to the edge of `id` (a leaf or,
  // for a new node, empty).
  void Extend(uint32_t id, uint32_t replica, std::span<const uint64_t> blocks);
  // Drops the unheld tail of a childless node, and the node if nothing is
  // left, then does the same for its parent.
  void Prune(uint32_t id);

  std::vector<Node> nodes_;
  std::vector<uint32_t> free_;
  RunBlockMap<KeyAt> blocks_{KeyAt{this}};
  std::vector<uint32_t> touched_;   // Remove's scratch
};

}  // namespace kvidx::bench
