#include "server/server.h"

#include <atomic>
#include <condition_variable>
#include <fstream>
#include <limits>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/impl/server_builder_option.h>
#include <grpcpp/resource_quota.h>
#include <spdlog/spdlog.h>

#include "server/admin_service.h"
#include "server/heap_trim.h"
#include "server/kv_index_service.h"
#include "server/metrics_endpoint.h"
#include "server/metric_families.h"
#include "server/node.h"
#include "server/node_metrics.h"
#include "server/rpc_metrics.h"

namespace kvidx::server {

namespace {

using Clock = std::chrono::steady_clock;

// A fleet whose engines are all down must not keep the service unready
// forever: after this long, serve what the snapshot and replay gave us.
constexpr std::chrono::seconds kReadyTimeout{30};

// RSS growth that counts as a burst whose memory, once freed, goes back to
// the OS (HeapTrimmer), and how often RSS is looked at.
constexpr uint64_t kHeapBurstBytes = uint64_t{64} << 20;
constexpr std::chrono::seconds kHeapPollInterval{1};

Result<std::string> ReadFile(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(what + ": cannot read \"" + path + "\"");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ' || s.back() == '\t')) s.pop_back();
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  return s.substr(i);
}

// metrics.basic_auth_file's first line "user:password", trimmed as the
// admin token is; none if the config names no file. InvalidArgument for a
// line without a non-empty user and password, NotFound if unreadable.
Result<ScrapeCredentials> ReadScrapeCredentials(const MetricsConfig& mc) {
  if (mc.basic_auth_file.empty()) return ScrapeCredentials{};
  Result<std::string> text = ReadFile(mc.basic_auth_file, "metrics.basic_auth_file");
  if (!text.ok()) return text.status();
  const std::string line = Trim(text.value().substr(0, text.value().find('\n')));
  const size_t colon = line.find(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == line.size()) {
    return Status::InvalidArgument("metrics.basic_auth_file: \"" + mc.basic_auth_file +
                                   "\" must hold one line \"user:password\" (both non-empty)");
  }
  return ScrapeCredentials{line.substr(0, colon), line.substr(colon + 1)};
}

// Removes server reflection from one builder: linking grpc++_reflection
// adds its plugin to every builder of the process.
class NoReflectionOption final : public grpc::ServerBuilderOption {
 public:
  void UpdateArguments(grpc::ChannelArguments*) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins) override {
    std::erase_if(*plugins, [](const std::unique_ptr<grpc::ServerBuilderPlugin>& p) {
      return dynamic_cast<const grpc::reflection::ProtoServerReflectionPlugin*>(p.get()) != nullptr;
    });
  }
};

}  // namespace

struct Server::Impl {
  ServerConfig config;
  std::unique_ptr<Node> node;
  RpcMetrics rpc_metrics;
  std::atomic<bool> serving{false};
  AdminAuth read_auth;  // what queries must carry with grpc.require_auth_for_reads
  std::unique_ptr<KvIndexService> query_service;
  std::unique_ptr<AdminService> admin_service;
  std::unique_ptr<grpc::Server> grpc_server;
  std::unique_ptr<MetricsEndpoint> metrics;
  int grpc_port = 0;

  std::mutex mu;  // control: started, stopped, config.engines
  bool started = false;
  bool stopped = false;

  // Background work: the snapshot timer and the readiness watch.
  std::mutex bg_mu;
  std::condition_variable bg_cv;
  bool bg_stop = false;
  std::thread bg;

  void BackgroundLoop();
  bool SourcesSettled() const;
  void SetServing(bool on);
};

bool Server::Impl::SourcesSettled() const {
  for (const ingest::SourceStatus& s : node->ingester().ListSources()) {
    if (s.state == SourceState::kConnecting || s.state == SourceState::kReplaying) return false;
  }
  return true;
}

