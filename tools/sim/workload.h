// Workload: the request stream kvidx-sim (and the fidelity tests) send to a
// simulated fleet.
//
// What makes prefix caching matter in production, in a few knobs:
//   - shared system prompts: `system_prompts` prompts of
//     [system_min, system_max] tokens, picked with Zipf popularity
//     (P(g) ~ 1 / (g + 1)^zipf_s), each followed by a user turn;
//   - multi-turn sessions: with probability `session_prob` a request
//     continues one of the last `max_sessions` conversations (the whole
//     history plus a new turn), until it reaches `max_session_tokens`;
//   - unique prompts: with probability `unique_prob` a prompt shares nothing;
//   - user turns of [turn_min, turn_max] tokens.
// Token ids are uniform in [0, vocab). The stream is a pure function of the
// options (seed included): two Workloads with equal options produce the same
// requests, which is how kvidx-sim replays one workload under two routings.
//
// Not thread-safe; one Workload per driving thread.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "base/status.h"

namespace kvidx::sim {

struct WorkloadOptions {
  uint64_t seed = 7;
  uint32_t system_prompts = 100;
  uint32_t system_min = 256;
  uint32_t system_max = 1024;
  double zipf_s = 1.0;
  double session_prob = 0.3;
  double unique_prob = 0.05;
  uint32_t turn_min = 16;
  uint32_t turn_max = 256;
  uint32_t max_session_tokens = 6000;
  uint32_t max_sessions = 512;
  uint32_t vocab = 150000;
};

// InvalidArgument naming the bad option, or OK.
Status ValidateWorkload(const WorkloadOptions& o);

enum class RequestKind : uint8_t { kSystemPrompt, kSessionTurn, kUnique };

class Workload {
 public:
  // `options` must pass ValidateWorkload.
  explicit Workload(const WorkloadOptions& options);

  // The next request's tokens (valid until the next call) and its kind.
  const std::vector<int64_t>& Next(RequestKind* kind = nullptr);

  const WorkloadOptions& options() const { return opts_; }

 private:
  int64_t Token();
  void AppendTurn(std::vector<int64_t>* v);
  size_t PickSystemPrompt();

  WorkloadOptions opts_;
  std::mt19937_64 rng_;
  std::vector<std::vector<int64_t>> prompts_;
  std::vector<double> zipf_cdf_;
  std::vector<std::vector<int64_t>> sessions_;
  size_t next_slot_ = 0;   // ring position once sessions_ is full
  std::vector<int64_t> out_;
};

// Queries for a fidelity check: what routers actually ask about. Keeps the
// last `capacity` requests and draws a mix of them unchanged (full hits
// where cached), cut at a random block and given a new tail (partial
// prefixes: where an index that is off by one block shows), and fresh
// prompts (misses).
class QuerySampler {
 public:
  QuerySampler(size_t capacity, uint32_t block_size, uint64_t seed);
  void Observe(const std::vector<int64_t>& tokens);
  // `n` queries.
  std::vector<std::vector<int64_t>> Draw(size_t n);
  size_t observed() const { return ring_.size(); }

 private:
  size_t capacity_;
  uint32_t block_size_;
  std::mt19937_64 rng_;
  std::vector<std::vector<int64_t>> ring_;
  size_t next_ = 0;
};

}  // namespace kvidx::sim
