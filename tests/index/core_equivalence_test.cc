// The two index cores (IndexCore::kBlocks, kRuns) side by side: the same
// random events applied to both, and everything either reports must be
// equal -- every answer of FindPrefix under several filters, every
// source's counters, the eviction ranks (to the resolution of their
// approximate histogram), eviction orders, block
// lookups, block counts and the snapshot, including after clock rebases,
// ClearSource and a restore of each core's snapshot into a fresh index of
// the other core. Events mix chained stores of shared prefixes, parentless
// re-announcements (hits), declared reuse, orphan and out-of-order pieces,
// lower tiers, a second group, removals of copies and of unknown blocks,
// keys in both forms (integer and bytes, sharing wire values), events
// that repeat keys or mix forms, and one event longer than a store step.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/sanitizers.h"
#include "index/block_index.h"

namespace kvidx {
namespace {

constexpr int kEvents = kUnderSanitizer ? 3000 : 30000;
constexpr SourceId kSources = 6;

// Value v as an integer-form key, or as a 32-byte digest whose last 8
// bytes are v: the two forms share wire values and must never meet.
BlockKey Key(uint64_t v, bool bytes) {
  if (!bytes) return BlockKey::FromU64(v);
  uint8_t d[32];
  for (int i = 0; i < 24; ++i) d[i] = static_cast<uint8_t>((v * 0x9E3779B97F4A7C15ULL) >> (i % 8 * 8)) ^ static_cast<uint8_t>(i);
  for (int i = 0; i < 8; ++i) d[24 + i] = static_cast<uint8_t>(v >> (56 - 8 * i));
  return BlockKey::FromBytes(d, 32);
}

std::vector<BlockKey> Chain(std::span<const uint64_t> ks, bool bytes) {
  std::vector<BlockKey> out;
  for (uint64_t k : ks) out.push_back(Key(k, bytes));
  return out;
}

class Pair {
 public:
  Pair() : runs_(IndexOptions{IndexCore::kRuns}) {
    for (BlockIndex* i : {&blocks_, &runs_}) {
      model_ = i->AddModel("m").value();
      other_ = i->AddModel("other", ModelOptions{64, true}).value();
    }
  }

  template <typename Fn>
  void Both(Fn fn) {
    const Status a = fn(blocks_), b = fn(runs_);
    ASSERT_EQ(a.code(), b.code()) << a.ToString() << " / " << b.ToString();
  }

  void ExpectSame(std::span<const std::vector<BlockKey>> queries) { ExpectSame(blocks_, runs_, queries); }

  static void ExpectSame(BlockIndex& a, BlockIndex& b, std::span<const std::vector<BlockKey>> queries) {
    for (ModelId m : {ModelId{0}, ModelId{1}}) {
      EXPECT_EQ(a.BlockCount(m), b.BlockCount(m)) << "model " << m;
      for (const std::vector<BlockKey>& keys : queries) {
        for (const PrefixFilter& f : {PrefixFilter{}, PrefixFilter{std::nullopt, 1}, PrefixFilter{2, ~uint64_t{0}},
                                      PrefixFilter{std::nullopt, 0b110}}) {
          PrefixMatch x, y;
          ASSERT_TRUE(a.FindPrefix(m, keys, f, &x).ok());
          ASSERT_TRUE(b.FindPrefix(m, keys, f, &y).ok());
          ASSERT_EQ(x.sources.size(), y.sources.size()) << "model " << m;
          for (size_t j = 0; j < x.sources.size(); ++j) {
            const SourceMatch& s = x.sources[j];
            const SourceMatch& t = y.sources[j];
            EXPECT_EQ(s.source, t.source);
            EXPECT_EQ(s.gpu_blocks, t.gpu_blocks) << "source " << s.source;
            EXPECT_EQ(s.blocks_with_lower_tiers, t.blocks_with_lower_tiers) << "source " << s.source;
            EXPECT_EQ(s.hits, t.hits) << "source " << s.source;
            EXPECT_EQ(s.hit_blocks, t.hit_blocks) << "source " << s.source;
          }
        }
        std::vector<OwnerRecord> ra, rb;
        ASSERT_TRUE(a.LookupBlock(m, keys.empty() ? BlockKey::FromU64(0) : keys.back(), &ra).ok());
        ASSERT_TRUE(b.LookupBlock(m, keys.empty() ? BlockKey::FromU64(0) : keys.back(), &rb).ok());
        EXPECT_EQ(ra, rb);
      }
      for (SourceId s = 0; s < kSources; ++s) {
        std::vector<BlockKey> ea, eb;
        ASSERT_TRUE(a.PeekEvictionOrder(m, s, 50, &ea).ok());
        ASSERT_TRUE(b.PeekEvictionOrder(m, s, 50, &eb).ok());
        EXPECT_EQ(ea, eb) << "source " << s;
      }
    }
    for (SourceId s = 0; s < kSources; ++s) EXPECT_EQ(a.GetSourceStats(s), b.GetSourceStats(s)) << "source " << s;
    // Ranks come from an approximate histogram (recency.h) whose sliding
    // window depends on the order of its updates, and the per-block core
    // applies a long write's blocks grouped by shard, the run core in event
    // order: the same removals, ranks within the histogram's resolution.
    const RecencyRankHistogram ha = a.GetEvictionRankHistogram(), hb = b.GetEvictionRankHistogram();
    EXPECT_EQ(ha.count, hb.count);
    EXPECT_NEAR(ha.sum, hb.sum, 0.01 * static_cast<double>(ha.count) + 1e-9);
    IndexSnapshot sa, sb;
    a.Dump(&sa);
    b.Dump(&sb);
    EXPECT_EQ(sa.source_clocks, sb.source_clocks);
    ASSERT_EQ(sa.owners.size(), sb.owners.size());
    for (size_t j = 0; j < sa.owners.size(); ++j) {
      const OwnerRecord& x = sa.owners[j];
      const OwnerRecord& y = sb.owners[j];
      ASSERT_EQ(x, y) << "record " << j << ": " << x.key.ToString() << " source " << x.source << " tier "
                      << static_cast<int>(x.tier) << " group " << x.group << " ref " << x.refcount << "/"
                      << y.refcount << " hits " << x.hits << "/" << y.hits << " stamp " << x.stamp << "/" << y.stamp
                      << " vs " << y.key.ToString() << " source " << y.source;
    }
    EXPECT_TRUE(SameContents(sa, sb));
  }

