// TimedWorkload: requests with arrival times, prompt and output lengths, for
// the latency-modelled fleet (kvidx-sim ttft).
//
// A prompt is a list of segments; a segment's tokens depend only on its id
// and the position inside it, so two prompts share a cached prefix exactly
// as far as their leading segments are equal -- Mooncake's `hash_ids`
// (512-token blocks) map one to one onto segments.
//
// Sources:
//   - a Mooncake-format JSONL trace (timestamp in ms, input_length,
//     output_length, hash_ids; other fields ignored), arrivals divided by
//     `rate_scale`;
//   - synthetic scenarios (Poisson arrivals, seeded): "hotspot" (Zipf-popular
//     system prompts + unique questions), "burst" (groups of `burst_n`
//     siblings sharing one unseen prompt, as n parallel samples or agent
//     branches), "unique" (nothing shared).
// Errors (Status) name the file and the 1-based line.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace kvidx::sim {

struct Segment {
  uint64_t id = 0;
  uint32_t tokens = 0;
};

struct TimedRequest {
  double arrival = 0;            // seconds from the start
  uint32_t prompt_tokens = 0;
  uint32_t output_tokens = 1;
  std::vector<Segment> segments; // their tokens sum to prompt_tokens
  uint32_t burst = 0;            // sibling group id (0 = none)
  uint32_t n = 1;                // siblings in its group
};

// The prompt's token ids (deterministic in the segments).
std::vector<int64_t> PromptTokens(const TimedRequest& r);

struct SyntheticOptions {
  std::string scenario;          // hotspot | burst | unique
  uint64_t requests = 2000;
  double rate = 8;               // requests (hotspot, unique) or bursts (burst) per second
  uint32_t system_prompts = 32;
  double zipf = 1.2;
  uint32_t system_tokens = 4096;
  uint32_t question_min = 256, question_max = 1024;
  uint32_t output_min = 64, output_max = 256;
  uint32_t burst_n = 8;
  uint32_t burst_prompt_min = 2048, burst_prompt_max = 8192;
  uint64_t seed = 7;
};

Result<std::vector<TimedRequest>> LoadTimedTrace(const std::string& path, double rate_scale, uint64_t max_requests);
Result<std::vector<TimedRequest>> MakeSynthetic(const SyntheticOptions& o);

}  // namespace kvidx::sim
