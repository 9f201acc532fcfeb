#include "ingest/engine_load.h"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace kvidx::ingest {

namespace {

enum class Gauge : uint8_t { kRunning, kWaiting, kUsage, kLegacyUsage, kOther };

Gauge GaugeOf(std::string_view name) {
  if (name == "vllm:num_requests_running") return Gauge::kRunning;
  if (name == "vllm:num_requests_waiting") return Gauge::kWaiting;
  if (name == "vllm:kv_cache_usage_perc") return Gauge::kUsage;
  if (name == "vllm:gpu_cache_usage_perc") return Gauge::kLegacyUsage;
  return Gauge::kOther;
}

std::optional<uint32_t> RankOf(const ExpositionSample& s) {
  const std::string* engine = s.Label("engine");
  if (engine == nullptr) return 0;
  uint32_t rank = 0;
  auto [end, ec] = std::from_chars(engine->data(), engine->data() + engine->size(), rank);
  if (ec != std::errc() || end != engine->data() + engine->size() || rank >= kMaxLoadRanks) return std::nullopt;
  return rank;
}

bool Valid(Gauge g, double v) {
  if (!std::isfinite(v) || v < 0) return false;
  return (g != Gauge::kUsage && g != Gauge::kLegacyUsage) || v <= 1.0;
}

void Add(std::optional<double>& slot, double v) { slot = slot.value_or(0) + v; }
void Max(std::optional<double>& slot, double v) { slot = std::max(slot.value_or(0), v); }

}  // namespace

EngineLoad ParseEngineLoad(std::string_view body, const ExpositionLimits& limits) {
  EngineLoad out;
  std::vector<RankLoad> legacy;  // old-name usage, used where the new name is absent
  auto slot = [](std::vector<RankLoad>& v, uint32_t rank) -> RankLoad& {
    auto it = std::lower_bound(v.begin(), v.end(), rank, [](const RankLoad& r, uint32_t k) { return r.dp_rank < k; });
    if (it == v.end() || it->dp_rank != rank) it = v.insert(it, RankLoad{rank, {}, {}, {}});
    return *it;
  };
  out.exposition = ReadExposition(body, limits, [&](const ExpositionSample& s) {
    const Gauge g = GaugeOf(s.name);
    if (g == Gauge::kOther) return;
    const std::optional<uint32_t> rank = RankOf(s);
    if (!rank || !Valid(g, s.value)) {
      ++out.invalid_values;
      return;
    }
    switch (g) {
      case Gauge::kRunning: Add(slot(out.ranks, *rank).running, s.value); break;
      case Gauge::kWaiting: Add(slot(out.ranks, *rank).waiting, s.value); break;
      case Gauge::kUsage: Max(slot(out.ranks, *rank).kv_usage, s.value); break;
      case Gauge::kLegacyUsage: Max(slot(legacy, *rank).kv_usage, s.value); break;
      case Gauge::kOther: break;
    }
  });
  for (const RankLoad& l : legacy) {
    RankLoad& r = slot(out.ranks, l.dp_rank);
    if (!r.kv_usage) r.kv_usage = l.kv_usage;
  }
  return out;
}

}  // namespace kvidx::ingest
