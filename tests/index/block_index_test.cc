// Unit tests for BlockIndex: one test per rule of the index (issue 4).
#include "index/block_index.h"
#include "common/index_core.h"
#include "index/internal/owner_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include <vector>

namespace kvidx {
namespace {

BlockKey K(uint64_t v) { return BlockKey::FromU64(v); }
std::vector<BlockKey> Keys(std::initializer_list<uint64_t> vs) {
  std::vector<BlockKey> out;
  for (uint64_t v : vs) out.push_back(K(v));
  return out;
}
std::vector<BlockKey> Range(uint64_t from, uint64_t to) {
  std::vector<BlockKey> out;
  for (uint64_t v = from; v < to; ++v) out.push_back(K(v));
  return out;
}

constexpr KvGroup kG0{0, GroupKind::kAbsent};

class BlockIndexTest : public ::testing::Test {
 protected:
  void SetUp() override { model_ = index_.AddModel("m").value(); }

  void Store(SourceId s, std::vector<BlockKey> ks, std::optional<uint64_t> parent = std::nullopt,
             Tier tier = Tier::kGpu, StoreOrigin origin = StoreOrigin::kUnknown, KvGroup g = kG0) {
    std::optional<BlockKey> p;
    if (parent) p = K(*parent);
    ASSERT_TRUE(index_.Store(model_, s, tier, g, ks, p, origin).ok());
  }
  void Remove(SourceId s, std::vector<BlockKey> ks, Tier tier = Tier::kGpu, KvGroup g = kG0) {
    ASSERT_TRUE(index_.Remove(model_, s, tier, g, ks).ok());
  }
  PrefixMatch Find(std::vector<BlockKey> ks, PrefixFilter f = {}) {
    PrefixMatch m;
    EXPECT_TRUE(index_.FindPrefix(model_, ks, f, &m).ok());
    return m;
  }
  uint32_t Gpu(const PrefixMatch& m, SourceId s) {
    const SourceMatch* e = m.Find(s);
    return e == nullptr ? 0 : e->gpu_blocks;
  }
  uint32_t Any(const PrefixMatch& m, SourceId s) {
    const SourceMatch* e = m.Find(s);
    return e == nullptr ? 0 : e->blocks_with_lower_tiers;
  }
  uint64_t TierBlocks(SourceId s, Tier t) {
    for (auto& [tier, n] : index_.GetSourceStats(s).blocks_per_tier) {
      if (tier == t) return n;
    }
    return 0;
  }

