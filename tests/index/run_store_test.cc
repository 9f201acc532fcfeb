// The run store (index/internal/run_store.h) against a plain model: per
// owner, each key's copies, hits and recency stamp; an owner's match on a
// query is the number of leading keys it holds, with the hits on them. Random chains share prefixes of every
// length, so runs cross pages (16 entries) and bit words (64); stores come
// as an engine sends them (each piece an owner lacks, parented on the block
// before) and as pieces without their parent in any order, removals in
// random batches with keys never stored among them, owners cleared whole,
// and the store now and then dumped and restored into a new one (in dump
// order, which must rebuild the same runs, or shuffled without parents).
// After every step every query and holding must agree; removing
// everything leaves nothing.
#include "index/internal/run_store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <vector>

#include "index/epoch.h"
#include "index/internal/probe_key.h"
#include "index/internal/words.h"

namespace kvidx::internal {
namespace {

// Owner identities as the index forms them: sources, a lower tier, a group.
const uint32_t kOwners[] = {OwnerKey(0, 0, 0), OwnerKey(1, 0, 0), OwnerKey(7, 0, 0), OwnerKey(7, 1, 0),
                            OwnerKey(300, 0, 2)};
constexpr size_t kNumOwners = std::size(kOwners);

std::vector<std::vector<uint64_t>> RandomChains(std::mt19937_64& rng, size_t n) {
  std::vector<std::vector<uint64_t>> chains;
  for (size_t i = 0; i < n; ++i) {
    std::vector<uint64_t> c;
    if (!chains.empty() && rng() % 4 != 0) {   // share a prefix of an earlier chain
      const std::vector<uint64_t>& base = chains[rng() % chains.size()];
      c.assign(base.begin(), base.begin() + static_cast<long>(rng() % (base.size() + 1)));
    }
    for (size_t more = 1 + rng() % 150; more > 0; --more) {
      c.push_back(MixKey((c.empty() ? 0x5eed : c.back()) ^ rng()));   // chained: names its prefix
    }
    chains.push_back(std::move(c));
  }
  return chains;
}

class Differential {
 public:
  // Stores chain[begin, end) for owner o: each maximal piece it lacks,
  // parented on the block before it (`orphans`: sometimes without a parent,
  // pieces in random order).
  void Store(size_t o, std::span<const uint64_t> chain, size_t begin, size_t end, bool orphans,
             std::mt19937_64& rng) {
    std::vector<std::pair<size_t, size_t>> pieces;
    for (size_t j = begin; j < end;) {
      size_t e = j;
      while (e < end && !held_[o].contains(chain[e])) held_[o][chain[e++]] = 1;
      if (e > j) pieces.emplace_back(j, e);
      j = std::max(e, j + 1);
    }
    if (orphans) std::shuffle(pieces.begin(), pieces.end(), rng);
    for (auto [b, e] : pieces) {
      const bool parented = b > 0 && (!orphans || rng() % 2 == 0);
      const auto piece = chain.subspan(b, e - b);
      store_->Store(kOwners[o], piece, parented ? &chain[b - 1] : nullptr, Stamp(o, piece, /*only_held=*/false));
    }
  }

  // Stores `keys` as one event, whatever they are (repeats, keys seen
  // under other parents), counted as `rule` says; each key's note must
  // say what it did.
  void StoreRaw(size_t o, std::span<const uint64_t> keys, const uint64_t* parent, StoreRule rule = {}) {
    const uint32_t top = clock_ += static_cast<uint32_t>(keys.size()) + 1;
    std::vector<KeyNote> expected(keys.size()), notes(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      const uint64_t k = keys[i];
      auto h = held_[o].find(k);
      if (h == held_[o].end()) {
        held_[o][k] = 1;
        if (rule.new_hit) ++hits_[o][k];
        expected[i] = KeyNote{KeyNote::kNew, 0};
      } else {
        expected[i] = KeyNote{rule.held_hit ? KeyNote::kHit : KeyNote::kCopy, stamps_[o][k]};
        rule.held_hit ? ++hits_[o][k] : ++h->second;
      }
      stamps_[o][k] = top - static_cast<uint32_t>(i);
    }
    store_->Store(kOwners[o], keys, parent, top, rule, notes.data());
    ExpectNotes(notes, expected);
  }

