// RpcMetrics: kvidx_grpc_requests_total{method,code} and
// kvidx_grpc_request_duration_seconds{method}, recorded on the query path.
//
// Why not prometheus-cpp's Family/Histogram: its Histogram takes a mutex per
// observation and Family::Add a map lookup under a lock; every gRPC thread
// would serialise on them. Here a call costs a few relaxed atomic adds on
// fixed arrays; Render() builds the families on scrape.
//
// Thread-safe: Record from any thread; Render from any thread.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string_view>
#include <vector>

#include <prometheus/metric_family.h>

#include "base/metric.h"

namespace kvidx::server {

enum class RpcMethod : uint8_t {
  kFindPrefix = 0,
  kFindPrefixBatch,
  kFindPrefixStream,   // one per streamed request
  kListReplicas,
  kGetStats,
  kGetBlock,
  kAddEngine,
  kRemoveEngine,
  kListSources,
  kTriggerSnapshot,
  kResync,
  kRoute,
  kRouteDone,
  kTokenize,
  kAdvanceClock,
  kScrapeLoads,
  kCount,
};
std::string_view RpcMethodName(RpcMethod m);

namespace metric {
inline constexpr MetricFamily kGrpcRequests{
    "kvidx_grpc_requests_total", MetricKind::kCounter,
    "gRPC requests served, by method and status code (streamed FindPrefix: per request)."};
inline constexpr MetricFamily kGrpcRequestDuration{"kvidx_grpc_request_duration_seconds", MetricKind::kHistogram,
                                                   "gRPC request latency inside the server, by method."};
}  // namespace metric

inline MetricFamilyTable RpcMetricFamilies() {
  static constexpr const MetricFamily* kTable[] = {&metric::kGrpcRequests, &metric::kGrpcRequestDuration};
  return kTable;
}

class RpcMetrics {
 public:
  static constexpr size_t kCodes = 17;   // grpc::StatusCode 0..16
  static constexpr std::array<double, 18> kBuckets = {10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3,
                                                      10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1, 2.5, 10};

  void Record(RpcMethod m, int code, std::chrono::nanoseconds elapsed);
  uint64_t Requests(RpcMethod m) const;
  uint64_t Requests(RpcMethod m, int code) const;
  // Families for the /metrics endpoint.
  void Render(std::vector<prometheus::MetricFamily>* out) const;

 private:
  static constexpr size_t kMethods = static_cast<size_t>(RpcMethod::kCount);
  struct PerMethod {
    std::array<std::atomic<uint64_t>, kCodes> codes{};
    std::array<std::atomic<uint64_t>, kBuckets.size() + 1> buckets{};   // last = +Inf
    std::atomic<uint64_t> sum_ns{0};
  };
  std::array<PerMethod, kMethods> m_{};
};

// Times one call and records it on destruction (unless the code was set to
// a negative value: not recorded).
class RpcTimer {
 public:
  RpcTimer(RpcMetrics* metrics, RpcMethod m) : metrics_(metrics), m_(m), t0_(std::chrono::steady_clock::now()) {}
  ~RpcTimer() {
    if (code_ >= 0) metrics_->Record(m_, code_, std::chrono::steady_clock::now() - t0_);
  }
  RpcTimer(const RpcTimer&) = delete;
  RpcTimer& operator=(const RpcTimer&) = delete;
  void set_code(int code) { code_ = code; }

 private:
  RpcMetrics* metrics_;
  RpcMethod m_;
  std::chrono::steady_clock::time_point t0_;
  int code_ = 0;
};

}  // namespace kvidx::server
