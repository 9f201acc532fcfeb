// DiscoveryState::Update on a discovered fleet of N engines x 8 DP ranks
// (issue 19: "1,000 engines x 8 DP ranks discovered and diffed in
// O(changes)"): one provider's answer per iteration, prebuilt, as the
// discovery thread hands it over after a resolution or a watch event.
//
//   kvidx-bench --benchmark_filter=Discovery
//
// Counters per iteration: lookups (engines of the answer looked up, = N)
// and other (records visited or changed beyond them: the O(changes) part).
#include <benchmark/benchmark.h>

#include <chrono>
#include <string>
#include <vector>

#include "server/discovery_state.h"

namespace {

using kvidx::server::DiscoveryActions;
using kvidx::server::DiscoveryState;
using kvidx::server::EngineEntry;

EngineEntry MakeEngine(int i) {
  EngineEntry e;
  e.engine.replica = "vllm-" + std::to_string(i) + ".vllm.inference.svc.cluster.local";
  e.engine.model = "qwen";
  const std::string host = "10." + std::to_string(i / 250) + "." + std::to_string(i % 250) + ".7";
  e.engine.endpoint = "tcp://" + host + ":5557";
  e.engine.replay_endpoint = "tcp://" + host + ":5558";
  e.engine.data_parallel_size = 8;
  e.metrics_url = "http://" + host + ":8000/metrics";
  return e;
}

std::vector<EngineEntry> Fleet(int n) {
  std::vector<EngineEntry> out;
  for (int i = 0; i < n; ++i) out.push_back(MakeEngine(i));
  return out;
}

void Report(benchmark::State& state, const DiscoveryState& d, const DiscoveryState::Work& before, size_t actions) {
  const double iters = static_cast<double>(state.iterations());
  state.counters["lookups"] = static_cast<double>(d.work().lookups - before.lookups) / iters;
  state.counters["other"] = static_cast<double>(d.work().other - before.other) / iters;
  state.counters["actions"] = static_cast<double>(actions) / iters;
}

// The same N engines again: nothing to do.
void BM_DiscoveryUpdateUnchanged(benchmark::State& state) {
  const std::vector<EngineEntry> fleet = Fleet(static_cast<int>(state.range(0)));
  DiscoveryState d;
  const auto now = DiscoveryState::Clock::now();
  d.Update("dns", std::chrono::seconds(30), fleet, now);
  const DiscoveryState::Work before = d.work();
  size_t actions = 0;
  for (auto _ : state) {
    DiscoveryActions a = d.Update("dns", std::chrono::seconds(30), fleet, now);
    actions += a.add.size() + a.remove.size();
    benchmark::DoNotOptimize(a);
  }
  Report(state, d, before, actions);
}
BENCHMARK(BM_DiscoveryUpdateUnchanged)->Arg(1000)->Arg(5000)->Unit(benchmark::kMicrosecond);

// One engine replaced per answer (a pod rescheduled under a new name; grace
// 0: removed with the answer that misses it): one add and one remove.
void BM_DiscoveryUpdateOneReplaced(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  std::vector<EngineEntry> a = Fleet(n), b = a;
  b[static_cast<size_t>(n / 2)] = MakeEngine(n);
  DiscoveryState d;
  const auto now = DiscoveryState::Clock::now();
  d.Update("dns", std::chrono::milliseconds(0), a, now);
  const DiscoveryState::Work before = d.work();
  size_t actions = 0;
  bool flip = false;
  for (auto _ : state) {
    flip = !flip;
    DiscoveryActions x = d.Update("dns", std::chrono::milliseconds(0), flip ? b : a, now);
    actions += x.add.size() + x.remove.size();
    benchmark::DoNotOptimize(x);
  }
  Report(state, d, before, actions);
}
BENCHMARK(BM_DiscoveryUpdateOneReplaced)->Arg(1000)->Arg(5000)->Unit(benchmark::kMicrosecond);

// The first answer: N engines added (a kvidx start beside a running fleet).
void BM_DiscoveryFirstAnswer(benchmark::State& state) {
  const std::vector<EngineEntry> fleet = Fleet(static_cast<int>(state.range(0)));
  const auto now = DiscoveryState::Clock::now();
  for (auto _ : state) {
    DiscoveryState d;
    DiscoveryActions a = d.Update("dns", std::chrono::seconds(30), fleet, now);
    benchmark::DoNotOptimize(a);
  }
}
BENCHMARK(BM_DiscoveryFirstAnswer)->Arg(1000)->Unit(benchmark::kMicrosecond);

}  // namespace
