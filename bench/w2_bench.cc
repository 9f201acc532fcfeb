#include "bench/w2_bench.h"

#include <charconv>
#include <cinttypes>
#include <cstdio>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "bench/child_process.h"
#include "bench/w2_indexes.h"
#include "bench/w2_replay.h"
#include "bench/w2_trace.h"
#include "index/source_registry.h"

#ifndef KVIDX_SHARED_DIR
#error "KVIDX_SHARED_DIR (the shared/ directory beside the source tree) must be defined"
#endif

namespace kvidx::bench {
namespace {

struct Flags {
  std::string trace = KVIDX_SHARED_DIR "/traces/mooncake_synthetic_trace.jsonl";
  W2Params params;
  uint64_t expand = 32;
  uint64_t runs = 3;
  std::string impl = "all";   // kvidx, naive, radix, runs, core, kvidx-runs, both (kvidx and naive) or all
};

bool ParseCount(std::string_view text, uint64_t max, uint64_t* out) {
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v > max) return false;
  *out = v;
  return true;
}

// Parses argv[1..] (argv[0] is the subcommand). False, with a message, on
// anything it does not understand.
bool ParseFlags(int argc, char** argv, Flags* f) {
  constexpr uint64_t kU32 = std::numeric_limits<uint32_t>::max();
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    std::string_view name = arg.substr(0, arg.find('='));
    std::string_view value;
    if (name.size() < arg.size()) {
      value = arg.substr(name.size() + 1);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      std::fprintf(stderr, "w2: %s needs a value\n", argv[i]);
      return false;
    }
    uint64_t n = 0;
    bool ok = true;
    if (name == "--trace") {
      f->trace = std::string(value);
    } else if (name == "--impl") {
      f->impl = std::string(value);
      ok = f->impl == "all" || f->impl == "both" || f->impl == "kvidx" || f->impl == "naive" || f->impl == "radix" ||
           f->impl == "runs" || f->impl == "core" || f->impl == "kvidx-runs";
    } else if (name == "--replicas") {
      ok = ParseCount(value, kMaxSources, &n) && n > 0;
      f->params.replicas = static_cast<uint32_t>(n);
    } else if (name == "--capacity") {
      ok = ParseCount(value, kU32, &n);
      f->params.capacity = static_cast<uint32_t>(n);
    } else if (name == "--expand") {
      ok = ParseCount(value, 1024, &f->expand) && f->expand > 0;
    } else if (name == "--runs") {
      ok = ParseCount(value, 1000, &f->runs) && f->runs > 0;
    } else if (name == "--passes") {
      ok = ParseCount(value, 1000, &n) && n > 0;   // latencies: ~12 B per request per pass
      f->params.passes = static_cast<uint32_t>(n);
    } else {
      std::fprintf(stderr, "w2: unknown argument %.*s\n", static_cast<int>(name.size()), name.data());
      return false;
    }
    if (!ok) {
      std::fprintf(stderr, "w2: bad value '%.*s' for %.*s\n", static_cast<int>(value.size()), value.data(),
                   static_cast<int>(name.size()), name.data());
      return false;
    }
  }
  return true;
}

std::string ChecksumLine(const W2Checksum& c) {
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "requests=%" PRIu64 " checksum_match=%" PRIu64 " stored_blocks=%" PRIu64 " evicted_blocks=%" PRIu64
                " store_events=%" PRIu64 " remove_events=%" PRIu64,
                c.requests, c.checksum_match, c.stored_blocks, c.evicted_blocks, c.store_events, c.remove_events);
  return buf;
}

// Rates derived from one run; medians are taken per rate, over runs.
struct W2Figures {
  double requests_per_s = 0, loop_requests_per_s = 0, loop_cpu_requests_per_s = 0;
  double stored_per_s = 0, removed_per_s = 0;
  double cpu_share = 0;   // loop CPU time / loop wall time: below ~0.9 the machine was busy
  double query_share = 0, store_share = 0, remove_share = 0;   // of the time inside index calls
  double p50_ns = 0, p99_ns = 0, bytes_per_held_block = 0;
};

double Rate(uint64_t n, double seconds) { return seconds > 0 ? static_cast<double>(n) / seconds : 0; }

