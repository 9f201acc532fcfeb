// Kubernetes discovery end to end against a TEST server of the Kubernetes
// API's list + watch protocol (kube_api_server.h: a real HTTPS server with
// a test CA and bearer-token auth, speaking the documented protocol; no
// Kubernetes API server can be installed here), driving a real Node: the
// initial list, scale up and down by watch events, readiness flips reaching
// Route, 410 Gone (an ERROR event, or HTTP) -> relist, a cut stream resumed
// from its resourceVersion without losing or repeating a change, bookmarks
// advancing that resourceVersion, a wrong token counted with the last set
// kept, a rotated token file, malformed events skipped and counted, an
// untrusted certificate refused, a watch the server ends resumed, a slow
// list timed out and retried, and the token never logged.
//
// Waits poll with generous deadlines; nothing asserts on how fast discovery
// reacts, only on what it ends up doing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <openssl/evp.h>

#include "discovery/kube_api_server.h"
#include "discovery/node_metric.h"
#include "server/config.h"
#include "server/node.h"

namespace kvidx::server {
namespace {

using kvidx::testing::KubeApiServer;
using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;
using Labels = kvidx::testing::MetricLabels;
using kvidx::testing::NodeMetric;

constexpr auto kDeadline = seconds(30);
constexpr const char* kToken = "k8s-test-token-7f3a9c1e5b";

bool WaitFor(const std::function<bool()>& done, std::chrono::steady_clock::duration limit = kDeadline) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(milliseconds(20));
  }
  return done();
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFile(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  std::ofstream(tmp, std::ios::binary) << text;
  std::filesystem::rename(tmp, path);  // as the kubelet swaps a projected token
}

// A test CA and a server certificate for 127.0.0.1 (openssl CLI), plus an
// unrelated CA, in one directory for the suite.
class Pki {
 public:
  explicit Pki(const std::string& dir) : dir_(dir) {
    std::filesystem::create_directories(dir);
    const std::string leaf = "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
                             "extendedKeyUsage=serverAuth\nsubjectAltName=DNS:localhost,IP:127.0.0.1\n";
    std::ofstream(dir + "/server.ext") << leaf;
    ok_ = Ca("ca") && Ca("other-ca") &&
          Run("req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout server.key -out server.csr "
              "-subj '/CN=localhost'") &&
          Run("x509 -req -in server.csr -CA ca.crt -CAkey ca.key -set_serial 2 -days 1 -out server.crt "
              "-extfile server.ext");
  }
  bool ok() const { return ok_; }
  std::string error() const { return Slurp(dir_ + "/openssl.log"); }
  std::string File(const std::string& name) const { return dir_ + "/" + name; }