  // Moves owner o's stamps down by `base`, as a clock rebase does.
  void Rebase(size_t o, uint32_t base) {
    std::vector<uint32_t> expected, got;
    for (auto& [k, stamp] : stamps_[o]) {
      stamp = stamp > base ? stamp - base : 0;
      expected.push_back(stamp);
    }
    store_->Rebase(kOwners[o], base, &got);
    std::sort(expected.begin(), expected.end());
    std::sort(got.begin(), got.end());
    EXPECT_EQ(got, expected);
  }

  // One hit on each of `keys` the owner holds.
  void AddHits(size_t o, std::span<const uint64_t> keys) {
    size_t expected = 0;
    for (uint64_t k : keys) {
      if (!held_[o].contains(k)) continue;
      ++expected;
      ++hits_[o][k];
    }
    const uint32_t top = Stamp(o, keys, /*only_held=*/true);
    EXPECT_EQ(store_->AddHits(kOwners[o], keys, top), expected);
  }

  // Removes one copy of about a third of the owner's keys.
  void RemoveSome(size_t o, std::mt19937_64& rng) {
    std::vector<uint64_t> gone;
    for (const auto& [k, copies] : held_[o]) {
      if (rng() % 3 == 0) gone.push_back(k);
    }
    std::shuffle(gone.begin(), gone.end(), rng);
    const size_t expected = gone.size();
    std::vector<KeyNote> expected_notes, notes(gone.size() + 1);
    for (uint64_t k : gone) expected_notes.push_back(Drop(o, k));
    gone.push_back(rng());   // never stored
    expected_notes.push_back(KeyNote{});
    EXPECT_EQ(store_->Remove(kOwners[o], gone, notes.data()), expected);
    ExpectNotes(notes, expected_notes);
  }

  // Drops everything owner o holds.
  void Clear(size_t o) {
    std::vector<uint32_t> expected_stamps, stamps;
    for (const auto& [k, stamp] : stamps_[o]) expected_stamps.push_back(stamp);
    const size_t expected = held_[o].size();
    held_[o].clear();
    hits_[o].clear();
    stamps_[o].clear();
    EXPECT_EQ(store_->Clear(kOwners[o], &stamps), expected);
    std::sort(stamps.begin(), stamps.end());
    std::sort(expected_stamps.begin(), expected_stamps.end());
    EXPECT_EQ(stamps, expected_stamps);
  }

  // Dumps the store and restores the dump into a new one, which replaces
  // it. In dump order the new store's dump must be the old one's, except
  // that a key whose parent is not held by anyone (a run's unheld
  // structure) now starts a run; shuffled without parents, every key is a
  // run of its own, and only the answers must stay the same.
  void Reload(bool in_order, std::mt19937_64& rng) {
    std::vector<RunStore::Holding> rows;
    store_->ForEachHolding([&](const RunStore::Holding& h) { rows.push_back(h); });
    std::set<uint64_t> dumped;
    for (const RunStore::Holding& h : rows) dumped.insert(h.key);
    std::vector<RunStore::Holding> expected = rows;
    for (RunStore::Holding& h : expected) {
      if (h.parent && !dumped.contains(*h.parent)) h.parent.reset();
    }
    if (!in_order) {
      std::shuffle(rows.begin(), rows.end(), rng);
      for (RunStore::Holding& h : rows) h.parent.reset();
    }
    auto fresh = std::make_unique<RunStore>(epoch_);
    // Shuffled rows are restored packed half the time (as BlockIndex
    // restores a snapshot sorted by key), one at a time as BlockIndex does.
    const bool pack = !in_order && rng() % 2 == 0;
    size_t applied = 0;
    if (pack) {
      for (const RunStore::Holding& h : rows) applied += fresh->Restore(std::span(&h, 1), /*pack=*/true);
    } else {
      applied = fresh->Restore(rows);
    }
    EXPECT_EQ(applied, rows.size());
    EXPECT_EQ(fresh->blocks(), dumped.size());
    store_ = std::move(fresh);
    if (!in_order) return;
    std::vector<RunStore::Holding> got;
    store_->ForEachHolding([&](const RunStore::Holding& h) { got.push_back(h); });
    // A key's owners may come in another order (rows join a run as the
    // restore meets them).
    auto by_owner = [](std::vector<RunStore::Holding>& v) {
      for (size_t j = 0; j < v.size();) {
        size_t e = j;
        while (e < v.size() && v[e].key == v[j].key) ++e;
        std::sort(v.begin() + j, v.begin() + e, [](auto& x, auto& y) { return x.owner < y.owner; });
        j = e;
      }
    };
    by_owner(got);
    by_owner(expected);
    ASSERT_EQ(got.size(), expected.size());
    for (size_t j = 0; j < got.size(); ++j) {
      EXPECT_EQ(got[j].key, expected[j].key) << j;
      EXPECT_EQ(got[j].owner, expected[j].owner) << j;
      EXPECT_EQ(got[j].parent, expected[j].parent) << j;
    }
  }