W2Figures FiguresOf(const W2Run& r) {
  const W2Checksum& c = r.checksum;
  W2Figures f;
  const double index_s = r.query_s + r.store_s + r.remove_s;
  f.requests_per_s = Rate(c.requests, index_s);
  f.loop_requests_per_s = Rate(c.requests, r.loop_s);
  f.loop_cpu_requests_per_s = Rate(c.requests, r.loop_cpu_s);
  f.cpu_share = r.loop_s > 0 ? r.loop_cpu_s / r.loop_s : 0;
  if (index_s > 0) {
    f.query_share = r.query_s / index_s;
    f.store_share = r.store_s / index_s;
    f.remove_share = r.remove_s / index_s;
  }
  f.stored_per_s = Rate(c.stored_blocks, r.store_s);
  f.removed_per_s = Rate(c.evicted_blocks, r.remove_s);
  f.p50_ns = r.p50_ns;
  f.p99_ns = r.p99_ns;
  f.bytes_per_held_block =
      r.held_blocks > 0 ? static_cast<double>(r.rss_growth) / static_cast<double>(r.held_blocks) : 0;
  return f;
}

W2Figures MedianOf(const std::vector<W2Run>& runs) {
  std::vector<W2Figures> fs;
  for (const W2Run& r : runs) fs.push_back(FiguresOf(r));
  auto med = [&](double W2Figures::*field) {
    std::vector<double> v;
    for (const W2Figures& f : fs) v.push_back(f.*field);
    return Median(v);
  };
  W2Figures m;
  for (double W2Figures::*field : {&W2Figures::requests_per_s, &W2Figures::loop_requests_per_s,
                                   &W2Figures::loop_cpu_requests_per_s,
                                   &W2Figures::stored_per_s, &W2Figures::removed_per_s, &W2Figures::p50_ns,
                                   &W2Figures::p99_ns, &W2Figures::bytes_per_held_block, &W2Figures::cpu_share,
                                   &W2Figures::query_share, &W2Figures::store_share, &W2Figures::remove_share}) {
    m.*field = med(field);
  }
  return m;
}

struct Impl {
  const char* name;
  W2Run (*replay)(const W2Trace&, const W2Params&);
  std::vector<W2Run> runs;
  W2Figures median;
};

void PrintImpl(const Impl& impl) {
  const W2Figures& f = impl.median;
  const W2Run& r = impl.runs.front();
  std::printf(
      "w2 impl=%s requests_per_s=%.0f loop_requests_per_s=%.0f loop_cpu_requests_per_s=%.0f "
      "stored_blocks_per_s=%.0f removed_blocks_per_s=%.0f p50_us=%.3f p99_us=%.3f bytes_per_held_block=%.1f "
      "held_blocks=%" PRIu64 " index_time_split=query:%.2f,store:%.2f,remove:%.2f cpu_share=%.2f\n",
      impl.name, f.requests_per_s, f.loop_requests_per_s, f.loop_cpu_requests_per_s, f.stored_per_s,
      f.removed_per_s, f.p50_ns / 1000, f.p99_ns / 1000, f.bytes_per_held_block, r.held_blocks, f.query_share,
      f.store_share, f.remove_share, f.cpu_share);
  std::printf("w2 impl=%s checksum %s\n", impl.name, ChecksumLine(r.checksum).c_str());
  const IndexMemory& m = r.memory;
  if (m.total() > 0 && r.held_blocks > 0) {
    // Allocated (not resident) bytes per held block, by part, at the end of the first run.
    const double held = static_cast<double>(r.held_blocks);
    std::printf(
        "w2 impl=%s allocated_bytes_per_held_block=%.1f tables=%.1f records=%.1f owners=%.1f spill=%.1f "
        "sources=%.1f runs=%.1f\n",
        impl.name, static_cast<double>(m.total()) / held, static_cast<double>(m.tables) / held,
        static_cast<double>(m.records) / held, static_cast<double>(m.owners) / held,
        static_cast<double>(m.spill) / held, static_cast<double>(m.sources) / held, static_cast<double>(m.runs) / held);
  }
  if (r.first_pass_memory.total() > 0 || r.first_pass_rss_growth > 0) {
    // The soak: what the index holds after the first pass and after the
    // last, when the fleet holds the same number of blocks.
    const double first = static_cast<double>(r.first_pass_memory.total());
    const double last = static_cast<double>(m.total());
    std::printf("w2 impl=%s soak allocated_mib first_pass=%.1f last_pass=%.1f growth=%+.1f%% rss_mib first_pass=%.1f "
                "last_pass=%.1f held_blocks first_pass=%" PRIu64 " last_pass=%" PRIu64 "\n",
                impl.name, first / 1048576, last / 1048576, first > 0 ? 100 * (last - first) / first : 0,
                static_cast<double>(r.first_pass_rss_growth) / 1048576, static_cast<double>(r.rss_growth) / 1048576,
                r.first_pass_held_blocks, r.held_blocks);
  }
}

