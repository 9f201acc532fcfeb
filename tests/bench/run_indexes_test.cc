// The bench's run-compressed yardsticks (bench/radix_prefix_index.h,
// bench/run_prefix_index.h) against the naive baseline, on random chains
// that share prefixes of every length (so edges split at and across 64-block
// bit words), stored as W2 stores them (each replica stores the runs of a
// prompt it lacks, parented on the block before) and removed in random
// batches (so holders, tails and runs are pruned); the runs index also takes
// parentless and out-of-order pieces. After every step each replica's match
// on random queries and its held-block count must agree; once every block
// is removed, nothing is left.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "bench/naive_prefix_index.h"
#include "bench/radix_prefix_index.h"
#include "bench/run_prefix_index.h"
#include "bench/workload_hash.h"

namespace kvidx::bench {
namespace {

constexpr uint32_t kReplicas = 4;

struct Chains {
  std::vector<std::vector<uint64_t>> prompts;   // chained hashes

  Chains(std::mt19937_64& rng, size_t n) {
    std::vector<std::vector<uint64_t>> contents;
    for (size_t i = 0; i < n; ++i) {
      std::vector<uint64_t> c;
      if (!contents.empty() && rng() % 4 != 0) {   // share a prefix of an earlier prompt
        const std::vector<uint64_t>& base = contents[rng() % contents.size()];
        c.assign(base.begin(), base.begin() + static_cast<long>(rng() % (base.size() + 1)));
      }
      const size_t more = 1 + rng() % 150;
      for (size_t j = 0; j < more; ++j) c.push_back(rng());
      std::vector<uint64_t> h(c.size());
      ChainHashes(c.data(), c.size(), h.data());
      contents.push_back(std::move(c));
      prompts.push_back(std::move(h));
    }
  }
};

template <typename Index>
class Pair {
 public:
  // Stores the first `len` blocks of `prompt` on `replica` the way W2's fleet
  // does: each maximal run of blocks the replica lacks, parented on the
  // block before it.
  void StorePrefix(uint32_t replica, std::span<const uint64_t> prompt) {
    size_t j = 0;
    while (j < prompt.size()) {
      if (held_[replica].contains(prompt[j])) {
        ++j;
        continue;
      }
      size_t end = j;
      while (end < prompt.size() && !held_[replica].contains(prompt[end])) held_[replica].insert(prompt[end++]);
      const auto run = prompt.subspan(j, end - j);
      const uint64_t* parent = j == 0 ? nullptr : &prompt[j - 1];
      naive_.Store(replica, run);
      if constexpr (std::is_same_v<Index, RadixPrefixIndex>) {
        ASSERT_TRUE(radix_.Store(replica, run, parent));
      } else {
        radix_.Store(replica, run, parent);
      }
      j = end;
    }
  }

  // Stores blocks [begin, end) of `prompt` that `replica` lacks, each
  // maximal run with its real parent or none, in a random order: the
  // orphan and out-of-order stores only RunPrefixIndex accepts.
  void StoreOrphans(uint32_t replica, std::span<const uint64_t> prompt, size_t begin, size_t end,
                    std::mt19937_64& rng) {
    std::vector<std::pair<size_t, size_t>> runs;
    for (size_t j = begin; j < end;) {
      if (held_[replica].contains(prompt[j])) {
        ++j;
        continue;
      }
      size_t e = j;
      while (e < end && !held_[replica].contains(prompt[e])) held_[replica].insert(prompt[e++]);
      runs.emplace_back(j, e);
      j = e;
    }
    std::shuffle(runs.begin(), runs.end(), rng);
    for (auto [b, e] : runs) {
      const auto run = prompt.subspan(b, e - b);
      naive_.Store(replica, run);
      radix_.Store(replica, run, b > 0 && rng() % 2 == 0 ? &prompt[b - 1] : nullptr);
    }
  }

  void RemoveSome(uint32_t replica, std::mt19937_64& rng) {
    std::vector<uint64_t> gone;
    for (uint64_t h : held_[replica]) {
      if (rng() % 3 == 0) gone.push_back(h);
    }
    std::shuffle(gone.begin(), gone.end(), rng);
    for (uint64_t h : gone) held_[replica].erase(h);
    gone.push_back(rng());   // never stored: skipped by both
    naive_.Remove(replica, gone);
    radix_.Remove(replica, gone);
  }

