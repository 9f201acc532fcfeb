// EndpointSlices, their lists and watch events as engines: every field the
// provider reads, and every bad input skipped and counted or refused with a
// clear error (never a crash, never a half-made engine).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "server/k8s_endpoints.h"

namespace kvidx::server {
namespace {

using ::testing::HasSubstr;

KubernetesProviderConfig Provider() {
  KubernetesProviderConfig p;
  p.name = "k8s";
  p.model = "qwen";
  p.events_port.name = "kv-events";
  p.replay_port.name = "kv-replay";
  return p;
}

const char* kSlice = R"({
  "kind": "EndpointSlice", "apiVersion": "discovery.k8s.io/v1",
  "metadata": {"name": "vllm-abc", "resourceVersion": "42"},
  "addressType": "IPv4",
  "ports": [{"name": "kv-events", "port": 5557, "protocol": "TCP"},
            {"name": "kv-replay", "port": 5558, "protocol": "TCP"}],
  "endpoints": [
    {"addresses": ["10.0.0.1"], "conditions": {"ready": true}, "targetRef": {"kind": "Pod", "name": "vllm-0"}},
    {"addresses": ["10.0.0.2"], "conditions": {"ready": false}, "targetRef": {"kind": "Pod", "name": "vllm-1"}},
    {"addresses": ["10.0.0.3"], "conditions": {}, "hostname": "vllm-2"},
    {"addresses": [], "targetRef": {"name": "no-address"}},
    {"addresses": ["10.0.0.5"], "targetRef": {"name": "bad/name"}},
    {"addresses": ["10.0.0.6"], "targetRef": {"name": "vllm-0"}},
    "not an object"
  ]
})";

TEST(K8sEndpointsTest, ASliceGivesOneEngineAnEndpointWithReadiness) {
  Result<EndpointSlice> s = ParseEndpointSlice(kSlice, Provider());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->name, "vllm-abc");
  EXPECT_EQ(s->resource_version, "42");
  ASSERT_EQ(s->engines.size(), 3u);
  EXPECT_EQ(s->engines[0].entry.engine.replica, "vllm-0");
  EXPECT_EQ(s->engines[0].entry.engine.endpoint, "tcp://10.0.0.1:5557");
  EXPECT_EQ(s->engines[0].entry.engine.replay_endpoint, "tcp://10.0.0.1:5558");
  EXPECT_EQ(s->engines[0].entry.engine.model, "qwen");
  EXPECT_EQ(s->engines[0].entry.metrics_url, "");
  EXPECT_TRUE(s->engines[0].ready);
  EXPECT_FALSE(s->engines[1].ready);
  EXPECT_EQ(s->engines[2].entry.engine.replica, "vllm-2");  // hostname when no targetRef
  EXPECT_TRUE(s->engines[2].ready);                          // ready absent = ready
  EXPECT_EQ(s->skipped[static_cast<size_t>(SkipReason::kNoAddress)], 1u);
  EXPECT_EQ(s->skipped[static_cast<size_t>(SkipReason::kBadName)], 1u);
  EXPECT_EQ(s->skipped[static_cast<size_t>(SkipReason::kDuplicate)], 1u);
  EXPECT_EQ(s->skipped[static_cast<size_t>(SkipReason::kMalformed)], 1u);
}

TEST(K8sEndpointsTest, PortsByNameOrNumberAndIpv6) {
  KubernetesProviderConfig p = Provider();
  p.events_port = PortRef{"", 7000};
  p.replay_port = PortRef{};
  p.metrics_port.name = "http";
  p.data_parallel_size = 2;
  Result<EndpointSlice> s = ParseEndpointSlice(
      R"({"metadata": {"name": "s"}, "addressType": "IPv6", "ports": [{"name": "http", "port": 8000}],
          "endpoints": [{"addresses": ["fd00::1"], "targetRef": {"name": "p"}}]})",
      p);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_EQ(s->engines.size(), 1u);
  EXPECT_EQ(s->engines[0].entry.engine.endpoint, "tcp://[fd00::1]:7000");
  EXPECT_EQ(s->engines[0].entry.engine.replay_endpoint, "");
  EXPECT_EQ(s->engines[0].entry.metrics_url, "http://[fd00::1]:8000/metrics");
  EXPECT_EQ(s->engines[0].entry.engine.data_parallel_size, 2u);
}

