// The simulated engines' /metrics: what kvidx's scraper parses back is what
// the simulation published, unknown replicas are 404, and the scrape
// barrier waits for two fetches of every page (and names the one missing).
#include "tools/sim/metrics_endpoint.h"

#include <gtest/gtest.h>

#include "ingest/engine_load.h"
#include "tests/common/http_get.h"

namespace kvidx::sim {
namespace {

using kvidx::testing::HttpGet;

std::string Body(const std::string& response) {
  const size_t at = response.find("\r\n\r\n");
  return at == std::string::npos ? "" : response.substr(at + 4);
}

TEST(MetricsEndpointTest, KvidxParsesBackWhatWasPublished) {
  Result<std::unique_ptr<MetricsEndpoint>> m = MetricsEndpoint::Start("sim-model");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  MetricsEndpoint& e = *m.value();
  e.Publish({{"r0", {{0, 3, 7, 0.25}, {1, 0, 0, 0.0}}}, {"r1", {{0, 256, 40, 0.97}}}});
  const std::string r0 = HttpGet(e.port(), "/r0/metrics");
  ASSERT_NE(r0.find("200 OK"), std::string::npos) << r0;
  const ingest::EngineLoad load = ingest::ParseEngineLoad(Body(r0));
  EXPECT_EQ(load.invalid_values, 0u);
  EXPECT_EQ(load.exposition.bad_lines, 0u);
  ASSERT_EQ(load.ranks.size(), 2u);
  EXPECT_EQ(load.ranks[0].running, 3.0);
  EXPECT_EQ(load.ranks[0].waiting, 7.0);
  EXPECT_EQ(load.ranks[0].kv_usage, 0.25);
  EXPECT_EQ(load.ranks[1].dp_rank, 1u);
  EXPECT_EQ(load.ranks[1].kv_usage, 0.0);
  const ingest::EngineLoad hot = ingest::ParseEngineLoad(Body(HttpGet(e.port(), "/r1/metrics")));
  ASSERT_EQ(hot.ranks.size(), 1u);
  EXPECT_EQ(hot.ranks[0].kv_usage, 0.97);
  EXPECT_NE(HttpGet(e.port(), "/r9/metrics").find("404"), std::string::npos);
  EXPECT_EQ(e.fetches(), 2u);
}

TEST(MetricsEndpointTest, TheBarrierWaitsForTwoFetchesOfEveryPageSinceThePublish) {
  Result<std::unique_ptr<MetricsEndpoint>> m = MetricsEndpoint::Start("sim-model");
  ASSERT_TRUE(m.ok());
  MetricsEndpoint& e = *m.value();
  e.Publish({{"a", {{0, 1, 0, 0.1}}}, {"b", {{0, 1, 0, 0.1}}}});
  HttpGet(e.port(), "/a/metrics");
  HttpGet(e.port(), "/a/metrics");
  HttpGet(e.port(), "/b/metrics");
  Status s = e.WaitScraped(std::chrono::milliseconds(50));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("/b/metrics fetched 1 times"), std::string::npos) << s.ToString();
  HttpGet(e.port(), "/b/metrics");
  EXPECT_TRUE(e.WaitScraped(std::chrono::milliseconds(50)).ok());
  // A new snapshot starts the count again.
  e.Publish({{"a", {{0, 2, 0, 0.2}}}});
  EXPECT_FALSE(e.WaitScraped(std::chrono::milliseconds(20)).ok());
  EXPECT_NE(HttpGet(e.port(), "/b/metrics").find("404"), std::string::npos);
}

}  // namespace
}  // namespace kvidx::sim