  // Removes every copy (a key listed once per copy): nothing may be left.
  void RemoveAll() {
    for (size_t o = 0; o < kNumOwners; ++o) {
      std::vector<uint64_t> all;
      for (const auto& [k, copies] : held_[o]) all.insert(all.end(), copies, k);
      held_[o].clear();
      hits_[o].clear();
      stamps_[o].clear();
      EXPECT_EQ(store_->Remove(kOwners[o], all), all.size());
    }
    EXPECT_EQ(store_->blocks(), 0u);
  }

  void ExpectQuery(std::span<const uint64_t> keys) {
    std::vector<RunStore::OwnerPrefix> expected;
    for (size_t o = 0; o < kNumOwners; ++o) {
      RunStore::OwnerPrefix e{kOwners[o], 0};
      for (; e.blocks < keys.size() && held_[o].contains(keys[e.blocks]); ++e.blocks) {
        auto h = hits_[o].find(keys[e.blocks]);
        if (h == hits_[o].end()) continue;
        e.hits += std::min<uint64_t>(h->second, kMaxViewedHits);
        ++e.hit_blocks;
      }
      if (e.blocks > 0) expected.push_back(e);
    }
    store_->LongestPrefixes(keys, &got_);
    auto by_owner = [](const RunStore::OwnerPrefix& a, const RunStore::OwnerPrefix& b) { return a.owner < b.owner; };
    std::sort(expected.begin(), expected.end(), by_owner);
    std::sort(got_.begin(), got_.end(), by_owner);
    ASSERT_EQ(got_.size(), expected.size());
    for (size_t j = 0; j < got_.size(); ++j) {
      EXPECT_EQ(got_[j].owner, expected[j].owner);
      EXPECT_EQ(got_[j].blocks, expected[j].blocks) << "owner " << got_[j].owner;
      EXPECT_EQ(got_[j].hits, expected[j].hits) << "owner " << got_[j].owner;
      EXPECT_EQ(got_[j].hit_blocks, expected[j].hit_blocks) << "owner " << got_[j].owner;
    }
  }

