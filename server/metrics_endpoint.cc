#include "server/metrics_endpoint.h"

#include <map>
#include <utility>

#include <prometheus/collectable.h>
#include <prometheus/exposer.h>

#include "server/credentials.h"

namespace kvidx::server {

prometheus::MetricFamily PrometheusFamily(const MetricFamily& f) {
  prometheus::MetricFamily out;
  out.name = std::string(f.name);
  out.help = std::string(f.help);
  switch (f.kind) {
    case MetricKind::kCounter: out.type = prometheus::MetricType::Counter; break;
    case MetricKind::kGauge: out.type = prometheus::MetricType::Gauge; break;
    case MetricKind::kHistogram: out.type = prometheus::MetricType::Histogram; break;
  }
  return out;
}

std::vector<prometheus::MetricFamily> ToFamilies(const std::vector<MetricSample>& samples) {
  std::vector<prometheus::MetricFamily> out;
  std::map<const MetricFamily*, size_t> index_of;
  for (const MetricSample& s : samples) {
    auto [it, fresh] = index_of.try_emplace(s.family, out.size());
    if (fresh) out.push_back(PrometheusFamily(*s.family));
    prometheus::MetricFamily& f = out[it->second];
    prometheus::ClientMetric m;
    for (const auto& [k, v] : s.labels) m.label.push_back({k, v});
    if (f.type == prometheus::MetricType::Counter) {
      m.counter.value = s.value;
    } else {
      m.gauge.value = s.value;
    }
    f.metric.push_back(std::move(m));
  }
  return out;
}

class MetricsEndpoint::Collector final : public prometheus::Collectable {
 public:
  Collector(SampleCollector samples, FamilyCollector families)
      : samples_(std::move(samples)), families_(std::move(families)) {}
  std::vector<prometheus::MetricFamily> Collect() const override {
    std::vector<prometheus::MetricFamily> out;
    if (samples_) out = ToFamilies(samples_());
    if (families_) families_(&out);
    return out;
  }

 private:
  SampleCollector samples_;
  FamilyCollector families_;
};

Result<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(const MetricsConfig& config, SampleCollector samples,
                                                               FamilyCollector families,
                                                               ScrapeCredentials credentials) {
  std::unique_ptr<MetricsEndpoint> ep(new MetricsEndpoint());
  ep->collector_ = std::make_shared<Collector>(std::move(samples), std::move(families));
  // prometheus-cpp's defaults (2 threads, civetweb's 30 s request timeout)
  // let two silent clients block every scrape. One request per connection:
  // an idle keep-alive scraper must not hold a thread either.
  std::vector<std::string> options = {
      "listening_ports",    config.listen,
      "num_threads",        std::to_string(config.threads),
      "request_timeout_ms", std::to_string(config.request_timeout_ms),
      "enable_keep_alive",  "no",
  };
  try {
    // civetweb throws when it cannot bind; nothing else here should.
    ep->exposer_ = std::make_unique<prometheus::Exposer>(std::move(options));
  } catch (const std::exception& e) {
    return Status::Unavailable("metrics.listen \"" + config.listen + "\": cannot listen: " + e.what());
  }
  if (!credentials.user.empty()) {
    ep->exposer_->RegisterAuth(
        [c = std::move(credentials)](const std::string& user, const std::string& password) {
          // Both compared, whichever differs: the time says nothing about which.
          const bool u = ConstantTimeEquals(user, c.user);
          const bool p = ConstantTimeEquals(password, c.password);
          return u && p;
        },
        "kvidx", "/metrics");
  }
  ep->exposer_->RegisterCollectable(ep->collector_, "/metrics");
  std::vector<int> ports = ep->exposer_->GetListeningPorts();
  ep->port_ = ports.empty() ? 0 : ports.front();
  return ep;
}

MetricsEndpoint::~MetricsEndpoint() = default;

}  // namespace kvidx::server
