// HolderBlock and HitView (index/internal/holder_block.h, hit_view.h), the
// run store's reader-visible parts, against plain models: rows added,
// dropped (the last row moves into the gap), bits set and cleared, blocks
// grown by copy, positions held by one row alone; hit views built from ranges and summed over every
// sub-range.
#include "index/internal/holder_block.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "index/internal/hit_ranges.h"
#include "index/internal/hit_view.h"

namespace kvidx::internal {
namespace {

struct BlockDeleter {
  void operator()(HolderBlock* b) const { HolderBlock::Delete(b); }
};
using BlockPtr = std::unique_ptr<HolderBlock, BlockDeleter>;

// Every row of `b` against `model` (owner -> held positions).
void ExpectMatches(const HolderBlock& b, const std::map<uint32_t, std::set<uint32_t>>& model, uint32_t positions) {
  ASSERT_EQ(b.count(), model.size());
  for (uint32_t row = 0; row < b.count(); ++row) {
    const auto it = model.find(b.owner(row));
    ASSERT_NE(it, model.end());
    ASSERT_EQ(b.Find(b.owner(row)), row);
    ASSERT_EQ(b.held(row), it->second.size());
    const uint32_t end = it->second.empty() ? 0 : *it->second.rbegin() + 1;
    ASSERT_EQ(b.End(row), end);
    for (uint32_t p = 0; p < positions; ++p) ASSERT_EQ(b.Has(row, p), it->second.contains(p)) << p;
    for (uint32_t from = 0; from < positions; from += 7) {
      uint32_t lead = 0;
      while (from + lead < positions && it->second.contains(from + lead)) ++lead;
      ASSERT_EQ(b.LeadingFrom(row, from, positions), lead);
      ASSERT_EQ(b.LeadingFrom(row, from, 3), std::min(lead, 3u));
    }
    uint32_t only = 0;
    for (uint32_t p = 0; p < positions; ++p) {
      bool other = false;
      for (const auto& [owner, held] : model) other |= owner != it->first && held.contains(p);
      ASSERT_EQ(b.HeldByOther(row, p), other) << p;
      only += it->second.contains(p) && !other;
    }
    ASSERT_EQ(b.HeldOnlyBy(row), only);
  }
}

TEST(HolderBlockTest, AgreesWithAModelAsRowsComeAndGoAndTheBlockGrows) {
  constexpr uint32_t kPositions = 200;   // four words
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    SCOPED_TRACE(seed);
    std::mt19937_64 rng(seed);
    BlockPtr b(HolderBlock::New(1, 1));
    std::map<uint32_t, std::set<uint32_t>> model;
    for (int step = 0; step < 400; ++step) {
      const uint32_t owner = static_cast<uint32_t>(rng() % 9);
      const uint32_t pos = static_cast<uint32_t>(rng() % kPositions);
      uint32_t row = b->Find(owner);
      if (rng() % 3 != 0) {   // hold
        const uint32_t words = pos / 64 + 1;
        const bool full = row == HolderBlock::kNoRow && b->count() == b->capacity();
        if (full || words > b->words()) {
          b.reset(HolderBlock::Grown(*b, full ? 2 * b->capacity() : 0, words));
          row = b->Find(owner);
        }
        if (row == HolderBlock::kNoRow) row = b->Add(owner);
        ASSERT_EQ(b->Set(row, pos), model[owner].insert(pos).second);
      } else if (row != HolderBlock::kNoRow) {   // release
        ASSERT_EQ(b->Clear(row, pos), model[owner].erase(pos) == 1);
        if (b->held(row) == 0) {
          b->Drop(row);
          model.erase(owner);
        }
      }
      ExpectMatches(*b, model, kPositions);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

TEST(HolderBlockTest, ARowAddedAfterADropStartsEmpty) {
  BlockPtr b(HolderBlock::New(2, 2));
  const uint32_t a = b->Add(1);
  const uint32_t c = b->Add(2);
  ASSERT_TRUE(b->Set(c, 100));
  ASSERT_TRUE(b->Set(a, 3));
  ASSERT_TRUE(b->Clear(a, 3));
  b->Drop(a);   // owner 2 moves into row 0; row 1's words are cleared
  ASSERT_EQ(b->count(), 1u);
  EXPECT_EQ(b->owner(0), 2u);
  EXPECT_TRUE(b->Has(0, 100));
  const uint32_t d = b->Add(3);
  EXPECT_EQ(b->End(d), 0u);
  EXPECT_FALSE(b->Has(d, 100));
  EXPECT_EQ(b->word(d, 5), 0u);   // past the row's words
}

TEST(HitViewTest, SumsEachOwnersRangesLikeTheRangesThemselves) {
  std::mt19937_64 rng(3);
  std::vector<HitRanges> ranges(4);
  for (int i = 0; i < 60; ++i) {
    HitRanges& r = ranges[rng() % ranges.size()];
    const uint32_t b = static_cast<uint32_t>(rng() % 90);
    r.AddOne(b, b + 1 + static_cast<uint32_t>(rng() % 30));
  }
  ranges[2] = HitRanges();   // an owner without hits is not listed
  std::vector<std::pair<uint32_t, const HitRanges*>> owners;
  for (uint32_t o = 0; o < ranges.size(); ++o) {
    if (!ranges[o].empty()) owners.emplace_back(100 + o, &ranges[o]);
  }
  const HitView* view = HitView::Build(owners);
  ASSERT_NE(view, nullptr);
  for (uint32_t o = 0; o < ranges.size(); ++o) {
    for (uint32_t b = 0; b < 120; b += 3) {
      for (uint32_t e = b; e <= 120; e += 11) {
        const HitRanges::Sum want = ranges[o].Over(b, e), got = view->Over(100 + o, b, e);
        ASSERT_EQ(got.hits, want.hits);
        ASSERT_EQ(got.hit_blocks, want.hit_blocks);
      }
    }
  }
  EXPECT_EQ(view->Over(7, 0, 120).hits, 0u);   // not an owner of the run
  HitView::Delete(const_cast<HitView*>(view));
  EXPECT_EQ(HitView::Build({}), nullptr);
}

// Readers see counts saturated per position, as FindPrefix reports them.
TEST(HitViewTest, SaturatesEachPositionsCount) {
  HitRanges ranges;
  ranges.Add(0, 4, 300);
  ranges.Add(4, 6, 7);
  const std::pair<uint32_t, const HitRanges*> owners[] = {{1, &ranges}};
  const HitView* view = HitView::Build(owners);
  EXPECT_EQ(view->Over(1, 0, 6).hits, 4u * kMaxViewedHits + 2u * 7u);
  EXPECT_EQ(view->Over(1, 0, 6).hit_blocks, 6u);
  EXPECT_EQ(ranges.Over(0, 6).hits, 4u * 300u + 2u * 7u);   // the writer's stay exact
  HitView::Delete(const_cast<HitView*>(view));
}

}  // namespace
}  // namespace kvidx::internal