  // SourcePrefixes for a query of `group` admitting `tier_mask`, against
  // the model: per source, the leading keys some admitted owner holds, the
  // leading keys its GPU owner holds, and that owner's hits on those.
  void ExpectSourceQuery(std::span<const uint64_t> keys, uint32_t group, uint64_t tier_mask) {
    auto admitted = [&](uint32_t owner) {
      return OwnerGroup(owner) == group && ((tier_mask >> OwnerTier(owner)) & 1) != 0;
    };
    std::map<uint32_t, RunStore::SourcePrefix> expected;
    for (uint32_t source : {0u, 1u, 7u, 300u}) {
      RunStore::SourcePrefix e{source};
      auto holds = [&](size_t o, uint64_t k) {
        return OwnerSource(kOwners[o]) == source && admitted(kOwners[o]) && held_[o].contains(k);
      };
      for (; e.any_blocks < keys.size(); ++e.any_blocks) {
        bool any = false;
        for (size_t o = 0; o < kNumOwners; ++o) any = any || holds(o, keys[e.any_blocks]);
        if (!any) break;
      }
      for (size_t o = 0; o < kNumOwners; ++o) {
        if (OwnerTier(kOwners[o]) != 0 || OwnerSource(kOwners[o]) != source || !admitted(kOwners[o])) continue;
        for (; e.gpu_blocks < keys.size() && holds(o, keys[e.gpu_blocks]); ++e.gpu_blocks) {
          auto h = hits_[o].find(keys[e.gpu_blocks]);
          if (h == hits_[o].end()) continue;
          e.hits += std::min<uint64_t>(h->second, kMaxViewedHits);
          ++e.hit_blocks;
        }
      }
      if (e.any_blocks > 0) expected[source] = e;
    }
    auto classify = [&](uint32_t owner) -> std::optional<RunStore::OwnerClass> {
      if (!admitted(owner)) return std::nullopt;
      return RunStore::OwnerClass{OwnerSource(owner), OwnerTier(owner) == 0};
    };
    store_->SourcePrefixes(keys, classify, &sources_);
    ASSERT_EQ(sources_.size(), expected.size());
    for (const RunStore::SourcePrefix& got : sources_) {
      ASSERT_TRUE(expected.contains(got.source)) << "source " << got.source;
      const RunStore::SourcePrefix& e = expected[got.source];
      EXPECT_EQ(got.any_blocks, e.any_blocks) << "source " << got.source;
      EXPECT_EQ(got.gpu_blocks, e.gpu_blocks) << "source " << got.source;
      EXPECT_EQ(got.hits, e.hits) << "source " << got.source;
      EXPECT_EQ(got.hit_blocks, e.hit_blocks) << "source " << got.source;
    }
  }

  // Every holding the store lists, against the model's.
  void ExpectAllHoldings() const {
    std::map<std::pair<uint64_t, uint32_t>, RunStore::Holding> expected, got;
    for (size_t o = 0; o < kNumOwners; ++o) {
      for (const auto& [k, copies] : held_[o]) {
        auto h = hits_[o].find(k);
        expected[{k, kOwners[o]}] = {k, kOwners[o], copies, h == hits_[o].end() ? 0 : h->second, stamps_[o].at(k), std::nullopt};
      }
    }
    store_->ForEachHolding([&](const RunStore::Holding& row) {
      EXPECT_TRUE(got.emplace(std::pair{row.key, row.owner}, row).second) << "listed twice: " << row.key;
    });
    ASSERT_EQ(got.size(), expected.size());
    for (const auto& [at, e] : expected) {
      auto g = got.find(at);
      ASSERT_NE(g, got.end()) << "missing key " << at.first;
      EXPECT_EQ(g->second.copies, e.copies);
      EXPECT_EQ(g->second.hits, e.hits);
      EXPECT_EQ(g->second.stamp, e.stamp);
    }
  }

  // Each owner's coldest keys, against the model's stamps.
  void ExpectColdest(size_t n) {
    for (size_t o = 0; o < kNumOwners; ++o) {
      std::vector<std::pair<uint32_t, uint64_t>> aged;
      for (const auto& [k, stamp] : stamps_[o]) aged.emplace_back(stamp, k);
      std::sort(aged.begin(), aged.end());
      std::vector<uint64_t> expected;
      for (size_t j = 0; j < std::min(n, aged.size()); ++j) expected.push_back(aged[j].second);
      std::vector<uint64_t> got;
      store_->Coldest(kOwners[o], n, &got);
      EXPECT_EQ(got, expected) << "owner " << kOwners[o];
    }
  }

