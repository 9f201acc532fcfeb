// The block index's shard parts on their own: table, record arena, owner
// pool, spill map (index/internal/).
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <iterator>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <vector>

#include "index/internal/owner_pool.h"
#include "index/internal/record_arena.h"
#include "index/internal/spill_map.h"
#include "index/internal/table.h"

namespace kvidx::internal {
namespace {

// Ids double as keys here: id i lives under hash MixKey(i).
uint32_t FindId(const Table& t, uint32_t id) {
  return t.Find(MixKey(id), [id](uint32_t cand) { return cand == id; });
}

TEST(TableTest, InsertFindErase) {
  Table t(4);
  for (uint32_t id = 0; id < 20; ++id) EXPECT_TRUE(t.Insert(MixKey(id), id));
  for (uint32_t id = 0; id < 20; ++id) EXPECT_EQ(FindId(t, id), id);
  EXPECT_EQ(FindId(t, 99), kNoId);
  t.Erase(MixKey(7), 7);
  EXPECT_EQ(FindId(t, 7), kNoId);
  for (uint32_t id = 0; id < 20; ++id) {
    if (id != 7) {
      EXPECT_EQ(FindId(t, id), id);
    }
  }
}

// Every group full: an erased slot must become a tombstone (a probe may
// have continued past it), and a later insert reuses it.
TEST(TableTest, TombstoneWhenGroupFull) {
  Table t(1);
  for (uint32_t id = 0; id < 8; ++id) t.Insert(MixKey(id), id);
  EXPECT_FALSE(t.Erase(MixKey(3), 3));   // no empty slot left in the group
  EXPECT_FALSE(t.Insert(MixKey(100), 100));   // took the tombstone
  EXPECT_EQ(FindId(t, 100), 100u);
  EXPECT_TRUE(Table(1).Insert(MixKey(1), 1));
}

TEST(TableTest, GrowKeepsEveryId) {
  auto t = std::make_unique<Table>(Table::GroupsFor(nullptr, 0));
  uint32_t n = 0;
  for (uint32_t id = 0; id < 5000; ++id) {
    if (n == t->max_load()) {
      auto bigger = std::make_unique<Table>(Table::GroupsFor(t.get(), n));
      EXPECT_GT(bigger->groups(), t->groups());
      t->ForEachId([&](uint32_t i) { bigger->Insert(MixKey(i), i); });
      t = std::move(bigger);
    }
    t->Insert(MixKey(id), id);
    ++n;
  }
  std::set<uint32_t> seen;
  t->ForEachId([&](uint32_t i) { seen.insert(i); });
  EXPECT_EQ(seen.size(), 5000u);
  for (uint32_t id = 0; id < 5000; id += 97) EXPECT_EQ(FindId(*t, id), id);
}

TEST(TableTest, GroupsForShrinksAnEmptiedTable) {
  Table big(1024);
  EXPECT_EQ(Table::GroupsFor(&big, 8000), 2048u);   // > 7/16 full: doubles
  EXPECT_EQ(Table::GroupsFor(&big, 0), 1u);         // emptied: smallest that fits
  EXPECT_EQ(Table::GroupsFor(nullptr, 2), 1u);   // 3 of 8 slots: load <= 7/16
  EXPECT_EQ(Table::GroupsFor(nullptr, 3), 2u);
}

TEST(RecordArenaTest, AllocFreeReuse) {
  RecordArena a;
  EXPECT_EQ(a.At(0), nullptr);
  uint32_t x = a.Alloc();
  uint32_t y = a.Alloc();
  EXPECT_EQ(a.top(), 2u);
  ASSERT_NE(a.At(y), nullptr);
  a.Free(x);
  EXPECT_EQ(OwnerSource(Ld(a.At(x)->w[2])), kSrcFree);
  EXPECT_EQ(a.Alloc(), x);   // reused before the arena grows
  EXPECT_EQ(a.top(), 2u);
}

TEST(RecordArenaTest, KeysRoundTrip) {
  RecordArena a;
  const BlockKey keys[] = {BlockKey::FromU64(0x1234), BlockKey::FromBytes("0123456789abcdef0123456789abcdef"),
                           BlockKey::FromBytes("abc"), BlockKey::FromBytes("")};
  for (const BlockKey& key : keys) {
    ProbeKey k(key);
    uint32_t id = a.Alloc();
    Rec* r = a.At(id);
    St(r->w[0], static_cast<uint32_t>(k.wire));
    St(r->w[1], static_cast<uint32_t>(k.wire >> 32));
    St(r->w[2], OwnerKey(1, 0, 0) | 1);
    a.WriteSideKey(id, k);
    EXPECT_EQ(a.KeyOf(id), key) << key.ToString();
    EXPECT_TRUE(a.Holds(r, id, k));
    EXPECT_FALSE(a.Holds(r, id, ProbeKey(BlockKey::FromU64(k.wire + 1))));
  }
  // Same wire, other form: never the same key.
  EXPECT_FALSE(a.Holds(a.At(2), 2, ProbeKey(BlockKey::FromU64(BlockKey::FromBytes("abc").wire()))));
}

TEST(OwnerPoolTest, AllocAlignedAndDisjoint) {
  OwnerPool p;
  std::set<uint32_t> offs;
  for (uint32_t cls = 1; cls <= 5; ++cls) {
    uint32_t off = p.Alloc(cls);
    EXPECT_EQ(off % (kOwnerWords << cls), 0u) << cls;
    EXPECT_TRUE(offs.insert(off).second);
    ASSERT_NE(p.At(off), nullptr);
  }
  EXPECT_EQ(p.chunks(), 1u);
}

// Freed buddies merge back into whole chunks: a top-class block fits again
// without a new chunk.
TEST(OwnerPoolTest, FreeMergesBuddies) {
  OwnerPool p;
  std::vector<uint32_t> small;
  for (int i = 0; i < 64; ++i) small.push_back(p.Alloc(1));
  uint32_t mid = p.Alloc(7);
  EXPECT_EQ(p.chunks(), 1u);
  for (uint32_t off : small) p.Free(off, 1);
  p.Free(mid, 7);
  EXPECT_EQ(p.Alloc(kTopPoolClass), 0u);
  EXPECT_EQ(p.chunks(), 1u);
  p.Alloc(1);   // the only chunk is taken: a second one
  EXPECT_EQ(p.chunks(), 2u);
}

// Random allocations and frees of every class, small and page-sized
// (whose free-list links live beside the pool): blocks stay aligned and
// disjoint, and once all are freed every chunk is whole again.
TEST(OwnerPoolTest, RandomAllocFreeKeepsBlocksDisjointAndMergesBack) {
  OwnerPool p;
  std::mt19937 rng(7);
  std::map<uint32_t, uint32_t> live;   // off -> class
  auto words = [](uint32_t cls) { return kOwnerWords << cls; };
  for (int step = 0; step < 20000; ++step) {
    if (live.empty() || rng() % 5 < 3) {
      uint32_t cls = 1 + rng() % 12;
      uint32_t off = p.Alloc(cls);
      ASSERT_EQ(off % words(cls), 0u);
      auto next = live.lower_bound(off);
      if (next != live.end()) {
        ASSERT_LE(off + words(cls), next->first) << step;
      }
      if (next != live.begin()) {
        auto prev = std::prev(next);
        ASSERT_LE(prev->first + words(prev->second), off) << step;
      }
      live[off] = cls;
    } else {
      auto it = std::next(live.begin(), rng() % live.size());
      p.Free(it->first, it->second);
      live.erase(it);
    }
  }
  const uint32_t chunks = p.chunks();
  for (auto [off, cls] : live) p.Free(off, cls);
  for (uint32_t i = 0; i < chunks; ++i) EXPECT_EQ(p.Alloc(kTopPoolClass) % kPoolChunk, 0u);
  EXPECT_EQ(p.chunks(), chunks);
}

// A fresh chunk split down to one small array commits the array's page
// only: the halves the split frees keep their links beside the pool.
TEST(OwnerPoolTest, SmallArrayInAFreshChunkCommitsOnePage) {
  OwnerPool p;
  uint32_t off = p.Alloc(1);
  AWord* a = p.At(off);
  St(a[0], 1);
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t pages = sizeof(AWord) * kPoolChunk / page;
  std::vector<unsigned char> resident(pages);
  ASSERT_EQ(mincore(p.At(0), sizeof(AWord) * kPoolChunk, resident.data()), 0);
  size_t committed = 0;
  for (unsigned char r : resident) committed += r & 1;
  EXPECT_EQ(committed, 1u);
}

TEST(OwnerPoolTest, ClassFor) {
  EXPECT_EQ(OwnerClassFor(1), 1u);
  EXPECT_EQ(OwnerClassFor(2), 1u);
  EXPECT_EQ(OwnerClassFor(3), 2u);
  EXPECT_EQ(OwnerClassFor(4), 2u);
  EXPECT_EQ(OwnerClassFor(5), 3u);
  EXPECT_EQ(OwnerClassFor(16384), kMaxOwnerClass);
}

TEST(SpillMapTest, SetGetErase) {
  SpillMap m;
  EXPECT_EQ(m.Get(1, OwnerKey(2, 0, 0)).ref, OwnerCounts{}.ref);
  m.Set(1, OwnerKey(2, 0, 0), OwnerCounts{20, 300});
  m.Set(1, OwnerKey(3, 0, 0), OwnerCounts{1, 256});
  EXPECT_EQ(m.Get(1, OwnerKey(2, 0, 0)).ref, 20u);
  EXPECT_EQ(m.Get(1, OwnerKey(2, 0, 0)).hits, 300u);
  EXPECT_EQ(m.Get(1, OwnerKey(3, 0, 0)).hits, 256u);
  EXPECT_EQ(m.Get(2, OwnerKey(2, 0, 0)).hits, 0u);   // other record
  m.Erase(1, OwnerKey(2, 0, 0));
  EXPECT_EQ(m.size(), 1u);
  EXPECT_EQ(m.Get(1, OwnerKey(2, 0, 0)).ref, 1u);
}

}  // namespace
}  // namespace kvidx::internal
