// Randomized differential test: BlockIndex against a plain reference model
// (std::map of blocks to owners) over random events and queries.
//
// Default size keeps CI at a few seconds (smaller under sanitizers); set
// KVIDX_DIFF_EVENTS for a longer run, e.g. KVIDX_DIFF_EVENTS=5000000.
#include <gtest/gtest.h>

#include <cstdlib>
#include <algorithm>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include "common/sanitizers.h"
#include "index/block_index.h"
#include "common/index_core.h"

namespace kvidx {
namespace {

constexpr uint64_t kDefaultEvents = kUnderSanitizer ? 30000 : 400000;

uint64_t EventsFromEnv() {
  const char* e = std::getenv("KVIDX_DIFF_EVENTS");
  if (e == nullptr || *e == '\0') return kDefaultEvents;
  return std::strtoull(e, nullptr, 10);
}

// The reference: every rule of block_index.h written the obvious way.
class Reference {
 public:
  using OKey = std::tuple<uint32_t, uint32_t, uint32_t>;   // source, tier, group
  struct Owner {
    uint32_t ref = 0, hits = 0, stamp = 0;
  };
  struct Counters {
    uint64_t hits = 0, dup = 0, orphan = 0, remove_unknown = 0, reused_unknown = 0, gpu_copies = 0;
    std::map<uint32_t, uint64_t> tier_blocks;
  };
  std::map<std::pair<ModelId, uint64_t>, std::map<OKey, Owner>> blocks;
  std::map<uint32_t, uint64_t> clock;
  std::map<uint32_t, Counters> counters;
  // (model, group) pairs that had an indexed store: a BlockRemoved has no
  // kind, so only removals in these groups are indexed (and can be drift).
  std::set<std::pair<ModelId, uint32_t>> indexed_groups;

  bool Holds(ModelId m, uint64_t k, OKey o) const {
    auto it = blocks.find({m, k});
    return it != blocks.end() && it->second.count(o) != 0;
  }

  void Store(ModelId m, uint32_t s, uint32_t tier, uint32_t group, const std::vector<uint64_t>& ks,
             std::optional<uint64_t> parent, StoreOrigin origin) {
    if (group != 0) return;   // the test only stores kind-less groups; only group 0 is indexed
    indexed_groups.insert({m, group});
    if (ks.empty()) return;
    OKey o{s, tier, group};
    Counters& c = counters[s];
    bool reused = origin == StoreOrigin::kReused;
    bool hit_candidate = reused || (origin == StoreOrigin::kUnknown && !parent && tier == 0);  // 0 = GPU
    if (parent && !reused && !Holds(m, *parent, o)) ++c.orphan;
    uint64_t base = clock[s];
    clock[s] += ks.size();
    for (size_t i = 0; i < ks.size(); ++i) {
      uint32_t stamp = static_cast<uint32_t>(base + ks.size() - i);
      auto& owners = blocks[{m, ks[i]}];
      auto it = owners.find(o);
      if (it != owners.end()) {
        it->second.stamp = stamp;
        if (hit_candidate) {
          ++it->second.hits;
          ++c.hits;
        } else {
          ++it->second.ref;
          ++c.dup;
          if (tier == 0) ++c.gpu_copies;
        }
        continue;
      }
      owners[o] = Owner{1, reused ? 1u : 0u, stamp};
      ++c.tier_blocks[tier];
      if (tier == 0) ++c.gpu_copies;
      if (reused) {
        ++c.hits;
        ++c.reused_unknown;
      }
    }
  }