void Server::Impl::SetServing(bool on) {
  serving.store(on, std::memory_order_release);
  if (grpc_server && grpc_server->GetHealthCheckService() != nullptr) {
    grpc_server->GetHealthCheckService()->SetServingStatus(on);
  }
}

void Server::Impl::BackgroundLoop() {
  const Clock::time_point start = Clock::now();
  Clock::time_point last_snapshot = Clock::now();
  Clock::time_point last_heap_poll = Clock::now();
  HeapTrimmer trimmer(kHeapBurstBytes);
  trimmer.Poll(last_heap_poll);  // the baseline: RSS before any client came
  std::unique_lock<std::mutex> lock(bg_mu);
  while (!bg_stop) {
    bg_cv.wait_for(lock, std::chrono::milliseconds(serving.load() ? 200 : 20));
    if (bg_stop) break;
    lock.unlock();
    if (!serving.load()) {
      if (SourcesSettled() || Clock::now() - start >= kReadyTimeout) {
        SetServing(true);
        spdlog::info("health: SERVING ({} sources)", node->ingester().ListSources().size());
      }
    }
    if (Clock::now() - last_heap_poll >= kHeapPollInterval) {
      last_heap_poll = Clock::now();
      if (trimmer.Poll(last_heap_poll)) {
        spdlog::debug("heap: returned free memory after a burst (RSS now {} MiB)", ProcessRssBytes() >> 20);
      }
    }
    if (node->persistent()) {
      const SnapshotConfig& sc = config.snapshot;
      const bool by_time =
          sc.interval_seconds > 0 && Clock::now() - last_snapshot >= std::chrono::seconds(sc.interval_seconds);
      const bool by_count = sc.every_batches > 0 && node->batches_since_snapshot() >= sc.every_batches;
      if (by_time || by_count) {
        Result<SnapshotOutcome> r = node->Snapshot();
        if (!r.ok()) spdlog::error("snapshot failed: {}", r.status().ToString());
        last_snapshot = Clock::now();
      }
    }
    lock.lock();
  }
}

Server::Server() : impl_(std::make_unique<Impl>()) {}

Server::~Server() { (void)Shutdown(std::chrono::seconds(1)); }

Node& Server::node() { return *impl_->node; }

Result<std::unique_ptr<Server>> Server::Create(ServerConfig config) {
  std::unique_ptr<Server> server(new Server());
  Impl& im = *server->impl_;
  Result<std::unique_ptr<Node>> node = Node::Create(config);
  if (!node.ok()) return node.status();
  im.node = std::move(node.value());
  im.config = std::move(config);
  return server;
}

