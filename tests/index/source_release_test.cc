// BlockIndex::ReleaseSource: a removed source's blocks and working memory
// go, its counters stay, other sources are untouched, and the id can be
// used again. ResetSource: a released id starts afresh for another source.
// BlockIndex::Memory: the bytes allocated, by part.
#include <gtest/gtest.h>

#include <vector>

#include "index/block_index.h"
#include "common/index_core.h"

namespace kvidx {
namespace {

std::vector<BlockKey> Range(uint64_t from, uint64_t to) {
  std::vector<BlockKey> out;
  for (uint64_t v = from; v < to; ++v) out.push_back(BlockKey::FromU64(v));
  return out;
}

constexpr KvGroup kG0{0, GroupKind::kAbsent};

TEST(SourceRelease, FreesTheSourcesStateAndLeavesOthersAlone) {
  BlockIndex index{testing::CoreUnderTest()};
  const ModelId m = index.AddModel("m").value();
  const std::vector<BlockKey> chain = Range(1, 1001);
  ASSERT_TRUE(index.Store(m, 0, Tier::kGpu, kG0, chain, std::nullopt).ok());
  ASSERT_TRUE(index.Store(m, 0, Tier::kCpu, kG0, chain, std::nullopt).ok());
  ASSERT_TRUE(index.Store(m, 1, Tier::kGpu, kG0, std::span(chain).first(10), std::nullopt).ok());
  index.SetSourceCapacity(0, 5000);
  // A source without GPU blocks has no recency histogram at all.
  EXPECT_LT(index.SourceMemoryBytes(2), 1024u);
  index.SetSourceState(2, SourceState::kExact);
  EXPECT_LT(index.SourceMemoryBytes(2), 1024u);
  const size_t held = index.SourceMemoryBytes(0);
  EXPECT_GT(held, 4u * 1024);   // its recency histogram and membership sets

  ASSERT_TRUE(index.ReleaseSource(0).ok());
  EXPECT_LT(index.SourceMemoryBytes(0), 1024u) << "was " << held;
  const SourceIndexStats st = index.GetSourceStats(0);
  EXPECT_TRUE(st.blocks_per_tier.empty());
  EXPECT_EQ(st.gpu_copies, 0u);
  EXPECT_EQ(st.gpu_capacity, 0u);
  EXPECT_EQ(st.stored_blocks, 2000u) << "counters continue";
  EXPECT_EQ(index.BlockCount(m), 10u);
  PrefixMatch pm;
  ASSERT_TRUE(index.FindPrefix(m, chain, {}, &pm).ok());
  EXPECT_EQ(pm.Find(0), nullptr);
  ASSERT_NE(pm.Find(1), nullptr);
  EXPECT_EQ(pm.Find(1)->gpu_blocks, 10u);

  // Releasing twice, or clearing a released source, is harmless.
  EXPECT_TRUE(index.ReleaseSource(0).ok());
  EXPECT_TRUE(index.ClearSource(0, std::nullopt).ok());
  // Removals after the release are drift, not a crash (no histogram).
  ASSERT_TRUE(index.Remove(m, 0, Tier::kGpu, kG0, std::span(chain).first(3)).ok());
  EXPECT_EQ(index.GetSourceStats(0).drift_remove_unknown, 3u);

  // The id comes back to life with exact accounting.
  ASSERT_TRUE(index.Store(m, 0, Tier::kGpu, kG0, std::span(chain).first(4), std::nullopt).ok());
  ASSERT_TRUE(index.Remove(m, 0, Tier::kGpu, kG0, std::span(chain).first(1)).ok());
  EXPECT_EQ(index.GetSourceStats(0).gpu_copies, 3u);
  ASSERT_TRUE(index.FindPrefix(m, chain, {}, &pm).ok());
  EXPECT_EQ(pm.Find(0), nullptr) << "block 0 was removed: no prefix";
  ASSERT_TRUE(index.FindPrefix(m, std::span(chain).subspan(1, 3), {}, &pm).ok());
  ASSERT_NE(pm.Find(0), nullptr);
  EXPECT_EQ(pm.Find(0)->gpu_blocks, 3u);
  std::vector<BlockKey> order;
  ASSERT_TRUE(index.PeekEvictionOrder(m, 0, 10, &order).ok());
  EXPECT_EQ(order.size(), 3u);
}

TEST(IndexMemory, PartsFollowWhatIsStored) {
  BlockIndex index{testing::CoreUnderTest()};
  const ModelId m = index.AddModel("m").value();
  const IndexMemory empty = index.Memory();
  if (testing::OnRunCore()) {
    // The run core reports its store as one part: an 8-byte entry and a
    // table slot per block, then a bit per block for another holder.
    const std::vector<BlockKey> chain = Range(1, 20001);
    ASSERT_TRUE(index.Store(m, 0, Tier::kGpu, kG0, chain, std::nullopt).ok());
    const IndexMemory one = index.Memory();
    EXPECT_GE(one.runs - empty.runs, 20000u * (8 + 5));
    EXPECT_EQ(one.records + one.owners + one.spill, empty.records + empty.owners + empty.spill);   // the shards stay empty
    ASSERT_TRUE(index.Store(m, 1, Tier::kGpu, kG0, chain, std::nullopt).ok());
    const IndexMemory two = index.Memory();
    EXPECT_LT(two.runs - one.runs, 20000u);
    ASSERT_TRUE(index.ReleaseSource(0).ok());
    ASSERT_TRUE(index.ReleaseSource(1).ok());
    EXPECT_EQ(index.BlockCount(m), 0u);
    return;
  }
  EXPECT_EQ(empty.records, 0u);
  EXPECT_EQ(empty.owners, 0u);
  EXPECT_EQ(empty.sources, 0u);

  const std::vector<BlockKey> chain = Range(1, 20001);
  ASSERT_TRUE(index.Store(m, 0, Tier::kGpu, kG0, chain, std::nullopt).ok());
  const IndexMemory one = index.Memory();
  EXPECT_GE(one.records, 20000u * 16);           // a 16-byte record per block
  EXPECT_GE(one.tables, 20000u * 5);             // a control byte and a 4-byte id per slot
  EXPECT_EQ(one.owners, 0u) << "one owner per block fits its record";
  EXPECT_GT(one.sources, 0u);                    // source 0's membership set
  EXPECT_EQ(one.total(), one.tables + one.records + one.owners + one.spill + one.sources);

  // A second holder of the same blocks needs owner arrays from the pool.
  ASSERT_TRUE(index.Store(m, 1, Tier::kGpu, kG0, chain, std::nullopt).ok());
  const IndexMemory two = index.Memory();
  EXPECT_GT(two.owners, 0u);
  EXPECT_EQ(two.records, one.records) << "no new records for known blocks";
  EXPECT_GT(two.sources, one.sources);

  // Released sources give their sets back; records stay allocated for reuse.
  ASSERT_TRUE(index.ReleaseSource(0).ok());
  ASSERT_TRUE(index.ReleaseSource(1).ok());
  const IndexMemory gone = index.Memory();
  EXPECT_LT(gone.sources, one.sources);
  EXPECT_EQ(gone.records, one.records);
  EXPECT_EQ(index.BlockCount(m), 0u);
}

TEST(SourceRelease, ResetStartsAReleasedIdAfreshAndRefusesOneHoldingBlocks) {
  BlockIndex index{testing::CoreUnderTest()};
  const ModelId m = index.AddModel("m").value();
  const std::vector<BlockKey> chain = Range(1, 101);
  ASSERT_TRUE(index.Store(m, 0, Tier::kGpu, kG0, chain, std::nullopt).ok());
  ASSERT_TRUE(index.Remove(m, 0, Tier::kGpu, kG0, Range(500, 503)).ok());   // drift
  index.SetSourceState(0, SourceState::kExact);
  index.SetSourceCapacity(0, 1000);

  const Status held = index.ResetSource(0);
  EXPECT_EQ(held.code(), StatusCode::kFailedPrecondition) << held.ToString();
  EXPECT_EQ(index.GetSourceStats(0).stored_blocks, 100u) << "a refused reset changes nothing";

  ASSERT_TRUE(index.ReleaseSource(0).ok());
  ASSERT_TRUE(index.ResetSource(0).ok());
  const SourceIndexStats st = index.GetSourceStats(0);
  EXPECT_EQ(st.stored_blocks, 0u);
  EXPECT_EQ(st.removed_blocks, 0u);
  EXPECT_EQ(st.drift_remove_unknown, 0u);
  EXPECT_EQ(st.gpu_capacity, 0u);
  EXPECT_EQ(index.GetSourceState(0), SourceState::kConnecting);
  // An id never used, or out of range.
  EXPECT_TRUE(index.ResetSource(7).ok());
  EXPECT_EQ(index.ResetSource(kMaxSources).code(), StatusCode::kOutOfRange);

  // The new source indexes from zero.
  ASSERT_TRUE(index.Store(m, 0, Tier::kGpu, kG0, std::span(chain).first(5), std::nullopt).ok());
  EXPECT_EQ(index.GetSourceStats(0).stored_blocks, 5u);
  EXPECT_EQ(index.GetSourceStats(0).gpu_copies, 5u);
}

}  // namespace
}  // namespace kvidx