  void Remove(ModelId m, uint32_t s, uint32_t tier, uint32_t group, const std::vector<uint64_t>& ks) {
    // Before any indexed store in this group of this model, a removal is not
    // drift (see block_index.h, Groups).
    if (group != 0 || indexed_groups.count({m, group}) == 0) return;
    OKey o{s, tier, group};
    Counters& c = counters[s];
    for (uint64_t k : ks) {
      auto bit = blocks.find({m, k});
      if (bit == blocks.end() || bit->second.count(o) == 0) {
        ++c.remove_unknown;
        continue;
      }
      if (tier == 0) --c.gpu_copies;
      Owner& ow = bit->second[o];
      if (ow.ref > 1) {
        --ow.ref;
        continue;
      }
      bit->second.erase(o);
      --c.tier_blocks[tier];
      if (bit->second.empty()) blocks.erase(bit);
    }
  }

  void Clear(uint32_t s, std::optional<uint32_t> tier) {
    Counters& c = counters[s];
    for (auto it = blocks.begin(); it != blocks.end();) {
      for (auto ot = it->second.begin(); ot != it->second.end();) {
        if (std::get<0>(ot->first) == s && (!tier || std::get<1>(ot->first) == *tier)) {
          ot = it->second.erase(ot);
        } else {
          ++ot;
        }
      }
      it = it->second.empty() ? blocks.erase(it) : std::next(it);
    }
    for (auto& [t, n] : c.tier_blocks) {
      if (!tier || t == *tier) n = 0;
    }
    if (!tier || *tier == 0) c.gpu_copies = 0;
    bool empty = true;
    for (const auto& [t, n] : c.tier_blocks) empty = empty && n == 0;
    if (empty) clock[s] = 0;   // no stamp left to order against
  }

