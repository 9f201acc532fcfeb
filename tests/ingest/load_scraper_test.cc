// LoadScraper against a real HTTP server on 127.0.0.1 (HttpTestServer): vLLM's gauges per DP
// rank, and every way an engine's endpoint can fail -- refused, 500, too
// slow, too big, not Prometheus text -- counted, never a crash, the last
// good reading kept with its age.
#include "ingest/load_scraper.h"

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "common/http_test_server.h"

namespace kvidx::ingest {
namespace {

using kvidx::testing::HttpTestServer;

using namespace std::chrono_literals;

constexpr char kVllmBody[] =
    "# TYPE vllm:num_requests_running gauge\n"
    "vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 3.0\n"
    "vllm:num_requests_running{engine=\"1\",model_name=\"m\"} 1.0\n"
    "vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 2.0\n"
    "vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.5\n";

LoadScraper::Options Fast() {
  LoadScraper::Options o;
  o.interval = 50ms;
  o.timeout = 300ms;
  o.max_body_bytes = 1u << 20;
  return o;
}

TEST(LoadScraper, ReadsEachRankOfAnEngine) {
  HttpTestServer http;
  http.Set("/metrics", 200, kVllmBody);
  LoadScraper s(Fast());
  s.SetTargets({{"a", http.Url("/metrics")}});
  s.ScrapeOnce();
  std::optional<LoadScraper::Reading> r0 = s.Get("a", 0);
  ASSERT_TRUE(r0.has_value());
  EXPECT_EQ(r0->load.running, 3.0);
  EXPECT_EQ(r0->load.waiting, 2.0);
  EXPECT_EQ(r0->load.kv_usage, 0.5);
  EXPECT_EQ(s.Get("a", 1)->load.running, 1.0);
  EXPECT_FALSE(s.Get("a", 2).has_value());
  EXPECT_FALSE(s.Get("b", 0).has_value());
  EXPECT_EQ(s.stats().at("a").scrapes_ok, 1u);
}

TEST(LoadScraper, EveryFailureIsCountedAndNamed) {
  HttpTestServer http;
  LoadScraper::Options options = Fast();
  // A small cap makes "too big" show within the first reads of the 8 MiB
  // body, well before the timeout even on a slow (sanitized, loaded) machine.
  options.max_body_bytes = 4096;
  http.Set("/500", 500, "down\n");
  http.Set("/slow", 200, kVllmBody);
  http.Set("/html", 200, "<html><body>It works</body></html>\n");
  LoadScraper s(options);
  s.SetTargets({{"e500", http.Url("/500")},
                {"slow", http.Url("/slow")},
                {"huge", http.Url("/huge")},
                {"html", http.Url("/html")},
                {"refused", "http://127.0.0.1:1/metrics"},
                {"ftp", "ftp://127.0.0.1/metrics"}});
  const auto t0 = std::chrono::steady_clock::now();
  s.ScrapeOnce();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1400ms) << "each scrape is bounded by the timeout, not by the slow answer";
  auto st = s.stats();
  EXPECT_EQ(st.at("e500").last_error, "HTTP 500");
  EXPECT_NE(st.at("slow").last_error.find("imeout"), std::string::npos) << st.at("slow").last_error;
  EXPECT_NE(st.at("huge").last_error.find("body over"), std::string::npos) << st.at("huge").last_error;
  EXPECT_FALSE(st.at("refused").last_error.empty());
  EXPECT_FALSE(st.at("ftp").last_error.empty());
  for (const char* t : {"e500", "slow", "huge", "refused", "ftp"}) {
    EXPECT_EQ(st.at(t).scrapes_failed, 1u) << t;
    EXPECT_FALSE(s.Get(t, 0).has_value()) << t;
  }
  // Not Prometheus text: a good scrape with nothing in it, its lines counted.
  EXPECT_EQ(st.at("html").scrapes_ok, 1u);
  EXPECT_EQ(st.at("html").bad_lines, 1u);
  EXPECT_FALSE(s.Get("html", 0).has_value());
}

TEST(LoadScraper, AFailingEngineKeepsItsLastReadingWhichAges) {
  HttpTestServer http;
  http.Set("/flaky", 200, kVllmBody);
  LoadScraper s(Fast());
  s.SetTargets({{"a", http.Url("/flaky")}});
  s.ScrapeOnce();
  ASSERT_TRUE(s.Get("a", 0).has_value());
  http.Set("/flaky", 503, "down\n");
  std::this_thread::sleep_for(20ms);
  s.ScrapeOnce();
  std::optional<LoadScraper::Reading> r = s.Get("a", 0);
  ASSERT_TRUE(r.has_value());
  EXPECT_GE(r->age, 20ms);
  EXPECT_EQ(s.stats().at("a").last_error, "HTTP 503");
  // Retargeted elsewhere: the old reading is not carried over.
  s.SetTargets({{"a", http.Url("/metrics?other")}});
  EXPECT_FALSE(s.Get("a", 0).has_value());
  s.SetTargets({});
  EXPECT_TRUE(s.stats().empty());
}

TEST(LoadScraper, TheBackgroundThreadKeepsReadingsFresh) {
  HttpTestServer http;
  http.Set("/metrics", 200, kVllmBody);
  LoadScraper s(Fast());
  s.SetTargets({{"a", http.Url("/metrics")}});
  s.Start();
  const auto end = std::chrono::steady_clock::now() + 10s;
  while (s.stats().at("a").scrapes_ok < 3 && std::chrono::steady_clock::now() < end) std::this_thread::sleep_for(10ms);
  EXPECT_GE(s.stats().at("a").scrapes_ok, 3u);
  s.Stop();
  s.Stop();  // idempotent
}

}  // namespace
}  // namespace kvidx::ingest