// > 1 means kvidx is better, for every column (W1's convention).
void PrintRatio(const Impl& kv_impl, const Impl& other) {
  const W2Figures& kv = kv_impl.median;
  const W2Figures& nv = other.median;
  std::printf(
      "w2 ratio kvidx/%s: requests %.2fx (loop %.2fx, loop cpu %.2fx) stored %.2fx removed %.2fx p99 %.2fx "
      "memory %.2fx\n",
      other.name, kv.requests_per_s / nv.requests_per_s, kv.loop_requests_per_s / nv.loop_requests_per_s,
      kv.loop_cpu_requests_per_s / nv.loop_cpu_requests_per_s, kv.stored_per_s / nv.stored_per_s,
      kv.removed_per_s / nv.removed_per_s, nv.p99_ns / kv.p99_ns, nv.bytes_per_held_block / kv.bytes_per_held_block);
}

// Runs every implementation `runs` times, alternating which goes first, so
// that slow drift in machine load falls on both alike.
bool RunAll(const W2Trace& trace, const Flags& f, std::vector<Impl>* impls) {
  for (uint64_t run = 0; run < f.runs; ++run) {
    for (size_t k = 0; k < impls->size(); ++k) {
      Impl& impl = (*impls)[run % 2 == 0 ? k : impls->size() - 1 - k];
      W2Run r;
      if (!RunInChild([&] { return impl.replay(trace, f.params); }, &r) || !r.ok) {
        std::fprintf(stderr, "w2: %s run %" PRIu64 " failed\n", impl.name, run);
        return false;
      }
      impl.runs.push_back(r);
    }
  }
  return true;
}

}  // namespace
}  // namespace kvidx::bench

int RunW2Bench(int argc, char** argv) {
  using namespace kvidx::bench;
  Flags f;
  if (!ParseFlags(argc, argv, &f)) return 1;
  kvidx::Result<W2Trace> trace = LoadW2Trace(f.trace, static_cast<uint32_t>(f.expand));
  if (!trace.ok()) {
    std::fprintf(stderr, "w2: %s\n", trace.status().ToString().c_str());
    return 2;
  }
  if (uint64_t{f.params.capacity} + trace->max_request_blocks >= std::numeric_limits<uint32_t>::max()) {
    std::fprintf(stderr, "w2: capacity + longest request must stay below 2^32 blocks\n");
    return 1;
  }
  std::printf("w2 params trace=%s requests=%zu blocks=%zu max_request_blocks=%u replicas=%u capacity=%u expand=%" PRIu64
              " runs=%" PRIu64 " passes=%u (figures are medians; single thread)\n",
              f.trace.c_str(), trace->requests(), trace->hashes.size(), trace->max_request_blocks,
              f.params.replicas, f.params.capacity, f.expand, f.runs, f.params.passes);
  auto wanted = [&](std::string_view impl) {
    return f.impl == "all" || f.impl == impl || (f.impl == "both" && (impl == "kvidx" || impl == "naive"));
  };
  std::vector<Impl> impls;
  if (wanted("kvidx")) impls.push_back({"kvidx", &ReplayW2<KvidxW2Index>, {}, {}});
  if (wanted("naive")) impls.push_back({"naive", &ReplayW2<NaiveW2Index>, {}, {}});
  if (wanted("radix")) impls.push_back({"radix", &ReplayW2<RadixW2Index>, {}, {}});
  if (wanted("runs")) impls.push_back({"runs", &ReplayW2<RunsW2Index>, {}, {}});
  if (wanted("core")) impls.push_back({"core", &ReplayW2<CoreW2Index>, {}, {}});
  if (wanted("kvidx-runs")) impls.push_back({"kvidx-runs", &ReplayW2<KvidxRunsW2Index>, {}, {}});
  if (!RunAll(*trace, f, &impls)) return 1;

  const W2Checksum& expected = impls.front().runs.front().checksum;
  bool agree = true;
  for (Impl& impl : impls) {
    impl.median = MedianOf(impl.runs);
    PrintImpl(impl);
    for (const W2Run& r : impl.runs) agree = agree && r.checksum == expected;
  }
  if (impls.front().name == std::string_view("kvidx")) {
    for (size_t k = 1; k < impls.size(); ++k) PrintRatio(impls.front(), impls[k]);
  }
  if (!agree) {
    std::fprintf(stderr, "w2: checksum differs between implementations or runs\n");
    return 2;
  }
  const W2Run& any = impls.front().runs.front();
  std::printf("w2 workload routed_match_blocks p50=%u p90=%u p99=%u max=%u requests_matching_nothing=%" PRIu64 "\n",
              any.match_p50, any.match_p90, any.match_p99, any.match_max, any.match_zero);
  std::printf("%s\n", ChecksumLine(expected).c_str());
  return 0;
}
