// See snapshot_bench.h.
#include "bench/snapshot_bench.h"

#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/child_process.h"
#include "index/block_index.h"
#include "index/source_registry.h"
#include "index/tier.h"
#include "server/snapshot_store.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace kvidx;
using namespace kvidx::snapshot;

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

double Secs(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// kB fields of /proc/self/status.
uint64_t StatusKb(const char* field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  size_t n = std::strlen(field);
  while (std::getline(f, line)) {
    if (line.compare(0, n, field) == 0) return std::strtoull(line.c_str() + n + 1, nullptr, 10);
  }
  return 0;
}
void ResetPeak() { std::ofstream("/proc/self/clear_refs") << "5"; }
// Peak resident growth since `base_kb` (after ResetPeak), in MiB.
double PeakExtraMiB(uint64_t base_kb) {
  uint64_t hwm = StatusKb("VmHWM:");
  return hwm > base_kb ? static_cast<double>(hwm - base_kb) / 1024.0 : 0.0;
}

uint64_t DirBytes(const std::string& dir) {
  uint64_t total = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir, ec)) {
    if (e.is_regular_file(ec)) total += e.file_size(ec);
  }
  return total;
}

// Longest call that overlapped [window_start, window_end] (ns since epoch of Clock).
struct Watch {
  std::atomic<int64_t> start{0}, end{0};
  std::atomic<int64_t> max_write_ns{0}, max_query_ns{0};
  std::atomic<uint64_t> writes{0}, queries{0};
  void Note(std::atomic<int64_t>* max, int64_t t0, int64_t t1) {
    int64_t s = start.load(std::memory_order_relaxed), e = end.load(std::memory_order_relaxed);
    if (s == 0 || t1 < s || (e != 0 && t0 > e)) return;
    int64_t d = t1 - t0, cur = max->load(std::memory_order_relaxed);
    while (d > cur && !max->compare_exchange_weak(cur, d)) {
    }
  }
  void Open() {
    max_write_ns = 0;
    max_query_ns = 0;
    end = 0;
    start = Now();
  }
  void Close() { end = Now(); }
  static int64_t Now() { return Clock::now().time_since_epoch().count(); }
};

struct Load {
  BlockIndex* index;
  ModelId model;
  SourceId writer_source;
  uint64_t n_blocks;
  std::atomic<bool> stop{false};
  Watch* watch;