  // Removes everything: the tree must then be empty.
  void RemoveAll() {
    for (uint32_t r = 0; r < kReplicas; ++r) {
      const std::vector<uint64_t> all(held_[r].begin(), held_[r].end());
      held_[r].clear();
      naive_.Remove(r, all);
      radix_.Remove(r, all);
    }
    EXPECT_EQ(radix_.IndexedBlocks(), 0u);
    EXPECT_EQ(radix_.OwnerEntries(), 0u);
  }

  void ExpectAgree(std::span<const uint64_t> query) const {
    std::vector<uint32_t> a(kReplicas), b(kReplicas);
    EXPECT_EQ(naive_.Match(query, a), radix_.Match(query, b));
    EXPECT_EQ(a, b);
  }

  void ExpectSameHoldings() const {
    for (uint32_t r = 0; r < kReplicas; ++r) {
      EXPECT_EQ(radix_.HeldBlocks(r), held_[r].size()) << "replica " << r;
      EXPECT_EQ(naive_.HeldBlocks(r), held_[r].size()) << "replica " << r;
    }
  }

 private:
  NaivePrefixIndex naive_;
  Index radix_;
  std::set<uint64_t> held_[kReplicas];
};

// Twelve seeds of 300 random steps: a quarter remove some of a replica's
// blocks, the rest call store(pair, replica, prompt, rng); after each step
// the two indexes must answer eight random queries alike.
template <typename Index, typename StoreStep>
void RunRandomSteps(StoreStep store) {
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    SCOPED_TRACE(seed);
    std::mt19937_64 rng(seed);
    const Chains chains(rng, 40);
    Pair<Index> pair;
    for (int step = 0; step < 300; ++step) {
      const uint32_t replica = static_cast<uint32_t>(rng() % kReplicas);
      if (rng() % 4 == 0) {
        pair.RemoveSome(replica, rng);
      } else {
        store(pair, replica, std::span<const uint64_t>(chains.prompts[rng() % chains.prompts.size()]), rng);
      }
      if (::testing::Test::HasFatalFailure()) return;
      for (int q = 0; q < 8; ++q) {
        std::vector<uint64_t> query = chains.prompts[rng() % chains.prompts.size()];
        if (rng() % 2 == 0) query.resize(rng() % (query.size() + 1));
        if (rng() % 4 == 0) query.push_back(rng());
        pair.ExpectAgree(query);
      }
      pair.ExpectSameHoldings();
    }
    pair.RemoveAll();
    pair.ExpectSameHoldings();
  }
}

template <typename Index>
class RunIndexTest : public ::testing::Test {};
using RunIndexes = ::testing::Types<RadixPrefixIndex, RunPrefixIndex>;
TYPED_TEST_SUITE(RunIndexTest, RunIndexes);

TYPED_TEST(RunIndexTest, AgreesWithNaiveUnderStoresAndRemovals) {
  RunRandomSteps<TypeParam>(
      [](Pair<TypeParam>& pair, uint32_t replica, std::span<const uint64_t> prompt, std::mt19937_64& rng) {
        pair.StorePrefix(replica, prompt.first(1 + rng() % prompt.size()));
      });
}

// Parentless and out-of-order stores of chain pieces (an offloaded chunk
// announced without its parent, a store after a lost event): the runs
// index takes them all and still answers exactly.
TEST(RunPrefixIndexTest, AgreesWithNaiveUnderOrphanStores) {
  RunRandomSteps<RunPrefixIndex>(
      [](Pair<RunPrefixIndex>& pair, uint32_t replica, std::span<const uint64_t> prompt, std::mt19937_64& rng) {
        const size_t begin = rng() % prompt.size();
        pair.StoreOrphans(replica, prompt, begin, begin + 1 + rng() % (prompt.size() - begin), rng);
      });
}

TEST(RadixPrefixIndexTest, RefusesAStoreUnderAnUnknownParent) {
  RadixPrefixIndex radix;
  const uint64_t unknown = 42;
  const uint64_t blocks[] = {1, 2, 3};
  EXPECT_FALSE(radix.Store(0, blocks, &unknown));
  EXPECT_EQ(radix.HeldBlocks(0), 0u);
  EXPECT_TRUE(radix.Store(0, blocks));
  EXPECT_EQ(radix.HeldBlocks(0), 3u);
}

}  // namespace
}  // namespace kvidx::bench
