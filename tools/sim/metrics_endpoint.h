// MetricsEndpoint: the simulated fleet's vLLM /metrics over real HTTP, so
// the kvidx-server under test scrapes what real engines would show.
//
// One HTTP server (civetweb) on 127.0.0.1 serves `/<replica>/metrics` for
// every replica Publish()ed: vLLM's gauges per DP rank (label `engine`),
// `vllm:num_requests_running`, `vllm:num_requests_waiting`,
// `vllm:kv_cache_usage_perc`, as they stood at the last Publish. A replica
// not in the last Publish answers 404, as a vanished pod's address would.
//
// Simulated time runs faster than kvidx's scraper, so a simulation that
// wants kvidx to decide on a snapshot calls WaitScraped(): it returns once
// every published page has been fetched twice since the Publish. kvidx's
// scraper fetches all targets of a round in parallel and records the round
// before the next one starts, so a second fetch means the first one's
// reading is held.
//
// Thread-safety: Publish and WaitScraped from one (simulation) thread; the
// server's threads read under one mutex, held for a map lookup and a copy.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

struct mg_connection;
struct mg_context;

namespace kvidx::sim {

// One engine rank's gauges.
struct RankGauges {
  uint32_t dp_rank = 0;
  size_t running = 0;
  size_t waiting = 0;
  double kv_usage = 0;  // 0..1
};

class MetricsEndpoint {
 public:
  // Errors: the HTTP server could not listen.
  static Result<std::unique_ptr<MetricsEndpoint>> Start(std::string model_name);
  ~MetricsEndpoint();
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  std::string Url(std::string_view replica) const;
  int port() const { return port_; }
  // Replaces every page: replica -> its ranks' gauges.
  void Publish(const std::map<std::string, std::vector<RankGauges>>& pages);
  // Errors: a page was not fetched twice within `timeout` (is the replica
  // registered with a metrics_url, and kvidx scraping?).
  Status WaitScraped(std::chrono::milliseconds timeout);
  uint64_t fetches() const;

  // The exposition text of one replica (public for tests).
  static std::string Render(std::string_view model_name, const std::vector<RankGauges>& ranks);

 private:
  struct Page {
    std::string body;
    uint32_t fetched = 0;  // since the last Publish
  };

  explicit MetricsEndpoint(std::string model_name) : model_(std::move(model_name)) {}
  static int Handle(mg_connection* c, void* self);

  const std::string model_;
  mg_context* ctx_ = nullptr;
  int port_ = 0;
  mutable std::mutex mu_;
  std::condition_variable fetched_;
  std::map<std::string, Page, std::less<>> pages_;  // by path
  uint64_t fetches_ = 0;
};

}  // namespace kvidx::sim
