// FleetPolicy: the routing policies kvidx-sim ttft compares on the same
// requests -- the peers' defaults as their routers implement them, and
// kvidx's Route.
//
//   random        uniform over the candidates;
//   round-robin   in turn;
//   least-loaded  fewest requests in flight (the router's own count);
//   prefix-only   most leading blocks on GPU (kvidx FindPrefix), ties to the
//                 fewest in flight;
//   dynamo        Dynamo's default KV router cost (lib/kv-router, scheduler:
//                 overlap_score_weight 1.0, temperature 0): the rank with the
//                 lowest  weight x prefill blocks + decode blocks, where
//                 prefill blocks = the request's uncached blocks there plus
//                 uncached blocks of its requests not yet past prefill, and
//                 decode blocks = blocks of its requests in flight -- all
//                 from the router's own accounting, overlap from the index;
//   llm-d         llm-d's default scorer weights (queue 2, KV utilisation 2,
//                 prefix 3): each scorer in [0, 1] (queue: min-max scaled
//                 waiting requests, inverted; KV: 1 - usage; prefix: matched
//                 fraction of the prompt's blocks), the highest sum wins;
//                 queue and KV usage read fresh from the engines, as a
//                 perfect scrape would;
//   kvidx         KvIndex.Route over gRPC (n, expected output), RouteDone
//                 with the engine's cached tokens at completion.
// Ties go to the lowest index after the stated tie-breaks, so every policy
// but `random` is deterministic given the fleet's state.
//
// Not thread-safe: one simulation loop drives a policy.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "client/client.h"
#include "index/block_index.h"

namespace kvidx::sim {

// One candidate rank as the router sees it for one request.
struct CandidateView {
  size_t rank = 0;                  // the fleet's rank index
  std::string replica;
  uint32_t dp_rank = 0;
  // The engine's own numbers (/metrics).
  size_t waiting = 0;
  size_t running = 0;
  double kv_usage = 0;
  // The router's accounting.
  uint32_t in_flight = 0;
  uint64_t prefill_blocks = 0;      // uncached blocks of its requests before their first token
  uint64_t active_blocks = 0;       // blocks of its requests in flight
};

struct RouteInput {
  const std::vector<BlockKey>* keys = nullptr;  // the prompt's block keys (may be cut)
  uint32_t prompt_tokens = 0;
  uint32_t output_tokens = 0;
  uint32_t n = 1;
  uint32_t block_size = 16;
  uint64_t request_id = 0;
};

struct RouteDecision {
  size_t candidate = 0;            // index into the candidates
  uint64_t route_id = 0;           // kvidx only
  uint32_t overlap_blocks = 0;     // what the policy believed the winner holds (its uncached estimate)
};

class FleetPolicy {
 public:
  virtual ~FleetPolicy() = default;
  virtual const char* name() const = 0;
  // `candidates` is never empty.
  virtual Result<RouteDecision> Choose(const RouteInput& in, std::span<const CandidateView> candidates) = 0;
  // The routed request ended (kvidx: RouteDone).
  virtual Status Done(const RouteDecision& /*d*/, uint32_t /*prompt_tokens*/, uint32_t /*cached_tokens*/) {
    return Status::Ok();
  }
};

// The policy names, in table order.
const std::vector<std::string>& FleetPolicyNames();
// `model` is the kvidx model name; `kvidx` must outlive the policy.
Result<std::unique_ptr<FleetPolicy>> MakeFleetPolicy(const std::string& name, const client::Client* kvidx,
                                                     const std::string& model, uint64_t seed);

}  // namespace kvidx::sim
