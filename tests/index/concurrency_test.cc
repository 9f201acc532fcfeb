// Readers and writers together (run under TSan in CI): lock-free queries
// must see consistent per-block answers while sources are stored, removed,
// cleared and tables grow, and must not wait behind a long ClearSource.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include "common/sanitizers.h"
#include "index/block_index.h"
#include "common/index_core.h"

namespace kvidx {
namespace {

constexpr int kScale = kUnderSanitizer ? 1 : 8;

constexpr KvGroup kG0{0, GroupKind::kAbsent};

std::vector<BlockKey> Chain(uint64_t start, size_t n) {
  std::vector<BlockKey> ks;
  for (size_t i = 0; i < n; ++i) ks.push_back(BlockKey::FromU64(start + i));
  return ks;
}

// One writer's scripted operations on its own sources.
struct Op {
  int kind;   // 0 store, 1 remove, 2 clear GPU
  SourceId source;
  Tier tier;
  std::vector<BlockKey> keys;
  std::optional<BlockKey> parent;
  StoreOrigin origin = StoreOrigin::kUnknown;
};

std::vector<Op> Script(uint64_t seed, SourceId first_source, size_t n) {
  std::mt19937_64 rng(seed);
  std::vector<Op> ops;
  for (size_t i = 0; i < n; ++i) {
    Op op;
    op.source = first_source + static_cast<SourceId>(rng() % 2);
    op.tier = rng() % 4 == 0 ? Tier::kCpu : Tier::kGpu;
    uint64_t r = rng() % 100;
    op.kind = r < 60 ? 0 : r < 99 ? 1 : 2;
    uint64_t start = rng() % 3000;
    // One in twenty long enough to be applied grouped by shard.
    op.keys = Chain(start, rng() % 20 == 0 ? 128 + rng() % 300 : 1 + rng() % 16);
    if (rng() % 2) op.parent = BlockKey::FromU64(start - 1);
    // Reused stores move hit counts under the readers' walks.
    if (op.kind == 0 && rng() % 3 == 0) op.origin = StoreOrigin::kReused;
    ops.push_back(std::move(op));
  }
  return ops;
}

void Apply(BlockIndex& index, ModelId m, const Op& op) {
  Status s;
  if (op.kind == 0) {
    s = index.Store(m, op.source, op.tier, kG0, op.keys, op.parent, op.origin);
  } else if (op.kind == 1) {
    s = index.Remove(m, op.source, op.tier, kG0, op.keys);
  } else {
    s = index.ClearSource(op.source, Tier::kGpu);
  }
  ASSERT_TRUE(s.ok());
}

TEST(ConcurrencyTest, ReadersAndWritersTogether) {
  BlockIndex index{testing::CoreUnderTest()};
  ModelId m = index.AddModel("m").value();
  // A stable source whose answers must never change while others churn
  // (its hits too: the walk adds runs of equal counts once per run).
  std::vector<BlockKey> stable = Chain(1'000'000, 64);
  std::vector<BlockKey> stable_hit = Chain(1'000'000, 32);
  ASSERT_TRUE(index.Store(m, 100, Tier::kGpu, kG0, stable, std::nullopt).ok());
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(index.Store(m, 100, Tier::kGpu, kG0, stable_hit, std::nullopt, StoreOrigin::kReused).ok());
  }

