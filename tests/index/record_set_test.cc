#include "index/record_set.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <vector>

namespace kvidx::internal {
namespace {

std::vector<uint32_t> Members(const RecordSet& s) {
  std::vector<uint32_t> v;
  s.AppendTo(&v);
  return v;
}

TEST(RecordSetTest, InsertEraseContains) {
  RecordSet s;
  EXPECT_TRUE(s.empty());
  EXPECT_TRUE(s.Insert(5));
  EXPECT_FALSE(s.Insert(5));
  EXPECT_TRUE(s.Insert(4096 * 3 + 7));
  EXPECT_TRUE(s.Insert(0));
  EXPECT_EQ(s.size(), 3u);
  EXPECT_TRUE(s.Contains(5));
  EXPECT_FALSE(s.Contains(6));
  EXPECT_FALSE(s.Contains(1u << 30));   // beyond any chunk
  EXPECT_EQ(Members(s), (std::vector<uint32_t>{0, 5, 4096 * 3 + 7}));
  EXPECT_TRUE(s.Erase(5));
  EXPECT_FALSE(s.Erase(5));
  EXPECT_FALSE(s.Erase(1u << 30));
  EXPECT_EQ(s.size(), 2u);
  s.Clear();
  EXPECT_TRUE(s.empty());
  EXPECT_EQ(s.MemoryBytes(), 0u);
}

// A chunk turns from an array into a bitmap past 64 members, and stays
// exact both ways; an emptied chunk is freed.
TEST(RecordSetTest, ArrayToBitmapAndBack) {
  RecordSet s;
  for (uint32_t i = 0; i < 4096; i += 2) ASSERT_TRUE(s.Insert(i));
  EXPECT_EQ(s.size(), 2048u);
  EXPECT_LE(s.MemoryBytes(), 600u);   // one 512-byte bitmap
  std::vector<uint32_t> m = Members(s);
  ASSERT_EQ(m.size(), 2048u);
  for (uint32_t i = 0; i < m.size(); ++i) EXPECT_EQ(m[i], 2 * i);
  for (uint32_t i = 0; i < 4096; i += 2) ASSERT_TRUE(s.Erase(i));
  EXPECT_TRUE(s.empty());
  EXPECT_TRUE(Members(s).empty());
  EXPECT_LE(s.MemoryBytes(), 8u);   // the chunk directory only
}

// Sparse members cost about 2 bytes each.
TEST(RecordSetTest, SparseMembersAreSmall) {
  RecordSet s;
  for (uint32_t c = 0; c < 100; ++c) {
    for (uint32_t i = 0; i < 200; ++i) ASSERT_TRUE(s.Insert(c * 4096 + i * 17));
  }
  EXPECT_LT(static_cast<double>(s.MemoryBytes()) / 20000.0, 3.0);
}

// A bulk load builds the same set as one insert at a time, in both chunk
// forms, and into a set that already has members.
TEST(RecordSetTest, InsertSortedMatchesInserts) {
  std::vector<uint32_t> ids;
  for (uint32_t i = 0; i < 3000; ++i) ids.push_back(i);            // chunk 0: bitmap
  for (uint32_t i = 0; i < 50; ++i) ids.push_back(4096 + 7 * i);    // chunk 1: array
  ids.push_back(4096 * 9 + 1);                                       // a lone far member
  RecordSet bulk, one;
  bulk.InsertSorted(ids);
  for (uint32_t id : ids) one.Insert(id);
  EXPECT_EQ(bulk.size(), ids.size());
  EXPECT_EQ(Members(bulk), ids);
  EXPECT_EQ(Members(bulk), Members(one));
  EXPECT_TRUE(bulk.Erase(4096 + 7));
  EXPECT_TRUE(bulk.Insert(4096 + 8));   // an exactly sized array still grows
  EXPECT_TRUE(bulk.Contains(4096 + 8));
  bulk.InsertSorted({1, 5, 4096 * 20});   // non-empty: falls back to inserts
  EXPECT_TRUE(bulk.Contains(4096 * 20));
  EXPECT_EQ(bulk.size(), ids.size() + 1);
}

TEST(RecordSetTest, RandomizedAgainstStdSet) {
  std::mt19937 rng(7);
  RecordSet s;
  std::set<uint32_t> ref;
  for (int step = 0; step < 200000; ++step) {
    // Mostly a few dense chunks, some far-away ids.
    uint32_t id = rng() % 4 == 0 ? rng() % (1u << 20) : rng() % 12000;
    if (rng() % 3 == 0) {
      EXPECT_EQ(s.Erase(id), ref.erase(id) == 1);
    } else {
      EXPECT_EQ(s.Insert(id), ref.insert(id).second);
    }
    if (step % 20000 == 0) {
      ASSERT_EQ(Members(s), std::vector<uint32_t>(ref.begin(), ref.end()));
    }
  }
  EXPECT_EQ(s.size(), ref.size());
  ASSERT_EQ(Members(s), std::vector<uint32_t>(ref.begin(), ref.end()));
  for (uint32_t id = 0; id < 12000; ++id) ASSERT_EQ(s.Contains(id), ref.count(id) == 1);
}

}  // namespace
}  // namespace kvidx::internal
