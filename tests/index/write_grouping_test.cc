// Store and Remove group a long event's blocks by shard (ShardOrder) and
// take each shard's lock once per run. Grouping must change nothing a
// caller sees: these tests apply the same blocks as one long event to one
// index and block by block to a twin, and compare everything.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include "index/block_index.h"
#include "common/index_core.h"
#include "index/internal/probe_key.h"
#include "index/internal/shard_order.h"

namespace kvidx {
namespace {

using internal::kGroupStep;
using internal::kMinGroupedBlocks;
using internal::ShardOrder;

std::vector<BlockKey> Keys(uint64_t from, size_t n) {
  std::vector<BlockKey> keys;
  for (size_t i = 0; i < n; ++i) keys.push_back(BlockKey::FromU64(from + i * 7919));
  return keys;
}

TEST(ShardOrderTest, GroupsByShardStablyAndCoversEveryBlock) {
  ShardOrder order;
  std::vector<BlockKey> keys = Keys(1, 1000);
  keys[500] = keys[10];   // a key listed twice stays in event order
  order.Build(keys);
  ASSERT_EQ(order.keys().size(), keys.size());
  std::set<uint32_t> seen;
  uint32_t prev_shard = 0;
  for (size_t j = 0; j < keys.size(); ++j) {
    const uint32_t i = order.index()[j];
    EXPECT_EQ(order.keys()[j], keys[i]);
    EXPECT_TRUE(seen.insert(i).second);
    const uint32_t shard = internal::ShardOfWire(keys[i].wire());
    ASSERT_GE(shard, prev_shard) << j;
    if (j > 0 && shard == prev_shard) {
      EXPECT_LT(order.index()[j - 1], i) << "blocks of one shard keep their event order";
    }
    prev_shard = shard;
  }
  order.Build({});
  EXPECT_EQ(order.keys().size(), 0u);
}

TEST(ShardOrderTest, NotesStartZeroed) {
  ShardOrder order;
  for (uint32_t& note : order.Notes(300)) note = 7;
  std::span<uint32_t> notes = order.Notes(200);
  ASSERT_EQ(notes.size(), 200u);
  for (uint32_t note : notes) EXPECT_EQ(note, 0u);
}

// Everything a caller can read about the given sources of a twin pair.
void ExpectSameIndex(const BlockIndex& a, const BlockIndex& b, const std::vector<SourceId>& sources) {
  IndexSnapshot sa, sb;
  a.Dump(&sa);
  b.Dump(&sb);
  EXPECT_EQ(sa.owners, sb.owners);
  EXPECT_EQ(sa.source_clocks, sb.source_clocks);
  for (SourceId s : sources) EXPECT_TRUE(a.GetSourceStats(s) == b.GetSourceStats(s)) << "source " << s;
  RecencyRankHistogram ha = a.GetEvictionRankHistogram(), hb = b.GetEvictionRankHistogram();
  EXPECT_EQ(ha.counts, hb.counts);
  EXPECT_EQ(ha.count, hb.count);
  EXPECT_DOUBLE_EQ(ha.sum, hb.sum);
}

// A long removal (several grouping steps, keys listed twice, blocks held
// twice, blocks never stored) against the same blocks removed one event
// each: same owners, counters and eviction ranks. The ranks are the
// delicate part: each is taken among the blocks still held at its turn in
// event order, which the grouped path replays after its shard pass.
TEST(WriteGroupingTest, LongRemovalEqualsOneBlockAtATime) {
  BlockIndex grouped{testing::CoreUnderTest()}, single{testing::CoreUnderTest()};
  const ModelId mg = grouped.AddModel("m").value();
  const ModelId ms = single.AddModel("m").value();
  const std::vector<BlockKey> chain = Keys(100, 2 * kGroupStep + 300);
  for (BlockIndex* index : {&grouped, &single}) {
    const ModelId m = index == &grouped ? mg : ms;
    for (size_t i = 0; i < chain.size(); i += 97) {
      const size_t n = std::min<size_t>(97, chain.size() - i);
      ASSERT_TRUE(index->Store(m, 1, Tier::kGpu, {}, std::span(chain).subspan(i, n), std::nullopt).ok());
    }
    // A second copy of every tenth block, and another source beside.
    for (size_t i = 0; i < chain.size(); i += 10) {
      ASSERT_TRUE(index->Store(m, 1, Tier::kGpu, {}, std::span(chain).subspan(i, 1), chain[i == 0 ? 0 : i - 1]).ok());
    }
    ASSERT_TRUE(index->Store(m, 2, Tier::kGpu, {}, std::span(chain).subspan(0, 500), std::nullopt).ok());
  }
  std::mt19937_64 rng(11);
  std::vector<BlockKey> victims;
  for (size_t i = 0; i < chain.size(); ++i) {
    if (rng() % 3 != 0) victims.push_back(chain[i]);
    if (rng() % 50 == 0) victims.push_back(chain[i]);                       // listed twice
    if (rng() % 70 == 0) victims.push_back(BlockKey::FromU64(rng() | 1));   // never stored
  }
  std::shuffle(victims.begin(), victims.end(), rng);
  ASSERT_GT(victims.size(), kGroupStep + kMinGroupedBlocks);   // two grouped steps
  ASSERT_TRUE(grouped.Remove(mg, 1, Tier::kGpu, {}, victims).ok());
  for (const BlockKey& k : victims) ASSERT_TRUE(single.Remove(ms, 1, Tier::kGpu, {}, std::span(&k, 1)).ok());
  ExpectSameIndex(grouped, single, {1, 2});
  EXPECT_GT(grouped.GetSourceStats(1).drift_remove_unknown, 0u);
}

// A long store (blocks already held: copies, then hits) against the same
// blocks stored one event each with the stamps the long event gives them.
TEST(WriteGroupingTest, LongStoreEqualsOneBlockAtATime) {
  BlockIndex grouped{testing::CoreUnderTest()}, single{testing::CoreUnderTest()};
  const ModelId mg = grouped.AddModel("m").value();
  const ModelId ms = single.AddModel("m").value();
  const std::vector<BlockKey> held = Keys(3, 300);
  ASSERT_TRUE(grouped.Store(mg, 1, Tier::kGpu, {}, held, std::nullopt).ok());
  ASSERT_TRUE(single.Store(ms, 1, Tier::kGpu, {}, held, std::nullopt).ok());
  std::vector<BlockKey> event = Keys(50'000, kGroupStep + 900);
  for (size_t i = 0; i < held.size(); i += 3) event[i * 5] = held[i];   // already held
  for (StoreOrigin origin : {StoreOrigin::kNew, StoreOrigin::kReused}) {
    ASSERT_TRUE(grouped.Store(mg, 1, Tier::kGpu, {}, event, held.back(), origin).ok());
    // One event of n blocks stamps block i with clock + (n - i): storing the
    // blocks last to first, one per event, gives each the same stamp.
    for (size_t i = event.size(); i-- > 0;) {
      ASSERT_TRUE(single.Store(ms, 1, Tier::kGpu, {}, std::span(&event[i], 1), held.back(), origin).ok());
    }
  }
  ExpectSameIndex(grouped, single, {1});
  EXPECT_GT(grouped.GetSourceStats(1).duplicate_copies, 0u);
  EXPECT_GT(grouped.GetSourceStats(1).hits, 0u);
}

// A key listed twice in one long store is applied in event order: two
// copies, and the stamp of its later listing.
TEST(WriteGroupingTest, LongStoreAppliesARepeatedKeyInEventOrder) {
  BlockIndex index{testing::CoreUnderTest()};
  const ModelId m = index.AddModel("m").value();
  std::vector<BlockKey> event = Keys(9, kGroupStep + 900);
  event[4000] = event[17];
  ASSERT_TRUE(index.Store(m, 1, Tier::kGpu, {}, event, std::nullopt, StoreOrigin::kNew).ok());
  IndexSnapshot snap;
  index.Dump(&snap);
  size_t found = 0;
  for (const OwnerRecord& o : snap.owners) {
    if (o.key != event[17]) continue;
    ++found;
    EXPECT_EQ(o.refcount, 2u);
    EXPECT_EQ(o.stamp, event.size() - 4000);
  }
  EXPECT_EQ(found, 1u);
}

}  // namespace
}  // namespace kvidx
