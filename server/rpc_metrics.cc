#include "server/rpc_metrics.h"

#include <limits>
#include <string>

#include "server/metrics_endpoint.h"

namespace kvidx::server {

namespace {

constexpr std::string_view kCodeNames[RpcMetrics::kCodes] = {
    "OK",        "CANCELLED",           "UNKNOWN",           "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
    "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
    "UNIMPLEMENTED", "INTERNAL",        "UNAVAILABLE",       "DATA_LOSS",        "UNAUTHENTICATED"};

}  // namespace

std::string_view RpcMethodName(RpcMethod m) {
  switch (m) {
    case RpcMethod::kFindPrefix: return "FindPrefix";
    case RpcMethod::kFindPrefixBatch: return "FindPrefixBatch";
    case RpcMethod::kFindPrefixStream: return "FindPrefixStream";
    case RpcMethod::kListReplicas: return "ListReplicas";
    case RpcMethod::kGetStats: return "GetStats";
    case RpcMethod::kGetBlock: return "GetBlock";
    case RpcMethod::kAddEngine: return "AddEngine";
    case RpcMethod::kRemoveEngine: return "RemoveEngine";
    case RpcMethod::kListSources: return "ListSources";
    case RpcMethod::kTriggerSnapshot: return "TriggerSnapshot";
    case RpcMethod::kResync: return "Resync";
    case RpcMethod::kRoute: return "Route";
    case RpcMethod::kRouteDone: return "RouteDone";
    case RpcMethod::kTokenize: return "Tokenize";
    case RpcMethod::kAdvanceClock: return "AdvanceClock";
    case RpcMethod::kScrapeLoads: return "ScrapeLoads";
    case RpcMethod::kCount: break;
  }
  return "unknown";
}

void RpcMetrics::Record(RpcMethod m, int code, std::chrono::nanoseconds elapsed) {
  PerMethod& p = m_[static_cast<size_t>(m)];
  const size_t c = code >= 0 && static_cast<size_t>(code) < kCodes ? static_cast<size_t>(code) : 2;  // UNKNOWN
  p.codes[c].fetch_add(1, std::memory_order_relaxed);
  const double s = std::chrono::duration<double>(elapsed).count();
  size_t b = 0;
  while (b < kBuckets.size() && s > kBuckets[b]) ++b;
  p.buckets[b].fetch_add(1, std::memory_order_relaxed);
  p.sum_ns.fetch_add(static_cast<uint64_t>(elapsed.count() > 0 ? elapsed.count() : 0), std::memory_order_relaxed);
}

uint64_t RpcMetrics::Requests(RpcMethod m) const {
  uint64_t n = 0;
  for (const auto& c : m_[static_cast<size_t>(m)].codes) n += c.load(std::memory_order_relaxed);
  return n;
}

uint64_t RpcMetrics::Requests(RpcMethod m, int code) const {
  if (code < 0 || static_cast<size_t>(code) >= kCodes) return 0;
  return m_[static_cast<size_t>(m)].codes[static_cast<size_t>(code)].load(std::memory_order_relaxed);
}

void RpcMetrics::Render(std::vector<prometheus::MetricFamily>* out) const {
  prometheus::MetricFamily req = PrometheusFamily(metric::kGrpcRequests);
  prometheus::MetricFamily lat = PrometheusFamily(metric::kGrpcRequestDuration);
  for (size_t i = 0; i < kMethods; ++i) {
    const std::string method(RpcMethodName(static_cast<RpcMethod>(i)));
    const PerMethod& p = m_[i];
    uint64_t total = 0;
    for (size_t c = 0; c < kCodes; ++c) {
      uint64_t v = p.codes[c].load(std::memory_order_relaxed);
      total += v;
      if (v == 0) continue;
      prometheus::ClientMetric cm;
      cm.label = {{"code", std::string(kCodeNames[c])}, {"method", method}};
      cm.counter.value = static_cast<double>(v);
      req.metric.push_back(std::move(cm));
    }
    if (total == 0) continue;
    prometheus::ClientMetric h;
    h.label = {{"method", method}};
    uint64_t cum = 0;
    for (size_t b = 0; b < kBuckets.size(); ++b) {
      cum += p.buckets[b].load(std::memory_order_relaxed);
      h.histogram.bucket.push_back({cum, kBuckets[b]});
    }
    cum += p.buckets[kBuckets.size()].load(std::memory_order_relaxed);
    h.histogram.bucket.push_back({cum, std::numeric_limits<double>::infinity()});
    h.histogram.sample_count = cum;
    h.histogram.sample_sum = static_cast<double>(p.sum_ns.load(std::memory_order_relaxed)) / 1e9;
    lat.metric.push_back(std::move(h));
  }
  out->push_back(std::move(req));
  out->push_back(std::move(lat));
}

}  // namespace kvidx::server