  const size_t n_ops = 3000 * kScale;
  std::vector<std::vector<Op>> scripts = {Script(1, 0, n_ops), Script(2, 2, n_ops)};
  std::atomic<bool> done{false};
  std::atomic<uint64_t> reads{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 3; ++r) {
    readers.emplace_back([&, r] {
      std::mt19937_64 rng(100 + r);
      PrefixMatch pm;
      while (!done.load(std::memory_order_relaxed)) {
        uint64_t start = rng() % 3000;
        std::vector<BlockKey> q = Chain(start, 1 + rng() % 24);
        ASSERT_TRUE(index.FindPrefix(m, q, {}, &pm).ok());
        SourceId prev = 0;
        for (size_t i = 0; i < pm.sources.size(); ++i) {
          const SourceMatch& e = pm.sources[i];
          ASSERT_LE(e.gpu_blocks, e.blocks_with_lower_tiers);
          ASSERT_LE(e.hit_blocks, e.gpu_blocks);
          ASSERT_GE(e.hits, e.hit_blocks);
          ASSERT_LE(e.hits, uint64_t{255} * e.hit_blocks);
          ASSERT_LE(e.blocks_with_lower_tiers, q.size());
          ASSERT_GE(e.blocks_with_lower_tiers, 1u);
          ASSERT_LT(e.source, 4u);
          if (i > 0) {
            ASSERT_GT(e.source, prev);
          }
          prev = e.source;
        }
        ASSERT_TRUE(index.FindPrefix(m, stable, {}, &pm).ok());
        ASSERT_EQ(pm.sources.size(), 1u);
        ASSERT_EQ(pm.sources[0].gpu_blocks, 64u);
        ASSERT_EQ(pm.sources[0].hits, 64u);
        ASSERT_EQ(pm.sources[0].hit_blocks, 32u);
        reads.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  std::vector<std::thread> writers;
  for (auto& script : scripts) {
    writers.emplace_back([&index, m, &script] {
      for (const Op& op : script) Apply(index, m, op);
    });
  }
  for (auto& w : writers) w.join();
  done = true;
  for (auto& r : readers) r.join();
  EXPECT_GT(reads.load(), 0u);

  // Sources are independent, so the interleaving must not matter: replaying
  // both scripts one after the other gives the same contents.
  BlockIndex serial{testing::CoreUnderTest()};
  ModelId m2 = serial.AddModel("m").value();
  ASSERT_TRUE(serial.Store(m2, 100, Tier::kGpu, kG0, stable, std::nullopt).ok());
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(serial.Store(m2, 100, Tier::kGpu, kG0, stable_hit, std::nullopt, StoreOrigin::kReused).ok());
  }
  for (auto& script : scripts) {
    for (const Op& op : script) Apply(serial, m2, op);
  }
  IndexSnapshot a, b;
  index.Dump(&a);
  serial.Dump(&b);
  EXPECT_TRUE(SameContents(a, b));
  for (SourceId s = 0; s < 4; ++s) {
    SourceIndexStats x = index.GetSourceStats(s), y = serial.GetSourceStats(s);
    EXPECT_EQ(x.drift_orphan_store, y.drift_orphan_store);
    EXPECT_EQ(x.drift_remove_unknown, y.drift_remove_unknown);
    EXPECT_EQ(x.gpu_copies, y.gpu_copies);
  }
}

TEST(ConcurrencyTest, ReadersProgressDuringLongClearAndTableGrowth) {
  BlockIndex index{testing::CoreUnderTest()};
  ModelId m = index.AddModel("m").value();
  std::vector<BlockKey> stable = Chain(1ull << 40, 32);
  ASSERT_TRUE(index.Store(m, 1, Tier::kGpu, kG0, stable, std::nullopt).ok());
  const size_t n_blocks = 25'000 * kScale;
  std::vector<BlockKey> big = Chain(1, n_blocks);
  std::atomic<int> phase{0};   // 0 = filling (tables grow), 1 = clearing, 2 = done
  std::atomic<uint64_t> during_fill{0}, during_clear{0};
  std::thread reader([&] {
    PrefixMatch pm;
    while (phase.load() != 2) {
      int p = phase.load();
      ASSERT_TRUE(index.FindPrefix(m, stable, {}, &pm).ok());
      ASSERT_EQ(pm.sources.size(), 1u);
      ASSERT_EQ(pm.sources[0].gpu_blocks, 32u);
      (p == 0 ? during_fill : during_clear).fetch_add(1);
    }
  });
  for (size_t i = 0; i < n_blocks; i += 512) {
    size_t n = std::min<size_t>(512, n_blocks - i);
    ASSERT_TRUE(index.Store(m, 0, Tier::kGpu, kG0, std::span<const BlockKey>(big).subspan(i, n), std::nullopt).ok());
  }
  phase = 1;
  ASSERT_TRUE(index.ClearSource(0, Tier::kGpu).ok());
  // Give the reader a fair chance to be scheduled on a loaded CI machine.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (during_clear.load() == 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  phase = 2;
  reader.join();
  EXPECT_EQ(index.BlockCount(m), 32u);
  EXPECT_GT(during_fill.load() + during_clear.load(), 0u);
}

}  // namespace
}  // namespace kvidx
