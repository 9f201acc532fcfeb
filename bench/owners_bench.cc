#include "bench/owners_bench.h"

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "bench/child_process.h"
#include "index/block_index.h"

namespace kvidx {
namespace {

struct OwnersResult {
  double rss_bytes = 0;   // growth from the empty index to all stores applied
  double seconds = 0;
};

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

OwnersResult Run(uint64_t n_blocks, uint32_t owners, bool tiers) {
  constexpr uint64_t kChain = 16;
  // Keys are generated per chain, not held in a vector: the run's RSS growth
  // is then the index's alone.
  auto index = std::make_unique<BlockIndex>();
  ModelId model = index->AddModel("m").value();
  uint64_t rss0 = bench::ResidentBytes();
  auto t0 = std::chrono::steady_clock::now();
  BlockKey chain[kChain];
  for (uint32_t o = 0; o < owners; ++o) {
    const SourceId source = tiers ? 0 : o;
    const Tier tier = tiers ? static_cast<Tier>(o) : Tier::kGpu;
    for (uint64_t b = 0; b < n_blocks; b += kChain) {
      uint64_t len = std::min(kChain, n_blocks - b);
      for (uint64_t j = 0; j < len; ++j) chain[j] = BlockKey::FromU64(Mix(b + j));
      std::optional<BlockKey> parent;
      if (b != 0) parent = BlockKey::FromU64(Mix(b - 1));
      Status st = index->Store(model, source, tier, KvGroup{}, std::span<const BlockKey>(chain, len), parent);
      if (!st.ok()) std::abort();
    }
  }
  auto t1 = std::chrono::steady_clock::now();
  OwnersResult r;
  r.rss_bytes = static_cast<double>(bench::ResidentBytes() - rss0);
  r.seconds = std::chrono::duration<double>(t1 - t0).count();
  if (index->BlockCount(model) != n_blocks) std::abort();
  return r;
}

}  // namespace
}  // namespace kvidx

int RunOwnersBench(int argc, char** argv) {
  using namespace kvidx;
  uint64_t n_blocks = 2'000'000;
  int runs = 3;
  bool tiers = false;
  std::vector<uint32_t> owner_counts = {1, 2, 4, 8, 64};
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a.substr(0, 9) == "--blocks=") {
      n_blocks = std::strtoull(std::string(a.substr(9)).c_str(), nullptr, 10);
    } else if (a.substr(0, 7) == "--runs=") {
      runs = std::atoi(std::string(a.substr(7)).c_str());
    } else if (a == "--tiers") {
      tiers = true;
    } else if (a.substr(0, 9) == "--owners=") {
      owner_counts.clear();
      std::string list(a.substr(9));
      for (size_t pos = 0; pos < list.size();) {
        size_t comma = list.find(',', pos);
        if (comma == std::string::npos) comma = list.size();
        owner_counts.push_back(static_cast<uint32_t>(std::strtoul(list.substr(pos, comma - pos).c_str(), nullptr, 10)));
        pos = comma + 1;
      }
    } else {
      std::fprintf(stderr, "owners: unknown flag %s\n", argv[i]);
      return 1;
    }
  }
  bool bad = n_blocks == 0 || runs <= 0 || owner_counts.empty() || owner_counts[0] != 1;
  for (uint32_t k : owner_counts) bad = bad || k == 0 || k > (tiers ? 3u : 4096u);
  if (bad) {
    std::fprintf(stderr, "owners: bad parameters (the owner list starts with 1; --tiers allows up to 3)\n");
    return 1;
  }
  std::printf("owners params blocks=%" PRIu64 " runs=%d owners_are=%s (medians; fresh process per run)\n", n_blocks,
              runs, tiers ? "tiers" : "replicas");
  double base = 0;
  for (uint32_t k : owner_counts) {
    std::vector<double> rss, secs;
    for (int r = 0; r < runs; ++r) {
      OwnersResult res;
      if (!bench::RunInChild([&] { return Run(n_blocks, k, tiers); }, &res)) {
        std::fprintf(stderr, "owners: run failed (K=%u)\n", k);
        return 1;
      }
      rss.push_back(res.rss_bytes);
      secs.push_back(res.seconds);
    }
    double m = bench::Median(rss);
    if (k == 1) base = m;
    double per_block = m / static_cast<double>(n_blocks);
    double per_extra = k == 1 ? 0 : (m - base) / static_cast<double>(n_blocks * (k - 1));
    std::printf("owners K=%-3u bytes_per_block=%.1f bytes_per_additional_owner=%.2f stores_per_s=%.0f\n", k,
                per_block, per_extra, static_cast<double>(n_blocks * k) / bench::Median(secs));
  }
  return 0;
}