  BlockIndex index_{testing::CoreUnderTest()};
  ModelId model_ = 0;
};

TEST_F(BlockIndexTest, StoreThenFindLongestPrefixPerSource) {
  Store(0, Keys({1, 2, 3}));
  Store(1, Keys({1, 2}));
  Store(2, Keys({2, 3}));   // does not hold block 0 of the query
  PrefixMatch m = Find(Keys({1, 2, 3, 4}));
  ASSERT_EQ(m.sources.size(), 2u);
  EXPECT_EQ(Gpu(m, 0), 3u);
  EXPECT_EQ(Gpu(m, 1), 2u);
  EXPECT_EQ(m.Find(2), nullptr);
  EXPECT_EQ(m.BestGpuBlocks(), 3u);
  EXPECT_EQ(m.query_blocks, 4u);
  EXPECT_FALSE(m.truncated);
}

TEST_F(BlockIndexTest, EmptyQueryAndUnknownModel) {
  Store(0, Keys({1}));
  PrefixMatch m = Find({});
  EXPECT_TRUE(m.sources.empty());
  EXPECT_EQ(m.query_blocks, 0u);
  PrefixMatch m2;
  std::vector<BlockKey> q = Keys({1});
  EXPECT_EQ(index_.FindPrefix(99, q, {}, &m2).code(), StatusCode::kNotFound);
  EXPECT_EQ(index_.Store(99, 0, Tier::kGpu, kG0, q, std::nullopt).code(), StatusCode::kNotFound);
  EXPECT_TRUE(Find(Keys({7})).sources.empty());
}

TEST_F(BlockIndexTest, QueryCapTruncates) {
  ModelOptions o;
  o.max_query_blocks = 4;
  ModelId capped = index_.AddModel("capped", o).value();
  std::vector<BlockKey> chain = Range(1, 11);
  ASSERT_TRUE(index_.Store(capped, 0, Tier::kGpu, kG0, chain, std::nullopt).ok());
  PrefixMatch m;
  ASSERT_TRUE(index_.FindPrefix(capped, chain, {}, &m).ok());
  EXPECT_TRUE(m.truncated);
  EXPECT_EQ(m.query_blocks, 4u);
  EXPECT_EQ(Gpu(m, 0), 4u);
  ModelOptions bad;
  bad.max_query_blocks = 0;
  EXPECT_FALSE(index_.AddModel("bad", bad).ok());
}

TEST_F(BlockIndexTest, DuplicateCopiesNeedEveryRemove) {
  Store(0, Keys({1, 2}));
  Store(0, Keys({2}), 1);            // second physical copy of block 2
  EXPECT_EQ(index_.GetSourceStats(0).duplicate_copies, 1u);
  EXPECT_EQ(index_.GetSourceStats(0).gpu_copies, 3u);
  Remove(0, Keys({2}));
  EXPECT_EQ(Gpu(Find(Keys({1, 2})), 0), 2u);   // one copy left
  Remove(0, Keys({2}));
  EXPECT_EQ(Gpu(Find(Keys({1, 2})), 0), 1u);
  EXPECT_EQ(index_.GetSourceStats(0).drift_remove_unknown, 0u);
  Remove(0, Keys({2}));                         // a third remove: we missed a store
  EXPECT_EQ(index_.GetSourceStats(0).drift_remove_unknown, 1u);
}

TEST_F(BlockIndexTest, RemovalOrderDoesNotMatter) {
  Store(0, Keys({1, 2, 3}));
  Store(0, Keys({3}), 2);
  Remove(0, Keys({1}));          // head evicted first: the prefix is broken at once
  EXPECT_TRUE(Find(Keys({1, 2, 3})).sources.empty());
  EXPECT_EQ(Gpu(Find(Keys({2, 3})), 0), 2u);
  Remove(0, Keys({3, 2, 3}));
  EXPECT_TRUE(Find(Keys({2})).sources.empty());
  EXPECT_TRUE(Find(Keys({3})).sources.empty());
  EXPECT_EQ(index_.BlockCount(model_), 0u);
  EXPECT_EQ(TierBlocks(0, Tier::kGpu), 0u);
  EXPECT_EQ(index_.GetSourceStats(0).gpu_copies, 0u);
}

TEST_F(BlockIndexTest, FullReportReannouncementIsAHitNotACopy) {
  Store(0, Keys({1, 2, 3}));
  Store(0, Keys({1, 2}));        // kv_cache_report_mode="full": parent None, from block 0
  Store(0, Keys({1, 2}));        // re-examined while waiting: again
  SourceIndexStats st = index_.GetSourceStats(0);
  EXPECT_EQ(st.hits, 4u);
  EXPECT_EQ(st.duplicate_copies, 0u);
  EXPECT_EQ(st.gpu_copies, 3u);
  PrefixMatch m = Find(Keys({1, 2, 3}));
  EXPECT_EQ(m.sources[0].hits, 4u);
  EXPECT_EQ(m.sources[0].hit_blocks, 2u);
  Remove(0, Keys({1}));          // a single remove clears it: refcount was not raised
  EXPECT_TRUE(Find(Keys({1})).sources.empty());
  EXPECT_EQ(index_.GetSourceStats(0).drift_remove_unknown, 0u);
}

TEST_F(BlockIndexTest, OriginFieldIsTrusted) {
  Store(0, Keys({1}));
  Store(0, Keys({1}), std::nullopt, Tier::kGpu, StoreOrigin::kNew);   // a real copy at block 0
  EXPECT_EQ(index_.GetSourceStats(0).duplicate_copies, 1u);
  Store(0, Keys({1}), 7, Tier::kGpu, StoreOrigin::kReused);          // a hit even with a parent
  EXPECT_EQ(index_.GetSourceStats(0).hits, 1u);
  EXPECT_EQ(index_.GetSourceStats(0).drift_orphan_store, 0u);        // REUSED is not an orphan
  Store(0, Keys({9}), std::nullopt, Tier::kGpu, StoreOrigin::kReused);   // reuse of a block we never saw
  EXPECT_EQ(index_.GetSourceStats(0).drift_reused_unknown, 1u);
  EXPECT_EQ(Gpu(Find(Keys({9})), 0), 1u);
  Remove(0, Keys({1}));
  Remove(0, Keys({1}));
  EXPECT_TRUE(Find(Keys({1})).sources.empty());
}

TEST_F(BlockIndexTest, AmbiguousFirstBlockDuplicateIsCountedAsHit) {
  // Documented ambiguity: without origin, a genuine second copy of block 0
  // looks like a re-announcement; its second removal surfaces as drift.
  Store(0, Keys({1}));
  Store(0, Keys({1}));
  Remove(0, Keys({1}));
  Remove(0, Keys({1}));
  EXPECT_EQ(index_.GetSourceStats(0).drift_remove_unknown, 1u);
}

TEST_F(BlockIndexTest, ClearSourceLeavesOtherSourcesAndTiers) {
  Store(0, Keys({1, 2}));
  Store(0, Keys({1, 2}), std::nullopt, Tier::kCpu);
  Store(1, Keys({1, 2}));
  ASSERT_TRUE(index_.ClearSource(0, Tier::kGpu).ok());   // AllBlocksCleared
  PrefixMatch m = Find(Keys({1, 2}));
  EXPECT_EQ(Gpu(m, 0), 0u);
  EXPECT_EQ(Any(m, 0), 2u);     // CPU copies survive a GPU clear
  EXPECT_EQ(Gpu(m, 1), 2u);
  EXPECT_EQ(TierBlocks(0, Tier::kGpu), 0u);
  EXPECT_EQ(TierBlocks(0, Tier::kCpu), 2u);
  EXPECT_EQ(index_.GetSourceStats(0).clears, 1u);
  ASSERT_TRUE(index_.ClearSource(0, std::nullopt).ok());
  m = Find(Keys({1, 2}));
  EXPECT_EQ(m.Find(0), nullptr);
  EXPECT_EQ(Gpu(m, 1), 2u);
  // The source can store again after a clear.
  Store(0, Keys({1}));
  EXPECT_EQ(Gpu(Find(Keys({1})), 0), 1u);
}

TEST_F(BlockIndexTest, ClearSourceCoversAllModelsAndGroups) {
  ModelId other = index_.AddModel("other").value();
  std::vector<BlockKey> ks = Keys({1, 2, 3});
  ASSERT_TRUE(index_.Store(other, 0, Tier::kGpu, kG0, ks, std::nullopt).ok());
  Store(0, ks);
  ASSERT_TRUE(index_.ClearSource(0, Tier::kGpu).ok());
  EXPECT_EQ(index_.BlockCount(model_), 0u);
  EXPECT_EQ(index_.BlockCount(other), 0u);
}

TEST_F(BlockIndexTest, ModelsWithIdenticalHashesAreKeptApart) {
  ModelId other = index_.AddModel("other").value();
  EXPECT_EQ(index_.AddModel("other").value(), other);
  EXPECT_EQ(index_.FindModel("other"), other);
  std::vector<BlockKey> ks = Keys({1, 2});
  Store(0, ks);
  ASSERT_TRUE(index_.Store(other, 1, Tier::kGpu, kG0, ks, std::nullopt).ok());
  PrefixMatch m = Find(ks);
  ASSERT_EQ(m.sources.size(), 1u);
  EXPECT_EQ(m.sources[0].source, 0u);
  ASSERT_TRUE(index_.FindPrefix(other, ks, {}, &m).ok());
  ASSERT_EQ(m.sources.size(), 1u);
  EXPECT_EQ(m.sources[0].source, 1u);
  // A removal in one model does not touch the other.
  ASSERT_TRUE(index_.Remove(other, 1, Tier::kGpu, kG0, ks).ok());
  EXPECT_EQ(Gpu(Find(ks), 0), 2u);
}

TEST_F(BlockIndexTest, LowerTierRepeatedStoresAreCopiesNotHits) {
  // vLLM's offloading connector: every CPU chunk starts without a parent and
  // hashes shared by two chunks are announced by each; removing one chunk
  // must leave the other whole.
  Store(0, Keys({10, 11, 12, 13}), std::nullopt, Tier::kCpu);
  Store(0, Keys({10, 11, 22, 23}), std::nullopt, Tier::kCpu);
  Remove(0, Keys({10, 11, 12, 13}), Tier::kCpu);
  PrefixMatch m = Find(Keys({10, 11, 22, 23}));
  EXPECT_EQ(Any(m, 0), 4u);
  EXPECT_EQ(Gpu(m, 0), 0u);
  SourceIndexStats st = index_.GetSourceStats(0);
  EXPECT_EQ(st.hits, 0u);
  EXPECT_EQ(st.duplicate_copies, 2u);
  EXPECT_EQ(st.drift_remove_unknown, 0u);
  EXPECT_EQ(TierBlocks(0, Tier::kCpu), 4u);
  Remove(0, Keys({10, 11, 22, 23}), Tier::kCpu);
  EXPECT_TRUE(Find(Keys({10})).sources.empty());
  EXPECT_EQ(index_.GetSourceStats(0).drift_remove_unknown, 0u);
}

TEST_F(BlockIndexTest, TierAccountingAndLowerTierReach) {
  TierRegistry tiers;
  Tier fs = tiers.Intern("FS").value();
  Store(0, Keys({1, 2}));
  Store(0, Keys({3, 4}), 2, Tier::kCpu);
  Store(0, Keys({5}), 4, Tier::kStorage);
  Store(0, Keys({6}), 5, fs);
  PrefixMatch m = Find(Range(1, 8));
  EXPECT_EQ(Gpu(m, 0), 2u);
  EXPECT_EQ(Any(m, 0), 6u);
  EXPECT_EQ(TierBlocks(0, Tier::kGpu), 2u);
  EXPECT_EQ(TierBlocks(0, Tier::kCpu), 2u);
  EXPECT_EQ(TierBlocks(0, Tier::kStorage), 1u);
  EXPECT_EQ(TierBlocks(0, fs), 1u);
  PrefixFilter gpu_only;
  gpu_only.tier_mask = 1u << static_cast<int>(Tier::kGpu);
  m = Find(Range(1, 8), gpu_only);
  EXPECT_EQ(Any(m, 0), 2u);
  // A CPU-only holder of block 0 is reported with gpu_blocks = 0.
  Store(1, Keys({1, 2}), std::nullopt, Tier::kCpu);
  m = Find(Keys({1, 2}));
  EXPECT_EQ(Gpu(m, 1), 0u);
  EXPECT_EQ(Any(m, 1), 2u);
  // GPU removals do not touch CPU copies.
  Remove(0, Keys({3}), Tier::kGpu);
  EXPECT_EQ(TierBlocks(0, Tier::kCpu), 2u);
  EXPECT_EQ(index_.GetSourceStats(0).drift_remove_unknown, 1u);
}

TEST_F(BlockIndexTest, GpuRunStopsAtFirstNonGpuBlock) {
  Store(0, Keys({1}), std::nullopt, Tier::kCpu);
  Store(0, Keys({2, 3}), 1);
  PrefixMatch m = Find(Keys({1, 2, 3}));
  EXPECT_EQ(Gpu(m, 0), 0u);
  EXPECT_EQ(Any(m, 0), 3u);
}

// Consecutive blocks with the same owners (source, tier, group) admit the
// same sources; the walk still reads each block's own hit counts, and a
// change of tier at the same owner count, or of copy count alone, is told
// apart correctly.
TEST_F(BlockIndexTest, RunsOfBlocksWithTheSameOwnersKeepPerBlockHits) {
  Store(0, Range(1, 7));
  Store(1, Range(1, 7));
  Store(2, Range(1, 5));
  Store(2, Keys({5, 6}), 4, Tier::kCpu);                          // same count, other tier
  for (int i = 0; i < 2; ++i) Store(0, Keys({1, 2}), std::nullopt, Tier::kGpu, StoreOrigin::kReused);
  Store(1, Keys({4}), 3, Tier::kGpu, StoreOrigin::kReused);
  Store(2, Keys({3}), 2);                                          // a second copy: only the refcount moves
  PrefixMatch m = Find(Range(1, 7));
  ASSERT_EQ(m.sources.size(), 3u);
  const SourceMatch* s0 = m.Find(0);
  const SourceMatch* s1 = m.Find(1);
  const SourceMatch* s2 = m.Find(2);
  EXPECT_EQ(s0->gpu_blocks, 6u);
  EXPECT_EQ(s0->hits, 4u);
  EXPECT_EQ(s0->hit_blocks, 2u);
  EXPECT_EQ(s1->gpu_blocks, 6u);
  EXPECT_EQ(s1->hits, 1u);
  EXPECT_EQ(s1->hit_blocks, 1u);
  EXPECT_EQ(s2->gpu_blocks, 4u);
  EXPECT_EQ(s2->blocks_with_lower_tiers, 6u);
  EXPECT_EQ(s2->hits, 0u);
  m = Find(Range(2, 7));
  EXPECT_EQ(m.Find(0)->hits, 2u);
  EXPECT_EQ(m.Find(0)->hit_blocks, 1u);
  EXPECT_EQ(m.Find(1)->hits, 1u);
  EXPECT_EQ(m.Find(2)->gpu_blocks, 3u);
}

// The walk adds a run of blocks with equal owners and equal hit counts
// once per run: a run must still end where one source's counts change,
// where a source's prefix ends, and where a GPU prefix goes on in a lower
// tier.
TEST_F(BlockIndexTest, RunsOfEqualHitCountsEndWhereAnySourceChanges) {
  auto reuse = [&](SourceId s, std::vector<BlockKey> ks, int times) {
    for (int i = 0; i < times; ++i) Store(s, ks, std::nullopt, Tier::kGpu, StoreOrigin::kReused);
  };
  Store(0, Range(1, 11));
  Store(1, Range(1, 11));
  Store(2, Range(1, 8));                              // ends at block 7
  Store(3, Range(1, 6));
  Store(3, Range(6, 11), 5, Tier::kCpu);             // GPU prefix ends at block 5
  reuse(0, Range(1, 11), 2);                          // 2 per block throughout
  reuse(1, Range(1, 11), 1);
  reuse(1, Range(5, 11), 2);                          // 1, then 3 from block 5
  reuse(2, Range(1, 7), 1);                           // none on block 7
  reuse(3, Range(1, 6), 2);

  struct Want {
    SourceId source;
    uint32_t gpu_blocks, blocks_with_lower_tiers;
    uint64_t hits;
    uint32_t hit_blocks;
  };
  auto expect = [&](uint64_t from, std::initializer_list<Want> wants) {
    PrefixMatch m = Find(Range(from, 12));
    ASSERT_EQ(m.sources.size(), wants.size());
    for (const Want& w : wants) {
      const SourceMatch* e = m.Find(w.source);
      ASSERT_NE(e, nullptr);
      EXPECT_EQ(e->gpu_blocks, w.gpu_blocks) << "from " << from << " source " << w.source;
      EXPECT_EQ(e->blocks_with_lower_tiers, w.blocks_with_lower_tiers) << "from " << from << " source " << w.source;
      EXPECT_EQ(e->hits, w.hits) << "from " << from << " source " << w.source;
      EXPECT_EQ(e->hit_blocks, w.hit_blocks) << "from " << from << " source " << w.source;
    }
  };
  expect(1, {{0, 10, 10, 20, 10}, {1, 10, 10, 4 * 1 + 6 * 3, 10}, {2, 7, 7, 6, 6}, {3, 5, 10, 10, 5}});
  expect(3, {{0, 8, 8, 16, 8}, {1, 8, 8, 2 * 1 + 6 * 3, 8}, {2, 5, 5, 4, 4}, {3, 3, 8, 6, 3}});   // inside the runs
}

TEST_F(BlockIndexTest, PerDataParallelRankAnswers) {
  SourceRegistry reg;
  SourceId r0 = reg.Register("replica-a", 0).value();
  SourceId r1 = reg.Register("replica-a", 1).value();
  EXPECT_NE(r0, r1);
  EXPECT_EQ(reg.Register("replica-a", 1).value(), r1);
  Store(r0, Keys({1, 2, 3}));
  Store(r1, Keys({1}));
  index_.SetSourceState(r1, SourceState::kDegraded);
  PrefixMatch m = Find(Keys({1, 2, 3}));
  ASSERT_EQ(m.sources.size(), 2u);
  EXPECT_EQ(Gpu(m, r0), 3u);
  EXPECT_EQ(Gpu(m, r1), 1u);
  EXPECT_EQ(m.Find(r1)->state, SourceState::kDegraded);
  EXPECT_EQ(m.Find(r0)->state, SourceState::kConnecting);
  EXPECT_EQ(SourceRegistry::Reader(reg).Get(r1)->dp_rank, 1u);
}

TEST_F(BlockIndexTest, DriftCountersFireOnMissedEvents) {
  Store(0, Keys({1, 2}));
  Store(0, Keys({3}), 2);     // parent held: fine
  EXPECT_EQ(index_.GetSourceStats(0).drift_orphan_store, 0u);
  Store(0, Keys({11}), 10);   // parent 10 never stored here: we missed it
  EXPECT_EQ(index_.GetSourceStats(0).drift_orphan_store, 1u);
  Store(1, Keys({10}));
  Store(0, Keys({12}), 10);   // held by another source only: still an orphan here
  EXPECT_EQ(index_.GetSourceStats(0).drift_orphan_store, 2u);
  Remove(0, Keys({99}));
  EXPECT_EQ(index_.GetSourceStats(0).drift_remove_unknown, 1u);
  index_.SetSourceCapacity(0, 6);
  Store(0, Keys({20}));       // 6 GPU copies: at capacity
  EXPECT_FALSE(index_.GetSourceStats(0).over_capacity);
  Store(0, Keys({21}));       // 7 > 6: we missed removals
  SourceIndexStats st = index_.GetSourceStats(0);
  EXPECT_EQ(st.gpu_copies, 7u);
  EXPECT_EQ(st.gpu_capacity, 6u);
  EXPECT_TRUE(st.over_capacity);
  EXPECT_FALSE(index_.GetSourceStats(1).over_capacity);   // capacity unknown
}

TEST_F(BlockIndexTest, HybridGroupsIndexFullAttentionOnly) {
  KvGroup swa{0, GroupKind::kOther};
  KvGroup full{1, GroupKind::kFullAttention};
  Store(0, Keys({1, 2}), std::nullopt, Tier::kGpu, StoreOrigin::kUnknown, swa);
  EXPECT_EQ(index_.GetSourceStats(0).unindexed_blocks, 2u);
  EXPECT_TRUE(Find(Keys({1})).sources.empty());
  Store(0, Keys({1, 2}), std::nullopt, Tier::kGpu, StoreOrigin::kUnknown, full);
  EXPECT_EQ(Gpu(Find(Keys({1, 2})), 0), 2u);   // the primary group is now 1
  // BlockRemoved has no kind: group 0 was never indexed, so no drift.
  Remove(0, Keys({1}), Tier::kGpu, KvGroup{0, GroupKind::kAbsent});
  EXPECT_EQ(index_.GetSourceStats(0).drift_remove_unknown, 0u);
  EXPECT_EQ(index_.GetSourceStats(0).unindexed_blocks, 3u);
  Remove(0, Keys({1}), Tier::kGpu, KvGroup{1, GroupKind::kAbsent});
  EXPECT_TRUE(Find(Keys({1})).sources.empty());
  PrefixFilter g0;
  g0.group = 0;
  EXPECT_TRUE(Find(Keys({2}), g0).sources.empty());
}

// A removal's group is indexed once the model indexed a store of it (any
// source); before that it is not drift. After that, a removal in another
// tier or group than the stored copy is a remove of an unknown block.
TEST_F(BlockIndexTest, RemovalBeforeFirstIndexedStoreOfItsGroupIsNotDrift) {
  Remove(0, Keys({5}));
  EXPECT_EQ(index_.GetSourceStats(0).drift_remove_unknown, 0u);
  EXPECT_EQ(index_.GetSourceStats(0).unindexed_blocks, 1u);
  ModelId other = index_.AddModel("other").value();
  ASSERT_TRUE(index_.Store(other, 1, Tier::kGpu, kG0, Keys({5}), std::nullopt).ok());
  Remove(0, Keys({5}));   // group 0 of *this* model is still never indexed
  EXPECT_EQ(index_.GetSourceStats(0).drift_remove_unknown, 0u);
  Store(1, Keys({7}));    // another source's store makes group 0 indexed
  Remove(0, Keys({5}));
  EXPECT_EQ(index_.GetSourceStats(0).drift_remove_unknown, 1u);
  EXPECT_EQ(index_.GetSourceStats(0).unindexed_blocks, 2u);
  Store(0, Keys({5}), std::nullopt, Tier::kCpu);
  Remove(0, Keys({5}), Tier::kGpu);   // stored in CPU, removed from GPU
  EXPECT_EQ(index_.GetSourceStats(0).drift_remove_unknown, 2u);
  Store(0, Keys({6}), std::nullopt, Tier::kGpu, StoreOrigin::kUnknown, KvGroup{1, GroupKind::kFullAttention});
  Remove(0, Keys({6}));               // stored in group 1, removed from group 0
  EXPECT_EQ(index_.GetSourceStats(0).drift_remove_unknown, 3u);
  EXPECT_EQ(TierBlocks(0, Tier::kCpu), 1u);
  EXPECT_EQ(TierBlocks(0, Tier::kGpu), 1u);
}

TEST_F(BlockIndexTest, IndexAllGroupsOption) {
  ModelOptions o;
  o.index_all_groups = true;
  ModelId m = index_.AddModel("hybrid", o).value();
  std::vector<BlockKey> ks = Keys({1, 2});
  ASSERT_TRUE(index_.Store(m, 0, Tier::kGpu, KvGroup{0, GroupKind::kFullAttention}, ks, std::nullopt).ok());
  ASSERT_TRUE(index_.Store(m, 0, Tier::kGpu, KvGroup{1, GroupKind::kOther}, Keys({1}), std::nullopt).ok());
  PrefixMatch pm;
  PrefixFilter f;
  ASSERT_TRUE(index_.FindPrefix(m, ks, f, &pm).ok());
  EXPECT_EQ(Gpu(pm, 0), 2u);
  f.group = 1;
  ASSERT_TRUE(index_.FindPrefix(m, ks, f, &pm).ok());
  EXPECT_EQ(Gpu(pm, 0), 1u);
  EXPECT_EQ(TierBlocks(0, Tier::kGpu), 3u);   // (block, group) pairs
}

TEST_F(BlockIndexTest, RecencyOrderEvictsTailFirst) {
  Store(0, Keys({1, 2, 3}));
  std::vector<BlockKey> order;
  ASSERT_TRUE(index_.PeekEvictionOrder(model_, 0, 10, &order).ok());
  EXPECT_EQ(order, Keys({3, 2, 1}));
  Store(0, Keys({1}));          // hit: block 1 becomes the hottest
  Store(0, Keys({4, 5}), 1);
  ASSERT_TRUE(index_.PeekEvictionOrder(model_, 0, 10, &order).ok());
  EXPECT_EQ(order, Keys({3, 2, 1, 5, 4}));
  ASSERT_TRUE(index_.PeekEvictionOrder(model_, 0, 2, &order).ok());
  EXPECT_EQ(order, Keys({3, 2}));
}

TEST_F(BlockIndexTest, EvictionRankHistogram) {
  std::vector<BlockKey> chain = Range(1, 101);
  Store(0, chain);
  Remove(0, Keys({100}));       // the coldest block (tail of the chain): rank 0
  RecencyRankHistogram h = index_.GetEvictionRankHistogram();
  EXPECT_EQ(h.count, 1u);
  EXPECT_EQ(h.counts[0], 1u);
  Remove(0, Keys({1}));         // the hottest: rank 1
  h = index_.GetEvictionRankHistogram();
  EXPECT_EQ(h.counts[RecencyRankHistogram::kBuckets - 1], 1u);
  EXPECT_NEAR(h.sum, 1.0, 1e-3);
}

TEST_F(BlockIndexTest, BytesKeysKeepFullDigest) {
  uint8_t a[32], b[32];
  for (int i = 0; i < 32; ++i) a[i] = b[i] = static_cast<uint8_t>(i);
  b[0] = 0xFF;   // same last 8 bytes (same wire), different digest
  BlockKey ka = BlockKey::FromBytes(a, 32), kb = BlockKey::FromBytes(b, 32);
  ASSERT_EQ(ka.wire(), kb.wire());
  BlockKey ki = BlockKey::FromU64(ka.wire());   // integer form with the same value
  std::vector<BlockKey> qa{ka}, qb{kb}, qi{ki};
  ASSERT_TRUE(index_.Store(model_, 0, Tier::kGpu, kG0, qa, std::nullopt).ok());
  EXPECT_EQ(Gpu(Find(qa), 0), 1u);
  EXPECT_TRUE(Find(qb).sources.empty());
  EXPECT_TRUE(Find(qi).sources.empty());
  ASSERT_TRUE(index_.Store(model_, 1, Tier::kGpu, kG0, qb, std::nullopt).ok());
  ASSERT_TRUE(index_.Store(model_, 2, Tier::kGpu, kG0, qi, std::nullopt).ok());
  EXPECT_EQ(Find(qa).sources.size(), 1u);
  EXPECT_EQ(Find(qb).Find(1)->gpu_blocks, 1u);
  EXPECT_EQ(Find(qi).Find(2)->gpu_blocks, 1u);
  EXPECT_EQ(index_.BlockCount(model_), 3u);
  std::vector<BlockKey> order;
  ASSERT_TRUE(index_.PeekEvictionOrder(model_, 1, 1, &order).ok());
  ASSERT_EQ(order.size(), 1u);
  EXPECT_EQ(order[0], kb);
  uint8_t x[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};   // xxhash-sized
  std::vector<BlockKey> qx{BlockKey::FromBytes(x, 16)};
  ASSERT_TRUE(index_.Store(model_, 0, Tier::kGpu, kG0, qx, std::nullopt).ok());
  EXPECT_EQ(Gpu(Find(qx), 0), 1u);
  ASSERT_TRUE(index_.Remove(model_, 0, Tier::kGpu, kG0, qa).ok());
  EXPECT_TRUE(Find(qa).sources.empty());
  EXPECT_EQ(Find(qb).sources.size(), 1u);
}

// While a shard holds only integer-form keys, lookups skip its side
// directory; a bytes-form key with the same wire must still not match.
TEST_F(BlockIndexTest, BytesKeyDoesNotMatchAnIntegerKeyWithTheSameWire) {
  uint8_t a[32];
  for (int i = 0; i < 32; ++i) a[i] = static_cast<uint8_t>(i + 1);
  BlockKey kb = BlockKey::FromBytes(a, 32);
  BlockKey ki = BlockKey::FromU64(kb.wire());
  std::vector<BlockKey> qb{kb}, qi{ki};
  ASSERT_TRUE(index_.Store(model_, 0, Tier::kGpu, kG0, qi, std::nullopt).ok());
  EXPECT_TRUE(Find(qb).sources.empty());
  EXPECT_EQ(Gpu(Find(qi), 0), 1u);
  ASSERT_TRUE(index_.Store(model_, 1, Tier::kGpu, kG0, qb, std::nullopt).ok());
  EXPECT_EQ(Find(qb).sources.size(), 1u);
  EXPECT_EQ(Find(qb).Find(1)->gpu_blocks, 1u);
  EXPECT_EQ(Find(qi).sources.size(), 1u);
  EXPECT_EQ(Find(qi).Find(0)->gpu_blocks, 1u);
}

TEST_F(BlockIndexTest, ManyOwnersOfOneBlock) {
  for (SourceId s = 0; s < 300; ++s) {
    Store(s, Keys({1, 2}));
    Store(s, Keys({1}), std::nullopt, Tier::kCpu);
  }
  PrefixMatch m = Find(Keys({1, 2}));
  ASSERT_EQ(m.sources.size(), 300u);
  for (size_t i = 0; i < m.sources.size(); ++i) {
    EXPECT_EQ(m.sources[i].source, i);   // ascending source order
    EXPECT_EQ(m.sources[i].gpu_blocks, 2u);
  }
  for (SourceId s = 0; s < 300; s += 2) Remove(s, Keys({2}));
  m = Find(Keys({1, 2}));
  EXPECT_EQ(Gpu(m, 0), 1u);
  EXPECT_EQ(Gpu(m, 1), 2u);
  for (SourceId s = 0; s < 300; ++s) ASSERT_TRUE(index_.ClearSource(s, std::nullopt).ok());
  EXPECT_EQ(index_.BlockCount(model_), 0u);
}

TEST_F(BlockIndexTest, GrowAndShrinkManyBlocks) {
  std::vector<BlockKey> ks = Range(1000, 201000);
  Store(0, ks);
  EXPECT_EQ(index_.BlockCount(model_), 200000u);
  EXPECT_EQ(Gpu(Find(ks), 0), 200000u > 8192 ? 8192u : 200000u);
  Remove(0, ks);
  EXPECT_EQ(index_.BlockCount(model_), 0u);
  Store(1, Range(1, 100));
  EXPECT_EQ(Gpu(Find(Range(1, 100)), 1), 99u);
  EXPECT_EQ(index_.GetSourceStats(0).drift_remove_unknown, 0u);
}

TEST_F(BlockIndexTest, DumpRestoreRoundTrip) {
  ModelId other = index_.AddModel("other").value();
  Store(0, Keys({1, 2, 3}));
  Store(0, Keys({3}), 2);
  Store(0, Keys({1}));
  Store(1, Keys({1, 2}), std::nullopt, Tier::kCpu);
  std::vector<BlockKey> ks = Keys({5, 6});
  ASSERT_TRUE(index_.Store(other, 2, Tier::kGpu, kG0, ks, std::nullopt).ok());
  IndexSnapshot snap;
  index_.Dump(&snap);
  EXPECT_EQ(snap.owners.size(), 7u);
  BlockIndex copy{testing::CoreUnderTest()};
  ASSERT_TRUE(copy.Restore(snap).ok());
  IndexSnapshot snap2;
  copy.Dump(&snap2);
  EXPECT_TRUE(SameContents(snap, snap2));
  PrefixMatch a, b;
  std::vector<BlockKey> q = Keys({1, 2, 3});
  ASSERT_TRUE(index_.FindPrefix(model_, q, {}, &a).ok());
  ASSERT_TRUE(copy.FindPrefix(model_, q, {}, &b).ok());
  ASSERT_EQ(a.sources.size(), b.sources.size());
  for (size_t i = 0; i < a.sources.size(); ++i) {
    EXPECT_EQ(a.sources[i].gpu_blocks, b.sources[i].gpu_blocks);
    EXPECT_EQ(a.sources[i].blocks_with_lower_tiers, b.sources[i].blocks_with_lower_tiers);
    EXPECT_EQ(a.sources[i].hits, b.sources[i].hits);
  }
  std::vector<BlockKey> o1, o2;
  ASSERT_TRUE(index_.PeekEvictionOrder(model_, 0, 10, &o1).ok());
  ASSERT_TRUE(copy.PeekEvictionOrder(model_, 0, 10, &o2).ok());
  EXPECT_EQ(o1, o2);
  EXPECT_EQ(copy.GetSourceStats(0).gpu_copies, index_.GetSourceStats(0).gpu_copies);
  // Continued ingest stays identical.
  for (BlockIndex* x : {&index_, &copy}) ASSERT_TRUE(x->Store(model_, 0, Tier::kGpu, kG0, Keys({4}), K(3)).ok());
  index_.Dump(&snap);
  copy.Dump(&snap2);
  EXPECT_TRUE(SameContents(snap, snap2));
  Store(0, Keys({9}));
  index_.Dump(&snap);
  EXPECT_FALSE(SameContents(snap, snap2));
  EXPECT_FALSE(copy.Restore(snap).ok());   // not empty
}

// Issue #15 item 8: a restored index applies the removals of the groups it
// holds owners of (BlockRemoved carries no kind), also before any new store
// of that group; otherwise the copies stay and a restarted server drifts
// from its never-restarted peers without any drift counter moving.
TEST_F(BlockIndexTest, RestoredIndexAppliesRemovalsBeforeAnyNewStore) {
  const KvGroup fa2{2, GroupKind::kFullAttention};
  Store(0, Keys({1, 2, 3}));
  Store(1, Keys({7}), std::nullopt, Tier::kGpu, StoreOrigin::kUnknown, fa2);
  IndexSnapshot snap;
  index_.Dump(&snap);
  BlockIndex copy{testing::CoreUnderTest()};
  ASSERT_TRUE(copy.Restore(snap).ok());
  for (BlockIndex* x : {&index_, &copy}) {
    ASSERT_TRUE(x->Remove(model_, 0, Tier::kGpu, kG0, Keys({3})).ok());
    ASSERT_TRUE(x->Remove(model_, 1, Tier::kGpu, KvGroup{2, GroupKind::kAbsent}, Keys({7})).ok());
  }
  IndexSnapshot after, copy_after;
  index_.Dump(&after);
  copy.Dump(&copy_after);
  EXPECT_TRUE(SameContents(after, copy_after));
  EXPECT_EQ(copy_after.owners.size(), 2u);
  for (SourceId s : {0u, 1u}) {
    EXPECT_EQ(copy.GetSourceStats(s).gpu_copies, index_.GetSourceStats(s).gpu_copies) << s;
    EXPECT_EQ(copy.GetSourceStats(s).unindexed_blocks, 0u) << s;
    EXPECT_EQ(copy.GetSourceStats(s).drift_remove_unknown, 0u) << s;
  }
}

// A hybrid model whose full-attention group is not group 0: the restored
// index answers unfiltered queries from that group, as the index it was
// dumped from does, before any new store tells it the group's kind.
TEST_F(BlockIndexTest, RestoredHybridModelKeepsItsPrimaryGroup) {
  const KvGroup fa{2, GroupKind::kFullAttention};
  const KvGroup sliding{1, GroupKind::kOther};
  Store(0, Keys({1, 2, 3}), std::nullopt, Tier::kGpu, StoreOrigin::kUnknown, sliding);
  Store(0, Keys({1, 2, 3}), std::nullopt, Tier::kGpu, StoreOrigin::kUnknown, fa);
  EXPECT_EQ(Gpu(Find(Keys({1, 2, 3})), 0), 3u);
  IndexSnapshot snap;
  index_.Dump(&snap);
  BlockIndex copy{testing::CoreUnderTest()};
  ASSERT_TRUE(copy.Restore(snap).ok());
  PrefixMatch m;
  ASSERT_TRUE(copy.FindPrefix(model_, Keys({1, 2, 3}), PrefixFilter{}, &m).ok());
  EXPECT_EQ(Gpu(m, 0), 3u);
}

// Stamps only order a source's own blocks, so a source left empty by a
// clear restarts its clock: two replicas that applied different histories
// before an engine restart (one was down) stamp identically after it.
TEST_F(BlockIndexTest, ASourceLeftEmptyByAClearRestartsItsClock) {
  auto clock_of = [this](SourceId s) -> uint64_t {
    IndexSnapshot snap;
    index_.Dump(&snap);
    for (const auto& [id, clock] : snap.source_clocks) {
      if (id == s) return clock;
    }
    return 0;
  };
  Store(0, Keys({1, 2}));
  Store(0, Keys({3}), std::nullopt, Tier::kCpu);
  ASSERT_TRUE(index_.ClearSource(0, Tier::kGpu).ok());
  EXPECT_EQ(clock_of(0), 3u);   // the CPU block's stamp still orders against new ones
  ASSERT_TRUE(index_.ClearSource(0, std::nullopt).ok());
  EXPECT_EQ(clock_of(0), 0u);
  Store(0, Keys({4}));
  EXPECT_EQ(clock_of(0), 1u);
  BlockIndex fresh{testing::CoreUnderTest()};
  ASSERT_TRUE(fresh.AddModel("m").ok());
  ASSERT_TRUE(fresh.Store(model_, 0, Tier::kGpu, kG0, Keys({4}), std::nullopt).ok());
  IndexSnapshot a, b;
  index_.Dump(&a);
  fresh.Dump(&b);
  EXPECT_TRUE(SameContents(a, b));
}

TEST_F(BlockIndexTest, RestoreAcceptsAnyOrderAndRejectsDuplicatesInEvery) {
  ModelId other = index_.AddModel("other").value();
  for (uint32_t s = 0; s < 4; ++s) Store(s, Range(1, 50));
  Store(1, Range(20, 60), std::nullopt, Tier::kCpu);
  ASSERT_TRUE(index_.Store(other, 2, Tier::kGpu, kG0, Range(1, 10), std::nullopt).ok());
  IndexSnapshot sorted;
  index_.Dump(&sorted);
  IndexSnapshot unsorted;
  index_.DumpUnsorted(&unsorted);
  IndexSnapshot resorted = unsorted;
  SortSnapshot(&resorted);
  EXPECT_TRUE(SameContents(sorted, resorted));

  // Dump order (fast path), shard order, shuffled, reversed: same index.
  IndexSnapshot shuffled = sorted;
  std::mt19937 rng(5);
  std::shuffle(shuffled.owners.begin(), shuffled.owners.end(), rng);
  IndexSnapshot reversed = sorted;
  std::reverse(reversed.owners.begin(), reversed.owners.end());
  for (const IndexSnapshot* in : {&sorted, &unsorted, &shuffled, &reversed}) {
    BlockIndex copy{testing::CoreUnderTest()};
    ASSERT_TRUE(copy.Restore(*in).ok());
    IndexSnapshot back;
    copy.Dump(&back);
    EXPECT_TRUE(SameContents(sorted, back));
  }
  // A duplicate owner is Corruption wherever it sits: adjacent in sorted
  // input, or far apart in shuffled input.
  IndexSnapshot dup = sorted;
  dup.owners.insert(dup.owners.begin() + 10, dup.owners[10]);
  IndexSnapshot dup_far = shuffled;
  dup_far.owners.push_back(dup_far.owners.front());
  IndexSnapshot dup_after_unsorted = sorted;   // out of order first, then a duplicate of an earlier run
  std::swap(dup_after_unsorted.owners[3], dup_after_unsorted.owners[40]);
  dup_after_unsorted.owners.push_back(dup_after_unsorted.owners[5]);
  for (const IndexSnapshot* in : {&dup, &dup_far, &dup_after_unsorted}) {
    BlockIndex copy{testing::CoreUnderTest()};
    Status st = copy.Restore(*in);
    EXPECT_EQ(st.code(), StatusCode::kCorruption) << st.ToString();
  }
}

TEST_F(BlockIndexTest, LargeRestoreRoundTrip) {
  // 2 x 130,000 owners, two tiers: many table resizes on the fast path.
  for (uint32_t s = 0; s < 2; ++s) {
    for (uint64_t b = 0; b < 130000; b += 1000) {
      Store(s, Range(b + 1, b + 1001), std::nullopt, s == 0 ? Tier::kGpu : Tier::kCpu);
    }
  }
  Store(0, Range(1, 20));   // duplicate copies: refcounts 2
  IndexSnapshot snap;
  index_.Dump(&snap);
  ASSERT_GE(snap.owners.size(), 200000u);
  BlockIndex copy{testing::CoreUnderTest()};
  ASSERT_TRUE(copy.Restore(snap).ok());
  IndexSnapshot back;
  copy.Dump(&back);
  EXPECT_TRUE(SameContents(snap, back));
  EXPECT_EQ(copy.GetSourceStats(0).gpu_copies, index_.GetSourceStats(0).gpu_copies);
  PrefixMatch a, b;
  ASSERT_TRUE(index_.FindPrefix(model_, Range(1, 300), {}, &a).ok());
  ASSERT_TRUE(copy.FindPrefix(model_, Range(1, 300), {}, &b).ok());
  ASSERT_EQ(a.sources.size(), b.sources.size());
  for (size_t i = 0; i < a.sources.size(); ++i) {
    EXPECT_EQ(a.sources[i].gpu_blocks, b.sources[i].gpu_blocks);
    EXPECT_EQ(a.sources[i].blocks_with_lower_tiers, b.sources[i].blocks_with_lower_tiers);
  }
  // A duplicate anywhere is still Corruption.
  for (size_t at : {size_t{0}, snap.owners.size() / 2, snap.owners.size() - 1}) {
    IndexSnapshot dup = snap;
    dup.owners.insert(dup.owners.begin() + static_cast<long>(at), dup.owners[at]);
    BlockIndex c{testing::CoreUnderTest()};
    EXPECT_EQ(c.Restore(dup).code(), StatusCode::kCorruption);
  }
}

// Stamps are 24-bit: a rebase keeps the order of the newest 2^22 clock
// ticks and folds older stamps into 0 (the coldest).
TEST_F(BlockIndexTest, ClockRebaseKeepsRecencyOrder) {
  const uint64_t limit = uint64_t{1} << 24;
  index_.TestOnlySetClock(0, limit - (1 << 21));
  Store(0, Keys({1, 2, 3}));
  Store(0, Keys({1}));
  std::vector<BlockKey> before, after;
  ASSERT_TRUE(index_.PeekEvictionOrder(model_, 0, 10, &before).ok());
  index_.TestOnlySetClock(0, limit - 2);   // those stamps are now 2^21 ticks old: inside the kept window
  Store(0, Keys({4, 5}), 1);   // forces a rebase before stamping
  ASSERT_TRUE(index_.PeekEvictionOrder(model_, 0, 10, &after).ok());
  std::vector<BlockKey> want = before;
  want.push_back(K(5));
  want.push_back(K(4));
  EXPECT_EQ(after, want);
  IndexSnapshot snap;
  index_.Dump(&snap);
  for (const OwnerRecord& o : snap.owners) {
    EXPECT_LT(o.stamp, limit);
    EXPECT_GT(o.stamp, 0u);
  }
  Remove(0, Keys({3}));
  EXPECT_EQ(index_.GetSourceStats(0).drift_remove_unknown, 0u);
  ASSERT_TRUE(index_.PeekEvictionOrder(model_, 0, 1, &after).ok());
  EXPECT_EQ(after, Keys({2}));

  // Far older than the window: folded into stamp 0, still before anything newer.
  index_.TestOnlySetClock(0, limit - 2);
  Store(0, Keys({6}));
  index_.Dump(&snap);
  for (const OwnerRecord& o : snap.owners) {
    if (o.key == K(6)) {
      EXPECT_GT(o.stamp, 0u);
    } else {
      EXPECT_EQ(o.stamp, 0u) << o.key.ToString();
    }
  }
  ASSERT_TRUE(index_.PeekEvictionOrder(model_, 0, 10, &after).ok());
  ASSERT_EQ(after.size(), 5u);
  EXPECT_EQ(after.back(), K(6));
  EXPECT_EQ(index_.GetEvictionRankHistogram().count, 1u);   // the one removal above
}

// Snapshots written when stamps were 32-bit carry clocks and stamps beyond
// 24 bits: Restore rebases them like a Store would, keeping the order.
TEST_F(BlockIndexTest, RestoreRebasesWideStampsOfOlderSnapshots) {
  IndexSnapshot old;
  old.models.emplace_back("m", ModelOptions{});
  const uint32_t clock = 0xE0000000u;
  old.source_clocks.emplace_back(0, clock);
  auto owner = [](uint64_t key, uint32_t stamp) {
    OwnerRecord o;
    o.key = BlockKey::FromU64(key);
    o.stamp = stamp;
    return o;
  };
  old.owners = {owner(1, clock - 10), owner(2, clock - 5), owner(3, 5)};
  BlockIndex index{testing::CoreUnderTest()};
  ASSERT_TRUE(index.Restore(old).ok());
  IndexSnapshot now;
  index.Dump(&now);
  ASSERT_EQ(now.source_clocks.size(), 1u);
  const uint64_t keep = uint64_t{1} << 22;
  EXPECT_EQ(now.source_clocks[0].second, keep);
  ASSERT_EQ(now.owners.size(), 3u);
  EXPECT_EQ(now.owners[0].stamp, keep - 10);
  EXPECT_EQ(now.owners[1].stamp, keep - 5);
  EXPECT_EQ(now.owners[2].stamp, 0u);
  std::vector<BlockKey> order;
  ASSERT_TRUE(index.PeekEvictionOrder(0, 0, 3, &order).ok());
  EXPECT_EQ(order, (std::vector<BlockKey>{BlockKey::FromU64(3), BlockKey::FromU64(1), BlockKey::FromU64(2)}));
}

// A snapshot that turns out corrupt half-way still leaves the owners
// applied before the error fully indexed, membership included: clearing
// their source removes them.
TEST_F(BlockIndexTest, FailedRestoreKeepsAppliedOwnersClearable) {
  IndexSnapshot snap;
  snap.models.emplace_back("m", ModelOptions{});
  for (uint64_t k = 1; k <= 100; ++k) {
    OwnerRecord o;
    o.key = BlockKey::FromU64(k);
    o.source = 3;
    snap.owners.push_back(o);
  }
  snap.owners.push_back(snap.owners.back());   // a duplicate: Corruption
  BlockIndex index{testing::CoreUnderTest()};
  EXPECT_EQ(index.Restore(snap).code(), StatusCode::kCorruption);
  EXPECT_EQ(index.BlockCount(0), 100u);
  ASSERT_TRUE(index.ClearSource(3, std::nullopt).ok());
  EXPECT_EQ(index.BlockCount(0), 0u);
}

// The owner word has 6 bits for the group: groups 0..62 are indexed, 63
// and above only counted (never an error, never a wrong owner); a snapshot
// claiming such a group is Corruption.
TEST_F(BlockIndexTest, GroupsBeyondTheOwnerFieldAreCountedNotIndexed) {
  ASSERT_TRUE(index_.Store(model_, 0, Tier::kGpu, KvGroup{62, GroupKind::kFullAttention}, Keys({1}), std::nullopt).ok());
  ASSERT_TRUE(index_.Store(model_, 0, Tier::kGpu, KvGroup{63, GroupKind::kFullAttention}, Keys({2}), std::nullopt).ok());
  ASSERT_TRUE(index_.Store(model_, 0, Tier::kGpu, KvGroup{200, GroupKind::kFullAttention}, Keys({3}), std::nullopt).ok());
  EXPECT_EQ(index_.BlockCount(model_), 1u);
  EXPECT_EQ(index_.GetSourceStats(0).unindexed_blocks, 2u);
  std::vector<OwnerRecord> owners;
  ASSERT_TRUE(index_.LookupBlock(model_, K(1), &owners).ok());
  ASSERT_EQ(owners.size(), 1u);
  EXPECT_EQ(owners[0].group, 62u);
  PrefixFilter f;
  f.group = 63;
  EXPECT_TRUE(Find(Keys({2}), f).sources.empty());

  IndexSnapshot snap;
  index_.Dump(&snap);
  snap.owners[0].group = 63;
  BlockIndex other{testing::CoreUnderTest()};
  Status st = other.Restore(snap);
  EXPECT_EQ(st.code(), StatusCode::kCorruption);
  EXPECT_NE(st.ToString().find("group 63"), std::string::npos) << st.ToString();
}

// A block holds at most 16,384 (source, tier, group) owners (the owner
// array's limit): a further owner is counted as unindexed, not a crash,
// and a snapshot with more is Corruption.
TEST_F(BlockIndexTest, OwnersPastTheBlockLimitAreCountedNotIndexed) {
  if (testing::OnRunCore()) GTEST_SKIP() << "the owner limit is the per-block core's; the run core has none";
  const uint32_t sources = internal::kMaxOwners / 4 + 1;
  for (SourceId s = 0; s < sources; ++s) {
    for (uint32_t t = 0; t < 4; ++t) {
      ASSERT_TRUE(index_.Store(model_, s, static_cast<Tier>(t), {}, Keys({1}), std::nullopt).ok());
    }
  }
  const SourceId last = sources - 1;
  std::vector<OwnerRecord> owners;
  ASSERT_TRUE(index_.LookupBlock(model_, K(1), &owners).ok());
  EXPECT_EQ(owners.size(), internal::kMaxOwners);
  EXPECT_EQ(index_.GetSourceStats(last).unindexed_blocks, 4u);
  EXPECT_TRUE(index_.GetSourceStats(last).blocks_per_tier.empty());
  EXPECT_EQ(index_.GetSourceStats(last - 1).unindexed_blocks, 0u);
  Store(last, Keys({2}));   // its other blocks are indexed as usual
  EXPECT_EQ(Find(Keys({2})).sources.size(), 1u);
  EXPECT_EQ(Find(Keys({1})).sources.size(), sources - 1);

  IndexSnapshot snap;
  index_.Dump(&snap);
  OwnerRecord extra = snap.owners.front();
  extra.source = last;
  snap.owners.push_back(extra);
  BlockIndex other{testing::CoreUnderTest()};
  Status st = other.Restore(snap);
  EXPECT_EQ(st.code(), StatusCode::kCorruption);
  EXPECT_NE(st.ToString().find("owners"), std::string::npos) << st.ToString();
}

// Copy counts and hit counts past the inline fields (14 copies, 254 hits)
// stay exact: they spill to the shard's side map and come back.
TEST_F(BlockIndexTest, LargeRefcountsAndHitCountsStayExact) {
  for (int i = 0; i < 40; ++i) Store(0, Keys({1}), std::nullopt, Tier::kGpu, StoreOrigin::kNew);
  for (int i = 0; i < 300; ++i) Store(0, Keys({1}), std::nullopt, Tier::kGpu, StoreOrigin::kReused);
  Store(1, Keys({1}), std::nullopt, Tier::kGpu, StoreOrigin::kNew);
  std::vector<OwnerRecord> owners;
  ASSERT_TRUE(index_.LookupBlock(model_, K(1), &owners).ok());
  ASSERT_EQ(owners.size(), 2u);
  EXPECT_EQ(owners[0].refcount, 40u);
  EXPECT_EQ(owners[0].hits, 300u);
  EXPECT_EQ(owners[1].refcount, 1u);
  // A query sums hit counts saturated at 255 per block.
  PrefixMatch m = Find(Keys({1}));
  ASSERT_EQ(m.sources.size(), 2u);
  EXPECT_EQ(m.sources[0].hits, 255u);
  EXPECT_EQ(m.sources[0].hit_blocks, 1u);
  // The round trip keeps the exact values.
  IndexSnapshot snap;
  index_.Dump(&snap);
  BlockIndex copy{testing::CoreUnderTest()};
  ASSERT_TRUE(copy.Restore(snap).ok());
  IndexSnapshot again;
  copy.Dump(&again);
  EXPECT_TRUE(SameContents(snap, again));
  // 39 removals leave one copy; the 40th removes the owner.
  for (int i = 0; i < 39; ++i) Remove(0, Keys({1}));
  ASSERT_TRUE(index_.LookupBlock(model_, K(1), &owners).ok());
  ASSERT_EQ(owners.size(), 2u);
  EXPECT_EQ(owners[0].refcount, 1u);
  EXPECT_EQ(owners[0].hits, 300u);
  Remove(0, Keys({1}));
  ASSERT_TRUE(index_.LookupBlock(model_, K(1), &owners).ok());
  ASSERT_EQ(owners.size(), 1u);
  EXPECT_EQ(owners[0].source, 1u);
  EXPECT_EQ(index_.GetSourceStats(0).drift_remove_unknown, 0u);
  // The restored copy counts the same removals down the same way.
  for (int i = 0; i < 40; ++i) ASSERT_TRUE(copy.Remove(model_, 0, Tier::kGpu, kG0, Keys({1})).ok());
  index_.Dump(&snap);
  copy.Dump(&again);
  EXPECT_TRUE(SameContents(snap, again));
  EXPECT_EQ(copy.GetSourceStats(0).gpu_copies, 0u);
  EXPECT_EQ(copy.GetSourceStats(0).drift_remove_unknown, 0u);
}

TEST(RegistryTest, TiersAndSources) {
  TierRegistry t;
  EXPECT_EQ(t.Intern("GPU").value(), Tier::kGpu);
  EXPECT_EQ(t.Intern("CPU").value(), Tier::kCpu);
  EXPECT_EQ(t.Intern("STORAGE").value(), Tier::kStorage);
  Tier obj = t.Intern("OBJ").value();
  EXPECT_EQ(static_cast<int>(obj), 3);
  EXPECT_EQ(t.Intern("OBJ").value(), obj);
  EXPECT_EQ(t.Name(obj), "OBJ");
  EXPECT_FALSE(t.Find("FS").has_value());
  for (int i = 0; i < 100; ++i) {
    std::string name = "medium-";   // (built with += : GCC 12 -Wrestrict false positive on operator+)
    name += std::to_string(i);
    (void)t.Intern(name);
  }
  EXPECT_EQ(t.size(), kMaxTiers);
  EXPECT_EQ(t.Intern("one-too-many").status().code(), StatusCode::kOutOfRange);

  SourceRegistry s;
  EXPECT_EQ(s.Register("a", 0).value(), 0u);
  EXPECT_EQ(s.Register("b", 0).value(), 1u);
  EXPECT_EQ(s.Find("a", 0), 0u);
  EXPECT_FALSE(s.Find("a", 1).has_value());
  EXPECT_EQ(SourceRegistry::Reader(s).Get(1)->replica, "b");
  EXPECT_EQ(SourceRegistry::Reader(s).Get(2), nullptr);
  EXPECT_EQ(SourceStateName(SourceState::kExact), "EXACT");
}

// A snapshot lists owners by key, without the runs; restored into the
// run core it must cost about what its blocks cost stored (packed runs),
// not a run, a page and a holder block per block, and answer the same.
TEST(BlockIndexRunCoreTest, ARestoredSnapshotCostsAboutWhatItsBlocksCost) {
  BlockIndex original(IndexOptions{IndexCore::kRuns});
  const ModelId m = original.AddModel("m").value();
  std::vector<BlockKey> chain;
  for (uint64_t k = 1; k <= 20000; ++k) chain.push_back(K(k * 0x9E3779B97F4A7C15ULL));
  ASSERT_TRUE(original.Store(m, 0, Tier::kGpu, {}, chain, std::nullopt).ok());
  ASSERT_TRUE(original.Store(m, 1, Tier::kGpu, {}, std::span(chain).first(5000), std::nullopt).ok());
  IndexSnapshot snap;
  original.Dump(&snap);
  BlockIndex restored(IndexOptions{IndexCore::kRuns});
  ASSERT_TRUE(restored.Restore(snap).ok());
  EXPECT_LT(restored.Memory().runs, 64u * chain.size());
  EXPECT_EQ(restored.BlockCount(m), chain.size());
  PrefixMatch a, b;
  ASSERT_TRUE(original.FindPrefix(m, chain, {}, &a).ok());
  ASSERT_TRUE(restored.FindPrefix(m, chain, {}, &b).ok());
  ASSERT_EQ(a.sources.size(), 2u);
  ASSERT_EQ(b.sources.size(), 2u);
  for (size_t j = 0; j < 2; ++j) {
    EXPECT_EQ(a.sources[j].gpu_blocks, b.sources[j].gpu_blocks);
    EXPECT_EQ(a.sources[j].hits, b.sources[j].hits);
  }
}

}  // namespace
}  // namespace kvidx
