// EngineModel: the timing of one vLLM engine rank, close enough to vLLM's
// scheduler to rank routing policies by the latency users feel.
//
// Model (vllm/v1/core/sched/scheduler.py, default V1 settings):
//   - the engine runs steps back to back while it has work; a step first
//     gives every running request in decode one token, then spends what is
//     left of `token_budget` (max_num_batched_tokens) on prefill, first on
//     requests whose prefill is under way, then on waiting ones in arrival
//     order (FCFS, chunked prefill: a long prompt takes several steps), at
//     most `max_running` requests at once (max_num_seqs);
//   - a waiting request's cache hit is decided when it is first scheduled
//     (get_computed_blocks), capped at prompt-1 tokens, block aligned, as
//     vLLM recomputes at least the last token; each chunk's blocks are
//     cached when the chunk is scheduled (so a request scheduled after it
//     hits them) and published at the end of that step;
//   - step time = step_overhead + prefill tokens x prefill_cost + decoding
//     requests x decode_cost: prefill is compute bound, decode memory bound,
//     and every running sequence slows every step, prefill chunks included;
//   - TTFT = arrival at the engine to the end of the step that finishes the
//     prefill (the first token comes out of that step); then one token per
//     step until `output_tokens`.
// Cache contents and KV events are the delegate's (a SimRank): the model
// asks it for a request's hit when scheduling and tells it when a step ends,
// which is when vLLM publishes the step's events.
//
// Pure logic, no clock and no I/O: the caller owns time (a discrete-event
// loop calls Enqueue / StartStep / FinishStep). Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

namespace kvidx::sim {

struct EngineModelOptions {
  uint32_t block_size = 16;
  uint32_t token_budget = 8192;       // max_num_batched_tokens
  uint32_t max_running = 256;         // max_num_seqs
  double step_overhead_s = 0.005;     // scheduling, sampling, kernel launches
  double prefill_cost_s = 50e-6;      // per prefill token (20k tokens/s)
  double decode_cost_s = 100e-6;      // per decoding request per step
  uint64_t kv_blocks = 0;             // KV capacity, for kv_usage()
};

// One request as the engine sees it. `id` is the caller's.
struct EngineRequest {
  uint64_t id = 0;
  uint32_t prompt_tokens = 0;
  uint32_t output_tokens = 1;         // >= 1: the first token ends the prefill
};

class EngineModelDelegate {
 public:
  virtual ~EngineModelDelegate() = default;
  // Leading blocks of the request's prompt the engine holds now (called
  // once per request, at its first scheduling, in scheduling order).
  virtual uint32_t Schedule(const EngineRequest& r) = 0;
  // A step scheduled the prompt's tokens up to `through`: vLLM caches
  // their full blocks now, and publishes them at the step's end.
  virtual void Computing(const EngineRequest& r, uint32_t through) = 0;
  // The step ended: publish its events.
  virtual void StepEnded() = 0;
  // The request's first token came out (TTFT) / its last one did.
  virtual void FirstToken(const EngineRequest& r, double now, uint32_t cached_tokens) = 0;
  virtual void Finished(const EngineRequest& r, double now) = 0;
};

class EngineModel {
 public:
  EngineModel(const EngineModelOptions& options, EngineModelDelegate* delegate);

  // A request reaches the engine at `now`.
  void Enqueue(const EngineRequest& r, double now);
  bool busy() const { return in_step_; }
  bool has_work() const { return !waiting_.empty() || !running_.empty(); }
  // Plans the next step at `now` (the engine must be idle and have work);
  // returns when it ends.
  double StartStep(double now);
  // Ends the step StartStep planned, at the time it returned.
  void FinishStep(double now);

  // What vLLM's /metrics would show now.
  size_t waiting() const { return waiting_.size(); }
  size_t running() const { return running_.size(); }
  // Blocks held by running requests / capacity (vllm:kv_cache_usage_perc).
  double kv_usage() const;

 private:
  struct Running {
    EngineRequest req;
    double enqueued = 0;
    uint32_t cached_tokens = 0;
    uint32_t prefill_left = 0;   // tokens still to prefill
    uint32_t generated = 0;      // output tokens so far
    uint32_t step_tokens = 0;    // prefill tokens in the current step
  };
  struct Waiting {
    EngineRequest req;
    double enqueued = 0;
  };

  uint32_t CachedTokens(const EngineRequest& r, uint32_t hit_blocks) const;
  uint32_t PlanPrefill(uint32_t budget);

  EngineModelOptions opts_;
  EngineModelDelegate* delegate_;
  std::deque<Waiting> waiting_;
  std::vector<Running> running_;
  bool in_step_ = false;
  uint32_t step_decodes_ = 0;
};

}  // namespace kvidx::sim
