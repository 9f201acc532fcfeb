#include "tools/sim/metrics_endpoint.h"

#include <civetweb.h>

#include <cstdio>

namespace kvidx::sim {
namespace {

std::string PathOf(std::string_view replica) {
  std::string path = "/";
  path.append(replica);
  path.append("/metrics");
  return path;
}

void AppendGauge(std::string* out, const char* name, std::string_view model, uint32_t rank, double v) {
  char line[256];
  std::snprintf(line, sizeof(line), "%s{engine=\"%u\",model_name=\"%.*s\"} %.6g\n", name, rank,
                static_cast<int>(model.size()), model.data(), v);
  *out += line;
}

int Reply(mg_connection* c, int code, const std::string& body) {
  mg_printf(c,
            "HTTP/1.1 %d %s\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: %zu\r\n"
            "Connection: close\r\n\r\n",
            code, code == 200 ? "OK" : "Not Found", body.size());
  mg_write(c, body.data(), body.size());
  return code;
}

}  // namespace

Result<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(std::string model_name) {
  std::unique_ptr<MetricsEndpoint> e(new MetricsEndpoint(std::move(model_name)));
  const char* options[] = {"listening_ports", "127.0.0.1:0", "num_threads", "4", nullptr};
  e->ctx_ = mg_start(nullptr, nullptr, options);
  if (e->ctx_ == nullptr) return Status::Unavailable("sim /metrics: cannot listen on 127.0.0.1");
  mg_server_port ports[1];
  if (mg_get_server_ports(e->ctx_, 1, ports) != 1) return Status::Unavailable("sim /metrics: no port");
  e->port_ = ports[0].port;
  mg_set_request_handler(e->ctx_, "/", &MetricsEndpoint::Handle, e.get());
  return e;
}

MetricsEndpoint::~MetricsEndpoint() {
  if (ctx_ != nullptr) mg_stop(ctx_);
}

std::string MetricsEndpoint::Url(std::string_view replica) const {
  return "http://127.0.0.1:" + std::to_string(port_) + PathOf(replica);
}

std::string MetricsEndpoint::Render(std::string_view model, const std::vector<RankGauges>& ranks) {
  std::string out;
  out += "# HELP vllm:num_requests_running Number of requests in model execution batches.\n";
  out += "# TYPE vllm:num_requests_running gauge\n";
  for (const RankGauges& r : ranks) {
    AppendGauge(&out, "vllm:num_requests_running", model, r.dp_rank, static_cast<double>(r.running));
  }
  out += "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n";
  out += "# TYPE vllm:num_requests_waiting gauge\n";
  for (const RankGauges& r : ranks) {
    AppendGauge(&out, "vllm:num_requests_waiting", model, r.dp_rank, static_cast<double>(r.waiting));
  }
  out += "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n";
  out += "# TYPE vllm:kv_cache_usage_perc gauge\n";
  for (const RankGauges& r : ranks) AppendGauge(&out, "vllm:kv_cache_usage_perc", model, r.dp_rank, r.kv_usage);
  return out;
}

void MetricsEndpoint::Publish(const std::map<std::string, std::vector<RankGauges>>& pages) {
  std::map<std::string, Page, std::less<>> next;
  for (const auto& [replica, ranks] : pages) next[PathOf(replica)] = Page{Render(model_, ranks), 0};
  std::lock_guard<std::mutex> lock(mu_);
  pages_ = std::move(next);
}

Status MetricsEndpoint::WaitScraped(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  auto all_twice = [this] {
    for (const auto& [path, page] : pages_) {
      if (page.fetched < 2) return false;
    }
    return true;
  };
  if (fetched_.wait_for(lock, timeout, all_twice)) return Status::Ok();
  for (const auto& [path, page] : pages_) {
    if (page.fetched < 2) {
      return Status::Unavailable("sim /metrics: " + path + " fetched " + std::to_string(page.fetched) +
                                 " times in " + std::to_string(timeout.count()) +
                                 " ms (is kvidx scraping it? routing.scrape_interval_ms)");
    }
  }
  return Status::Ok();
}

uint64_t MetricsEndpoint::fetches() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fetches_;
}

int MetricsEndpoint::Handle(mg_connection* c, void* self) {
  auto* e = static_cast<MetricsEndpoint*>(self);
  const std::string_view uri = mg_get_request_info(c)->local_uri;
  std::string body;
  {
    std::lock_guard<std::mutex> lock(e->mu_);
    auto it = e->pages_.find(uri);
    if (it == e->pages_.end()) return Reply(c, 404, "not found\n");
    ++it->second.fetched;
    ++e->fetches_;
    body = it->second.body;
  }
  e->fetched_.notify_all();
  return Reply(c, 200, body);
}

}  // namespace kvidx::sim
