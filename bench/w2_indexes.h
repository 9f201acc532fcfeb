// The indexes W2 replays its event stream into, behind one adapter shape so
// that the replay driver (w2_replay.h) treats them alike:
//
//   using Key = ...;                       // the key type the index takes
//   static Key MakeKey(uint64_t hash);     // done by the driver, untimed
//   Status Query(std::span<const Key> keys, std::span<uint32_t> match);
//       // match[r] = leading blocks of `keys` replica r holds (0 if none)
//   Status Store(uint32_t replica, std::span<const Key> run, const Key* parent);
//   Status Remove(uint32_t replica, std::span<const Key> blocks);
//   uint64_t HeldBlocks(uint32_t replica) const;   // distinct blocks, for the end-of-run check
//   IndexMemory Memory() const;            // optional: bytes allocated by part
//
// Replica r is source r, DP rank 0, tier GPU, group 0: the same calls
// w1_bench.cc makes. Single-threaded.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <type_traits>

#include "bench/core_run_index.h"
#include "bench/naive_prefix_index.h"
#include "bench/radix_prefix_index.h"
#include "bench/run_prefix_index.h"
#include "index/block_index.h"

namespace kvidx::bench {

class KvidxW2Index {
 public:
  using Key = BlockKey;
  static Key MakeKey(uint64_t hash) { return BlockKey::FromU64(hash); }

  explicit KvidxW2Index(const IndexOptions& options = {}) : index_(options) {}
  // `max_query_blocks` raises the model's query cap (8192 by default) so
  // that no request of the trace is truncated.
  static Result<std::unique_ptr<KvidxW2Index>> Create(uint32_t max_query_blocks);

  Status Query(std::span<const Key> keys, std::span<uint32_t> match);
  Status Store(uint32_t replica, std::span<const Key> run, const Key* parent);
  Status Remove(uint32_t replica, std::span<const Key> blocks);
  uint64_t HeldBlocks(uint32_t replica) const;
  IndexMemory Memory() const { return index_.Memory(); }

 protected:
  Status Init(uint32_t max_query_blocks);

 private:
  BlockIndex index_;
  ModelId model_ = 0;
  PrefixFilter filter_;
  PrefixMatch found_;   // warm across queries: FindPrefix then allocates nothing
};

// kvidx's index on the run core (IndexCore::kRuns).
class KvidxRunsW2Index : public KvidxW2Index {
 public:
  KvidxRunsW2Index() : KvidxW2Index(IndexOptions{IndexCore::kRuns}) {}
  static Result<std::unique_ptr<KvidxRunsW2Index>> Create(uint32_t max_query_blocks) {
    auto index = std::make_unique<KvidxRunsW2Index>();
    if (Status s = index->Init(max_query_blocks); !s.ok()) return s;
    return index;
  }
};

// A bench reference index (Store / Remove / Match / HeldBlocks over 64-bit
// hashes, as W1 drives it): the naive baseline (naive_prefix_index.h), the
// compressed radix tree of the fastest peer's layout (radix_prefix_index.h)
// the same runs without the tree (run_prefix_index.h), the layout proposed
// for kvidx's core, and the index's own run store (core_run_index.h).
template <typename Index>
class ReferenceW2Index {
 public:
  using Key = uint64_t;
  static Key MakeKey(uint64_t hash) { return hash; }

  static Result<std::unique_ptr<ReferenceW2Index>> Create(uint32_t /*max_query_blocks*/) {
    return std::make_unique<ReferenceW2Index>();
  }

  Status Query(std::span<const Key> keys, std::span<uint32_t> match) {
    index_.Match(keys, match);
    return Status::Ok();
  }
  // The naive index takes no parent; the radix tree refuses a store it
  // cannot place under its parent.
  Status Store(uint32_t replica, std::span<const Key> run, const Key* parent) {
    if constexpr (!requires { index_.Store(replica, run, parent); }) {
      index_.Store(replica, run);
    } else if constexpr (std::is_same_v<decltype(index_.Store(replica, run, parent)), bool>) {
      if (!index_.Store(replica, run, parent)) return Status::Internal("store off the indexed chains");
    } else {
      index_.Store(replica, run, parent);
    }
    return Status::Ok();
  }
  Status Remove(uint32_t replica, std::span<const Key> blocks) {
    index_.Remove(replica, blocks);
    return Status::Ok();
  }
  uint64_t HeldBlocks(uint32_t replica) const { return index_.HeldBlocks(replica); }

 private:
  Index index_;
};
using NaiveW2Index = ReferenceW2Index<NaivePrefixIndex>;
using RadixW2Index = ReferenceW2Index<RadixPrefixIndex>;
using RunsW2Index = ReferenceW2Index<RunPrefixIndex>;
using CoreW2Index = ReferenceW2Index<CoreRunIndex>;

}  // namespace kvidx::bench
