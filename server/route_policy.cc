#include "server/route_policy.h"

#include <algorithm>
#include <cmath>

namespace kvidx::server {

std::string_view RouteReasonName(RouteReason r) {
  switch (r) {
    case RouteReason::kAffinity: return "affinity";
    case RouteReason::kLoad: return "load";
    case RouteReason::kWarmup: return "warmup";
    case RouteReason::kNoPrefix: return "no_prefix";
  }
  return "unknown";
}

namespace {

// vLLM always computes the prompt's last token: at most the blocks before
// it can be reused.
double UsableTokens(uint64_t prompt_tokens, uint32_t block_size) {
  if (prompt_tokens == 0 || block_size == 0) return 0;
  return static_cast<double>((prompt_tokens - 1) / block_size * block_size);
}

double CreditedBlocks(const RoutePolicy& p, const RouteSignals& s) {
  return s.gpu_blocks + p.cpu_credit * s.cpu_blocks + p.storage_credit * s.storage_blocks +
         p.predicted_credit * s.predicted_blocks;
}

double KvFactor(const RoutePolicy& p, double usage) {
  if (usage <= p.kv_pressure_start || p.kv_pressure_start >= 1) return 1;
  const double over = std::min(1.0, (usage - p.kv_pressure_start) / (1 - p.kv_pressure_start));
  return 1 + over * (p.kv_pressure_max_factor - 1);
}

double WarmupFactor(const RoutePolicy& p, double age_seconds) {
  if (p.warmup_seconds <= 0 || age_seconds >= p.warmup_seconds) return 1;
  const double left = 1 - std::max(0.0, age_seconds) / p.warmup_seconds;
  return 1 - p.warmup_credit * left;
}

}  // namespace

RouteScore ScoreCandidate(const RoutePolicy& p, uint64_t prompt_tokens, uint32_t block_size, const RouteSignals& s,
                          bool with_warmup) {
  RouteScore r;
  const double w = std::clamp(s.scrape_weight, 0.0, 1.0);
  r.cached_tokens = std::min(UsableTokens(prompt_tokens, block_size), CreditedBlocks(p, s) * block_size);
  r.uncached_tokens = static_cast<double>(prompt_tokens) - r.cached_tokens;
  // kvidx's own count covers what it routed since the last scrape; the
  // scrape covers every router's requests. Either may be the larger.
  r.queued_tokens = std::max(w * s.waiting * p.mean_prompt_tokens, s.inflight_uncached_tokens);
  // Predicted blocks are being computed by a request already queued there:
  // waiting for them is this request's prefill, not extra work on top.
  const double following = std::min(s.inflight_uncached_tokens, p.predicted_credit * s.predicted_blocks * block_size);
  r.queued_tokens = std::max(0.0, r.queued_tokens - following);
  r.decode_factor = 1 + p.decode_weight * std::max(w * s.running, s.inflight_requests);
  r.kv_factor = KvFactor(p, w * s.kv_usage);
  r.warmup_factor = with_warmup ? WarmupFactor(p, s.age_seconds) : 1;
  r.cost = (r.uncached_tokens + r.queued_tokens) * r.decode_factor * r.kv_factor * r.warmup_factor;
  return r;
}

namespace {

// Lowest cost; ties to the most GPU overlap, then the lowest index.
size_t Best(std::span<const RouteScore> scores, std::span<const RouteSignals> c) {
  size_t best = 0;
  for (size_t i = 1; i < scores.size(); ++i) {
    if (scores[i].cost < scores[best].cost ||
        (scores[i].cost == scores[best].cost && c[i].gpu_blocks > c[best].gpu_blocks)) {
      best = i;
    }
  }
  return best;
}

}  // namespace

RouteChoice ChooseRoute(const RoutePolicy& p, uint64_t prompt_tokens, uint32_t block_size,
                        std::span<const RouteSignals> c) {
  RouteChoice out;
  out.scores.reserve(c.size());
  for (const RouteSignals& s : c) out.scores.push_back(ScoreCandidate(p, prompt_tokens, block_size, s));
  if (c.empty()) return out;
  out.winner = Best(out.scores, c);
  std::vector<RouteScore> settled;  // the same scores without warm-up credit
  settled.reserve(c.size());
  for (const RouteSignals& s : c) settled.push_back(ScoreCandidate(p, prompt_tokens, block_size, s, false));
  double most_cached = 0;
  for (const RouteScore& s : out.scores) most_cached = std::max(most_cached, s.cached_tokens);
  if (Best(settled, c) != out.winner) {
    out.reason = RouteReason::kWarmup;
  } else if (most_cached == 0) {
    out.reason = RouteReason::kNoPrefix;
  } else if (out.scores[out.winner].cached_tokens == most_cached) {
    out.reason = RouteReason::kAffinity;
  } else {
    out.reason = RouteReason::kLoad;
  }
  return out;
}

}  // namespace kvidx::server
