// W2's per-replica cache model: the set of blocks a replica holds, in LRU
// order, with O(1) work per touched, stored or evicted block.
//
// Storage is sized once, in the constructor, for the most blocks the replica
// can hold at any moment (its capacity plus one request's blocks, held until
// that request's evictions run); nothing is allocated afterwards. That keeps
// the simulation out of the resident-memory growth W2 attributes to the
// index under test, and makes a block's cost a few array accesses: an open-
// addressing table (linear probing, backward-shift deletion, load <= 1/2)
// maps a block hash to its node in an intrusive doubly linked list.
//
// Block hashes are chained SplitMix outputs, i.e. already uniform, so their
// low bits index the table directly. Single-threaded.
#pragma once

#include <cstdint>
#include <vector>

namespace kvidx::bench {

class LruBlockSet {
 public:
  // Holds at most `max_blocks` blocks at once (exceeding it aborts: the
  // caller sized it wrong).
  explicit LruBlockSet(uint32_t max_blocks);

  uint32_t size() const { return size_; }

  // Makes `key` the most recently used block. True if it was already held;
  // false if it was absent and has been added.
  bool Touch(uint64_t key);

  // Removes the least recently used block and returns its hash. size() > 0.
  uint64_t PopOldest();

 private:
  static constexpr uint32_t kNone = 0;   // empty slot; node 0 is the list's sentinel

  struct Node {
    uint64_t key;
    uint32_t prev, next;   // circular list through the sentinel; next also chains free nodes
  };

  uint32_t* FindSlot(uint64_t key);
  void EraseSlot(uint32_t* slot);
  void Unlink(uint32_t n);
  void PushNewest(uint32_t n);

  std::vector<Node> nodes_;        // [0] sentinel: next = oldest, prev = newest
  std::vector<uint32_t> slots_;    // node index or kNone
  uint64_t mask_ = 0;
  uint32_t free_ = kNone;          // head of the free-node chain
  uint32_t size_ = 0;
};

}  // namespace kvidx::bench