Status Server::Start() {
  Impl& im = *impl_;
  std::lock_guard<std::mutex> lock(im.mu);
  if (im.started) return Status::FailedPrecondition("server already started");
  const GrpcConfig& gc = im.config.grpc;

  AdminAuth auth;
  if (!gc.admin_token_file.empty()) {
    Result<std::string> tok = ReadFile(gc.admin_token_file, "grpc.admin_token_file");
    if (!tok.ok()) return tok.status();
    auth.token = Trim(tok.value());
    if (auth.token.empty()) return Status::InvalidArgument("grpc.admin_token_file: \"" + gc.admin_token_file + "\" is empty");
  }
  std::shared_ptr<grpc::ServerCredentials> creds;
  if (gc.tls.enabled()) {
    grpc::SslServerCredentialsOptions opts;
    Result<std::string> cert = ReadFile(gc.tls.cert_file, "grpc.tls.cert_file");
    if (!cert.ok()) return cert.status();
    Result<std::string> key = ReadFile(gc.tls.key_file, "grpc.tls.key_file");
    if (!key.ok()) return key.status();
    opts.pem_key_cert_pairs.push_back({key.value(), cert.value()});
    if (!gc.tls.client_ca_file.empty()) {
      Result<std::string> ca = ReadFile(gc.tls.client_ca_file, "grpc.tls.client_ca_file");
      if (!ca.ok()) return ca.status();
      opts.pem_root_certs = ca.value();
      opts.client_certificate_request = gc.tls.require_client_cert
                                            ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                                            : GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY;
      auth.mtls = true;
    }
    creds = grpc::SslServerCredentials(opts);
  } else {
    creds = grpc::InsecureServerCredentials();
  }

  Result<ScrapeCredentials> scrape = ReadScrapeCredentials(im.config.metrics);
  if (!scrape.ok()) return scrape.status();
  if (gc.require_auth_for_reads && auth.token.empty() && !auth.mtls) {
    return Status::InvalidArgument(
        "grpc.require_auth_for_reads: needs grpc.admin_token_file or grpc.tls.client_ca_file");
  }
  im.read_auth = auth;

  if (Status s = im.node->Start(); !s.ok()) return s;

  im.query_service = std::make_unique<KvIndexService>(im.node.get(), gc, &im.rpc_metrics, &im.serving,
                                                      gc.require_auth_for_reads ? &im.read_auth : nullptr);
  im.admin_service = std::make_unique<AdminService>(im.node.get(), auth, &im.rpc_metrics,
                                                    [this] { return SnapshotNow(); });
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  // Reflection describes the public schema only (no data); it is off when
  // reads need credentials, as it cannot check them.
  if (gc.require_auth_for_reads) builder.SetOption(std::make_unique<NoReflectionOption>());
  builder.AddListeningPort(gc.listen, creds, &im.grpc_port);
  builder.RegisterService(im.query_service.get());
  builder.RegisterService(im.admin_service.get());
  builder.SetMaxReceiveMessageSize(static_cast<int>(gc.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(gc.max_message_bytes));
  // gRPC sets SO_REUSEPORT by default: a second kvidx on the same port would
  // silently take half the connections instead of failing.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  if (gc.max_connection_age_ms > 0) {
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS, static_cast<int>(gc.max_connection_age_ms));
    // Calls in flight when the age is reached get this long to finish.
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS, 10000);
  }
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, static_cast<int>(gc.max_concurrent_streams));
  // A synchronous call holds a thread until it ends (an idle reflection
  // stream forever); past the budget gRPC answers RESOURCE_EXHAUSTED instead
  // of starting one thread per call.
  grpc::ResourceQuota quota("kvidx-server");
  quota.SetMaxThreads(static_cast<int>(gc.max_threads));
  builder.SetResourceQuota(quota);
  im.grpc_server = builder.BuildAndStart();
  if (!im.grpc_server || im.grpc_port == 0) {
    im.node->Stop();
    return Status::Unavailable("grpc.listen \"" + gc.listen + "\": cannot listen (address in use or invalid)");
  }
  im.grpc_server->GetHealthCheckService()->SetServingStatus(false);

  if (!im.config.metrics.listen.empty()) {
    Node* node = im.node.get();
    RpcMetrics* rpc = &im.rpc_metrics;
    std::atomic<bool>* serving = &im.serving;
    Result<std::unique_ptr<MetricsEndpoint>> ep = MetricsEndpoint::Start(
        im.config.metrics, [node] { return node->RenderMetrics(); },
        [rpc, serving, node](std::vector<prometheus::MetricFamily>* out) {
          rpc->Render(out);
          // Where each block the engines evicted sat in our recency order
          // (0 = coldest): in sync, the mass is near 0; drift moves it up.
          const RecencyRankHistogram h = node->index().GetEvictionRankHistogram();
          prometheus::MetricFamily ev = PrometheusFamily(metric::kEvictionRank);
          prometheus::ClientMetric hm;
          uint64_t cum = 0;
          for (size_t i = 0; i < RecencyRankHistogram::kBuckets; ++i) {
            cum += h.counts[i];
            hm.histogram.bucket.push_back({cum, RecencyRankHistogram::UpperBound(i)});
          }
          hm.histogram.bucket.push_back({cum, std::numeric_limits<double>::infinity()});
          hm.histogram.sample_count = h.count;
          hm.histogram.sample_sum = h.sum;
          ev.metric.push_back(std::move(hm));
          out->push_back(std::move(ev));
          prometheus::MetricFamily up = PrometheusFamily(metric::kServing);
          prometheus::ClientMetric m;
          m.gauge.value = serving->load() ? 1 : 0;
          up.metric.push_back(m);
          out->push_back(std::move(up));
        },
        std::move(scrape).value());
    if (!ep.ok()) {
      im.grpc_server->Shutdown();
      im.node->Stop();
      return ep.status();
    }
    im.metrics = std::move(ep.value());
  }
  im.started = true;
  im.bg = std::thread([&im] { im.BackgroundLoop(); });
  spdlog::info("kvidx-server listening: grpc {} (port {}{}), metrics {}", gc.listen, im.grpc_port,
               gc.tls.enabled() ? ", TLS" : "", im.metrics ? std::to_string(im.metrics->port()) : "off");
  return Status::Ok();
}

