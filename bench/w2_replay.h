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
#include "index/block_index.h"
#include "base/status.h"

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
  IndexMemory memory;             // at the end, for indexes that report it (all zero otherwise)
  // After the first pass (W2Params::passes > 1): the soak's baseline.
  IndexMemory first_pass_memory;
  uint64_t first_pass_rss_growth = 0;
  uint64_t first_pass_held_blocks = 0;   // the fleet's: a fair baseline once it is full
  // The routed replica's match over requests (what a query walk must cover;
  // a property of the workload, equal for every correct index).
  uint32_t match_p50 = 0, match_p90 = 0, match_p99 = 0, match_max = 0;
  uint64_t match_zero = 0;        // requests no replica matched at all
};

struct W2Params {
  uint32_t replicas = 16;
  uint32_t capacity = 32768;
  // Replays of the trace (a soak): pass p > 0 xors every hash with a
  // per-pass salt, so each pass brings new contents and evicts the last
  // pass's. W2 itself is one pass.
  uint32_t passes = 1;
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

// One run of the loop; construct, Run() once.
template <typename Index>
class W2Replay {
 public:
  using Key = typename Index::Key;

  // Allocates the fleet and every scratch buffer, sized for the trace.
  W2Replay(const W2Trace& trace, const W2Params& p)
      : trace_(trace),
        passes_(std::max(p.passes, 1u)),
        fleet_(p.replicas, p.capacity, trace.max_request_blocks),
        keys_(trace.max_request_blocks),
        evicted_keys_(trace.max_request_blocks),
        salted_(trace.max_request_blocks),
        match_(p.replicas),
        latency_ns_(trace.requests() * passes_),
        best_match_(trace.requests() * passes_) {
    evicted_.reserve(trace.max_request_blocks);
    runs_.reserve(trace.max_request_blocks);
  }

  W2Run Run() {
    const uint64_t rss0 = ResidentBytes();
    auto created = Index::Create(trace_.max_request_blocks);
    if (!internal::Check(created.status(), "creating the index")) return out_;
    Index& index = **created;
    const auto loop0 = internal::Clock::now();
    const double cpu0 = internal::ThreadCpuSeconds();
    for (uint32_t pass = 0; pass < passes_; ++pass) {
      for (size_t i = 0; i < trace_.requests(); ++i) {
        if (!Request(index, pass, i)) return out_;
      }
      if (pass == 0 && passes_ > 1) MarkFirstPass(index, rss0);
    }
    out_.loop_s = internal::Since(loop0, internal::Clock::now());
    out_.loop_cpu_s = internal::ThreadCpuSeconds() - cpu0;
    const uint64_t rss1 = ResidentBytes();
    out_.rss_growth = rss1 > rss0 ? rss1 - rss0 : 0;
    out_.held_blocks = fleet_.held_blocks();
    if constexpr (requires(const Index& i) { i.Memory(); }) out_.memory = index.Memory();
    SetPercentiles();
    out_.ok = IndexAgreesWithFleet(index);
    return out_;
  }

 private:
  // The soak's baseline: what the index and the process hold after pass 0.
  void MarkFirstPass(const Index& index, uint64_t rss0) {
    const uint64_t rss = ResidentBytes();
    out_.first_pass_rss_growth = rss > rss0 ? rss - rss0 : 0;
    out_.first_pass_held_blocks = fleet_.held_blocks();
    if constexpr (requires(const Index& i) { i.Memory(); }) out_.first_pass_memory = index.Memory();
  }

  // Steps 1-5 of workload.md for request i of pass `pass`. False if an
  // index call failed.
  bool Request(Index& index, uint32_t pass, size_t i) {
    std::span<const uint64_t> hashes = trace_.Request(i);
    if (pass > 0) {
      const uint64_t salt = 0x9E3779B97F4A7C15ULL * pass;
      for (size_t j = 0; j < hashes.size(); ++j) salted_[j] = hashes[j] ^ salt;
      hashes = std::span<const uint64_t>(salted_.data(), hashes.size());
    }
    const size_t slot = pass * trace_.requests() + i;   // in the per-request figures
    for (size_t j = 0; j < hashes.size(); ++j) keys_[j] = Index::MakeKey(hashes[j]);
    const std::span<const Key> request(keys_.data(), hashes.size());
    const auto t0 = internal::Clock::now();
    Status s = index.Query(request, match_);
    const double took = internal::Since(t0, internal::Clock::now());
    if (!internal::Check(s, "query")) return false;
    latency_ns_[slot] = took * 1e9;
    out_.query_s += took;
    const uint32_t replica = fleet_.Route(match_);
    ++out_.checksum.requests;
    out_.checksum.checksum_match += match_[replica];
    best_match_[slot] = match_[replica];
    fleet_.Apply(replica, hashes, &runs_);
    return StoreRuns(index, replica, request) && RemoveEvicted(index, replica);
  }

