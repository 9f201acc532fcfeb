#include "bench/w1_bench.h"

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <string_view>
#include <type_traits>
#include <span>
#include <vector>

#include "bench/child_process.h"
#include "bench/core_run_index.h"
#include "bench/naive_prefix_index.h"
#include "bench/radix_prefix_index.h"
#include "bench/run_prefix_index.h"
#include "bench/workload_hash.h"
#include "index/block_index.h"

namespace kvidx {
namespace {

// ---- The generator, exactly as workload.md specifies. ----
using bench::ChainHashes;
using bench::SplitMix;

struct Rng {
  uint64_t state = 42;
  uint64_t Next() { return SplitMix(++state); }
  uint64_t Below(uint64_t n) { return Next() % n; }
};

struct Params {
  uint64_t prompts = 20000, blocks = 32, shared = 16, groups = 200, replicas = 8, queries = 20000;
  int runs = 3;
  std::string impl = "all";   // kvidx, naive, radix, runs, core, kvidx-runs, both (kvidx and naive) or all
};

struct Workload {
  std::vector<uint64_t> prompt_hashes;   // prompts x blocks, chained
  std::vector<uint64_t> query_hashes;    // queries x blocks, chained
};

Workload Generate(const Params& p) {
  Rng rng;
  const uint64_t B = p.blocks;
  std::vector<uint64_t> content(p.prompts * B);
  for (uint64_t i = 0; i < p.prompts; ++i) {
    uint64_t g = rng.Below(p.groups);
    for (uint64_t j = 0; j < B; ++j) content[i * B + j] = j < p.shared ? ((g << 20) | j) : rng.Next();
  }
  Workload w;
  w.query_hashes.resize(p.queries * B);
  std::vector<uint64_t> q(B);
  for (uint64_t k = 0; k < p.queries; ++k) {
    const uint64_t* src = &content[rng.Below(p.prompts) * B];
    uint64_t cut = rng.Below(B + 1);
    for (uint64_t j = 0; j < B; ++j) q[j] = j < cut ? src[j] : rng.Next();
    ChainHashes(q.data(), B, &w.query_hashes[k * B]);
  }
  w.prompt_hashes.resize(p.prompts * B);
  for (uint64_t i = 0; i < p.prompts; ++i) ChainHashes(&content[i * B], B, &w.prompt_hashes[i * B]);
  return w;
}

// ---- Measurement helpers. ----
using bench::Median;
using bench::ResidentBytes;

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

struct W1Result {
  double inserts_per_s = 0;
  double queries_per_s = 0;
  double p50_ns = 0, p99_ns = 0;
  double bytes_per_block = 0;          // RSS growth / (prompts * blocks), workload.md's definition
  double bytes_per_owner_entry = 0;    // RSS growth / distinct (block, replica) pairs
  uint64_t checksum = 0;
  uint64_t distinct_entries = 0;
};

// Runs `query(k)` (returns the best replica's match) for every query twice:
// once untimed for throughput and the checksum, once timed for latency.
template <typename QueryFn>
void MeasureQueries(const Params& p, QueryFn query, W1Result* r) {
  uint64_t sum = 0;
  for (uint64_t k = 0; k < std::min<uint64_t>(p.queries, 2000); ++k) sum += query(k);   // warm-up
  sum = 0;
  auto t0 = Clock::now();
  for (uint64_t k = 0; k < p.queries; ++k) sum += query(k);
  auto t1 = Clock::now();
  r->checksum = sum;
  r->queries_per_s = static_cast<double>(p.queries) / Seconds(t0, t1);
  std::vector<double> lat(p.queries);
  uint64_t sink = 0;
  for (uint64_t k = 0; k < p.queries; ++k) {
    auto a = Clock::now();
    sink += query(k);
    auto b = Clock::now();
    lat[k] = static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count());
  }
  if (sink != sum) std::fprintf(stderr, "w1: nondeterministic query results\n");
  std::sort(lat.begin(), lat.end());
  r->p50_ns = lat[lat.size() / 2];
  r->p99_ns = lat[std::min(lat.size() - 1, lat.size() * 99 / 100)];
}

// kvidx's BlockIndex on the given core (kvidx: the default; kvidx-runs:
// the run core).
W1Result RunKvidx(const Params& p, const Workload& w, const IndexOptions& core) {
  W1Result r;
  uint64_t rss0 = ResidentBytes();
  auto index = std::make_unique<BlockIndex>(core);
  ModelId model = index->AddModel("w1").value();
  const bool verbose = std::getenv("KVIDX_W1_VERBOSE") != nullptr;
  if (verbose) std::fprintf(stderr, "w1: empty index + model: %.1f MiB\n", (ResidentBytes() - rss0) / 1048576.0);
  const uint64_t B = p.blocks;
  std::vector<BlockKey> keys(B);
  auto t0 = Clock::now();
  for (uint64_t i = 0; i < p.prompts; ++i) {
    for (uint64_t j = 0; j < B; ++j) keys[j] = BlockKey::FromU64(w.prompt_hashes[i * B + j]);
    Status s = index->Store(model, static_cast<SourceId>(i % p.replicas), Tier::kGpu, KvGroup{}, keys, std::nullopt);
    if (!s.ok()) std::abort();
  }
  auto t1 = Clock::now();
  uint64_t rss1 = ResidentBytes();
  if (verbose) std::fprintf(stderr, "w1: after inserts: %.1f MiB\n", (rss1 - rss0) / 1048576.0);
  r.inserts_per_s = static_cast<double>(p.prompts * B) / Seconds(t0, t1);
  for (SourceId s = 0; s < p.replicas; ++s) {
    for (auto& [tier, n] : index->GetSourceStats(s).blocks_per_tier) r.distinct_entries += n;
  }
  r.bytes_per_block = static_cast<double>(rss1 - rss0) / static_cast<double>(p.prompts * B);
  r.bytes_per_owner_entry = static_cast<double>(rss1 - rss0) / static_cast<double>(r.distinct_entries);

  std::vector<BlockKey> qkeys(p.queries * B);
  for (size_t i = 0; i < qkeys.size(); ++i) qkeys[i] = BlockKey::FromU64(w.query_hashes[i]);
  PrefixMatch pm;
  PrefixFilter filter;
  MeasureQueries(
      p,
      [&](uint64_t k) -> uint64_t {
        Status s = index->FindPrefix(model, std::span<const BlockKey>(&qkeys[k * B], B), filter, &pm);
        if (!s.ok()) std::abort();
        return pm.BestGpuBlocks();
      },
      &r);
  return r;
}

// The stores, memory and queries of an index with W1's Store(replica,
// hashes) / Match(hashes, match) shape: the naive baseline the issue asks
// for (naive_prefix_index.h), the compressed radix tree of the fastest
// peer's layout (radix_prefix_index.h), the same runs without the tree
// (run_prefix_index.h) and the index's own run store (core_run_index.h).
template <typename Index>
W1Result RunReference(const Params& p, const Workload& w) {
  W1Result r;
  uint64_t rss0 = ResidentBytes();
  auto index = std::make_unique<Index>();
  const uint64_t B = p.blocks;
  auto t0 = Clock::now();
  for (uint64_t i = 0; i < p.prompts; ++i) {
    const auto replica = static_cast<uint32_t>(i % p.replicas);
    const std::span<const uint64_t> prompt(&w.prompt_hashes[i * B], B);
    if constexpr (std::is_same_v<decltype(index->Store(replica, prompt)), bool>) {
      if (!index->Store(replica, prompt)) std::abort();
    } else {
      index->Store(replica, prompt);
    }
  }
  auto t1 = Clock::now();
  uint64_t rss1 = ResidentBytes();
  r.inserts_per_s = static_cast<double>(p.prompts * B) / Seconds(t0, t1);
  r.distinct_entries = index->OwnerEntries();
  r.bytes_per_block = static_cast<double>(rss1 - rss0) / static_cast<double>(p.prompts * B);
  r.bytes_per_owner_entry = static_cast<double>(rss1 - rss0) / static_cast<double>(r.distinct_entries);
  std::vector<uint32_t> match(p.replicas);
  MeasureQueries(
      p,
      [&](uint64_t k) -> uint64_t {
        return index->Match(std::span<const uint64_t>(&w.query_hashes[k * B], B), match);
      },
      &r);
  return r;
}

W1Result RunImpl(std::string_view impl, const Params& p, const Workload& w) {
  if (impl == "kvidx") return RunKvidx(p, w, IndexOptions{});
  if (impl == "kvidx-runs") return RunKvidx(p, w, IndexOptions{IndexCore::kRuns});
  if (impl == "naive") return RunReference<bench::NaivePrefixIndex>(p, w);
  if (impl == "radix") return RunReference<bench::RadixPrefixIndex>(p, w);
  if (impl == "runs") return RunReference<bench::RunPrefixIndex>(p, w);
  return RunReference<bench::CoreRunIndex>(p, w);
}

bool ParseFlag(std::string_view arg, std::string_view name, uint64_t* out) {
  if (arg.substr(0, name.size()) != name || arg.size() <= name.size() || arg[name.size()] != '=') return false;
  *out = std::strtoull(std::string(arg.substr(name.size() + 1)).c_str(), nullptr, 10);
  return true;
}

W1Result MedianOf(const std::vector<W1Result>& rs) {
  W1Result m = rs[0];
  auto med = [&](double W1Result::*f) {
    std::vector<double> v;
    for (const W1Result& r : rs) v.push_back(r.*f);
    return Median(v);
  };
  m.inserts_per_s = med(&W1Result::inserts_per_s);
  m.queries_per_s = med(&W1Result::queries_per_s);
  m.p50_ns = med(&W1Result::p50_ns);
  m.p99_ns = med(&W1Result::p99_ns);
  m.bytes_per_block = med(&W1Result::bytes_per_block);
  m.bytes_per_owner_entry = med(&W1Result::bytes_per_owner_entry);
  return m;
}

void Print(const char* name, const W1Result& r, const Params& p) {
  std::printf(
      "w1 impl=%-6s inserts_per_s=%.0f queries_per_s=%.0f p50_us=%.3f p99_us=%.3f bytes_per_block=%.1f "
      "bytes_per_block_replica_entry=%.1f entries=%" PRIu64 " checksum=%" PRIu64 " mean_match=%.6f\n",
      name, r.inserts_per_s, r.queries_per_s, r.p50_ns / 1000, r.p99_ns / 1000, r.bytes_per_block,
      r.bytes_per_owner_entry, r.distinct_entries, r.checksum,
      static_cast<double>(r.checksum) / static_cast<double>(p.queries));
}

}  // namespace
}  // namespace kvidx

