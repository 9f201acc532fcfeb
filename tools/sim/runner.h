// Runner: drives a workload through a Fleet, routing each request either at
// random or by kvidx's answer, injecting faults, and checking fidelity at
// checkpoints. kvidx-sim is flags + reports around it; tests use it too.
//
// Routing by kvidx: one FindPrefixTokens per request; the rank with the
// longest matched GPU prefix wins; ties, and requests nobody holds, go to
// the least loaded rank (load = an exponentially decayed count of recent
// requests), then at random. A failed query routes at random (kvidx is
// advisory) and is counted.
//
// A checkpoint (every `check_every` requests and at the end of the phase)
// settles the fleet (Fleet::Settle), waits until kvidx has caught up, and
// measures fidelity over `samples` queries drawn from recent traffic.
//
// Not thread-safe; one thread runs phases. The progress callback runs on it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "client/client.h"
#include "base/status.h"
#include "tools/sim/fidelity.h"
#include "tools/sim/fleet.h"
#include "tools/sim/workload.h"

namespace kvidx::sim {

enum class Routing : uint8_t { kRandom, kKvidx };
const char* RoutingName(Routing r);  // "random" / "kvidx"

// Scale the fleet to `replicas` before global request `at` (Fleet::ScaleTo).
struct ScaleStep {
  uint64_t at = 0;
  int replicas = 1;
};

// "AT:REPLICAS[,AT:REPLICAS...]", e.g. "2000:5,4000:1"; steps in increasing
// order of AT. InvalidArgument naming the bad step.
Result<std::vector<ScaleStep>> ParseScaleSteps(const std::string& text);

struct PhaseOptions {
  std::string name;
  Routing routing = Routing::kRandom;
  WorkloadOptions workload;
  uint64_t requests = 0;          // stop after this many (0 = no limit)
  double duration_seconds = 0;    // ... or after this long (0 = no limit); one must be set
  double rate = 0;                // requests per second (0 = as fast as possible)
  double full_report = 0.1;       // fraction of requests in kv_cache_report_mode="full"
  double drop_rate = 0;           // fraction of published batches dropped at the publisher
  uint64_t first_request = 0;     // global number of this phase's first request
  std::optional<uint64_t> restart_at;  // global request number: restart `restart_rank` before it
  size_t restart_rank = 1;
  std::optional<uint64_t> pause_at;    // global request number: pause all traffic before it
  double pause_seconds = 0;
  std::vector<ScaleStep> scale_at;     // fleet size changes (Runner::set_on_scale is told)
  uint64_t check_every = 0;       // fidelity checkpoint every N requests (0 = end of phase only)
  size_t samples = 200;           // fidelity queries per checkpoint
  bool final_check = true;        // checkpoint at the end of the phase
  std::chrono::milliseconds catch_up_timeout{20000};
  uint64_t seed = 1;              // routing and fault randomness
};

struct PhaseReport {
  std::string name;
  Routing routing = Routing::kRandom;
  uint64_t requests = 0;
  uint64_t prompt_blocks = 0;     // full blocks of all prompts
  uint64_t hit_blocks = 0;        // of those, found in the chosen rank's cache
  double seconds = 0;             // traffic time (checkpoints and pauses excluded)
  double wall_seconds = 0;        // everything
  uint64_t batches_published = 0;
  uint64_t events_published = 0;
  uint64_t batches_dropped = 0;
  uint64_t restarts = 0;
  uint64_t pauses = 0;
  uint64_t scale_steps = 0;
  uint64_t settle_requests = 0;
  uint64_t routing_queries = 0;
  uint64_t routing_errors = 0;
  uint64_t fidelity_queries = 0;
  std::vector<double> query_us;   // routing query latencies (client side, microseconds)
  FidelityResult fidelity;
  uint64_t checks = 0;
  std::string catch_up_error;     // the first checkpoint where kvidx did not catch up ("" = none)

  double hit_rate() const {
    return prompt_blocks == 0 ? 0 : static_cast<double>(hit_blocks) / static_cast<double>(prompt_blocks);
  }
};

// Called about once per second with the phase so far and the rates over the
// last interval.
using ProgressFn = std::function<void(const PhaseReport& so_far, double events_per_s, double queries_per_s)>;

class Runner {
 public:
  // Both must outlive the Runner.
  Runner(Fleet* fleet, const client::Client* kvidx);

  // Runs one phase. Errors: traffic could not be served (a SimRank failed),
  // or a checkpoint could not query kvidx at all. kvidx failing to catch up
  // is not an error: it is recorded in the report (catch_up_error).
  Result<PhaseReport> Run(const PhaseOptions& options, const ProgressFn& progress = nullptr);

  // Settles the fleet, waits for kvidx and measures `samples` queries drawn
  // from the traffic seen so far.
  Status Checkpoint(size_t samples, std::chrono::milliseconds timeout, PhaseReport* report);

  // Called after every scale step with the fleet resized (e.g. to publish it
  // through DNS); its error ends the phase.
  void set_on_scale(std::function<Status()> fn) { on_scale_ = std::move(fn); }

 private:
  Status Scale(int replicas);
  size_t Route(const std::vector<int64_t>& tokens, Routing routing, PhaseReport* report);
  double Load(size_t i) const;
  void AddLoad(size_t i);

  Fleet* fleet_;
  const client::Client* kvidx_;
  std::mt19937_64 rng_;
  QuerySampler sampler_;
  uint64_t tick_ = 0;
  std::vector<double> load_;
  std::vector<uint64_t> load_tick_;
  v1::FindPrefixResponse resp_;
  std::vector<size_t> candidates_;
  std::function<Status()> on_scale_;
};

}  // namespace kvidx::sim
