// vLLM's load gauges read from /metrics bodies as vLLM writes them (one
// series per engine core, label `engine`), as older releases wrote them
// (gpu_cache_usage_perc, no engine label) and as nothing valid writes them.
#include "ingest/engine_load.h"

#include <gtest/gtest.h>

namespace kvidx::ingest {
namespace {

TEST(EngineLoad, ReadsEachDpRankOfAV1Engine) {
  const EngineLoad l = ParseEngineLoad(
      "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
      "# TYPE vllm:num_requests_running gauge\n"
      "vllm:num_requests_running{engine=\"0\",model_name=\"qwen\"} 3.0\n"
      "vllm:num_requests_running{engine=\"1\",model_name=\"qwen\"} 5.0\n"
      "vllm:num_requests_waiting{engine=\"0\",model_name=\"qwen\"} 0.0\n"
      "vllm:num_requests_waiting{engine=\"1\",model_name=\"qwen\"} 7.0\n"
      "vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"qwen\"} 0.25\n"
      "vllm:kv_cache_usage_perc{engine=\"1\",model_name=\"qwen\"} 0.5\n"
      "vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"0.001\",model_name=\"qwen\"} 0.0\n");
  EXPECT_EQ(l.invalid_values, 0u);
  ASSERT_EQ(l.ranks.size(), 2u);
  EXPECT_EQ(l.Rank(0)->running, 3.0);
  EXPECT_EQ(l.Rank(0)->waiting, 0.0);
  EXPECT_EQ(l.Rank(0)->kv_usage, 0.25);
  EXPECT_EQ(l.Rank(1)->running, 5.0);
  EXPECT_EQ(l.Rank(1)->waiting, 7.0);
  EXPECT_EQ(l.Rank(1)->kv_usage, 0.5);
  EXPECT_EQ(l.Rank(2), nullptr);
}

TEST(EngineLoad, OldUsageNameCountsOnlyWhereTheNewOneIsAbsent) {
  const EngineLoad old_only = ParseEngineLoad(
      "vllm:num_requests_running{model_name=\"m\"} 1\n"
      "vllm:gpu_cache_usage_perc{model_name=\"m\"} 0.75\n");
  ASSERT_EQ(old_only.ranks.size(), 1u);
  EXPECT_EQ(old_only.ranks[0].dp_rank, 0u);  // no engine label: rank 0
  EXPECT_EQ(old_only.ranks[0].kv_usage, 0.75);

  const EngineLoad both = ParseEngineLoad(
      "vllm:gpu_cache_usage_perc 0.75\n"
      "vllm:kv_cache_usage_perc 0.5\n");
  EXPECT_EQ(both.Rank(0)->kv_usage, 0.5);
}

TEST(EngineLoad, SeveralSeriesOfOneRankSumCountsAndKeepTheHighestUsage) {
  const EngineLoad l = ParseEngineLoad(
      "vllm:num_requests_waiting{engine=\"0\",model_name=\"a\"} 2\n"
      "vllm:num_requests_waiting{engine=\"0\",model_name=\"b\"} 3\n"
      "vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"a\"} 0.2\n"
      "vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"b\"} 0.4\n");
  EXPECT_EQ(l.Rank(0)->waiting, 5.0);
  EXPECT_EQ(l.Rank(0)->kv_usage, 0.4);
  EXPECT_FALSE(l.Rank(0)->running.has_value());
}

TEST(EngineLoad, ImpossibleValuesAreCountedNotUsed) {
  const EngineLoad l = ParseEngineLoad(
      "vllm:num_requests_running{engine=\"0\"} NaN\n"
      "vllm:num_requests_waiting{engine=\"0\"} -1\n"
      "vllm:kv_cache_usage_perc{engine=\"0\"} 1.5\n"
      "vllm:kv_cache_usage_perc{engine=\"1\"} +Inf\n"
      "vllm:num_requests_running{engine=\"x\"} 1\n"
      "vllm:num_requests_running{engine=\"99999\"} 1\n"
      "vllm:num_requests_running{engine=\"2\"} 4\n"
      "vllm:num_requests_running{engine=\"2\" 4\n");
  EXPECT_EQ(l.invalid_values, 6u);
  EXPECT_EQ(l.exposition.bad_lines, 1u);
  ASSERT_EQ(l.ranks.size(), 1u);
  EXPECT_EQ(l.ranks[0].dp_rank, 2u);
  EXPECT_EQ(l.ranks[0].running, 4.0);
}

TEST(EngineLoad, AnEmptyOrForeignBodyHasNoRanks) {
  EXPECT_TRUE(ParseEngineLoad("").ranks.empty());
  EXPECT_TRUE(ParseEngineLoad("<html>503 Service Unavailable</html>\n").ranks.empty());
  EXPECT_TRUE(ParseEngineLoad("process_cpu_seconds_total 12\n").ranks.empty());
}

}  // namespace
}  // namespace kvidx::ingest