  void ExpectHoldings(std::span<const uint64_t> some_keys) const {
    size_t all = 0;
    for (const auto& h : held_) all += h.size();
    EXPECT_EQ(store_->HeldByAll(), all);
    std::set<uint64_t> distinct;
    for (const auto& h : held_) {
      for (const auto& [k, copies] : h) distinct.insert(k);
    }
    EXPECT_EQ(store_->HeldKeys(), distinct.size());
    for (size_t o = 0; o < kNumOwners; ++o) {
      EXPECT_EQ(store_->HeldBy(kOwners[o]), held_[o].size());
      for (uint64_t k : some_keys) {
        auto it = held_[o].find(k);
        EXPECT_EQ(store_->Copies(kOwners[o], k), it == held_[o].end() ? 0u : it->second);
        auto stamp = stamps_[o].find(k);
        EXPECT_EQ(store_->Stamp(kOwners[o], k),
                  stamp == stamps_[o].end() ? std::nullopt : std::optional<uint32_t>(stamp->second));
      }
    }
    std::vector<RunStore::Holding> rows;
    for (uint64_t k : some_keys) {
      store_->HoldingsOf(k, &rows);
      size_t holders = 0;
      for (size_t o = 0; o < kNumOwners; ++o) {
        auto it = held_[o].find(k);
        if (it == held_[o].end()) continue;
        ++holders;
        auto row = std::find_if(rows.begin(), rows.end(), [&](auto& r) { return r.owner == kOwners[o]; });
        ASSERT_NE(row, rows.end()) << "key " << k << " owner " << kOwners[o];
        EXPECT_EQ(row->copies, it->second);
        auto h = hits_[o].find(k);
        EXPECT_EQ(row->hits, h == hits_[o].end() ? 0u : h->second);
        EXPECT_EQ(row->stamp, std::optional<uint32_t>(stamps_[o].at(k)));
      }
      EXPECT_EQ(rows.size(), holders) << "key " << k;
    }
  }

 private:
  // One copy of `k` leaves owner o; with its last, its hits and stamp go
  // too. What the store must note.
  KeyNote Drop(size_t o, uint64_t k) {
    const uint32_t stamp = stamps_[o][k];
    if (--held_[o][k] > 0) return KeyNote{KeyNote::kRemovedCopy, stamp};
    held_[o].erase(k);
    hits_[o].erase(k);
    stamps_[o].erase(k);
    return KeyNote{KeyNote::kRemovedLast, stamp};
  }

  static void ExpectNotes(std::span<const KeyNote> got, std::span<const KeyNote> expected) {
    ASSERT_EQ(got.size(), expected.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].kind, expected[i].kind) << "key " << i;
      EXPECT_EQ(got[i].stamp, expected[i].stamp) << "key " << i;
    }
  }

  // An event's stamps: keys[i] (held ones only for a hit) gets top - i,
  // from a clock that moves past every event.
  uint32_t Stamp(size_t o, std::span<const uint64_t> keys, bool only_held) {
    const uint32_t top = clock_ += static_cast<uint32_t>(keys.size()) + 1;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (!only_held || held_[o].contains(keys[i])) stamps_[o][keys[i]] = top - static_cast<uint32_t>(i);
    }
    return top;
  }

  EpochDomain epoch_;
  std::unique_ptr<RunStore> store_ = std::make_unique<RunStore>(epoch_);
  std::map<uint64_t, uint32_t> held_[kNumOwners];   // copies
  std::map<uint64_t, uint64_t> hits_[kNumOwners];
  std::map<uint64_t, uint32_t> stamps_[kNumOwners];
  uint32_t clock_ = 1;
  std::vector<RunStore::OwnerPrefix> got_;
  std::vector<RunStore::SourcePrefix> sources_;
};

