// MetricsEndpoint: the Prometheus /metrics HTTP endpoint (prometheus-cpp's
// civetweb Exposer) serving whatever the collector callbacks return.
//
// Values are rendered on scrape from the live counters (library-neutral
// MetricSample lists from ingest/index/persistence, and ready-made families
// such as RpcMetrics'), so the data path never touches prometheus-cpp.
// Samples of one name become one family; help and type come from the
// registered MetricFamilyInfo lists (unknown names get a generic help).
//
// Slow clients: each of `config.threads` HTTP threads serves one connection
// at a time, and a connection that has not sent its whole request within
// `config.request_timeout_ms` is dropped, so fewer stalled clients than
// threads never delay a scrape and more delay it at most by the timeout.
//
// Thread-safety: scrapes run on the Exposer's threads and call the
// collectors concurrently with everything else; collectors must be
// thread-safe and must outlive the endpoint.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <prometheus/metric_family.h>

#include "base/status.h"
#include "base/metric.h"
#include "server/config.h"

namespace prometheus {
class Exposer;
}

namespace kvidx::server {

using SampleCollector = std::function<std::vector<MetricSample>()>;
using FamilyCollector = std::function<void(std::vector<prometheus::MetricFamily>*)>;

// An empty exporter family with `f`'s name, help and type.
prometheus::MetricFamily PrometheusFamily(const MetricFamily& f);
// Groups samples into their families, in order of first appearance (pure;
// exposed for tests).
std::vector<prometheus::MetricFamily> ToFamilies(const std::vector<MetricSample>& samples);

// HTTP basic-auth credentials every scrape must carry; an empty user = none.
struct ScrapeCredentials {
  std::string user;
  std::string password;
};

class MetricsEndpoint {
 public:
  // Binds `config.listen` ("host:port"; port 0 picks one). Unavailable if
  // the address cannot be bound. With `credentials`, a scrape without them
  // gets 401 (compared in constant time).
  static Result<std::unique_ptr<MetricsEndpoint>> Start(const MetricsConfig& config, SampleCollector samples,
                                                        FamilyCollector families,
                                                        ScrapeCredentials credentials = {});
  ~MetricsEndpoint();
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;
  int port() const { return port_; }

 private:
  MetricsEndpoint() = default;
  class Collector;
  std::shared_ptr<Collector> collector_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_ = 0;
};

}  // namespace kvidx::server