  void Writer() {
    std::vector<BlockKey> keys(16);
    uint64_t i = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      for (size_t j = 0; j < keys.size(); ++j) keys[j] = BlockKey::FromU64(Mix(1ull << 60 | (i * 16 + j)));
      int64_t t0 = Watch::Now();
      (void)index->Store(model, writer_source, Tier::kGpu, KvGroup{}, keys, std::nullopt);
      int64_t t1 = Watch::Now();
      watch->Note(&watch->max_write_ns, t0, t1);
      (void)index->Remove(model, writer_source, Tier::kGpu, KvGroup{}, keys);
      int64_t t2 = Watch::Now();
      watch->Note(&watch->max_write_ns, t1, t2);
      watch->writes.fetch_add(2, std::memory_order_relaxed);
      ++i;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  void Reader() {
    std::vector<BlockKey> keys(32);
    PrefixMatch m;
    uint64_t i = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      uint64_t b = Mix(i++) % (n_blocks - keys.size());
      for (size_t j = 0; j < keys.size(); ++j) keys[j] = BlockKey::FromU64(Mix(b + j));
      int64_t t0 = Watch::Now();
      (void)index->FindPrefix(model, keys, PrefixFilter{}, &m);
      watch->Note(&watch->max_query_ns, t0, Watch::Now());
      watch->queries.fetch_add(1, std::memory_order_relaxed);
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
};

struct Run {
  double dump_s, dump_max_write_ms, dump_max_query_ms, dump_peak_mib;
  double write_s, write_max_write_ms, write_max_query_ms, write_peak_mib;
  double sst_mib, dir_mib;
  double load_s, apply_s, restore_peak_mib;
  double capture_s;  // DumpUnsorted: the server's ingest pause
};

using bench::Median;

}  // namespace

int RunSnapshotBench(int argc, char** argv) {
  uint64_t n = 10'000'000;
  uint32_t n_sources = 64;
  int runs = 3;
  std::string dir;
  IndexOptions options;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&](const char* flag) -> const char* {
      size_t l = std::strlen(flag);
      return a.compare(0, l, flag) == 0 ? a.c_str() + l : nullptr;
    };
    if (const char* v = val("--n=")) n = std::strtoull(v, nullptr, 10);
    else if (const char* v = val("--sources=")) n_sources = static_cast<uint32_t>(std::strtoul(v, nullptr, 10));
    else if (const char* v = val("--runs=")) runs = std::atoi(v);
    else if (const char* v = val("--dir=")) dir = v;
    else if (a == "--core=runs") options.core = IndexCore::kRuns;
    else if (a == "--core=blocks") options.core = IndexCore::kBlocks;
    else if (a != "snapshot") {
      std::fprintf(stderr, "kvidx-bench snapshot: unknown flag %s\n", a.c_str());
      return 1;
    }
  }
  if (n_sources < 2 || n < 1000 || runs < 1) {
    std::fprintf(stderr, "kvidx-bench snapshot: need --n >= 1000, --sources >= 2, --runs >= 1\n");
    return 1;
  }
  bool own_dir = dir.empty();
  if (own_dir) {
    const char* base = getenv("TMPDIR");
    std::string t = std::string(base != nullptr && *base ? base : "/tmp") + "/kvidx-snapbench-XXXXXX";
    if (mkdtemp(t.data()) == nullptr) {
      std::perror("mkdtemp");
      return 1;
    }
    dir = t;
  }

  // Build: every block held by two sources (n / 2 blocks), chains of 64.
  BlockIndex index(options);
  TierRegistry tiers;
  SourceRegistry sources;
  ModelId model = index.AddModel("bench-model").value();
  for (uint32_t s = 0; s <= n_sources; ++s) {
    (void)sources.Register("replica-" + std::to_string(s / 8), s % 8);  // the last one is the live writer
  }
  const uint64_t n_blocks = n / 2;
  const uint64_t per_source = n / n_sources;
  auto t_build = Clock::now();
  std::vector<BlockKey> chain(64);
  for (uint32_t s = 0; s < n_sources; ++s) {
    uint64_t first = s * (n_blocks / n_sources * 2);
    for (uint64_t off = 0; off < per_source; off += chain.size()) {
      size_t len = std::min<uint64_t>(chain.size(), per_source - off);
      for (size_t j = 0; j < len; ++j) chain[j] = BlockKey::FromU64(Mix((first + off + j) % n_blocks));
      (void)index.Store(model, s, Tier::kGpu, KvGroup{}, std::span(chain).subspan(0, len), std::nullopt);
    }
  }
  const double build_s = Secs(t_build, Clock::now());
  // What a /metrics scrape costs the index (the run core walks its runs
  // under the model's writer lock).
  auto t_memory = Clock::now();
  const IndexMemory memory = index.Memory();
  const double memory_ms = Secs(t_memory, Clock::now()) * 1e3;
  std::printf("snapshot bench: %llu owners requested, %u sources, %s core, index built in %.1f s, dir %s; "
              "Memory() %.2f ms (%.1f MiB allocated)\n",
              static_cast<unsigned long long>(n), n_sources, options.core == IndexCore::kRuns ? "run" : "per-block",
              build_s, dir.c_str(), memory_ms, static_cast<double>(memory.total()) / 1048576);

  Watch watch;
  Load load{&index, model, n_sources, n_blocks, {false}, &watch};
  std::thread writer([&] { load.Writer(); });
  std::thread reader([&] { load.Reader(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  watch.Open();
  std::this_thread::sleep_for(std::chrono::seconds(2));
  watch.Close();
  double base_write_ms = watch.max_write_ns / 1e6, base_query_ms = watch.max_query_ns / 1e6;
  std::printf("quiet baseline (2 s): max write call %.3f ms, max query %.3f ms\n", base_write_ms, base_query_ms);

  std::vector<Run> results;
  int rc = 0;
  for (int r = 0; r < runs && rc == 0; ++r) {
    Run run{};
    SnapshotData data;
    // Dump under load.
    uint64_t base = StatusKb("VmRSS:");
    ResetPeak();
    watch.Open();
    auto t0 = Clock::now();
    // As kvidx-server does: the capture is what holds ingest back (the
    // server pauses batch application for it); the sort runs after.
    index.DumpUnsorted(&data.index);
    auto t1 = Clock::now();
    if (options.core == IndexCore::kBlocks) SortSnapshot(&data.index);   // the run core's stays in run order
    auto t2 = Clock::now();
    watch.Close();
    run.dump_s = Secs(t0, t2);
    run.capture_s = Secs(t0, t1);
    run.dump_max_write_ms = watch.max_write_ns / 1e6;
    run.dump_max_query_ms = watch.max_query_ns / 1e6;
    run.dump_peak_mib = PeakExtraMiB(base);
    for (size_t i = 0; i < tiers.size(); ++i) data.tier_names.emplace_back(tiers.Name(static_cast<Tier>(i)));
    for (SourceId s = 0; s < sources.size(); ++s) {
      ingest::SourceWatermark w;
      w.source_id = s;
      w.replica = SourceRegistry::Reader(sources).Get(s)->replica;
      w.dp_rank = SourceRegistry::Reader(sources).Get(s)->dp_rank;
      w.model = "bench-model";
      w.has_seq = true;
      w.last_seq = 12345 + s;
      data.sources.push_back(w);
    }

    // Write under load (the dump's memory is still held: extra is on top).
    {
      auto store = SnapshotStore::Open(dir);
      if (!store.ok()) {
        std::fprintf(stderr, "open: %s\n", store.status().ToString().c_str());
        rc = 1;
        break;
      }
      base = StatusKb("VmRSS:");
      ResetPeak();
      watch.Open();
      t0 = Clock::now();
      Status st = store.value()->Write(data);
      t1 = Clock::now();
      watch.Close();
      if (!st.ok()) {
        std::fprintf(stderr, "write: %s\n", st.ToString().c_str());
        rc = 1;
        break;
      }
      run.write_s = Secs(t0, t1);
      run.write_max_write_ms = watch.max_write_ns / 1e6;
      run.write_max_query_ms = watch.max_query_ns / 1e6;
      run.write_peak_mib = PeakExtraMiB(base);
      run.sst_mib = store.value()->stats().last_bytes / 1048576.0;
    }
    run.dir_mib = DirBytes(dir) / 1048576.0;
    size_t owners = data.index.owners.size();
    data = SnapshotData();

    // Restore into a fresh index (what a restarting server does).
    {
      base = StatusKb("VmRSS:");
      ResetPeak();
      t0 = Clock::now();
      auto store = SnapshotStore::Open(dir);
      auto loaded = store.ok() ? store.value()->LoadLatest() : Result<std::optional<SnapshotData>>(store.status());
      t1 = Clock::now();
      if (!loaded.ok() || !loaded.value()) {
        std::fprintf(stderr, "load: %s\n", loaded.status().ToString().c_str());
        rc = 1;
        break;
      }
      BlockIndex restored(options);
      TierRegistry tiers2;
      SourceRegistry sources2;
      Status st = ApplySnapshot(*loaded.value(), &tiers2, &sources2, &restored);
      auto t2 = Clock::now();
      if (!st.ok()) {
        std::fprintf(stderr, "apply: %s\n", st.ToString().c_str());
        rc = 1;
        break;
      }
      run.load_s = Secs(t0, t1);
      run.apply_s = Secs(t1, t2);
      run.restore_peak_mib = PeakExtraMiB(base);
    }
    std::printf("run %d: %zu owners | dump %.3f s (capture %.3f s) (max write %.2f ms, max query %.3f ms, +%.0f MiB) | "
                "write %.3f s (max write %.2f ms, max query %.3f ms, +%.0f MiB), sst %.1f MiB, dir %.1f MiB | "
                "restore %.3f s = load %.3f + apply %.3f (+%.0f MiB)\n",
                r + 1, owners, run.dump_s, run.capture_s, run.dump_max_write_ms, run.dump_max_query_ms, run.dump_peak_mib,
                run.write_s, run.write_max_write_ms, run.write_max_query_ms, run.write_peak_mib, run.sst_mib,
                run.dir_mib, run.load_s + run.apply_s, run.load_s, run.apply_s, run.restore_peak_mib);
    std::fflush(stdout);
    results.push_back(run);
  }
  load.stop = true;
  writer.join();
  reader.join();
  if (own_dir) std::filesystem::remove_all(dir);
  if (results.empty()) return rc == 0 ? 1 : rc;

  auto med = [&](double Run::*f) {
    std::vector<double> v;
    for (const Run& r : results) v.push_back(r.*f);
    return Median(v);
  };
  std::printf("median of %zu: dump %.3f s (capture = server ingest pause %.3f s) (max write call %.2f ms, max query %.3f ms; baseline %.3f / %.3f ms), "
              "dump +%.0f MiB | write %.3f s (max write call %.2f ms, max query %.3f ms), write +%.0f MiB, "
              "sst %.1f MiB, dir %.1f MiB | restore %.3f s (load %.3f + apply %.3f), restore +%.0f MiB\n",
              results.size(), med(&Run::dump_s), med(&Run::capture_s), med(&Run::dump_max_write_ms), med(&Run::dump_max_query_ms),
              base_write_ms, base_query_ms, med(&Run::dump_peak_mib), med(&Run::write_s),
              med(&Run::write_max_write_ms), med(&Run::write_max_query_ms), med(&Run::write_peak_mib),
              med(&Run::sst_mib), med(&Run::dir_mib), med(&Run::load_s) + med(&Run::apply_s), med(&Run::load_s),
              med(&Run::apply_s), med(&Run::restore_peak_mib));
  return rc;
}