void RunRandomSteps(bool orphans) {
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    SCOPED_TRACE(seed);
    std::mt19937_64 rng(seed);
    const auto chains = RandomChains(rng, 40);
    Differential d;
    for (int step = 0; step < 250; ++step) {
      const size_t o = rng() % kNumOwners;
      const std::vector<uint64_t>& chain = chains[rng() % chains.size()];
      const size_t begin = orphans ? rng() % chain.size() : 0;
      const size_t end = begin + 1 + rng() % (chain.size() - begin);
      if (rng() % 4 == 0) {
        d.RemoveSome(o, rng);
      } else if (rng() % 30 == 0) {
        d.Clear(o);
      } else if (rng() % 3 == 0) {   // a request that hit a prefix of the chain
        d.AddHits(o, std::span<const uint64_t>(chain).first(end));
      } else if (rng() % 40 == 0) {
        d.Rebase(o, static_cast<uint32_t>(rng() % 3000));
      } else if (rng() % 8 == 0) {   // a second physical copy of a whole piece, or a re-announcement
        const StoreRule rule{rng() % 2 == 0, rng() % 3 == 0};
        d.StoreRaw(o, std::span<const uint64_t>(chain).subspan(begin, end - begin), begin > 0 ? &chain[begin - 1] : nullptr,
                   rule);
      } else {
        d.Store(o, chain, begin, end, orphans, rng);
      }
      for (int q = 0; q < 6; ++q) {
        std::vector<uint64_t> query = chains[rng() % chains.size()];
        if (rng() % 2 == 0) query.resize(rng() % (query.size() + 1));
        if (rng() % 4 == 0) query.push_back(rng());
        d.ExpectQuery(query);
        d.ExpectSourceQuery(query, 0, ~uint64_t{0});   // every tier
        d.ExpectSourceQuery(query, 0, 1);              // GPU only
        d.ExpectSourceQuery(query, 2, ~uint64_t{0});   // another group
        if (::testing::Test::HasFailure()) return;
      }
      d.ExpectHoldings(chain);
      if (step % 60 == 30) d.Reload(/*in_order=*/step % 120 == 30, rng);
      if (step % 25 == 0) {
        d.ExpectAllHoldings();
        d.ExpectColdest(step % 50 == 0 ? 7 : 100000);
      }
    }
    d.ExpectAllHoldings();
    d.RemoveAll();
  }
}

TEST(RunStoreTest, AgreesWithModelUnderChainedStoresAndRemovals) { RunRandomSteps(/*orphans=*/false); }

TEST(RunStoreTest, AgreesWithModelUnderParentlessAndOutOfOrderStores) { RunRandomSteps(/*orphans=*/true); }

// Keys that are not chained hashes (a buggy or hostile engine): drawn from
// 40 values, repeated within an event, seen after other parents. Answers
// stay exact and nothing breaks.
TEST(RunStoreTest, AgreesWithModelOnKeysThatAreNotChains) {
  std::mt19937_64 rng(7);
  Differential d;
  auto random_keys = [&](size_t n) {
    std::vector<uint64_t> k(n);
    for (uint64_t& x : k) x = 1 + rng() % 40;
    return k;
  };
  for (int step = 0; step < 2000; ++step) {
    const size_t o = rng() % kNumOwners;
    if (rng() % 4 == 0) {
      d.RemoveSome(o, rng);
    } else if (rng() % 4 == 0) {
      d.AddHits(o, random_keys(1 + rng() % 20));
    } else {
      const std::vector<uint64_t> keys = random_keys(1 + rng() % 20);
      const uint64_t parent = 1 + rng() % 45;   // sometimes not indexed
      d.StoreRaw(o, keys, rng() % 2 == 0 ? &parent : nullptr, StoreRule{rng() % 3 == 0, rng() % 3 == 0});
    }
    const std::vector<uint64_t> query = random_keys(rng() % 25);
    d.ExpectQuery(query);
    d.ExpectSourceQuery(query, 0, ~uint64_t{0});
    d.ExpectHoldings(random_keys(10));
    if (step % 100 == 0) {
      d.ExpectAllHoldings();
      d.ExpectColdest(5);
    }
    if (::testing::Test::HasFailure()) return;
  }
  d.ExpectAllHoldings();
  d.RemoveAll();
}

