// RoutePolicy: which rank should serve a request, from what kvidx knows of
// each candidate's cache and load. Pure arithmetic over the signals the
// caller gathers (RouteSignals); no clock, no I/O, no locks.
//
// The cost of sending a request to a rank estimates the work that stands
// between the request and its first token there, in prefill tokens:
//
//   cost = (uncached + queued) x decode_factor x kv_factor x warmup_factor
//
//   uncached       prompt tokens the rank must compute: the prompt minus the
//                  tokens it holds on GPU, minus lower-tier copies credited
//                  at tier_credit (a CPU copy is loaded faster than it is
//                  recomputed), minus blocks predicted to be there (a sibling
//                  routed there moments ago is computing them now);
//   queued         prefill tokens ahead of it: the rank's waiting requests
//                  (scraped) times the mean uncached prompt, or kvidx's own count of
//                  in-flight uncached tokens when the scrape is stale; less
//                  the predicted blocks this request follows (their compute
//                  is queued already and would be repeated elsewhere);
//   decode_factor  1 + decode_weight x running requests: each running
//                  sequence slows every step, prefill chunks included;
//   kv_factor      > 1 once KV usage passes kv_pressure_start: a nearly
//                  full cache evicts what the next request would reuse;
//   warmup_factor  < 1 for a rank that joined less than warmup_seconds ago
//                  (linear from 1 - warmup_credit back to 1), so a fresh
//                  replica wins requests before it holds anything.
//
// The lowest cost wins; ties go to the most GPU overlap, then the lowest
// candidate index. Every term is reported, and a reason says why the
// winner won (RouteReason).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace kvidx::server {

// Chosen on kvidx-sim ttft (docs/ROUTING.md, "mean_prompt_tokens"): the
// smallest value that kept every scenario within 5% of the best peer's p99.
inline constexpr double kDefaultQueuedPromptTokens = 4096;

struct RoutePolicy {
  // Credit per lower-tier block relative to a GPU block (0..1).
  double cpu_credit = 0.75;
  double storage_credit = 0.25;
  // Credit per block predicted on the rank by an in-flight sibling (0..1).
  double predicted_credit = 1.0;
  // Cost of one running sequence, as a fraction of the request's own work.
  double decode_weight = 0.02;
  // KV usage above which the cost grows, and how steeply (factor at 100%).
  double kv_pressure_start = 0.9;
  double kv_pressure_max_factor = 3.0;
  // A rank younger than this gets its cost cut by up to warmup_credit.
  double warmup_seconds = 60;
  double warmup_credit = 0.5;
  // Prefill tokens assumed for each scraped waiting request. 0: learned,
  // the running mean of the uncached tokens of the requests Route sent
  // (kDefaultQueuedPromptTokens until the first one).
  double mean_prompt_tokens = kDefaultQueuedPromptTokens;
};

// What kvidx knows about one candidate rank for one request.
struct RouteSignals {
  uint32_t gpu_blocks = 0;       // leading blocks held on GPU
  uint32_t cpu_blocks = 0;       // further leading blocks held on CPU
  uint32_t storage_blocks = 0;   // further leading blocks in storage tiers
  uint32_t predicted_blocks = 0; // further leading blocks predicted (in flight)
  // Scraped load; `scrape_weight` (0..1) is how much to trust it (1 fresh,
  // 0 stale or never scraped: only kvidx's own accounting counts).
  double running = 0;
  double waiting = 0;
  double kv_usage = 0;
  double scrape_weight = 0;
  // kvidx's own accounting of requests it routed there and not yet done.
  double inflight_requests = 0;
  double inflight_uncached_tokens = 0;
  // Seconds since the rank joined (or restarted); large = long ago.
  double age_seconds = 1e9;
};

enum class RouteReason : uint8_t {
  kAffinity,   // the rank holding the most of the prompt won
  kLoad,       // a rank with less overlap won because the best-overlap one is loaded
  kWarmup,     // a young rank won on its warm-up credit
  kNoPrefix,   // no candidate holds any of the prompt: load decided
};
inline constexpr size_t kNumRouteReasons = 4;
std::string_view RouteReasonName(RouteReason r);  // "affinity", "load", "warmup", "no_prefix"

struct RouteScore {
  double cost = 0;
  double cached_tokens = 0;     // credited: GPU + lower tiers + predicted
  double uncached_tokens = 0;
  double queued_tokens = 0;
  double decode_factor = 1;
  double kv_factor = 1;
  double warmup_factor = 1;
};

struct RouteChoice {
  size_t winner = 0;   // index into the candidates
  RouteReason reason = RouteReason::kNoPrefix;
  std::vector<RouteScore> scores;  // one per candidate, in candidate order
};

// Scores each candidate for a prompt of `prompt_tokens` in blocks of
// `block_size` tokens. `candidates` must not be empty. The policy's
// mean_prompt_tokens must be resolved (> 0): RouteEngine fills in the
// learned mean for a policy that asks for one.
RouteChoice ChooseRoute(const RoutePolicy& policy, uint64_t prompt_tokens, uint32_t block_size,
                        std::span<const RouteSignals> candidates);

// The score of one candidate (ChooseRoute's per-candidate term).
RouteScore ScoreCandidate(const RoutePolicy& policy, uint64_t prompt_tokens, uint32_t block_size,
                          const RouteSignals& s, bool with_warmup = true);

}  // namespace kvidx::server