  // source -> (gpu, any, hits, hit_blocks)
  std::map<uint32_t, std::tuple<uint32_t, uint32_t, uint64_t, uint32_t>> Query(ModelId m,
                                                                               const std::vector<uint64_t>& ks,
                                                                               uint64_t tier_mask) const {
    std::map<uint32_t, std::tuple<uint32_t, uint32_t, uint64_t, uint32_t>> out;
    if (ks.empty()) return out;
    auto owners_at = [&](size_t i) -> const std::map<OKey, Owner>* {
      auto it = blocks.find({m, ks[i]});
      return it == blocks.end() ? nullptr : &it->second;
    };
    const auto* first = owners_at(0);
    if (first == nullptr) return out;
    for (const auto& [o, ow] : *first) {
      auto [s, t, g] = o;
      if (g != 0 || !((tier_mask >> t) & 1)) continue;
      if (out.count(s)) continue;
      uint32_t gpu = 0, any = 0, hit_blocks = 0;
      uint64_t hits = 0;
      bool gpu_on = ((tier_mask >> 0) & 1) != 0;
      for (size_t i = 0; i < ks.size(); ++i) {
        const auto* os = owners_at(i);
        bool has_any = false, has_gpu = false;
        uint32_t h = 0;
        if (os != nullptr) {
          for (const auto& [o2, ow2] : *os) {
            if (std::get<0>(o2) != s || std::get<2>(o2) != 0 || !((tier_mask >> std::get<1>(o2)) & 1)) continue;
            has_any = true;
            if (std::get<1>(o2) == 0) {
              has_gpu = true;
              h = ow2.hits;
            }
          }
        }
        if (gpu_on && has_gpu && gpu == i) {
          gpu = static_cast<uint32_t>(i + 1);
          hits += std::min<uint32_t>(h, 255);   // a query counts each block's hits up to 255
          hit_blocks += h > 0;
        }
        if (!has_any) break;
        any = static_cast<uint32_t>(i + 1);
      }
      out[s] = {gpu, any, hits, hit_blocks};
    }
    return out;
  }
};

// Long chains: stores, removals and queries of up to this many blocks, and
// half of the removals and queries follow a recently stored chain, so that
// walks are long (the index starts lookups further ahead in long walks).
struct LongChains {
  size_t store_len;
  size_t remove_len;
  size_t query_len;
};

// One randomized run over the given source ids and key universe.
// Per 1000 events: 480 stores, `removes` removals, `clears` ClearSource
// calls, queries for the rest.
void RunDifferential(uint64_t events, const std::vector<uint32_t>& source_ids, uint64_t universe, uint64_t seed,
                     size_t store_len = 8, uint64_t removes = 350, uint64_t clears = 5,
                     std::optional<LongChains> long_chains = std::nullopt) {
  std::mt19937_64 rng(seed);
  auto below = [&](uint64_t n) { return rng() % n; };
  BlockIndex index{testing::CoreUnderTest()};
  Reference ref;
  const ModelId models[2] = {index.AddModel("a").value(), index.AddModel("b").value()};
  const uint64_t kUniverse = universe;
  const uint32_t tiers[4] = {0, 1, 2, 7};
  auto random_chain = [&](size_t max_len) {
    std::vector<uint64_t> ks(1 + below(max_len));
    for (uint64_t& k : ks) k = below(kUniverse);
    return ks;
  };
  std::vector<std::vector<uint64_t>> stored(64);   // recent stored chains (long_chains only)
  // A recently stored chain's run from a random start, of up to `len`
  // blocks, then random keys up to a random length of at most `len`.
  auto follow_stored = [&](size_t len) {
    const std::vector<uint64_t>& c = stored[below(stored.size())];
    std::vector<uint64_t> ks;
    if (!c.empty()) {
      const size_t from = below(c.size());
      ks.assign(c.begin() + from, c.begin() + std::min(c.size(), from + len));
    }
    const size_t want = 1 + below(len);
    while (ks.size() < want) ks.push_back(below(kUniverse));
    return ks;
  };
  auto to_keys = [](const std::vector<uint64_t>& ks) {
    std::vector<BlockKey> out;
    for (uint64_t k : ks) out.push_back(BlockKey::FromU64(k));
    return out;
  };
  // The event's source's counters, right after the event: a divergence is
  // reported at the event that causes it, not at the next full check.
  auto check_counters = [&](uint64_t e, uint32_t src) {
    SourceIndexStats st = index.GetSourceStats(src);
    const Reference::Counters& c = ref.counters[src];
    ASSERT_EQ(st.hits, c.hits) << "event " << e << " source " << src;
    ASSERT_EQ(st.duplicate_copies, c.dup) << "event " << e << " source " << src;
    ASSERT_EQ(st.drift_orphan_store, c.orphan) << "event " << e << " source " << src;
    ASSERT_EQ(st.drift_remove_unknown, c.remove_unknown) << "event " << e << " source " << src;
    ASSERT_EQ(st.drift_reused_unknown, c.reused_unknown) << "event " << e << " source " << src;
    ASSERT_EQ(st.gpu_copies, c.gpu_copies) << "event " << e << " source " << src;
  };
  PrefixMatch pm;
  uint64_t queries = 0, nonempty = 0, long_matches = 0;
  for (uint64_t e = 0; e < events; ++e) {
    uint64_t op = below(1000);
    ModelId m = models[below(2)];
    uint32_t s = source_ids[below(source_ids.size())];
    uint32_t tier = tiers[below(10) < 7 ? 0 : below(4)];
    uint32_t group = below(10) == 0 ? 2 : 0;   // group 2 (kind other) is never indexed
    KvGroup g{group, group == 0 ? GroupKind::kAbsent : GroupKind::kOther};
    if (op < 480) {
      std::vector<uint64_t> ks = random_chain(store_len);
      std::optional<uint64_t> parent;
      if (below(3) != 0) parent = below(kUniverse);
      uint64_t o = below(20);
      StoreOrigin origin = o == 0 ? StoreOrigin::kNew : o == 1 ? StoreOrigin::kReused : StoreOrigin::kUnknown;
      std::optional<BlockKey> p;
      if (parent) p = BlockKey::FromU64(*parent);
      if (long_chains) stored[below(stored.size())] = ks;
      ASSERT_TRUE(index.Store(m, s, static_cast<Tier>(tier), g, to_keys(ks), p, origin).ok());
      ref.Store(m, s, tier, group, ks, parent, origin);
      ASSERT_NO_FATAL_FAILURE(check_counters(e, s));
    } else if (op < 480 + removes) {
      std::vector<uint64_t> ks = !long_chains            ? random_chain(4)
                                 : below(2) == 0 ? follow_stored(long_chains->remove_len)
                                                 : random_chain(long_chains->remove_len);
      ASSERT_TRUE(index.Remove(m, s, static_cast<Tier>(tier), g, to_keys(ks)).ok());
      ref.Remove(m, s, tier, group, ks);
      ASSERT_NO_FATAL_FAILURE(check_counters(e, s));
    } else if (op < 1000 - clears) {
      std::vector<uint64_t> ks = random_chain(long_chains ? long_chains->query_len : 12);
      if (long_chains && below(2) == 0) {
        ks = follow_stored(long_chains->query_len);
      } else if (below(4) == 0) {
        // Extend a stored chain so that long matches happen too.
        auto it = ref.blocks.lower_bound({m, below(kUniverse)});
        if (it != ref.blocks.end()) ks[0] = it->first.second;
      }
      PrefixFilter f;
      if (below(4) == 0) f.tier_mask = below(2) ? 1u : (1u | 2u);
      ASSERT_TRUE(index.FindPrefix(m, to_keys(ks), f, &pm).ok());
      auto want = ref.Query(m, ks, f.tier_mask);
      ++queries;
      nonempty += !want.empty();
      ASSERT_EQ(pm.sources.size(), want.size()) << "event " << e;
      for (const SourceMatch& sm : pm.sources) {
        auto it = want.find(sm.source);
        ASSERT_NE(it, want.end()) << "event " << e;
        auto [gpu, any, hits, hit_blocks] = it->second;
        ASSERT_EQ(sm.gpu_blocks, gpu) << "event " << e << " source " << sm.source;
        ASSERT_EQ(sm.blocks_with_lower_tiers, any) << "event " << e;
        ASSERT_EQ(sm.hits, hits) << "event " << e;
        ASSERT_EQ(sm.hit_blocks, hit_blocks) << "event " << e;
        long_matches += any > 64;
      }
    } else {
      std::optional<uint32_t> t;
      if (below(2) == 0) t = tiers[below(4)];
      std::optional<Tier> tt;
      if (t) tt = static_cast<Tier>(*t);
      ASSERT_TRUE(index.ClearSource(s, tt).ok());
      ref.Clear(s, t);
    }
    if (e % 20000 == 19999 || e + 1 == events) {
      // Full state: ownership, tiers, refcounts, hits, recency stamps.
      IndexSnapshot snap;
      index.Dump(&snap);
      size_t n = 0;
      for (const auto& [mk, owners] : ref.blocks) n += owners.size();
      ASSERT_EQ(snap.owners.size(), n) << "event " << e;
      for (const OwnerRecord& o : snap.owners) {
        auto bit = ref.blocks.find({o.model, o.key.wire()});
        ASSERT_NE(bit, ref.blocks.end());
        auto oit = bit->second.find({o.source, static_cast<uint32_t>(o.tier), o.group});
        ASSERT_NE(oit, bit->second.end());
        ASSERT_EQ(o.refcount, oit->second.ref);
        ASSERT_EQ(o.hits, oit->second.hits);
        ASSERT_EQ(o.stamp, oit->second.stamp);
      }
      for (uint32_t src : source_ids) {
        SourceIndexStats st = index.GetSourceStats(src);
        const Reference::Counters& c = ref.counters[src];
        ASSERT_EQ(st.hits, c.hits);
        ASSERT_EQ(st.duplicate_copies, c.dup);
        ASSERT_EQ(st.drift_orphan_store, c.orphan);
        ASSERT_EQ(st.drift_remove_unknown, c.remove_unknown);
        ASSERT_EQ(st.drift_reused_unknown, c.reused_unknown);
        ASSERT_EQ(st.gpu_copies, c.gpu_copies);
        std::map<uint32_t, uint64_t> tb;
        for (auto [t, v] : st.blocks_per_tier) tb[static_cast<uint32_t>(t)] = v;
        for (auto [t, v] : c.tier_blocks) {
          if (v != 0) {
            ASSERT_EQ(tb[t], v) << "source " << src << " tier " << t;
          }
        }
      }
      // Round trip through a snapshot.
      if (e + 1 == events) {
        BlockIndex copy{testing::CoreUnderTest()};
        ASSERT_TRUE(copy.Restore(snap).ok());
        IndexSnapshot snap2;
        copy.Dump(&snap2);
        ASSERT_TRUE(SameContents(snap, snap2));
      }
    }
  }
  EXPECT_GT(nonempty, queries / 10);   // the workload does produce matches
  if (long_chains) {
    EXPECT_GT(long_matches, queries / 100) << "matches longer than 64 blocks";
  }
}

TEST(DifferentialTest, MatchesReferenceModel) {
  RunDifferential(EventsFromEnv(), {0, 1, 2, 3, 4, 5}, 400, 20260901);
}

// FindPrefix keeps candidates in a 64-bit mask with a direct map indexed by
// source % 64; sources that collide there take the merge path.
TEST(DifferentialTest, SourcesCollidingModulo64) {
  RunDifferential(EventsFromEnv() / 4, {0, 64, 128, 3, 67, 65533}, 300, 77, 8);
}

// A handful of keys stored and re-announced over and over: copy counts past
// 14 and hit counts past 254 leave the owner word for the shard's spill map
// and must come back exact (state, snapshot round trip) and saturated in
// queries.
TEST(DifferentialTest, HeavyDuplicatesAndHits) {
  RunDifferential(EventsFromEnv() / 4, {0, 1}, 6, 99, 3, /*removes=*/20, /*clears=*/0);
}

// More than 64 sources hold block 0 (the candidate-list path), and blocks
// with many owners but few remaining candidates (the binary-search path).
TEST(DifferentialTest, ManySourcesPerBlock) {
  std::vector<uint32_t> ids;
  for (uint32_t i = 0; i < 100; ++i) ids.push_back(i * 3);
  RunDifferential(EventsFromEnv() / 40, ids, 24, 4242, 12);
}

// The long-chain tests assert that some queries match more than 64 blocks;
// below a few thousand events (the sanitizer default scaled down) too few
// queries run for that to be a fair expectation.
uint64_t LongChainEvents(uint64_t scaled) { return std::max<uint64_t>(scaled, 3000); }

// Chains of hundreds of blocks: queries longer than 64 blocks and long
// stores and removals take the index's long lookup pipeline.
TEST(DifferentialTest, LongChains) {
  RunDifferential(LongChainEvents(EventsFromEnv() / 20), {0, 1, 2, 3, 4, 5}, 20000, 5150, 160, /*removes=*/350, /*clears=*/5,
                  LongChains{.store_len = 160, .remove_len = 120, .query_len = 200});
}

// Stores and removals of hundreds of blocks: past kMinGroupedBlocks the
// index applies them grouped by shard (internal/shard_order.h).
TEST(DifferentialTest, LongWritesGroupedByShard) {
  RunDifferential(LongChainEvents(EventsFromEnv() / 40), {0, 1, 2, 3}, 30000, 7171, 600, /*removes=*/350, /*clears=*/5,
                  LongChains{.store_len = 600, .remove_len = 400, .query_len = 300});
}

// The same with more than 64 sources (the candidate-list walk).
TEST(DifferentialTest, LongChainsManySources) {
  std::vector<uint32_t> ids;
  for (uint32_t i = 0; i < 80; ++i) ids.push_back(i * 5);
  RunDifferential(LongChainEvents(EventsFromEnv() / 100), ids, 3000, 6160, 100, /*removes=*/300, /*clears=*/2,
                  LongChains{.store_len = 100, .remove_len = 80, .query_len = 150});
}

}  // namespace
}  // namespace kvidx