// A snapshot without parents (keys in any order, one row per call, as
// BlockIndex restores it) packs its keys into runs of at most kPackedRun:
// memory close to the keys' own, not a run and a page per key; answers
// unchanged.
TEST(RunStoreTest, PackedRestoreCostsAboutWhatTheBlocksCost) {
  EpochDomain epoch;
  RunStore packed(epoch), loose(epoch);
  std::vector<RunStore::Holding> rows;
  for (uint64_t k = 1; k <= 20000; ++k) {
    rows.push_back({MixKey(k), OwnerKey(static_cast<uint32_t>(k % 3), 0, 0), 1, 0, 5, std::nullopt});
  }
  for (const RunStore::Holding& h : rows) {
    ASSERT_EQ(packed.Restore(std::span(&h, 1), /*pack=*/true), 1u);
    ASSERT_EQ(loose.Restore(std::span(&h, 1)), 1u);
  }
  EXPECT_LT(packed.MemoryBytes(), 64u * rows.size()) << "loose: " << loose.MemoryBytes();
  EXPECT_GT(loose.MemoryBytes(), 4 * packed.MemoryBytes());   // measured 352 vs 46 B per key
  std::vector<RunStore::OwnerPrefix> a, b;
  for (uint64_t k = 1; k <= 200; ++k) {
    const uint64_t q[] = {MixKey(k), MixKey(k + 1)};
    packed.LongestPrefixes(q, &a);
    loose.LongestPrefixes(q, &b);
    ASSERT_EQ(a.size(), 1u);
    ASSERT_EQ(b.size(), 1u);
    EXPECT_EQ(a[0].owner, b[0].owner);
    EXPECT_EQ(a[0].blocks, b[0].blocks);
  }
}

// A dump in run order without its parents (what a snapshot holds),
// restored packed one row at a time, gets its runs back in pieces of at
// most kPackedRun: all but about 1 in 64 keys follow their run neighbour.
TEST(RunStoreTest, PackedRestoreInRunOrderKeepsRunsInPieces) {
  EpochDomain epoch;
  RunStore original(epoch), restored(epoch);
  std::vector<uint64_t> chain(5000);
  for (size_t k = 0; k < chain.size(); ++k) chain[k] = MixKey(k + 1);
  original.Store(OwnerKey(0, 0, 0), chain, nullptr, 10000);
  original.Store(OwnerKey(1, 0, 0), std::span(chain).first(3000), nullptr, 20000);
  std::vector<RunStore::Holding> rows;
  original.ForEachHolding([&](const RunStore::Holding& h) { rows.push_back(h); });
  for (RunStore::Holding& h : rows) h.parent.reset();
  for (const RunStore::Holding& h : rows) ASSERT_EQ(restored.Restore(std::span(&h, 1), /*pack=*/true), 1u);
  std::map<uint64_t, size_t> index;
  for (size_t k = 0; k < chain.size(); ++k) index[chain[k]] = k;
  size_t keys = 0, following = 0;   // keys whose run neighbour is their chain predecessor
  uint64_t previous = 0;
  restored.ForEachHolding([&](const RunStore::Holding& h) {
    if (h.key == previous) return;   // another owner of the same key
    previous = h.key;
    ++keys;
    const size_t k = index.at(h.key);
    following += h.parent.has_value() && k > 0 && *h.parent == chain[k - 1];
  });
  EXPECT_EQ(keys, chain.size());
  EXPECT_GE(following, keys - keys / RunStore::kPackedRun - 1);
}

// A packed restore remembers its last entry across calls; when that
// entry's run was freed and its pages reused, the entry is not the key's
// any more and the next row finds its key anew.
TEST(RunStoreTest, PackedRestoreDoesNotTrustAnEntryWhoseRunWasReused) {
  EpochDomain epoch;
  RunStore store(epoch);
  const uint32_t a = OwnerKey(0, 0, 0), b = OwnerKey(1, 0, 0);
  std::vector<RunStore::Holding> rows;
  for (uint64_t k = 1; k <= 20; ++k) rows.push_back({MixKey(k), a, 1, 0, 5, std::nullopt});
  for (const RunStore::Holding& h : rows) ASSERT_EQ(store.Restore(std::span(&h, 1), /*pack=*/true), 1u);
  // The last key sat at position 19 (the second page, slot 3); its run and
  // pages are freed, and the key comes back at position 0 of the reused run.
  ASSERT_EQ(store.Clear(a), 20u);
  const uint64_t last = MixKey(20);
  store.Store(a, std::span(&last, 1), nullptr, 9);
  const RunStore::Holding other{last, b, 1, 0, 5, std::nullopt};
  ASSERT_EQ(store.Restore(std::span(&other, 1), /*pack=*/true), 1u);
  EXPECT_EQ(store.Copies(b, last), 1u);
  EXPECT_EQ(store.Copies(a, last), 1u);
  EXPECT_EQ(store.HeldKeys(), 1u);
  EXPECT_EQ(store.HeldByAll(), 2u);
}