int Server::grpc_port() const { return impl_->grpc_port; }
int Server::metrics_port() const { return impl_->metrics ? impl_->metrics->port() : 0; }
bool Server::serving() const { return impl_->serving.load(std::memory_order_acquire); }

Result<SnapshotOutcome> Server::SnapshotNow() { return impl_->node->Snapshot(); }

Status Server::Reload(const ServerConfig& next) {
  Impl& im = *impl_;
  std::lock_guard<std::mutex> lock(im.mu);
  if (!im.started || im.stopped) return Status::FailedPrecondition("server not running");
  EngineDiff diff = DiffEngines(im.config, next);
  Status first;
  for (const std::string& r : diff.removed) {
    if (Status s = im.node->RemoveEngine(r); !s.ok() && first.ok()) first = s;
  }
  for (const EngineEntry& e : diff.added) {
    Result<std::vector<std::string>> r = im.node->AddEngine(e, /*from_config=*/true);
    if (!r.ok() && first.ok()) first = r.status();
  }
  im.config.engines = next.engines;
  // Route policies follow the file; models themselves (hashing) do not
  // change without a restart.
  std::unordered_map<std::string, RoutePolicy> policies;
  for (const ModelConfig& m : next.models) policies[m.name] = m.route;
  im.node->routes().SetPolicies(policies);
  spdlog::info("reload: {} engine(s) removed, {} added, route policies of {} model(s) set{}", diff.removed.size(),
               diff.added.size(), policies.size(),
               first.ok() ? "" : " (with errors: " + first.ToString() + ")");
  return first;
}

Status Server::Shutdown(std::chrono::milliseconds grace) {
  Impl& im = *impl_;
  std::lock_guard<std::mutex> lock(im.mu);
  if (im.stopped) return Status::Ok();
  im.stopped = true;
  if (!im.started) {
    if (im.node) im.node->Stop();
    return Status::Ok();
  }
  im.SetServing(false);
  {
    std::lock_guard<std::mutex> bl(im.bg_mu);
    im.bg_stop = true;
  }
  im.bg_cv.notify_all();
  if (im.bg.joinable()) im.bg.join();
  // Stop accepting; in-flight calls get `grace`, then are cancelled.
  im.grpc_server->Shutdown(std::chrono::system_clock::now() + grace);
  im.grpc_server->Wait();
  im.node->Stop();
  Status result;
  if (im.node->persistent() && im.config.snapshot.on_shutdown) {
    Result<SnapshotOutcome> r = im.node->Snapshot();
    if (!r.ok()) {
      spdlog::error("final snapshot failed: {}", r.status().ToString());
      result = r.status();
    }
  }
  // Last: civetweb takes ~2 s to join its threads; the snapshot must not wait.
  im.metrics.reset();
  spdlog::info("kvidx-server stopped");
  return result;
}

}  // namespace kvidx::server