 private:
  bool Run(const std::string& args) {
    const std::string cmd = "cd '" + dir_ + "' && openssl " + args + " >>openssl.log 2>&1 </dev/null";
    return std::system(cmd.c_str()) == 0;
  }
  bool Ca(const std::string& name) {
    return Run("req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout " + name + ".key -out " +
               name + ".crt -days 1 -subj '/CN=kvidx k8s test CA' -addext 'basicConstraints=critical,CA:TRUE' "
               "-addext 'keyUsage=critical,keyCertSign,cRLSign'");
  }
  std::string dir_;
  bool ok_ = false;
};

struct Pod {
  std::string name;
  std::string ip;
  bool ready = true;
};

// An EndpointSlice of `service` as the EndpointSlice controller writes it.
json Slice(const std::string& name, const std::vector<Pod>& pods, const std::string& service = "vllm") {
  json eps = json::array();
  for (const Pod& p : pods) {
    eps.push_back({{"addresses", {p.ip}},
                   {"conditions", {{"ready", p.ready}, {"serving", p.ready}, {"terminating", false}}},
                   {"targetRef", {{"kind", "Pod"}, {"namespace", "ns"}, {"name", p.name}}},
                   {"nodeName", "node-1"}});
  }
  return {{"kind", "EndpointSlice"},
          {"apiVersion", "discovery.k8s.io/v1"},
          {"metadata",
           {{"name", name}, {"namespace", "ns"}, {"labels", {{"kubernetes.io/service-name", service}}}}},
          {"addressType", "IPv4"},
          {"endpoints", eps},
          {"ports",
           {{{"name", "kv-events"}, {"port", 5557}, {"protocol", "TCP"}},
            {{"name", "kv-replay"}, {"port", 5558}, {"protocol", "TCP"}},
            {{"name", "http"}, {"port", 8000}, {"protocol", "TCP"}}}}};
}

// A Pod of the vLLM Deployment, as the kubelet reports it.
json PodObject(const std::string& name, const std::string& ip, bool ready, json annotations = json::object(),
               const std::string& app = "vllm") {
  json status = {{"phase", ip.empty() ? "Pending" : "Running"},
                 {"conditions", {{{"type", "Ready"}, {"status", ready ? "True" : "False"}}}}};
  if (!ip.empty()) status["podIP"] = ip;
  return {{"kind", "Pod"},
          {"apiVersion", "v1"},
          {"metadata",
           {{"name", name},
            {"namespace", "ns"},
            {"labels", {{"app.kubernetes.io/name", app}}},
            {"annotations", annotations}}},
          {"spec",
           {{"containers",
             {{{"name", "vllm"},
               {"ports",
                {{{"name", "kv-events"}, {"containerPort", 5557}},
                 {{"name", "kv-replay"}, {"containerPort", 5558}},
                 {{"name", "http"}, {"containerPort", 8000}}}}}}}}},
          {"status", status}};
}

class K8sDiscoveryTest : public ::testing::Test {
 protected:
  // One PKI and one API server for the suite (civetweb takes 2 s to stop).
  static void SetUpTestSuite() {
    pki_ = new Pki(::testing::TempDir() + "k8s_pki_" + std::to_string(getpid()));
    if (pki_->ok()) server_ = new KubeApiServer(pki_->File("server.crt"), pki_->File("server.key"), kToken);
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
    delete pki_;
    pki_ = nullptr;
  }

