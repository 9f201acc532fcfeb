// IndexSink against a real BlockIndex: BlockStored events whose block_size
// is not the model's are counted and not indexed; removing a source
// releases its index state and retires its id.
#include "ingest/index_sink.h"

#include <gtest/gtest.h>

#include "index/block_index.h"
#include "index/source_registry.h"
#include "index/tier.h"

namespace kvidx::ingest {
namespace {

const std::string kModel = "m";

SourceSpec Spec(const std::string& replica, uint64_t id) {
  SourceSpec s;
  s.id = id;
  s.replica = replica;
  s.model = kModel;
  s.name = SourceName(replica, 0);
  return s;
}

// One BlockStored of `n` chained blocks starting at key `first`.
EventBatch Stored(uint64_t first, uint32_t n, int64_t block_size,
                  std::optional<std::string_view> kind = std::nullopt) {
  EventBatch b;
  KvEvent e;
  e.type = EventType::kBlockStored;
  e.block_hashes = {0, n};
  e.block_size = block_size;
  e.kv_cache_spec_kind = kind;
  for (uint32_t i = 0; i < n; ++i) b.keys.push_back(BlockKey::FromU64(first + i));
  b.events.push_back(e);
  return b;
}

struct SinkFixture : ::testing::Test {
  BlockIndex index;
  SourceRegistry sources;
  TierRegistry tiers;
  IndexSink sink{&index, &sources, &tiers};
};

TEST_F(SinkFixture, StoresWithAnotherBlockSizeAreCountedNotIndexed) {
  sink.SetModelBlockSize("m", 16);
  const SourceSpec spec = Spec("r0", 1);
  sink.OnSourceAdded(spec);
  const ModelId model = index.FindModel("m").value();

  sink.OnBatch(spec, 0, Stored(100, 3, 16), false);
  EXPECT_EQ(index.BlockCount(model), 3u);
  EXPECT_EQ(sink.stats().block_size_mismatch_events.load(), 0u);

  uint64_t seq = 1;
  for (int64_t bad : {int64_t{0}, int64_t{32}, int64_t{8}, int64_t{-16}}) {
    sink.OnBatch(spec, seq, Stored(200 + 10 * seq, 2, bad), false);
    ++seq;
  }
  EXPECT_EQ(index.BlockCount(model), 3u) << "a mismatched store was indexed";
  EXPECT_EQ(sink.stats().block_size_mismatch_events.load(), 4u);
  // Still applied as a batch: the watermark moves, nothing else is lost.
  EXPECT_EQ(sink.LastSeq(sources.Find("r0", 0).value()), 4);

  // Non-attention groups (sliding window, mamba) may use other block sizes;
  // they are not indexed by default and are not miscounted as mismatches.
  sink.OnBatch(spec, seq++, Stored(300, 2, 64, "mamba"), false);
  EXPECT_EQ(sink.stats().block_size_mismatch_events.load(), 4u);
  sink.OnBatch(spec, seq++, Stored(400, 2, 32, "full_attention"), false);
  EXPECT_EQ(sink.stats().block_size_mismatch_events.load(), 5u);
  EXPECT_EQ(index.BlockCount(model), 3u);
}

TEST_F(SinkFixture, ModelWithoutAConfiguredBlockSizeIsNotChecked) {
  const SourceSpec spec = Spec("r0", 1);
  sink.OnSourceAdded(spec);
  sink.OnBatch(spec, 0, Stored(100, 2, 0), false);
  EXPECT_EQ(index.BlockCount(index.FindModel("m").value()), 2u);
  EXPECT_EQ(sink.stats().block_size_mismatch_events.load(), 0u);
}

TEST_F(SinkFixture, RemovedSourceIsReleasedAndRetired) {
  sink.SetModelBlockSize("m", 16);
  const SourceSpec spec = Spec("r0", 1);
  sink.OnSourceAdded(spec);
  sink.OnBatch(spec, 0, Stored(100, 50, 16), false);
  const SourceId id = sources.Find("r0", 0).value();
  EXPECT_TRUE(SourceRegistry::Reader(sources).IsLive(id));
  const size_t live = index.SourceMemoryBytes(id);
  EXPECT_GT(live, 4u * 1024);   // its recency histogram (~4 KiB) and membership sets

  sink.OnSourceRemoved(spec);
  EXPECT_FALSE(SourceRegistry::Reader(sources).IsLive(id));
  EXPECT_EQ(index.BlockCount(index.FindModel("m").value()), 0u);
  EXPECT_LT(index.SourceMemoryBytes(id), 1024u);
  EXPECT_EQ(index.GetSourceState(id), SourceState::kDisconnected);
  EXPECT_TRUE(sink.Watermarks().empty());

  // The same name comes back on the same id, live and indexing again.
  const SourceSpec again = Spec("r0", 2);
  sink.OnSourceAdded(again);
  EXPECT_EQ(sources.Find("r0", 0), id);
  EXPECT_TRUE(SourceRegistry::Reader(sources).IsLive(id));
  sink.OnBatch(again, 0, Stored(100, 2, 16), false);
  EXPECT_EQ(index.BlockCount(index.FindModel("m").value()), 2u);
}

// A released id taken by a new pair starts with no blocks and zeroed
// counters; the old pair's blocks do not show on the new one.
TEST(IndexSinkReuse, ANewPairOnAReleasedIdStartsFromNothing) {
  BlockIndex index;
  SourceRegistry sources(SourceRegistry::Options{std::chrono::seconds(0), nullptr});
  TierRegistry tiers;
  IndexSink sink{&index, &sources, &tiers};
  sink.SetModelBlockSize("m", 16);
  const SourceSpec old_spec = Spec("old", 1);
  sink.OnSourceAdded(old_spec);
  sink.OnBatch(old_spec, 0, Stored(100, 50, 16), false);
  const SourceId id = sources.Find("old", 0).value();
  EXPECT_EQ(index.GetSourceStats(id).stored_blocks, 50u);
  sink.OnSourceRemoved(old_spec);

  const SourceSpec new_spec = Spec("new", 2);
  sink.OnSourceAdded(new_spec);
  ASSERT_EQ(sources.Find("new", 0), id);
  EXPECT_FALSE(sources.Find("old", 0).has_value());
  const SourceIndexStats st = index.GetSourceStats(id);
  EXPECT_EQ(st.stored_blocks, 0u);
  EXPECT_TRUE(st.blocks_per_tier.empty());
  sink.OnBatch(new_spec, 0, Stored(100, 2, 16), false);
  EXPECT_EQ(index.GetSourceStats(id).stored_blocks, 2u);
  EXPECT_EQ(index.BlockCount(index.FindModel("m").value()), 2u);
  EXPECT_EQ(sink.stats().apply_errors.load(), 0u);
}

}  // namespace
}  // namespace kvidx::ingest
