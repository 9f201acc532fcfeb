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
  EXPECT_TRUE(sources.IsLive(id));
  const size_t live = index.SourceMemoryBytes(id);
  EXPECT_GT(live, 12u * 1024);

  sink.OnSourceRemoved(spec);
  EXPECT_FALSE(sources.IsLive(id));
  EXPECT_EQ(index.BlockCount(index.FindModel("m").value()), 0u);
  EXPECT_LT(index.SourceMemoryBytes(id), 1024u);
  EXPECT_EQ(index.GetSourceState(id), SourceState::kDisconnected);
  EXPECT_TRUE(sink.Watermarks().empty());

  // The same name comes back on the same id, live and indexing again.
  const SourceSpec again = Spec("r0", 2);
  sink.OnSourceAdded(again);
  EXPECT_EQ(sources.Find("r0", 0), id);
  EXPECT_TRUE(sources.IsLive(id));
  sink.OnBatch(again, 0, Stored(100, 2, 16), false);
  EXPECT_EQ(index.BlockCount(index.FindModel("m").value()), 2u);
}

}  // namespace
}  // namespace kvidx::ingest