  void SetUp() override {
    ASSERT_TRUE(pki_->ok()) << pki_->error();
    dir_ = ::testing::TempDir() + "k8s_" + std::to_string(getpid()) + "_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::create_directories(dir_);
    token_file_ = dir_ + "/token";
    WriteFile(token_file_, std::string(kToken) + "\n");
    api_ = server_;
    ASSERT_TRUE(api_ != nullptr && api_->ok()) << "the test API server did not start";
    api_->Reset(kToken);
  }
  void TearDown() override {
    node_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  KubernetesProviderConfig Provider() const {
    KubernetesProviderConfig p;
    p.name = "k8s";
    p.model = "qwen";
    p.namespace_name = "ns";
    p.service = "vllm";
    p.events_port.name = "kv-events";
    p.replay_port.name = "kv-replay";
    p.metrics_port.name = "http";
    p.grace_ms = 0;
    p.api_server = api_->url();
    p.token_file = token_file_;
    p.ca_file = pki_->File("ca.crt");
    p.backoff_initial_ms = 20;
    p.backoff_max_ms = 200;
    p.watch_timeout_seconds = 60;
    p.timeout_ms = 5000;
    return p;
  }

  void StartNode(const KubernetesProviderConfig& p) {
    ServerConfig c;
    c.data_dir = "";
    c.metrics.listen = "";
    c.models.push_back(ModelConfig{});
    c.models[0].name = "qwen";
    c.discovery.kubernetes.push_back(p);
    auto node = Node::Create(c);
    ASSERT_TRUE(node.ok()) << node.status().ToString();
    node_ = std::move(node.value());
    Status s = node_->Start();
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  std::vector<std::string> Replicas() const {
    std::vector<std::string> out;
    for (const EngineEntry& e : node_->Engines()) out.push_back(e.engine.replica);
    std::sort(out.begin(), out.end());
    return out;
  }
  bool Has(const std::vector<std::string>& want) const { return Replicas() == want; }
  double Result(const std::string& result) const {
    return NodeMetric(*node_, "kvidx_discovery_resolutions_total", {{"provider", "k8s"}, {"result", result}});
  }
  double Counter(std::string_view name) const { return NodeMetric(*node_, name, {{"provider", "k8s"}}); }
  double Engines(const std::string& state) const {
    return NodeMetric(*node_, "kvidx_discovery_engines", {{"provider", "k8s"}, {"state", state}});
  }
  double Skipped(const std::string& reason) const {
    return NodeMetric(*node_, "kvidx_discovery_skipped_records_total", {{"provider", "k8s"}, {"reason", reason}});
  }
  // Waits until a watch is open at the server (so that changes arrive by it).
  bool Watching(int watches = 1) const {
    return WaitFor([&] { return api_->counts().open_watches == 1 && api_->counts().watches >= watches; });
  }

  // Cuts the watch and refuses the client (401) while `change` runs, so
  // that it sees the change only once let back in.
  void WhileShutOut(const std::function<void()>& change) {
    const int refused = api_->counts().unauthorized;
    api_->SetToken("not-the-client-token");
    api_->CutWatches();
    ASSERT_TRUE(WaitFor([&] { return api_->counts().unauthorized > refused; }));
    change();
    api_->SetToken(kToken);
  }

  static Pki* pki_;
  static KubeApiServer* server_;
  std::string dir_;
  std::string token_file_;
  KubeApiServer* api_ = nullptr;  // server_
  std::unique_ptr<Node> node_;
};

Pki* K8sDiscoveryTest::pki_ = nullptr;
KubeApiServer* K8sDiscoveryTest::server_ = nullptr;

TEST_F(K8sDiscoveryTest, ListsThenFollowsScaleUpAndDownByWatchEvents) {
  api_->Put(Slice("vllm-a", {{"pod-1", "127.0.0.11"}, {"pod-2", "127.0.0.12"}}));
  StartNode(Provider());
  ASSERT_TRUE(WaitFor([&] { return Has({"pod-1", "pod-2"}); }));
  EXPECT_EQ(api_->counts().last_selector, "kubernetes.io/service-name=vllm");
  for (const EngineEntry& e : node_->Engines()) {
    if (e.engine.replica != "pod-1") continue;
    EXPECT_EQ(e.engine.endpoint, "tcp://127.0.0.11:5557");
    EXPECT_EQ(e.engine.replay_endpoint, "tcp://127.0.0.11:5558");
    EXPECT_EQ(e.metrics_url, "http://127.0.0.11:8000/metrics");
    EXPECT_EQ(e.engine.model, "qwen");
  }
  ASSERT_TRUE(Watching());

  // Scale up: a second slice and a third pod in the first.
  api_->Put(Slice("vllm-a", {{"pod-1", "127.0.0.11"}, {"pod-2", "127.0.0.12"}, {"pod-3", "127.0.0.13"}}));
  api_->Put(Slice("vllm-b", {{"pod-4", "127.0.0.14"}}));
  ASSERT_TRUE(WaitFor([&] { return Has({"pod-1", "pod-2", "pod-3", "pod-4"}); }));
  // Scale down: pods leave the slice, a slice is deleted.
  api_->Put(Slice("vllm-a", {{"pod-1", "127.0.0.11"}}));
  api_->Delete("vllm-b");
  ASSERT_TRUE(WaitFor([&] { return Has({"pod-1"}); }));
  // The node has an engine a moment before discovery counts it.
  EXPECT_TRUE(WaitFor([&] { return Counter("kvidx_discovery_engines_added_total") == 4; }));
  EXPECT_TRUE(WaitFor([&] { return Counter("kvidx_discovery_engines_removed_total") == 3; }));
  EXPECT_EQ(Engines("active"), 1);
  EXPECT_EQ(Result("ok"), 1);  // one list; everything else came by the watch
  EXPECT_EQ(api_->counts().lists, 1);
  EXPECT_EQ(Counter("kvidx_discovery_stale"), 0);
}

TEST_F(K8sDiscoveryTest, ANotReadyEngineStaysSubscribedButRouteSkipsIt) {
  api_->Put(Slice("vllm-a", {{"pod-1", "127.0.0.11"}, {"pod-2", "127.0.0.12", /*ready=*/false}}));
  StartNode(Provider());
  ASSERT_TRUE(WaitFor([&] { return Has({"pod-1", "pod-2"}) && !node_->EngineReady("pod-2"); }));
  EXPECT_TRUE(node_->EngineReady("pod-1"));
  EXPECT_TRUE(node_->ingester().GetSource("pod-2/dp0").has_value());  // subscribed all the same
  EXPECT_TRUE(WaitFor([&] { return Engines("not_ready") == 1; }));  // counted just after the node is told
  EXPECT_EQ(Engines("active"), 1);

  const std::vector<int64_t> tokens(64, 7);
  auto route = [&] {
    RouteQuery q;
    q.prompt.model = "qwen";
    q.prompt.form = PromptForm::kTokens;
    q.prompt.token_ids = tokens;
    RouteAnswer a;
    Status s = node_->routes().Route(q, &a);
    EXPECT_TRUE(s.ok()) << s.ToString();
    std::vector<std::string> picked;
    for (const RouteCandidate& c : a.candidates) picked.emplace_back(c.replica);
    return picked;
  };
  EXPECT_THAT(route(), ::testing::ElementsAre("pod-1"));

  // Flips: pod-2 ready, pod-1 not.
  api_->Put(Slice("vllm-a", {{"pod-1", "127.0.0.11", false}, {"pod-2", "127.0.0.12"}}));
  ASSERT_TRUE(WaitFor([&] { return node_->EngineReady("pod-2") && !node_->EngineReady("pod-1"); }));
  EXPECT_THAT(route(), ::testing::ElementsAre("pod-2"));
  EXPECT_EQ(Counter("kvidx_discovery_engines_added_total"), 2);  // a flip re-adds nothing
  EXPECT_EQ(Counter("kvidx_discovery_engines_removed_total"), 0);

  // None ready: Route has nothing to pick.
  api_->Put(Slice("vllm-a", {{"pod-1", "127.0.0.11", false}, {"pod-2", "127.0.0.12", false}}));
  ASSERT_TRUE(WaitFor([&] { return !node_->EngineReady("pod-2"); }));
  RouteQuery q;
  q.prompt.model = "qwen";
  q.prompt.form = PromptForm::kTokens;
  q.prompt.token_ids = tokens;
  RouteAnswer a;
  EXPECT_EQ(node_->routes().Route(q, &a).code(), StatusCode::kUnavailable);
}

TEST_F(K8sDiscoveryTest, GoneAsAnErrorEventRelists) {
  api_->Put(Slice("vllm-a", {{"pod-1", "127.0.0.11"}}));
  StartNode(Provider());
  ASSERT_TRUE(WaitFor([&] { return Has({"pod-1"}); }));
  ASSERT_TRUE(Watching());
  // While the client is shut out, a change happens and the history is
  // compacted: its resourceVersion is too old, only a list has the truth.
  WhileShutOut([&] {
    api_->Put(Slice("vllm-a", {{"pod-2", "127.0.0.12"}}));
    api_->Compact();
  });
  ASSERT_TRUE(WaitFor([&] { return Has({"pod-2"}); }));
  EXPECT_GE(api_->counts().gone, 1);
  EXPECT_GE(api_->counts().lists, 2);
  EXPECT_GE(Result("gone"), 1);
  EXPECT_EQ(Counter("kvidx_discovery_stale"), 0);  // a relist is not a failure
}

TEST_F(K8sDiscoveryTest, GoneAsHttp410Relists) {
  api_->SetGoneAsHttp(true);
  api_->Put(Slice("vllm-a", {{"pod-1", "127.0.0.11"}}));
  StartNode(Provider());
  ASSERT_TRUE(WaitFor([&] { return Has({"pod-1"}); }));
  ASSERT_TRUE(Watching());
  WhileShutOut([&] {
    api_->Put(Slice("vllm-a", {{"pod-1", "127.0.0.11"}, {"pod-3", "127.0.0.13"}}));
    api_->Compact();
  });
  ASSERT_TRUE(WaitFor([&] { return Has({"pod-1", "pod-3"}); }));
  EXPECT_GE(api_->counts().gone, 1);
  EXPECT_GE(Result("gone"), 1);
  EXPECT_EQ(Counter("kvidx_discovery_engines_removed_total"), 0);  // pod-1 never left
}

TEST_F(K8sDiscoveryTest, ACutStreamResumesFromItsVersionWithoutLossOrDuplicates) {
  api_->Put(Slice("vllm-a", {{"pod-1", "127.0.0.11"}}));
  StartNode(Provider());
  ASSERT_TRUE(WaitFor([&] { return Has({"pod-1"}); }));
  ASSERT_TRUE(Watching());
  api_->Put(Slice("vllm-a", {{"pod-1", "127.0.0.11"}, {"pod-2", "127.0.0.12"}}));
  ASSERT_TRUE(WaitFor([&] { return Has({"pod-1", "pod-2"}); }));
  const uint64_t seen = api_->resource_version();
  api_->CutWatches();
  // While it reconnects: pod-2 goes, pod-3 comes (both must be seen once).
  api_->Put(Slice("vllm-a", {{"pod-1", "127.0.0.11"}, {"pod-3", "127.0.0.13"}}));
  ASSERT_TRUE(WaitFor([&] { return Has({"pod-1", "pod-3"}) && api_->counts().watches >= 2; }));
  const KubeApiServer::Counts c = api_->counts();
  EXPECT_EQ(c.lists, 1);  // resumed, not relisted
  ASSERT_GE(c.watch_versions.size(), 2u);
  EXPECT_EQ(c.watch_versions[1], seen);  // from the last event it had
  EXPECT_TRUE(WaitFor([&] { return Counter("kvidx_discovery_engines_added_total") == 3; }));
  EXPECT_TRUE(WaitFor([&] { return Counter("kvidx_discovery_engines_removed_total") == 1; }));
  std::this_thread::sleep_for(milliseconds(100));  // nothing more comes
  EXPECT_EQ(Counter("kvidx_discovery_engines_added_total"), 3);
  EXPECT_GE(Result("unreachable"), 1);  // the cut, counted
}

TEST_F(K8sDiscoveryTest, AWatchTheServerEndsIsResumedWithoutARelist) {
  api_->Put(Slice("vllm-a", {{"pod-1", "127.0.0.11"}}));
  KubernetesProviderConfig p = Provider();
  p.watch_timeout_seconds = 1;  // the server ends each watch after 1 s
  StartNode(p);
  ASSERT_TRUE(WaitFor([&] { return api_->counts().watches >= 3; }));
  api_->Put(Slice("vllm-a", {{"pod-1", "127.0.0.11"}, {"pod-2", "127.0.0.12"}}));
  ASSERT_TRUE(WaitFor([&] { return Has({"pod-1", "pod-2"}); }));
  EXPECT_EQ(api_->counts().lists, 1);
  EXPECT_EQ(Counter("kvidx_discovery_stale"), 0);
  EXPECT_EQ(Result("unreachable") + Result("timeout") + Result("error"), 0);  // a normal end is no failure
}

TEST_F(K8sDiscoveryTest, ASlowListTimesOutAndIsRetried) {
  api_->Put(Slice("vllm-a", {{"pod-1", "127.0.0.11"}}));
  api_->SetListDelay(milliseconds(2000));
  KubernetesProviderConfig p = Provider();
  p.timeout_ms = 300;
  StartNode(p);
  ASSERT_TRUE(WaitFor([&] { return Result("timeout") >= 1; }));
  EXPECT_TRUE(node_->Engines().empty());
  EXPECT_EQ(Counter("kvidx_discovery_stale"), 1);
  api_->SetListDelay(milliseconds(0));
  ASSERT_TRUE(WaitFor([&] { return Has({"pod-1"}); }));
  EXPECT_EQ(Counter("kvidx_discovery_stale"), 0);
}

TEST_F(K8sDiscoveryTest, BookmarksAdvanceTheVersionAndMalformedEventsAreSkipped) {
  api_->Put(Slice("vllm-a", {{"pod-1", "127.0.0.11"}}));
  StartNode(Provider());
  ASSERT_TRUE(WaitFor([&] { return Has({"pod-1"}); }));
  ASSERT_TRUE(Watching());
  // Another Service's change moves the version without reaching this watch;
  // the bookmark carries it over.
  api_->Put(Slice("other-a", {{"x-1", "127.0.0.99"}}, "other"));
  api_->Bookmark();
  api_->SendRaw("{\"type\": \"ADDED\", \"object\": {");  // broken JSON
  api_->SendRaw("{\"type\": \"ADDED\"}");                // no object
  ASSERT_TRUE(WaitFor([&] { return Skipped("malformed") == 2; }));  // after the bookmark, in stream order
  const uint64_t bookmarked = api_->resource_version();
  api_->Compact();  // history before the bookmark is gone: resuming from it still works
  api_->CutWatches();
  ASSERT_TRUE(WaitFor([&] { return api_->counts().watches >= 2; }));
  EXPECT_EQ(api_->counts().watch_versions[1], bookmarked);
  api_->Put(Slice("vllm-a", {{"pod-1", "127.0.0.11"}, {"pod-2", "127.0.0.12"}}));
  ASSERT_TRUE(WaitFor([&] { return Has({"pod-1", "pod-2"}); }));  // the stream went on
  EXPECT_EQ(api_->counts().gone, 0);
  EXPECT_EQ(api_->counts().lists, 1);
}

TEST_F(K8sDiscoveryTest, AWrongTokenIsCountedTheLastSetKeptAndARotatedTokenUsed) {
  std::ostringstream log;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(log);
  spdlog::default_logger()->sinks().push_back(sink);
  const auto level = spdlog::get_level();
  spdlog::set_level(spdlog::level::debug);

  api_->Put(Slice("vllm-a", {{"pod-1", "127.0.0.11"}, {"pod-2", "127.0.0.12"}}));
  KubernetesProviderConfig p = Provider();
  p.grace_ms = 60'000;
  StartNode(p);
  ASSERT_TRUE(WaitFor([&] { return Has({"pod-1", "pod-2"}); }));
  ASSERT_TRUE(Watching());
  // The server's token rotates; ours is now wrong.
  const std::string rotated = "rotated-token-d41d8cd98f";
  api_->SetToken(rotated);
  api_->CutWatches();
  ASSERT_TRUE(WaitFor([&] { return Result("unauthorized") >= 2; }));
  EXPECT_EQ(Counter("kvidx_discovery_stale"), 1);
  EXPECT_TRUE(Has({"pod-1", "pod-2"}));  // the last good set stays
  EXPECT_EQ(Engines("grace"), 0);

  // The kubelet rewrites the token file: the next request uses it.
  WriteFile(token_file_, rotated + "\n");
  ASSERT_TRUE(WaitFor([&] { return Counter("kvidx_discovery_stale") == 0; }));
  api_->Put(Slice("vllm-a", {{"pod-1", "127.0.0.11"}}));
  ASSERT_TRUE(WaitFor([&] { return Has({"pod-1"}) || Engines("grace") == 1; }));

  spdlog::default_logger()->flush();
  spdlog::set_level(level);
  auto& sinks = spdlog::default_logger()->sinks();
  sinks.erase(std::remove(sinks.begin(), sinks.end(), sink), sinks.end());
  const std::string text = log.str();
  EXPECT_THAT(text, ::testing::HasSubstr("unauthorized"));
  EXPECT_EQ(text.find(kToken), std::string::npos) << text;
  EXPECT_EQ(text.find(rotated), std::string::npos) << text;
  for (const MetricSample& s : node_->RenderMetrics()) {
    for (const auto& [k, v] : s.labels) {
      EXPECT_EQ(v.find(kToken), std::string::npos);
      EXPECT_EQ(v.find(rotated), std::string::npos);
    }
  }
}

TEST_F(K8sDiscoveryTest, AnUntrustedCertificateIsRefusedUnlessInsecureIsSet) {
  api_->Put(Slice("vllm-a", {{"pod-1", "127.0.0.11"}}));
  KubernetesProviderConfig p = Provider();
  p.ca_file = pki_->File("other-ca.crt");
  StartNode(p);
  ASSERT_TRUE(WaitFor([&] { return Result("tls") >= 1; }));
  EXPECT_TRUE(node_->Engines().empty());
  EXPECT_EQ(api_->counts().lists, 0);  // the token never reached it
  EXPECT_EQ(Counter("kvidx_discovery_stale"), 1);
  node_.reset();

  p.insecure_skip_tls_verify = true;
  StartNode(p);
  ASSERT_TRUE(WaitFor([&] { return Has({"pod-1"}); }));
}

TEST_F(K8sDiscoveryTest, AMissingTokenFileIsCountedAsUnauthorized) {
  KubernetesProviderConfig p = Provider();
  p.token_file = dir_ + "/no-such-token";
  StartNode(p);
  ASSERT_TRUE(WaitFor([&] { return Result("unauthorized") >= 1; }));
  EXPECT_EQ(api_->counts().lists + api_->counts().unauthorized, 0);  // nothing was sent
}

TEST_F(K8sDiscoveryTest, PodsByLabelSelectorWithAnnotations) {
  api_->Put(PodObject("pod-1", "127.0.0.11", true));
  api_->Put(PodObject("pod-2", "127.0.0.12", false));
  api_->Put(PodObject("pod-3", "127.0.0.13", true, {{"kvidx.io/events-port", "6000"}, {"kvidx.io/dp-size", "2"}}));
  api_->Put(PodObject("pod-4", "127.0.0.14", true, {{"kvidx.io/dp-size", "zero"}}));  // skipped, whole
  api_->Put(PodObject("pod-5", "", false));                                          // pending: no IP yet
  api_->Put(PodObject("other-1", "127.0.0.99", true, json::object(), "other"));      // not selected
  KubernetesProviderConfig p = Provider();
  p.service = "";
  p.pod_selector = "app.kubernetes.io/name=vllm";
  StartNode(p);
  ASSERT_TRUE(WaitFor([&] { return Has({"pod-1", "pod-2", "pod-3"}); }));
  EXPECT_EQ(api_->counts().last_selector, "app.kubernetes.io/name=vllm");
  EXPECT_FALSE(node_->EngineReady("pod-2"));
  EXPECT_EQ(Skipped("bad_annotation"), 1);
  for (const EngineEntry& e : node_->Engines()) {
    if (e.engine.replica == "pod-3") {
      EXPECT_EQ(e.engine.endpoint, "tcp://127.0.0.13:6000");
      EXPECT_EQ(e.engine.replay_endpoint, "tcp://127.0.0.13:5558");
      EXPECT_EQ(e.engine.data_parallel_size, 2u);
    }
    if (e.engine.replica == "pod-1") {
      EXPECT_EQ(e.metrics_url, "http://127.0.0.11:8000/metrics");
    }
  }
  ASSERT_TRUE(Watching());
  api_->Put(PodObject("pod-5", "127.0.0.15", true));  // scheduled and ready
  api_->Put(PodObject("pod-2", "127.0.0.12", true));  // ready now
  api_->Delete("pod-1");                                // scaled down
  ASSERT_TRUE(WaitFor([&] { return Has({"pod-2", "pod-3", "pod-5"}) && node_->EngineReady("pod-2"); }));
  EXPECT_EQ(api_->counts().lists, 1);
}

TEST(K8sDiscoveryConfig, OutsideAPodWithoutApiServerStartFails) {
  if (std::getenv("KUBERNETES_SERVICE_HOST") != nullptr) GTEST_SKIP() << "running in a pod";
  ServerConfig c;
  c.data_dir = "";
  c.metrics.listen = "";
  c.models.push_back(ModelConfig{});
  c.models[0].name = "qwen";
  KubernetesProviderConfig p;
  p.name = "k8s";
  p.model = "qwen";
  p.namespace_name = "ns";
  p.service = "vllm";
  p.events_port.number = 5557;
  c.discovery.kubernetes.push_back(p);
  auto node = Node::Create(c);
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  Status s = node.value()->Start();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("KUBERNETES_SERVICE_HOST"));
}

// Outside the cluster: the provider reads a kubeconfig (server/kubeconfig.h)
// through the config loader -- the server, the CA inline or as a file next
// to it, the token inline or as a tokenFile, the context's namespace -- and
// follows the same test API server over verified TLS.
TEST_F(K8sDiscoveryTest, KubeconfigGivesServerCaTokenAndNamespace) {
  api_->Put(Slice("vllm-a", {{"pod-1", "127.0.0.11"}}));
  const std::string ca = Slurp(pki_->File("ca.crt"));
  std::string ca_b64(4 * ((ca.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(ca_b64.data()),
                                reinterpret_cast<const unsigned char*>(ca.data()), static_cast<int>(ca.size()));
  ca_b64.resize(static_cast<size_t>(n));
  std::filesystem::create_directories(dir_ + "/kube/pki");
  WriteFile(dir_ + "/kube/pki/ca.crt", ca);
  WriteFile(dir_ + "/kube/token", std::string(kToken) + "\n");
  WriteFile(dir_ + "/kube/config",
            "apiVersion: v1\nkind: Config\ncurrent-context: inline\n"
            "clusters:\n"
            "- {name: inline, cluster: {server: '" + api_->url() + "', certificate-authority-data: " + ca_b64 + "}}\n"
            "- {name: files, cluster: {server: '" + api_->url() + "', certificate-authority: pki/ca.crt}}\n"
            "users:\n- {name: inline, user: {token: " + std::string(kToken) + "}}\n"
            "- {name: files, user: {tokenFile: token}}\n"
            "contexts:\n- {name: inline, context: {cluster: inline, user: inline, namespace: ns}}\n"
            "- {name: files, context: {cluster: files, user: files, namespace: ns}}\n");
  for (const char* context : {"", "files"}) {
    SCOPED_TRACE(context);
    auto cfg = ParseConfig("models: [{name: qwen}]\n"
                           "discovery:\n  providers:\n"
                           "    - {type: kubernetes, name: k8s, model: qwen, service: vllm, grace_ms: 0,\n"
                           "       ports: {events: kv-events, replay: kv-replay, metrics: http},\n"
                           "       backoff_initial_ms: 20, backoff_max_ms: 200, kubeconfig: '" + dir_ + "/kube/config'" +
                               (*context == '\0' ? std::string() : ", kubeconfig_context: " + std::string(context)) + "}\n",
                           "kvidx.yaml");
    ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
    const KubernetesProviderConfig& p = cfg->discovery.kubernetes[0];
    EXPECT_EQ(p.namespace_name, "ns");
    EXPECT_EQ(p.api_server, api_->url());
    StartNode(p);
    ASSERT_TRUE(WaitFor([&] { return Has({"pod-1"}); })) << "tls " << Result("tls") << ", 401 " << Result("unauthorized");
    EXPECT_EQ(node_->EngineOrigins().at("pod-1"), "kubernetes:k8s");
    node_.reset();
  }
}

}  // namespace
}  // namespace kvidx::server
