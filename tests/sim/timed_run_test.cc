// kvidx-sim ttft's parts: timed workloads (trace parsing, bad lines,
// synthetic scenarios) and a short run of every policy against a real
// in-process server over gRPC, ZMQ and (Route's load) HTTP /metrics.
#include "tools/sim/timed_run.h"

#include <fstream>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "tests/sim/sim_test_util.h"
#include "tools/sim/fleet_policies.h"
#include "tools/sim/timed_workload.h"

namespace kvidx::sim {
namespace {

std::string WriteTrace(const server::testing::TempDir& dir, const std::string& body) {
  return dir.File("trace.jsonl", body);
}

TEST(TimedWorkloadTest, ReadsMooncakeLinesAndSharesPrefixesByHashIds) {
  server::testing::TempDir dir;
  const std::string path = WriteTrace(dir,
                                      "{\"timestamp\": 2000, \"input_length\": 700, \"output_length\": 5, "
                                      "\"hash_ids\": [1, 2]}\n\n"
                                      "{\"timestamp\": 0, \"input_length\": 1100, \"output_length\": 0, "
                                      "\"hash_ids\": [1, 3], \"extra\": true}\n");
  Result<std::vector<TimedRequest>> r = LoadTimedTrace(path, 2.0, 0);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_DOUBLE_EQ((*r)[0].arrival, 0);          // sorted by arrival
  EXPECT_DOUBLE_EQ((*r)[1].arrival, 1.0);        // 2 s at rate scale 2
  EXPECT_EQ((*r)[0].output_tokens, 1u);          // at least the first token
  const std::vector<int64_t> a = PromptTokens((*r)[0]), b = PromptTokens((*r)[1]);
  ASSERT_EQ(a.size(), 1100u);                     // 512 + 512 + 76 tokens nobody shares
  ASSERT_EQ(b.size(), 700u);
  EXPECT_TRUE(std::equal(a.begin(), a.begin() + 512, b.begin()));
  EXPECT_NE(a[512], b[512]);
}

TEST(TimedWorkloadTest, BadLinesAreNamedWithTheirLineNumber) {
  server::testing::TempDir dir;
  const std::pair<const char*, const char*> cases[] = {
      {"not json\n", ":1: not valid JSON"},
      {"[1]\n", ":1: not a JSON object"},
      {"{\"timestamp\": -1, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": []}\n", "timestamp"},
      {"{\"timestamp\": 0, \"output_length\": 1, \"hash_ids\": []}\n", "no \"input_length\" field"},
      {"{\"timestamp\": 0, \"input_length\": 0, \"output_length\": 1, \"hash_ids\": []}\n", "\"input_length\" is 0"},
      {"\n{\"timestamp\": 0, \"input_length\": 9, \"output_length\": 1, \"hash_ids\": [\"x\"]}\n", ":2: \"hash_ids\""},
      {"{\"timestamp\": 0, \"input_length\": 9, \"output_length\": 1, \"hash_ids\": 7}\n", "not an array"},
      {"\n\n", "holds no request"},
  };
  for (const auto& [body, want] : cases) {
    Result<std::vector<TimedRequest>> r = LoadTimedTrace(WriteTrace(dir, body), 1, 0);
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_NE(r.status().message().find(want), std::string::npos) << r.status().ToString();
  }
  EXPECT_EQ(LoadTimedTrace(dir.path() + "/missing.jsonl", 1, 0).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(LoadTimedTrace(WriteTrace(dir, "{}"), 0, 0).status().code(), StatusCode::kInvalidArgument);
}

TEST(TimedWorkloadTest, BurstsAreGroupsOfIdenticalPromptsArrivingTogether) {
  SyntheticOptions o;
  o.scenario = "burst";
  o.requests = 24;
  o.burst_n = 8;
  Result<std::vector<TimedRequest>> r = MakeSynthetic(o);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->size(), 24u);
  for (size_t i = 0; i < 24; ++i) {
    const TimedRequest& first = (*r)[i / 8 * 8];
    EXPECT_EQ((*r)[i].burst, first.burst);
    EXPECT_EQ((*r)[i].n, 8u);
    EXPECT_EQ((*r)[i].arrival, first.arrival);
    EXPECT_EQ(PromptTokens((*r)[i]), PromptTokens(first));
  }
  o.scenario = "nope";
  EXPECT_EQ(MakeSynthetic(o).status().code(), StatusCode::kInvalidArgument);
}

// Three single-rank replicas of 512 blocks whose /metrics Route reads over
// HTTP every 0.25 simulated seconds.
TimedRunOptions ThreeRanks(const std::string& policy) {
  TimedRunOptions o;
  o.policy = policy;
  o.fleet = testing::SmallFleet();
  o.fleet.replicas = 3;
  o.fleet.dp = 1;
  o.fleet.blocks_per_rank = 512;
  o.catch_up_timeout = std::chrono::seconds(20);
  o.scrape_interval_s = 0.25;
  return o;
}

TEST(TimedRunTest, EveryPolicyRunsOnTheSameRequestsAgainstARealServer) {
  testing::SimHarness h;
  FleetOptions fleet = testing::SmallFleet();
  fleet.replicas = 1;  // the harness's own fleet only anchors the server
  fleet.dp = 1;
  ASSERT_NO_FATAL_FAILURE(h.Start(fleet));
  SyntheticOptions w;
  w.scenario = "burst";
  w.requests = 32;
  w.burst_n = 4;
  w.burst_prompt_min = 200;
  w.burst_prompt_max = 600;
  w.rate = 20;
  Result<std::vector<TimedRequest>> reqs = MakeSynthetic(w);
  ASSERT_TRUE(reqs.ok());
  for (const std::string& policy : FleetPolicyNames()) {
    const TimedRunOptions o = ThreeRanks(policy);
    Result<TimedReport> r = RunTimed(o, reqs.value(), h.client());
    ASSERT_TRUE(r.ok()) << policy << ": " << r.status().ToString();
    EXPECT_EQ(r->requests, 32u) << policy;
    EXPECT_EQ(r->ttft_s.size(), 32u) << policy;
    EXPECT_EQ(r->bursts, 8u) << policy;
    EXPECT_GT(r->Percentile(50), 0) << policy;
    EXPECT_GE(r->burst_computations, r->bursts) << policy;
    if (policy == "kvidx") {
      // Siblings sent together follow the first: each prompt computed once.
      EXPECT_EQ(r->burst_computations, r->bursts);
      // Decisions waited for kvidx to scrape the gauges of their moment.
      EXPECT_GT(r->scrape_waits, 0u);
    } else {
      EXPECT_EQ(r->scrape_waits, 0u) << policy;
    }
  }
  // Every run removed its engines again.
  v1::ListReplicasRequest req;
  v1::ListReplicasResponse resp;
  ASSERT_TRUE(h.client().ListReplicas(req, &resp).ok());
  EXPECT_EQ(resp.replicas_size(), 1);
}

// On a server whose route clock the loop drives (routing.clock: simulated)
// Route's time terms and scraped loads follow the simulation, not the
// machine: two runs of the same requests decide identically, to the
// microsecond of every TTFT.
TEST(TimedRunTest, KvidxRunsRepeatExactlyOnSimulatedTime) {
  testing::SimHarness h;
  h.UseSimulatedClock();
  FleetOptions fleet = testing::SmallFleet();
  fleet.replicas = 1;
  fleet.dp = 1;
  ASSERT_NO_FATAL_FAILURE(h.Start(fleet));
  SyntheticOptions w;
  w.scenario = "hotspot";   // queues build up, so scraped load decides
  w.requests = 120;
  w.rate = 60;
  w.system_prompts = 6;
  w.system_tokens = 1024;
  w.question_min = 64;
  w.question_max = 256;
  Result<std::vector<TimedRequest>> reqs = MakeSynthetic(w);
  ASSERT_TRUE(reqs.ok()) << reqs.status().ToString();
  TimedRunOptions o = ThreeRanks("kvidx");
  o.engine.prefill_cost_s = 250e-6;   // 4,000 tokens/s: the hot prompt overloads a rank
  Result<TimedReport> first = RunTimed(o, reqs.value(), h.client());
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  // Wall time passes between the runs; simulated time does not care.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  Result<TimedReport> second = RunTimed(o, reqs.value(), h.client());
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  for (const TimedReport* r : {&first.value(), &second.value()}) {
    EXPECT_TRUE(r->server_clock);
    EXPECT_EQ(r->scrape_waits, 0u);   // scraped by ScrapeLoads, not awaited
    EXPECT_EQ(r->requests, 120u);
  }
  EXPECT_EQ(first->ttft_s, second->ttft_s);
  EXPECT_EQ(first->rank_requests, second->rank_requests);
  EXPECT_EQ(first->rank_prefill_tokens, second->rank_prefill_tokens);
  EXPECT_EQ(first->cached_tokens, second->cached_tokens);
  // More than one rank served: the load terms, not affinity alone, decided.
  int used = 0;
  for (uint64_t n : first->rank_requests) used += n > 0;
  EXPECT_GT(used, 1);
}

}  // namespace
}  // namespace kvidx::sim