  BlockIndex blocks_, runs_;
  ModelId model_ = 0, other_ = 0;
};

std::vector<std::vector<uint64_t>> Chains(std::mt19937_64& rng, size_t n) {
  std::vector<std::vector<uint64_t>> chains;
  for (size_t i = 0; i < n; ++i) {
    std::vector<uint64_t> c;
    if (!chains.empty() && rng() % 3 != 0) {
      const std::vector<uint64_t>& base = chains[rng() % chains.size()];
      c.assign(base.begin(), base.begin() + static_cast<long>(rng() % (base.size() + 1)));
    }
    for (size_t more = 1 + rng() % 90; more > 0; --more) c.push_back((c.empty() ? 77 : c.back()) * 0x9E3779B97F4A7C15ULL + rng() % 3 + 1);
    chains.push_back(std::move(c));
  }
  return chains;
}

// (predecessor, key) for every record of `snap` flagged as following.
std::set<std::pair<std::string, std::string>> Followers(const IndexSnapshot& snap) {
  std::set<std::pair<std::string, std::string>> out;
  for (size_t i = 1; i < snap.owners.size(); ++i) {
    const OwnerRecord& o = snap.owners[i];
    if (o.follows) out.emplace(std::to_string(o.model) + "/" + snap.owners[i - 1].key.ToString(), o.key.ToString());
  }
  return out;
}

void RunEvents(uint64_t seed) {
  std::mt19937_64 rng(seed);
  const auto chains = Chains(rng, 30);
  // Every fourth chain is sent in bytes form (an engine with
  // VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0); chains share prefixes, so the
  // same wire values arrive in both forms.
  auto bytes = [](size_t c) { return c % 4 == 3; };
  auto query_of = [&](size_t c) { return Chain(chains[c], bytes(c)); };
  Pair p;
  for (int e = 0; e < kEvents; ++e) {
    const size_t c = rng() % chains.size();
    const std::vector<uint64_t>& chain = chains[c];
    const SourceId s = static_cast<SourceId>(rng() % kSources);
    const ModelId m = rng() % 8 == 0 ? p.other_ : p.model_;
    const Tier tier = rng() % 5 == 0 ? Tier::kCpu : Tier::kGpu;
    const KvGroup group{rng() % 6 == 0 ? 2u : 0u, GroupKind::kAbsent};
    const size_t begin = rng() % 3 == 0 ? rng() % chain.size() : 0;
    const size_t end = begin + 1 + rng() % (chain.size() - begin);
    const std::vector<BlockKey> piece = Chain(std::span(chain).subspan(begin, end - begin), bytes(c));
    const uint64_t op = rng() % 100;
    if (op < 45) {
      const bool parented = begin > 0 && rng() % 4 != 0;
      const StoreOrigin origin = rng() % 10 == 0 ? StoreOrigin::kReused : StoreOrigin::kUnknown;
      const std::optional<BlockKey> parent = parented ? std::optional(Key(chain[begin - 1], bytes(c))) : std::nullopt;
      p.Both([&](BlockIndex& i) { return i.Store(m, s, tier, group, piece, parent, origin); });
    } else if (op < 55) {   // a re-announcement: parentless from block 0
      p.Both([&](BlockIndex& i) {
        return i.Store(m, s, tier, group, Chain(std::span(chain).first(end), bytes(c)), std::nullopt);
      });
    } else if (op < 90) {
      std::vector<BlockKey> gone = piece;
      std::shuffle(gone.begin(), gone.end(), rng);
      if (rng() % 4 == 0) gone.push_back(Key(rng(), rng() % 2 == 0));
      p.Both([&](BlockIndex& i) { return i.Remove(m, s, tier, group, gone); });
    } else if (op < 92) {
      const std::optional<Tier> which = rng() % 2 == 0 ? std::nullopt : std::optional(tier);
      p.Both([&](BlockIndex& i) { return i.ClearSource(s, which); });
    } else if (op < 93) {   // the next store of s rebases its clock
      const uint64_t clock = (uint64_t{1} << 24) - 50 - rng() % 2;
      p.Both([&](BlockIndex& i) {
        i.TestOnlySetClock(s, clock);
        return Status::Ok();
      });
    } else if (op < 97) {   // an event that repeats keys and mixes forms
      std::vector<BlockKey> odd = piece;
      for (size_t k = 0, n = odd.size(); k < n && k < 6; ++k) odd.push_back(odd[rng() % n]);
      odd.push_back(Key(chain[begin], !bytes(c)));   // the same wire in the other form
      std::shuffle(odd.begin() + 1, odd.end(), rng);
      if (rng() % 2 == 0) {
        p.Both([&](BlockIndex& i) { return i.Store(m, s, tier, group, odd, std::nullopt); });
      } else {
        p.Both([&](BlockIndex& i) { return i.Remove(m, s, tier, group, odd); });
      }
    }
    if (e % (kEvents / 10) == 0) {
      std::vector<std::vector<BlockKey>> queries;
      for (int q = 0; q < 12; ++q) queries.push_back(query_of(rng() % chains.size()));
      p.ExpectSame(queries);
      if (::testing::Test::HasFailure()) return;
    }
  }
  std::vector<std::vector<BlockKey>> queries;
  for (size_t q = 0; q < chains.size(); ++q) queries.push_back(query_of(q));
  // One event longer than a store step (65,536 blocks): stamped in steps,
  // each step's parent the previous step's last block.
  std::vector<uint64_t> longest(70000);
  for (size_t k = 0; k < longest.size(); ++k) longest[k] = (seed << 40) + k * 7 + 1;
  const std::vector<BlockKey> long_keys = Chain(longest, seed % 2 == 0);
  p.Both([&](BlockIndex& i) { return i.Store(0, 1, Tier::kGpu, {}, long_keys, std::nullopt); });
  queries.push_back(long_keys);
  p.ExpectSame(queries);
  p.Both([&](BlockIndex& i) { return i.Remove(0, 1, Tier::kGpu, {}, std::span(long_keys).first(30000)); });
  p.ExpectSame(queries);
  // Each core's snapshot restores into the other.
  IndexSnapshot from_blocks, from_runs;
  p.blocks_.Dump(&from_blocks);
  p.runs_.Dump(&from_runs);
  BlockIndex runs_restored(IndexOptions{IndexCore::kRuns}), blocks_restored;
  ASSERT_TRUE(runs_restored.Restore(from_blocks).ok());
  ASSERT_TRUE(blocks_restored.Restore(from_runs).ok());
  Pair::ExpectSame(blocks_restored, runs_restored, queries);
  // A run-order capture restores into the run core with its runs whole:
  // every record it flags as following its predecessor is again that
  // key's run neighbour (a restore that ignored the flags would break
  // the 40,000 blocks left of the long chain every 64).
  IndexSnapshot in_run_order, again;
  p.runs_.DumpUnsorted(&in_run_order);
  BlockIndex runs_from_runs(IndexOptions{IndexCore::kRuns});
  ASSERT_TRUE(runs_from_runs.Restore(in_run_order).ok());
  Pair::ExpectSame(blocks_restored, runs_from_runs, queries);
  runs_from_runs.DumpUnsorted(&again);
  const std::set<std::pair<std::string, std::string>> flagged = Followers(in_run_order), kept = Followers(again);
  EXPECT_GT(flagged.size(), 40000u);
  EXPECT_TRUE(std::includes(kept.begin(), kept.end(), flagged.begin(), flagged.end()));
}

TEST(CoreEquivalenceTest, BothCoresAnswerAlike) {
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    SCOPED_TRACE(seed);
    RunEvents(seed);
    if (::testing::Test::HasFailure()) return;
  }
}

}  // namespace
}  // namespace kvidx