TEST(K8sEndpointsTest, AMissingNamedPortSkipsEveryEndpoint) {
  Result<EndpointSlice> s = ParseEndpointSlice(
      R"({"metadata": {"name": "s"},
          "ports": [{"name": "kv-events", "port": 5557}, {"name": "kv-replay", "port": 99999}],
          "endpoints": [{"addresses": ["10.0.0.1"]}, {"addresses": ["10.0.0.2"]}]})",
      Provider());
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->engines.empty());
  EXPECT_EQ(s->skipped[static_cast<size_t>(SkipReason::kNoPort)], 2u);
}

TEST(K8sEndpointsTest, NoEndpointsIsAnEmptySlice) {
  for (const char* text : {R"({"metadata": {"name": "s"}})", R"({"metadata": {"name": "s"}, "endpoints": null})"}) {
    Result<EndpointSlice> s = ParseEndpointSlice(text, Provider());
    ASSERT_TRUE(s.ok()) << text;
    EXPECT_TRUE(s->engines.empty());
  }
}

TEST(K8sEndpointsTest, BadSlicesAreErrors) {
  for (const char* text : {"", "[]", "{", R"({"metadata": {}})", R"({"metadata": {"name": 3}})",
                           R"({"metadata": {"name": "s"}, "endpoints": {}})", "\"text\"", "null"}) {
    EXPECT_EQ(ParseEndpointSlice(text, Provider()).status().code(), StatusCode::kInvalidArgument) << text;
  }
}

TEST(K8sEndpointsTest, AListCarriesItsResourceVersion) {
  Result<EndpointSliceList> l = ParseEndpointSliceList(
      std::string(R"({"kind": "EndpointSliceList", "metadata": {"resourceVersion": "77"}, "items": [)") + kSlice +
          "]}",
      Provider());
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->resource_version, "77");
  ASSERT_EQ(l->items.size(), 1u);
  EXPECT_EQ(l->items[0].engines.size(), 3u);
  Result<EndpointSliceList> empty = ParseEndpointSliceList(R"({"metadata": {"resourceVersion": "1"}, "items": null})",
                                                           Provider());
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->items.empty());
  EXPECT_THAT(ParseEndpointSliceList(R"({"items": []})", Provider()).status().message(),
              HasSubstr("resourceVersion"));
  EXPECT_FALSE(ParseEndpointSliceList(R"({"metadata": {"resourceVersion": "1"}, "items": {}})", Provider()).ok());
  EXPECT_FALSE(ParseEndpointSliceList(R"({"metadata": {"resourceVersion": "1"}, "items": [{}]})", Provider()).ok());
  EXPECT_FALSE(ParseEndpointSliceList("<html>", Provider()).ok());
}