int RunW1Bench(int argc, char** argv) {
  using namespace kvidx;
  Params p;
  for (int i = 0; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a.substr(0, 2) != "--") continue;
    uint64_t v = 0;
    if (ParseFlag(a, "--prompts", &v)) p.prompts = v;
    else if (ParseFlag(a, "--blocks", &v)) p.blocks = v;
    else if (ParseFlag(a, "--shared", &v)) p.shared = v;
    else if (ParseFlag(a, "--groups", &v)) p.groups = v;
    else if (ParseFlag(a, "--replicas", &v)) p.replicas = v;
    else if (ParseFlag(a, "--queries", &v)) p.queries = v;
    else if (ParseFlag(a, "--runs", &v)) p.runs = static_cast<int>(v);
    else if (a.substr(0, 7) == "--impl=") p.impl = std::string(a.substr(7));
    else {
      std::fprintf(stderr, "w1: unknown flag %s\n", argv[i]);
      return 1;
    }
  }
  const bool known_impl = p.impl == "all" || p.impl == "both" || p.impl == "kvidx" || p.impl == "naive" ||
                          p.impl == "radix" || p.impl == "runs" || p.impl == "core" || p.impl == "kvidx-runs";
  if (p.prompts == 0 || p.blocks == 0 || p.groups == 0 || p.replicas == 0 || p.replicas > kMaxSources ||
      p.queries == 0 || p.runs <= 0 || p.shared > p.blocks || !known_impl) {
      std::fprintf(stderr, "w1: bad parameters\n");
      return 1;
  }
  std::printf("w1 params prompts=%" PRIu64 " blocks=%" PRIu64 " shared=%" PRIu64 " groups=%" PRIu64
              " replicas=%" PRIu64 " queries=%" PRIu64 " runs=%d (figures are medians; single thread)\n",
              p.prompts, p.blocks, p.shared, p.groups, p.replicas, p.queries, p.runs);
  Workload w = Generate(p);
  auto wanted = [&](std::string_view impl) {
    return p.impl == "all" || p.impl == impl || (p.impl == "both" && (impl == "kvidx" || impl == "naive"));
  };
  std::map<std::string, W1Result> got;
  for (const char* impl : {"kvidx", "naive", "radix", "runs", "core", "kvidx-runs"}) {
    if (!wanted(impl)) continue;
    std::vector<W1Result> rs;
    for (int run = 0; run < p.runs; ++run) {
      W1Result r;
      bool ok = bench::RunInChild([&] { return RunImpl(impl, p, w); }, &r);
      if (!ok) {
        std::fprintf(stderr, "w1: %s run %d failed\n", impl, run);
        return 1;
      }
      rs.push_back(r);
    }
    got[impl] = MedianOf(rs);
    Print(impl, got[impl], p);
  }
  if (!got.contains("kvidx")) return 0;
  const W1Result& kv = got["kvidx"];
  for (const char* other : {"naive", "radix", "runs", "core", "kvidx-runs"}) {
    if (!got.contains(other)) continue;
    const W1Result& o = got[other];
    std::printf("w1 ratio kvidx/%s: inserts %.2fx queries %.2fx p99 %.2fx memory %.2fx\n", other,
                kv.inserts_per_s / o.inserts_per_s, kv.queries_per_s / o.queries_per_s, o.p99_ns / kv.p99_ns,
                o.bytes_per_block / kv.bytes_per_block);
    if (kv.checksum != o.checksum) {
      std::fprintf(stderr, "w1: checksum mismatch kvidx=%" PRIu64 " %s=%" PRIu64 "\n", kv.checksum, other,
                   o.checksum);
      return 2;
    }
  }
  return 0;
}
