// EngineModel: the step timing, chunked prefill, hit cap and FCFS order,
// driven by hand (no clock, no sockets).
#include "tools/sim/engine_model.h"

#include <map>
#include <vector>

#include <gtest/gtest.h>

namespace kvidx::sim {
namespace {

class FakeCache : public EngineModelDelegate {
 public:
  uint32_t Schedule(const EngineRequest& r) override {
    scheduled.push_back(r.id);
    return hits[r.id];
  }
  void Computing(const EngineRequest& r, uint32_t through) override { chunks[r.id].push_back(through); }
  void StepEnded() override { ++steps; }
  void FirstToken(const EngineRequest& r, double now, uint32_t cached) override {
    first_token[r.id] = now;
    cached_tokens[r.id] = cached;
  }
  void Finished(const EngineRequest& r, double now) override { finished[r.id] = now; }

  std::map<uint64_t, uint32_t> hits;  // leading blocks held, per request
  std::vector<uint64_t> scheduled;
  std::map<uint64_t, std::vector<uint32_t>> chunks;  // `through` per scheduled chunk
  int steps = 0;
  std::map<uint64_t, double> first_token, finished, cached_tokens;
};

EngineModelOptions Opts() {
  EngineModelOptions o;
  o.block_size = 16;
  o.token_budget = 1000;
  o.max_running = 4;
  o.step_overhead_s = 0.001;
  o.prefill_cost_s = 0.0001;
  o.decode_cost_s = 0.01;
  o.kv_blocks = 100;
  return o;
}

// Runs steps until idle; returns the time the engine went idle.
double Drain(EngineModel& e, double now) {
  while (e.has_work()) {
    now = e.StartStep(now);
    e.FinishStep(now);
  }
  return now;
}

TEST(EngineModelTest, OneRequestPrefillsThenDecodes) {
  FakeCache cache;
  EngineModel e(Opts(), &cache);
  e.Enqueue({1, 500, 3}, 0);
  const double end = Drain(e, 0);
  // Step 1: 500 prefill tokens; steps 2 and 3: one decode each.
  EXPECT_DOUBLE_EQ(cache.first_token[1], 0.001 + 500 * 0.0001);
  EXPECT_DOUBLE_EQ(end, cache.first_token[1] + 2 * (0.001 + 0.01));
  EXPECT_DOUBLE_EQ(cache.finished[1], end);
  EXPECT_EQ(cache.steps, 3);
}

TEST(EngineModelTest, LongPromptIsChunkedByTheTokenBudget) {
  FakeCache cache;
  EngineModel e(Opts(), &cache);
  e.Enqueue({1, 2500, 1}, 0);
  Drain(e, 0);
  EXPECT_EQ(cache.steps, 3);  // 1000 + 1000 + 500
  EXPECT_EQ(cache.chunks[1], (std::vector<uint32_t>{1000, 2000, 2500}));
  EXPECT_DOUBLE_EQ(cache.first_token[1], 3 * 0.001 + 2500 * 0.0001);
}

TEST(EngineModelTest, FullHitStillComputesTheLastBlock) {
  FakeCache cache;
  cache.hits[1] = 10;  // 160 tokens: the whole prompt
  EngineModel e(Opts(), &cache);
  e.Enqueue({1, 160, 1}, 0);
  Drain(e, 0);
  EXPECT_EQ(cache.cached_tokens[1], 144);  // (160 - 1) / 16 whole blocks
  EXPECT_EQ(cache.chunks[1], (std::vector<uint32_t>{160}));
  EXPECT_DOUBLE_EQ(cache.first_token[1], 0.001 + 16 * 0.0001);
}

TEST(EngineModelTest, WaitingRequestsAreScheduledInArrivalOrderWithinLimits) {
  FakeCache cache;
  EngineModelOptions o = Opts();
  o.max_running = 2;
  EngineModel e(o, &cache);
  for (uint64_t id = 1; id <= 4; ++id) e.Enqueue({id, 100, 5}, 0);
  const double t = e.StartStep(0);
  EXPECT_EQ(cache.scheduled, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(e.waiting(), 2u);
  EXPECT_EQ(e.running(), 2u);
  EXPECT_GT(e.kv_usage(), 0.0);
  e.FinishStep(t);
  Drain(e, t);
  EXPECT_EQ(cache.scheduled, (std::vector<uint64_t>{1, 2, 3, 4}));
  EXPECT_LT(cache.first_token[2], cache.first_token[3]);
  EXPECT_EQ(cache.finished.size(), 4u);
  EXPECT_EQ(e.kv_usage(), 0.0);
}

TEST(EngineModelTest, DecodesSlowEveryStepIncludingPrefill) {
  FakeCache alone_cache, busy_cache;
  EngineModel alone(Opts(), &alone_cache), busy(Opts(), &busy_cache);
  alone.Enqueue({9, 400, 1}, 0);
  Drain(alone, 0);
  busy.Enqueue({1, 10, 50}, 0);
  double t = busy.StartStep(0);
  busy.FinishStep(t);  // request 1 is now decoding
  busy.Enqueue({9, 400, 1}, t);
  t = busy.StartStep(t);
  busy.FinishStep(t);
  EXPECT_GT(busy_cache.first_token[9] - (busy_cache.first_token[1]), alone_cache.first_token[9]);
}

}  // namespace
}  // namespace kvidx::sim
