// EngineLoad: what an engine's /metrics says about its load, per DP rank.
//
// vLLM exports, per engine core (label `engine`, the DP rank within the
// serving process; absent on single-rank builds = rank 0):
//   vllm:num_requests_running   requests in the running batch
//   vllm:num_requests_waiting   requests queued for admission
//   vllm:kv_cache_usage_perc    fraction (0..1) of KV blocks in use; older
//                               releases call it vllm:gpu_cache_usage_perc,
//                               read only when the new name is absent.
// A rank appearing under several label sets (e.g. two model_name values)
// sums its request counts and keeps its highest usage. A value that cannot
// be a load (NaN, infinite, negative, usage above 1, a rank label that is
// not a small integer) is counted in `invalid_values` and ignored.
//
// Pure logic over a response body; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "ingest/exposition.h"

namespace kvidx::ingest {

struct RankLoad {
  uint32_t dp_rank = 0;
  std::optional<double> running;
  std::optional<double> waiting;
  std::optional<double> kv_usage;  // 0..1
};

struct EngineLoad {
  std::vector<RankLoad> ranks;  // ascending dp_rank, only ranks with a value
  uint64_t invalid_values = 0;
  ExpositionStats exposition;

  const RankLoad* Rank(uint32_t dp_rank) const {
    for (const RankLoad& r : ranks) {
      if (r.dp_rank == dp_rank) return &r;
    }
    return nullptr;
  }
};

inline constexpr uint32_t kMaxLoadRanks = 1024;  // a larger `engine` label is invalid

EngineLoad ParseEngineLoad(std::string_view body, const ExpositionLimits& limits = {});

}  // namespace kvidx::ingest
