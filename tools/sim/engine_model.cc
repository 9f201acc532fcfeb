#include "tools/sim/engine_model.h"

#include <algorithm>

namespace kvidx::sim {

EngineModel::EngineModel(const EngineModelOptions& options, EngineModelDelegate* delegate)
    : opts_(options), delegate_(delegate) {}

void EngineModel::Enqueue(const EngineRequest& r, double now) {
  EngineRequest req = r;
  req.output_tokens = std::max<uint32_t>(1, req.output_tokens);
  req.prompt_tokens = std::max<uint32_t>(1, req.prompt_tokens);
  waiting_.push_back({req, now});
}

uint32_t EngineModel::CachedTokens(const EngineRequest& r, uint32_t hit_blocks) const {
  // vLLM computes at least the prompt's last token, so a full hit is cut to
  // the last whole block before it.
  const uint64_t usable_blocks = (r.prompt_tokens - 1) / opts_.block_size;
  return static_cast<uint32_t>(std::min<uint64_t>(hit_blocks, usable_blocks) * opts_.block_size);
}

// Spends `budget` prefill tokens: requests under way first, then new ones in
// arrival order. Returns the tokens planned.
uint32_t EngineModel::PlanPrefill(uint32_t budget) {
  uint32_t planned = 0;
  for (Running& r : running_) {
    r.step_tokens = 0;
    if (r.prefill_left == 0 || planned >= budget) continue;
    r.step_tokens = std::min(r.prefill_left, budget - planned);
    planned += r.step_tokens;
    delegate_->Computing(r.req, r.req.prompt_tokens - r.prefill_left + r.step_tokens);
  }
  while (!waiting_.empty() && planned < budget && running_.size() < opts_.max_running) {
    Waiting w = waiting_.front();
    waiting_.pop_front();
    Running r;
    r.req = w.req;
    r.enqueued = w.enqueued;
    r.cached_tokens = CachedTokens(w.req, delegate_->Schedule(w.req));
    r.prefill_left = w.req.prompt_tokens - r.cached_tokens;
    r.step_tokens = std::min(r.prefill_left, budget - planned);
    planned += r.step_tokens;
    if (r.step_tokens > 0) delegate_->Computing(r.req, r.cached_tokens + r.step_tokens);
    running_.push_back(r);
  }
  return planned;
}

double EngineModel::StartStep(double now) {
  in_step_ = true;
  step_decodes_ = 0;
  for (const Running& r : running_) {
    if (r.prefill_left == 0) ++step_decodes_;
  }
  const uint32_t budget = opts_.token_budget > step_decodes_ ? opts_.token_budget - step_decodes_ : 0;
  const uint32_t prefill = PlanPrefill(budget);
  return now + opts_.step_overhead_s + prefill * opts_.prefill_cost_s + step_decodes_ * opts_.decode_cost_s;
}

void EngineModel::FinishStep(double now) {
  in_step_ = false;
  delegate_->StepEnded();
  std::vector<Running> still;
  still.reserve(running_.size());
  for (Running& r : running_) {
    if (r.prefill_left > 0) {
      if (r.step_tokens == 0) {
        still.push_back(r);
        continue;
      }
      r.prefill_left -= r.step_tokens;
      r.step_tokens = 0;
      if (r.prefill_left > 0) {
        still.push_back(r);
        continue;
      }
      r.generated = 1;
      delegate_->FirstToken(r.req, now, r.cached_tokens);
    } else {
      ++r.generated;
    }
    if (r.generated >= r.req.output_tokens) {
      delegate_->Finished(r.req, now);
    } else {
      still.push_back(r);
    }
  }
  running_.swap(still);
}

double EngineModel::kv_usage() const {
  if (opts_.kv_blocks == 0) return 0;
  uint64_t blocks = 0;
  for (const Running& r : running_) {
    // vLLM allocates a chunk's blocks when it schedules it.
    const uint64_t tokens = r.req.prompt_tokens - r.prefill_left + r.step_tokens + r.generated;
    blocks += (tokens + opts_.block_size - 1) / opts_.block_size;
  }
  return std::min(1.0, static_cast<double>(blocks) / static_cast<double>(opts_.kv_blocks));
}

}  // namespace kvidx::sim
