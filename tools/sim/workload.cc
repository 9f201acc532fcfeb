#include "tools/sim/workload.h"

#include <algorithm>
#include <cmath>

namespace kvidx::sim {

Status ValidateWorkload(const WorkloadOptions& o) {
  if (o.system_prompts == 0 || o.system_prompts > 1000000) return Status::InvalidArgument("system prompts must be in [1, 1000000]");
  if (o.system_min == 0 || o.system_min > o.system_max) return Status::InvalidArgument("system prompt tokens: need 1 <= min <= max");
  if (o.system_max > (1u << 20)) return Status::InvalidArgument("system prompt tokens: max is 1048576");
  if (o.turn_min == 0 || o.turn_min > o.turn_max) return Status::InvalidArgument("turn tokens: need 1 <= min <= max");
  if (o.turn_max > (1u << 20)) return Status::InvalidArgument("turn tokens: max is 1048576");
  if (!(o.zipf_s >= 0 && o.zipf_s <= 10)) return Status::InvalidArgument("zipf exponent must be in [0, 10]");
  if (!(o.session_prob >= 0 && o.session_prob <= 1)) return Status::InvalidArgument("session probability must be in [0, 1]");
  if (!(o.unique_prob >= 0 && o.unique_prob <= 1)) return Status::InvalidArgument("unique probability must be in [0, 1]");
  if (o.max_sessions == 0) return Status::InvalidArgument("max sessions must be >= 1");
  if (o.vocab < 2) return Status::InvalidArgument("vocab must be >= 2");
  return Status::Ok();
}

Workload::Workload(const WorkloadOptions& options) : opts_(options), rng_(options.seed) {
  std::uniform_int_distribution<uint32_t> len(opts_.system_min, opts_.system_max);
  prompts_.reserve(opts_.system_prompts);
  for (uint32_t g = 0; g < opts_.system_prompts; ++g) {
    std::vector<int64_t> p(len(rng_));
    for (auto& t : p) t = Token();
    prompts_.push_back(std::move(p));
  }
  double sum = 0;
  for (size_t g = 0; g < prompts_.size(); ++g) sum += std::pow(static_cast<double>(g + 1), -opts_.zipf_s);
  double acc = 0;
  for (size_t g = 0; g < prompts_.size(); ++g) {
    acc += std::pow(static_cast<double>(g + 1), -opts_.zipf_s) / sum;
    zipf_cdf_.push_back(acc);
  }
}

int64_t Workload::Token() { return static_cast<int64_t>(rng_() % opts_.vocab); }

void Workload::AppendTurn(std::vector<int64_t>* v) {
  std::uniform_int_distribution<uint32_t> turn(opts_.turn_min, opts_.turn_max);
  uint32_t n = turn(rng_);
  for (uint32_t i = 0; i < n; ++i) v->push_back(Token());
}

size_t Workload::PickSystemPrompt() {
  double u = std::uniform_real_distribution<double>(0, 1)(rng_);
  size_t g = static_cast<size_t>(std::lower_bound(zipf_cdf_.begin(), zipf_cdf_.end(), u) - zipf_cdf_.begin());
  return std::min(g, prompts_.size() - 1);
}

const std::vector<int64_t>& Workload::Next(RequestKind* kind) {
  std::uniform_real_distribution<double> u(0, 1);
  double r = u(rng_);
  if (!sessions_.empty() && r < opts_.session_prob) {
    std::vector<int64_t>& s = sessions_[rng_() % sessions_.size()];
    if (s.size() < opts_.max_session_tokens) {
      AppendTurn(&s);  // the previous answer and the next question, as tokens
      out_ = s;
      if (kind) *kind = RequestKind::kSessionTurn;
      return out_;
    }
  }
  std::vector<int64_t> req;
  if (u(rng_) < opts_.unique_prob) {
    std::uniform_int_distribution<uint32_t> len(opts_.turn_min, opts_.system_max);
    req.resize(len(rng_));
    for (auto& t : req) t = Token();
    if (kind) *kind = RequestKind::kUnique;
  } else {
    req = prompts_[PickSystemPrompt()];
    AppendTurn(&req);
    if (kind) *kind = RequestKind::kSystemPrompt;
  }
  out_ = req;
  if (sessions_.size() < opts_.max_sessions) {
    sessions_.push_back(std::move(req));
  } else {
    sessions_[next_slot_] = std::move(req);
    next_slot_ = (next_slot_ + 1) % sessions_.size();
  }
  return out_;
}

QuerySampler::QuerySampler(size_t capacity, uint32_t block_size, uint64_t seed)
    : capacity_(std::max<size_t>(capacity, 1)), block_size_(std::max<uint32_t>(block_size, 1)), rng_(seed) {}

void QuerySampler::Observe(const std::vector<int64_t>& tokens) {
  if (ring_.size() < capacity_) {
    ring_.push_back(tokens);
  } else {
    ring_[next_] = tokens;
    next_ = (next_ + 1) % capacity_;
  }
}

std::vector<std::vector<int64_t>> QuerySampler::Draw(size_t n) {
  std::vector<std::vector<int64_t>> out;
  out.reserve(n);
  // Tokens far above any workload vocabulary: a fresh tail never collides.
  auto fresh = [&](std::vector<int64_t>* v, size_t count) {
    for (size_t i = 0; i < count; ++i) v->push_back(static_cast<int64_t>(1000000 + rng_() % 1000000));
  };
  for (size_t i = 0; i < n; ++i) {
    uint64_t kind = ring_.empty() ? 3 : rng_() % 8;
    if (kind < 4) {  // 50%: a recent request as it was sent
      out.push_back(ring_[rng_() % ring_.size()]);
    } else if (kind < 7) {  // 37.5%: a recent request cut at a block boundary, new tail or none
      const std::vector<int64_t>& src = ring_[rng_() % ring_.size()];
      size_t blocks = src.size() / block_size_;
      size_t cut = blocks == 0 ? 0 : rng_() % (blocks + 1);
      std::vector<int64_t> q(src.begin(), src.begin() + static_cast<std::ptrdiff_t>(cut * block_size_));
      if (rng_() % 2 == 0) fresh(&q, block_size_ * (1 + rng_() % 4));
      if (q.empty()) fresh(&q, block_size_);
      out.push_back(std::move(q));
    } else {  // 12.5%: a prompt nobody holds
      std::vector<int64_t> q;
      fresh(&q, block_size_ * (1 + rng_() % 8));
      out.push_back(std::move(q));
    }
  }
  return out;
}

}  // namespace kvidx::sim