// Restore stops at a row whose owner already holds its key and reports
// the rows applied before it; those stay fully indexed.
TEST(RunStoreTest, RestoreStopsAtADuplicate) {
  EpochDomain epoch;
  RunStore store(epoch);
  const uint32_t owner = OwnerKey(0, 0, 0);
  const RunStore::Holding rows[] = {{1, owner, 2, 5, 9, std::nullopt},
                                    {2, owner, 1, 0, 8, 1},
                                    {1, owner, 1, 0, 7, std::nullopt},
                                    {3, owner, 1, 0, 6, 2}};
  EXPECT_EQ(store.Restore(rows), 2u);
  EXPECT_EQ(store.Copies(owner, 1), 2u);
  EXPECT_EQ(store.Stamp(owner, 2), std::optional<uint32_t>(8));
  EXPECT_EQ(store.Copies(owner, 3), 0u);
  const uint64_t query[] = {1, 2, 3};
  std::vector<RunStore::OwnerPrefix> got;
  store.LongestPrefixes(query, &got);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].blocks, 2u);
  EXPECT_EQ(got[0].hits, 5u);
}

// An owner that keeps joining and leaving runs: the list of runs Clear
// visits is compacted, so memory does not grow with the churn.
TEST(RunStoreTest, AnOwnersRunListStaysBoundedUnderChurn) {
  EpochDomain epoch;
  RunStore store(epoch);
  const uint32_t owner = OwnerKey(3, 0, 0), other = OwnerKey(4, 0, 0);
  const uint64_t kept[] = {1000000};
  store.Store(other, kept, nullptr, 1);   // the store is never empty
  size_t after_warmup = 0;
  for (uint64_t round = 0; round < 20000; ++round) {
    const uint64_t keys[] = {round * 3 + 1, round * 3 + 2, round * 3 + 3};
    store.Store(owner, keys, nullptr, static_cast<uint32_t>(round));
    EXPECT_EQ(store.Remove(owner, keys), 3u);
    if (round == 1000) after_warmup = store.MemoryBytes();
  }
  EXPECT_LE(store.MemoryBytes(), after_warmup + 1024);
  store.Store(owner, kept, nullptr, 1);
  EXPECT_EQ(store.Clear(owner), 1u);
  EXPECT_EQ(store.Clear(owner), 0u);
  EXPECT_EQ(store.Clear(OwnerKey(9, 0, 0)), 0u);   // never seen
  EXPECT_EQ(store.HeldBy(other), 1u);
}

TEST(RunStoreTest, AnUnknownParentStartsARun) {
  EpochDomain epoch;
  RunStore store(epoch);
  const uint64_t unknown = 42;
  const uint64_t keys[] = {1, 2, 3};
  store.Store(OwnerKey(0, 0, 0), keys, &unknown, 10);
  EXPECT_EQ(store.blocks(), 3u);
  std::vector<RunStore::OwnerPrefix> got;
  store.LongestPrefixes(keys, &got);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].blocks, 3u);
}

TEST(RunStoreTest, AnEmptyQueryOrStoreChangesNothing) {
  EpochDomain epoch;
  RunStore store(epoch);
  store.Store(OwnerKey(0, 0, 0), {}, nullptr, 10);
  std::vector<RunStore::OwnerPrefix> got{{1, 1}};
  store.LongestPrefixes({}, &got);
  EXPECT_TRUE(got.empty());
  EXPECT_EQ(store.Remove(OwnerKey(0, 0, 0), {}), 0u);
  EXPECT_EQ(store.blocks(), 0u);
}

}  // namespace
}  // namespace kvidx::internal
