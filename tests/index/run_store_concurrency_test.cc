// The run store's lock-free readers (index/internal/run_store.h) while its
// writer churns the same runs: owners join and leave anchor runs (their
// holder blocks grow and are replaced), extensions push runs past bit
// words and pages and are removed again (pages and runs are freed and
// reused), hits are added (hit views are replaced), and the table grows.
// What must hold at every moment: an owner that never stops holding a
// chain matches all of it, its hits never go down between a reader's
// queries, keys never stored match nothing, and every answer is in range.
// Run under TSan in CI, which checks the protocol's memory accesses.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <thread>
#include <vector>

#include "common/sanitizers.h"
#include "index/epoch.h"
#include "index/internal/probe_key.h"
#include "index/internal/run_store.h"

namespace kvidx::internal {
namespace {

constexpr int kScale = kUnderSanitizer ? 1 : 6;

constexpr uint32_t kAnchorOwner = 1;
constexpr uint32_t kTailOwners = 8;   // owners 2 .. 9 extend anchors
constexpr size_t kAnchors = 4, kAnchorLength = 100;   // past a bit word and several pages
constexpr size_t kTailLength = 60, kTailVersions = 4;

std::vector<uint64_t> Chain(uint64_t seed, size_t n) {
  std::vector<uint64_t> c;
  for (uint64_t prev = seed; c.size() < n;) c.push_back(prev = MixKey(prev + 1));
  return c;
}

// Anchor `a` followed by owner `o`'s tail version `v`: each owner's tails
// are its own keys, so a position past the anchor is only ever held by the
// owner whose tail sits there.
std::vector<uint64_t> Extended(const std::vector<uint64_t>& anchor, size_t a, uint32_t o, size_t v) {
  std::vector<uint64_t> ext = anchor;
  const std::vector<uint64_t> tail = Chain(((a * 64 + o) * 8 + v) << 20, kTailLength);
  ext.insert(ext.end(), tail.begin(), tail.end());
  return ext;
}

TEST(RunStoreConcurrencyTest, ReadersSeeConsistentSegmentsWhileTheWriterChurns) {
  EpochDomain epoch;
  RunStore store(epoch);
  std::vector<std::vector<uint64_t>> anchors;
  for (size_t a = 0; a < kAnchors; ++a) {
    anchors.push_back(Chain(1000 * (a + 1), kAnchorLength));
    store.Store(kAnchorOwner, anchors.back(), nullptr, 1000);
  }
  const std::vector<uint64_t> never = Chain(999'999, 40);

  std::atomic<bool> done{false};
  std::atomic<uint64_t> reads{0};
  auto read = [&](int seed) {
    std::mt19937_64 rng(seed);
    std::vector<RunStore::OwnerPrefix> got;
    std::vector<uint64_t> last_hits(kAnchors, 0);
    auto query = [&](std::span<const uint64_t> q) {
      EpochDomain::ReadGuard guard(epoch);
      store.LongestPrefixes(q, &got);
    };
    while (!done.load(std::memory_order_relaxed)) {
      const size_t a = rng() % kAnchors;
      const uint32_t o = 2 + static_cast<uint32_t>(rng() % kTailOwners);
      std::vector<uint64_t> q = Extended(anchors[a], a, o, rng() % kTailVersions);
      q.resize(1 + rng() % q.size());
      query(q);
      auto anchor = std::find_if(got.begin(), got.end(), [](const auto& p) { return p.owner == kAnchorOwner; });
      ASSERT_NE(anchor, got.end());
      ASSERT_EQ(anchor->blocks, std::min(q.size(), kAnchorLength));
      ASSERT_LE(anchor->hit_blocks, anchor->blocks);
      for (const RunStore::OwnerPrefix& p : got) {
        ASSERT_GE(p.blocks, 1u);
        ASSERT_LE(p.blocks, q.size());
        ASSERT_LE(p.owner, 1 + kTailOwners);
        if (p.blocks > kAnchorLength) {
          ASSERT_EQ(p.owner, o);   // another's tail is other keys
        }
      }
      if (q.size() >= kAnchorLength) {
        ASSERT_GE(anchor->hits, last_hits[a]);   // later reads, later moments
        last_hits[a] = anchor->hits;
      }
      query(never);
      ASSERT_TRUE(got.empty());
      reads.fetch_add(1, std::memory_order_relaxed);
    }
  };
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) readers.emplace_back(read, 7 + r);

  struct Held {
    uint32_t owner;
    std::vector<uint64_t> keys;
  };
  std::mt19937_64 rng(42);
  std::vector<Held> churn;   // what owners other than the anchor's hold
  for (int step = 0; step < 3000 * kScale; ++step) {
    const uint32_t owner = 2 + static_cast<uint32_t>(rng() % kTailOwners);
    const size_t a = rng() % kAnchors;
    const uint32_t top = 2000 + static_cast<uint32_t>(step) * 200;
    switch (rng() % 5) {
      case 0:   // an owner joins an anchor and extends it with a tail
        churn.push_back({owner, Extended(anchors[a], a, owner, rng() % kTailVersions)});
        store.Store(owner, churn.back().keys, nullptr, top);
        break;
      case 1:   // a chain of its own: other runs, table growth, page reuse
        churn.push_back({owner, Chain(rng(), 1 + rng() % 150)});
        store.Store(owner, churn.back().keys, nullptr, top);
        break;
      case 2:
      case 3:   // an owner leaves what it stored (the anchor's owner stays)
        if (!churn.empty()) {
          const size_t c = rng() % churn.size();
          EXPECT_EQ(store.Remove(churn[c].owner, churn[c].keys), churn[c].keys.size());
          churn[c] = std::move(churn.back());
          churn.pop_back();
        }
        break;
      default:   // engine-confirmed hits on an anchor
        store.AddHits(kAnchorOwner, anchors[a], top);
        break;
    }
  }
  done = true;
  for (std::thread& t : readers) t.join();
  EXPECT_GT(reads.load(), 0u);
  for (const Held& h : churn) store.Remove(h.owner, h.keys);
  EXPECT_EQ(store.blocks(), kAnchors * kAnchorLength);
}

// The race the run's sequence lock exists for, made to happen: a reader
// has compared the query with a run's entries when the writer removes one
// owner's tail from the run and appends another owner's tail in its place;
// the reader then reads the holders. The classifier, which runs between
// the two, holds the reader until the writer is done. The segment must be
// read again, so the new tail's owner is not credited with the old one.
TEST(RunStoreConcurrencyTest, AWriteDuringASegmentReadIsNotMixedIntoIt) {
  EpochDomain epoch;
  RunStore store(epoch);
  const std::vector<uint64_t> anchor = Chain(5000, kAnchorLength);
  const std::vector<uint64_t> ext_a = Extended(anchor, 0, 2, 0), ext_b = Extended(anchor, 0, 3, 0);
  store.Store(kAnchorOwner, anchor, nullptr, 1000);
  // Both owners have held the run once, so its holder block is already
  // large enough: the writer changes it in place under the reader.
  store.Store(2, ext_a, nullptr, 1100);
  store.Remove(2, ext_a);
  store.Store(3, ext_b, nullptr, 1200);
  store.Remove(3, ext_b);
  store.Store(2, ext_a, nullptr, 1300);

  std::atomic<int> stage{0};   // 1: the reader is inside its segment; 2: the writer is done
  std::vector<RunStore::SourcePrefix> got;
  std::thread reader([&] {
    auto classify = [&](uint32_t owner) {
      int expected = 0;
      if (stage.compare_exchange_strong(expected, 1)) {
        while (stage.load() != 2) std::this_thread::yield();
      }
      return std::optional(RunStore::OwnerClass{owner, true});
    };
    EpochDomain::ReadGuard guard(epoch);
    store.SourcePrefixes(ext_a, classify, &got);
  });
  while (stage.load() != 1) std::this_thread::yield();
  store.Remove(2, ext_a);
  store.Store(3, ext_b, nullptr, 1400);
  stage = 2;
  reader.join();

  std::sort(got.begin(), got.end(), [](const auto& x, const auto& y) { return x.source < y.source; });
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].source, kAnchorOwner);
  EXPECT_EQ(got[0].any_blocks, kAnchorLength);
  EXPECT_EQ(got[1].source, 3u);
  EXPECT_EQ(got[1].any_blocks, kAnchorLength);   // its own tail is other keys
}

}  // namespace
}  // namespace kvidx::internal