TEST(K8sEndpointsTest, WatchEventsOfEveryType) {
  const KubernetesProviderConfig p = Provider();
  Result<WatchEvent> added = ParseWatchEvent(std::string(R"({"type": "ADDED", "object": )") + kSlice + "}", p);
  ASSERT_TRUE(added.ok()) << added.status().ToString();
  EXPECT_EQ(added->type, WatchEventType::kAdded);
  EXPECT_EQ(added->slice.engines.size(), 3u);
  EXPECT_EQ(added->slice.resource_version, "42");
  Result<WatchEvent> modified =
      ParseWatchEvent(R"({"type": "MODIFIED", "object": {"metadata": {"name": "s", "resourceVersion": "43"}}})", p);
  ASSERT_TRUE(modified.ok());
  EXPECT_EQ(modified->type, WatchEventType::kModified);
  Result<WatchEvent> deleted =
      ParseWatchEvent(R"({"type": "DELETED", "object": {"metadata": {"name": "s", "resourceVersion": "44"}}})", p);
  ASSERT_TRUE(deleted.ok());
  EXPECT_EQ(deleted->type, WatchEventType::kDeleted);
  EXPECT_EQ(deleted->slice.name, "s");
  Result<WatchEvent> bookmark = ParseWatchEvent(
      R"({"type": "BOOKMARK", "object": {"kind": "EndpointSlice", "metadata": {"resourceVersion": "99"}}})", p);
  ASSERT_TRUE(bookmark.ok());
  EXPECT_EQ(bookmark->type, WatchEventType::kBookmark);
  EXPECT_EQ(bookmark->slice.resource_version, "99");
  Result<WatchEvent> error = ParseWatchEvent(
      R"j({"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired",
                                           "message": "too old resource version: 1 (5)"}})j",
      p);
  ASSERT_TRUE(error.ok());
  EXPECT_EQ(error->type, WatchEventType::kError);
  EXPECT_EQ(error->error_code, 410);
  EXPECT_THAT(error->error_message, HasSubstr("too old"));
}

TEST(K8sEndpointsTest, BadWatchEventsAreErrors) {
  const KubernetesProviderConfig p = Provider();
  for (const char* line : {"", "{", "[1]", R"({"type": "ADDED"})", R"({"type": "ADDED", "object": 1})",
                           R"({"type": "RENAMED", "object": {"metadata": {"name": "s"}}})",
                           R"({"type": "BOOKMARK", "object": {"metadata": {}}})",
                           R"({"type": "ADDED", "object": {"metadata": {}}})", "\xff\xfe"}) {
    Result<WatchEvent> e = ParseWatchEvent(line, p);
    EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument) << line;
  }
}

KubernetesProviderConfig PodProvider() {
  KubernetesProviderConfig p = Provider();
  p.pod_selector = "app=vllm";
  p.replay_port = PortRef{};
  return p;
}

std::string Pod(const std::string& annotations, const std::string& status, const std::string& extra_meta = "") {
  return R"({"metadata": {"name": "vllm-7d9f-abcde", "resourceVersion": "9", "annotations": )" + annotations +
         extra_meta + R"(},
     "spec": {"containers": [{"name": "vllm", "ports": [{"name": "kv-events", "containerPort": 5557}]}]},
     "status": )" + status + "}";
}

constexpr const char* kRunningReady =
    R"({"phase": "Running", "podIP": "10.1.0.5", "conditions": [{"type": "Ready", "status": "True"}]})";

TEST(K8sEndpointsTest, APodIsOneEngineWithItsAnnotations) {
  Result<EndpointSlice> s = ParseEndpointSlice(Pod("{}", kRunningReady), PodProvider());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_EQ(s->engines.size(), 1u);
  EXPECT_EQ(s->engines[0].entry.engine.replica, "vllm-7d9f-abcde");
  EXPECT_EQ(s->engines[0].entry.engine.endpoint, "tcp://10.1.0.5:5557");
  EXPECT_EQ(s->engines[0].entry.engine.model, "qwen");
  EXPECT_TRUE(s->engines[0].ready);

  s = ParseEndpointSlice(Pod(R"({"kvidx.io/model": "llama", "kvidx.io/dp-size": "4", "kvidx.io/events-port": "7000",
                                 "kvidx.io/replay-port": "7100", "kvidx.io/metrics-port": "9000"})",
                             kRunningReady),
                         PodProvider());
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->engines.size(), 1u);
  const EngineEntry& e = s->engines[0].entry;
  EXPECT_EQ(e.engine.model, "llama");
  EXPECT_EQ(e.engine.data_parallel_size, 4u);
  EXPECT_EQ(e.engine.endpoint, "tcp://10.1.0.5:7000");
  EXPECT_EQ(e.engine.replay_endpoint, "tcp://10.1.0.5:7100");
  EXPECT_EQ(e.metrics_url, "http://10.1.0.5:9000/metrics");
}

