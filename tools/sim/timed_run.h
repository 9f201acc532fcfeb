// TimedRun: one routing policy on a latency-modelled fleet, in simulated
// time, with a real kvidx-server in the loop (kvidx-sim ttft).
//
// Each rank is a SimRank (real block pool, real vLLM block hashes, real ZMQ
// PUB + replay) timed by an EngineModel. A discrete-event loop replays the
// requests at their arrival times: route (the policy, asking kvidx over gRPC
// where it needs to), reach the engine `ingress_s` later (HTTP, tokenizing),
// be scheduled, prefilled in chunks, decoded. Each engine step publishes its
// KV events at its end, as vLLM does, and before any decision that reads
// kvidx the loop waits until kvidx has applied every batch published so far
// in simulated time -- so kvidx's answers, and with them the run, do not
// depend on how fast this machine is. Route's own wall-clock terms
// (prediction TTL, warm-up age) do: docs/ROUTING.md says how that is bounded.
//
// Each run registers its own replicas "<policy>-<i>" through the admin API
// and removes them at the end, so policies share one server without
// sharing a cache.
//
// Not thread-safe; one thread runs.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "client/client.h"
#include "tools/sim/engine_model.h"
#include "tools/sim/fleet.h"
#include "tools/sim/timed_workload.h"

namespace kvidx::sim {

struct TimedRunOptions {
  std::string policy;
  FleetOptions fleet;                 // replica_prefix is replaced by "<policy>-"
  EngineModelOptions engine;          // block_size and kv_blocks come from `fleet`
  double ingress_s = 0.010;
  uint32_t max_query_blocks = 8192;   // the server's limit (longer prompts are asked by their head)
  // The last replica joins at this simulated time (< 0: present from the start).
  double join_at = -1;
  // kvidx Route only: every this many simulated seconds the engines' gauges
  // are published on their /metrics (MetricsEndpoint), and the next decision
  // waits until kvidx has scraped them. 0: no /metrics, Route runs on its
  // own accounting.
  // On a server with routing.clock: simulated the loop also moves the
  // server's route clock to simulated time before every Route, RouteDone
  // and scrape, and scrapes by ScrapeLoads: Route's time terms then follow
  // the simulation and the kvidx rows repeat exactly.
  double scrape_interval_s = 0;
  std::chrono::milliseconds catch_up_timeout{20000};
  uint64_t seed = 7;
};

struct TimedReport {
  std::string policy;
  uint64_t requests = 0;
  std::vector<double> ttft_s;         // one per request, in completion order
  uint64_t output_tokens = 0;
  double makespan_s = 0;              // first arrival to last token
  uint64_t prompt_tokens = 0;
  uint64_t cached_tokens = 0;         // at scheduling, on the chosen rank
  std::vector<uint64_t> rank_requests;
  std::vector<uint64_t> rank_prefill_tokens;
  uint64_t bursts = 0;
  uint64_t burst_computations = 0;    // siblings that computed their burst's prompt
  double join_to_half_share_s = -1;   // join_at: simulated seconds until half a fair share (< 0: never)
  uint64_t kvidx_waits = 0;           // catch-up barriers before decisions
  uint64_t scrape_waits = 0;          // decisions that waited for kvidx to scrape a new snapshot
  bool server_clock = false;          // kvidx Route ran on simulated time (routing.clock: simulated)
  double wall_s = 0;

  double Percentile(double p) const;  // of ttft_s, seconds
  double hit_rate() const {
    return prompt_tokens == 0 ? 0 : static_cast<double>(cached_tokens) / static_cast<double>(prompt_tokens);
  }
  double output_tokens_per_s() const { return makespan_s > 0 ? output_tokens / makespan_s : 0; }
  double imbalance() const;           // max / mean prefill tokens per rank
};

// Runs `requests` under options.policy. Errors: the fleet could not be
// created or registered, kvidx failed a call, or did not catch up in time.
Result<TimedReport> RunTimed(const TimedRunOptions& options, const std::vector<TimedRequest>& requests,
                             const client::Client& kvidx);

}  // namespace kvidx::sim
