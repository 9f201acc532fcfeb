// The W2 replay loop (../shared/bench/workload.md): every request of a trace,
// in file order, is queried against the index under test, routed by the
// fleet on the index's answer, and the stores and evictions it causes on
// the fleet are applied to the index as BlockStored / BlockRemoved events.
// Queries and events run in one loop on one thread, as a router would see
// them. Because routing uses the index's answer, an index that answers
// wrongly changes the event stream and therefore the checksum.
//
// Timed: each index call (queries one by one for p50/p99; stores and removes
// in sum), and the whole loop. Key conversion (Index::MakeKey) and the fleet
// are outside the index time; the fleet and all scratch buffers are
// allocated before the index exists, so the resident-memory growth is the
// index's own. `Index` is an adapter of the shape w2_indexes.h describes.
#pragma once

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdint>
#include <cstdio>
#include <span>
#include <vector>

#include "bench/child_process.h"
#include "bench/w2_fleet.h"
#include "bench/w2_trace.h"
#include "index/status.h"

namespace kvidx::bench {

// What every correct index produces on the same trace and parameters.
struct W2Checksum {
  uint64_t requests = 0;
  uint64_t checksum_match = 0;   // sum of the chosen replica's match, in blocks
  uint64_t stored_blocks = 0;
  uint64_t evicted_blocks = 0;
  uint64_t store_events = 0;
  uint64_t remove_events = 0;

  friend bool operator==(const W2Checksum&, const W2Checksum&) = default;
};

// One run's figures. Trivially copyable: it crosses the fork pipe.
struct W2Run {
  bool ok = false;                // every index call succeeded and the index agrees with the fleet at the end
  W2Checksum checksum;
  double loop_s = 0;              // the whole loop, fleet and key conversion included
  double loop_cpu_s = 0;          // CPU time of the loop: on a loaded machine, loop_s minus waiting
  double query_s = 0, store_s = 0, remove_s = 0;   // inside index calls only
  double p50_ns = 0, p99_ns = 0;  // per-request query latency
  uint64_t rss_growth = 0;        // bytes, from before the index is created to the end
  uint64_t held_blocks = 0;       // blocks the fleet holds at the end
};

struct W2Params {
  uint32_t replicas = 16;
  uint32_t capacity = 32768;
};

namespace internal {

using Clock = std::chrono::steady_clock;

inline double Since(Clock::time_point t0, Clock::time_point t1) {
  return std::chrono::duration<double>(t1 - t0).count();
}

inline double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

inline bool Check(const Status& s, const char* what) {
  if (!s.ok()) std::fprintf(stderr, "w2: %s failed: %s\n", what, s.ToString().c_str());
  return s.ok();
}

}  // namespace internal

template <typename Index>
W2Run ReplayW2(const W2Trace& trace, const W2Params& p) {
  using internal::Check;
  using internal::Clock;
  using internal::Since;
  using Key = typename Index::Key;
  const uint32_t max_blocks = trace.max_request_blocks;
  W2Fleet fleet(p.replicas, p.capacity, max_blocks);
  std::vector<Key> keys(max_blocks), evicted_keys(max_blocks);
  std::vector<uint64_t> evicted;
  evicted.reserve(max_blocks);
  std::vector<BlockRun> runs;
  runs.reserve(max_blocks);
  std::vector<uint32_t> match(p.replicas);
  std::vector<double> latency_ns(trace.requests());

  W2Run out;
  const uint64_t rss0 = ResidentBytes();
  auto created = Index::Create(max_blocks);
  if (!Check(created.status(), "creating the index")) return out;
  Index& index = **created;
  W2Checksum& sum = out.checksum;
  const auto loop0 = Clock::now();
  const double cpu0 = internal::ThreadCpuSeconds();
  for (size_t i = 0; i < trace.requests(); ++i) {
    const std::span<const uint64_t> hashes = trace.Request(i);
    for (size_t j = 0; j < hashes.size(); ++j) keys[j] = Index::MakeKey(hashes[j]);
    const std::span<const Key> request(keys.data(), hashes.size());

    auto t0 = Clock::now();
    Status s = index.Query(request, match);
    auto t1 = Clock::now();
    if (!Check(s, "query")) return out;
    latency_ns[i] = Since(t0, t1) * 1e9;
    out.query_s += Since(t0, t1);
    const uint32_t replica = fleet.Route(match);
    ++sum.requests;
    sum.checksum_match += match[replica];

    fleet.Apply(replica, hashes, &runs);
    for (const BlockRun& run : runs) {
      const Key* parent = run.begin == 0 ? nullptr : &keys[run.begin - 1];
      t0 = Clock::now();
      s = index.Store(replica, request.subspan(run.begin, run.end - run.begin), parent);
      t1 = Clock::now();
      if (!Check(s, "store")) return out;
      out.store_s += Since(t0, t1);
      sum.stored_blocks += run.end - run.begin;
      ++sum.store_events;
    }

    fleet.Evict(replica, &evicted);
    if (evicted.empty()) continue;
    for (size_t j = 0; j < evicted.size(); ++j) evicted_keys[j] = Index::MakeKey(evicted[j]);
    t0 = Clock::now();
    s = index.Remove(replica, std::span<const Key>(evicted_keys.data(), evicted.size()));
    t1 = Clock::now();
    if (!Check(s, "remove")) return out;
    out.remove_s += Since(t0, t1);
    sum.evicted_blocks += evicted.size();
    ++sum.remove_events;
  }
  out.loop_s = Since(loop0, Clock::now());
  out.loop_cpu_s = internal::ThreadCpuSeconds() - cpu0;
  const uint64_t rss1 = ResidentBytes();
  out.rss_growth = rss1 > rss0 ? rss1 - rss0 : 0;
  out.held_blocks = fleet.held_blocks();

  std::sort(latency_ns.begin(), latency_ns.end());
  if (!latency_ns.empty()) {
    out.p50_ns = latency_ns[latency_ns.size() / 2];
    out.p99_ns = latency_ns[std::min(latency_ns.size() - 1, latency_ns.size() * 99 / 100)];
  }
  out.ok = true;
  for (uint32_t r = 0; r < p.replicas; ++r) {
    if (index.HeldBlocks(r) != fleet.held_blocks(r)) {
      std::fprintf(stderr, "w2: replica %u: the index holds %llu blocks, the fleet %u\n", r,
                   static_cast<unsigned long long>(index.HeldBlocks(r)), fleet.held_blocks(r));
      out.ok = false;
    }
  }
  return out;
}

}  // namespace kvidx::bench