TEST(K8sEndpointsTest, PodReadinessPendingAndFinished) {
  const KubernetesProviderConfig p = PodProvider();
  auto engines = [&](const std::string& status, const std::string& extra = "") {
    Result<EndpointSlice> s = ParseEndpointSlice(Pod("{}", status, extra), p);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? s->engines : std::vector<DiscoveredEngine>{};
  };
  auto not_ready =
      engines(R"({"phase": "Running", "podIP": "10.1.0.5", "conditions": [{"type": "Ready", "status": "False"}]})");
  ASSERT_EQ(not_ready.size(), 1u);
  EXPECT_FALSE(not_ready[0].ready);
  auto no_conditions = engines(R"({"phase": "Running", "podIP": "10.1.0.5"})");
  ASSERT_EQ(no_conditions.size(), 1u);
  EXPECT_FALSE(no_conditions[0].ready);
  auto terminating = engines(kRunningReady, R"(, "deletionTimestamp": "2026-01-01T00:00:00Z")");
  ASSERT_EQ(terminating.size(), 1u);
  EXPECT_FALSE(terminating[0].ready);
  EXPECT_TRUE(engines(R"({"phase": "Pending"})").empty());
  EXPECT_TRUE(engines(R"({"phase": "Succeeded", "podIP": "10.1.0.5"})").empty());
  EXPECT_TRUE(engines(R"({"phase": "Failed", "podIP": "10.1.0.5"})").empty());
  auto v6 = engines(R"({"phase": "Running", "podIP": "fd00::5", "conditions": [{"type": "Ready", "status": "True"}]})");
  ASSERT_EQ(v6.size(), 1u);
  EXPECT_EQ(v6[0].entry.engine.endpoint, "tcp://[fd00::5]:5557");
}

TEST(K8sEndpointsTest, BadPodAnnotationsSkipThePodWhole) {
  for (const char* annotations :
       {R"({"kvidx.io/dp-size": "0"})", R"({"kvidx.io/dp-size": "two"})", R"({"kvidx.io/dp-size": 2})",
        R"({"kvidx.io/events-port": "70000"})", R"({"kvidx.io/events-port": "-1"})", R"({"kvidx.io/replay-port": ""})",
        R"({"kvidx.io/metrics-port": "99999999999"})", R"({"kvidx.io/model": ""})", R"({"kvidx.io/model": 7})",
        R"({"kvidx.io/events-port": "65535", "kvidx.io/dp-size": "2"})"}) {
    Result<EndpointSlice> s = ParseEndpointSlice(Pod(annotations, kRunningReady), PodProvider());
    ASSERT_TRUE(s.ok()) << annotations;
    EXPECT_TRUE(s->engines.empty()) << annotations;
    EXPECT_EQ(s->skipped[static_cast<size_t>(SkipReason::kBadAnnotation)], 1u) << annotations;
  }
  // No events port by name or annotation.
  KubernetesProviderConfig p = PodProvider();
  p.events_port.name = "zmq";
  Result<EndpointSlice> s = ParseEndpointSlice(Pod("{}", kRunningReady), p);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->skipped[static_cast<size_t>(SkipReason::kNoPort)], 1u);
  EXPECT_FALSE(ParseEndpointSlice(R"({"metadata": {}})", PodProvider()).ok());
  EXPECT_FALSE(ParseEndpointSlice("[]", PodProvider()).ok());
}

TEST(K8sEndpointsTest, StatusMessageOfAnErrorBody) {
  EXPECT_EQ(StatusMessage(R"({"kind": "Status", "code": 403, "message": "endpointslices is forbidden"})"),
            "endpointslices is forbidden");
  EXPECT_EQ(StatusMessage("<html>502</html>"), "");
  EXPECT_EQ(StatusMessage(R"({"kind": "Pod"})"), "");
}

}  // namespace
}  // namespace kvidx::server