  bool StoreRuns(Index& index, uint32_t replica, std::span<const Key> request) {
    for (const BlockRun& run : runs_) {
      const Key* parent = run.begin == 0 ? nullptr : &request[run.begin - 1];
      const auto t0 = internal::Clock::now();
      Status s = index.Store(replica, request.subspan(run.begin, run.end - run.begin), parent);
      out_.store_s += internal::Since(t0, internal::Clock::now());
      if (!internal::Check(s, "store")) return false;
      out_.checksum.stored_blocks += run.end - run.begin;
      ++out_.checksum.store_events;
    }
    return true;
  }

  bool RemoveEvicted(Index& index, uint32_t replica) {
    fleet_.Evict(replica, &evicted_);
    if (evicted_.empty()) return true;
    // The replica held <= capacity before this request, so it evicts at
    // most this request's new blocks: evicted_keys_ is large enough.
    for (size_t j = 0; j < evicted_.size(); ++j) evicted_keys_[j] = Index::MakeKey(evicted_[j]);
    const auto t0 = internal::Clock::now();
    Status s = index.Remove(replica, std::span<const Key>(evicted_keys_.data(), evicted_.size()));
    out_.remove_s += internal::Since(t0, internal::Clock::now());
    if (!internal::Check(s, "remove")) return false;
    out_.checksum.evicted_blocks += evicted_.size();
    ++out_.checksum.remove_events;
    return true;
  }

  template <typename T>
  static T Percentile(const std::vector<T>& sorted, size_t pct) {
    return sorted[std::min(sorted.size() - 1, sorted.size() * pct / 100)];
  }

  void SetPercentiles() {
    if (latency_ns_.empty()) return;
    std::sort(latency_ns_.begin(), latency_ns_.end());
    out_.p50_ns = Percentile(latency_ns_, 50);
    out_.p99_ns = Percentile(latency_ns_, 99);
    std::sort(best_match_.begin(), best_match_.end());
    out_.match_p50 = Percentile(best_match_, 50);
    out_.match_p90 = Percentile(best_match_, 90);
    out_.match_p99 = Percentile(best_match_, 99);
    out_.match_max = best_match_.back();
    out_.match_zero = static_cast<uint64_t>(std::count(best_match_.begin(), best_match_.end(), 0u));
  }

  // Catches stores or removals an index applied wrongly even where no later
  // query would have noticed.
  bool IndexAgreesWithFleet(const Index& index) const {
    bool agree = true;
    for (uint32_t r = 0; r < fleet_.replicas(); ++r) {
      const uint64_t held = index.HeldBlocks(r);
      if (held == fleet_.held_blocks(r)) continue;
      std::fprintf(stderr, "w2: replica %u: the index holds %llu blocks, the fleet %u\n", r,
                   static_cast<unsigned long long>(held), fleet_.held_blocks(r));
      agree = false;
    }
    return agree;
  }

  const W2Trace& trace_;
  const uint32_t passes_;
  W2Fleet fleet_;
  std::vector<Key> keys_, evicted_keys_;
  std::vector<uint64_t> salted_;
  std::vector<uint64_t> evicted_;
  std::vector<BlockRun> runs_;
  std::vector<uint32_t> match_;
  std::vector<double> latency_ns_;
  std::vector<uint32_t> best_match_;   // per request, the routed replica's match
  W2Run out_;
};

template <typename Index>
W2Run ReplayW2(const W2Trace& trace, const W2Params& p) {
  return W2Replay<Index>(trace, p).Run();
}

}  // namespace kvidx::bench
