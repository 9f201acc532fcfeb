#include "server/k8s_endpoints.h"

#include <nlohmann/json.hpp>

#include <set>
#include <utility>

#include "ingest/source_config.h"

namespace kvidx::server {
namespace {

using nlohmann::json;

// A string member, or "" when absent or of another type.
std::string StringAt(const json& j, const char* key) {
  if (!j.is_object()) return "";
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

const json* ObjectAt(const json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it != j.end() && it->is_object() ? &*it : nullptr;
}

// The slice's port of this reference: a fixed number, or the named port it
// lists; 0 if it lists no such port.
uint32_t ResolvePort(const PortRef& ref, const json& ports) {
  if (ref.number != 0) return ref.number;
  if (ref.name.empty() || !ports.is_array()) return 0;
  for (const json& port : ports) {
    if (StringAt(port, "name") != ref.name) continue;
    auto it = port.find("port");
    if (it == port.end() || !it->is_number_integer()) return 0;
    const int64_t n = it->get<int64_t>();
    return n >= 1 && n <= 65535 ? static_cast<uint32_t>(n) : 0;
  }
  return 0;
}

std::string Url(std::string_view scheme, const std::string& host, uint32_t port, std::string_view path = "") {
  return std::string(scheme) + "://" + host + ":" + std::to_string(port) + std::string(path);
}

EngineEntry Build(std::string replica, const std::string& host, const std::string& model, uint32_t dp_size,
                  const uint32_t ports[3]) {
  EngineEntry e;
  e.engine.replica = std::move(replica);
  e.engine.model = model;
  e.engine.endpoint = Url("tcp", host, ports[0]);
  if (ports[1] != 0) e.engine.replay_endpoint = Url("tcp", host, ports[1]);
  e.engine.data_parallel_size = dp_size;
  if (ports[2] != 0) e.metrics_url = Url("http", host, ports[2], "/metrics");
  return e;
}

// The engine of one endpoint, or why there is none.
bool MakeEngine(const KubernetesProviderConfig& p, const json& endpoint, bool v6, const uint32_t ports[3],
                DiscoveredEngine* out, SkipReason* why) {
  const auto addrs = endpoint.find("addresses");
  if (addrs == endpoint.end() || !addrs->is_array() || addrs->empty() || !(*addrs)[0].is_string()) {
    *why = SkipReason::kNoAddress;
    return false;
  }
  const std::string addr = (*addrs)[0].get<std::string>();
  std::string replica;
  if (const json* ref = ObjectAt(endpoint, "targetRef")) replica = StringAt(*ref, "name");
  if (replica.empty()) replica = StringAt(endpoint, "hostname");
  if (replica.empty()) replica = addr;
  if (!ingest::CheckReplicaName(replica).ok()) {
    *why = SkipReason::kBadName;
    return false;
  }
  if (ports[0] == 0 || (!p.replay_port.empty() && ports[1] == 0) || (!p.metrics_port.empty() && ports[2] == 0)) {
    *why = SkipReason::kNoPort;
    return false;
  }
  out->entry = Build(std::move(replica), v6 ? "[" + addr + "]" : addr, p.model, p.data_parallel_size, ports);
  out->ready = true;
  if (const json* cond = ObjectAt(endpoint, "conditions")) {
    auto r = cond->find("ready");
    if (r != cond->end() && r->is_boolean()) out->ready = r->get<bool>();
  }
  return true;
}

Result<EndpointSlice> SliceFrom(const json& j, const KubernetesProviderConfig& p) {
  if (!j.is_object()) return Status::InvalidArgument("an EndpointSlice must be an object");
  const json* meta = ObjectAt(j, "metadata");
  if (meta == nullptr || StringAt(*meta, "name").empty()) {
    return Status::InvalidArgument("EndpointSlice without metadata.name");
  }
  EndpointSlice s;
  s.name = StringAt(*meta, "name");
  s.resource_version = StringAt(*meta, "resourceVersion");
  const std::string type = StringAt(j, "addressType");
  const bool v6 = type == "IPv6";
  const json ports = j.contains("ports") ? j["ports"] : json::array();
  const uint32_t resolved[3] = {ResolvePort(p.events_port, ports),
                                p.replay_port.empty() ? 0 : ResolvePort(p.replay_port, ports),
                                p.metrics_port.empty() ? 0 : ResolvePort(p.metrics_port, ports)};
  auto eps = j.find("endpoints");
  // A slice of no endpoints may say so with null (Go's empty slice).
  if (eps == j.end() || eps->is_null()) return s;
  if (!eps->is_array()) return Status::InvalidArgument("EndpointSlice " + s.name + ": endpoints is not a list");
  std::set<std::string> seen;
  for (const json& ep : *eps) {
    DiscoveredEngine e;
    SkipReason why = SkipReason::kMalformed;
    if (!ep.is_object() || !MakeEngine(p, ep, v6, resolved, &e, &why)) {
      ++s.skipped[static_cast<size_t>(why)];
      continue;
    }
    if (!seen.insert(e.entry.engine.replica).second) {
      ++s.skipped[static_cast<size_t>(SkipReason::kDuplicate)];
      continue;
    }
    s.engines.push_back(std::move(e));
  }
  return s;
}

// A kvidx.io/ number annotation in [lo, hi]: kept in *out if present;
// false if present but not such a number.
bool NumberAnnotation(const json* annotations, const char* key, uint32_t lo, uint32_t hi, uint32_t* out) {
  if (annotations == nullptr || !annotations->contains(key)) return true;
  const json& v = (*annotations)[key];
  if (!v.is_string()) return false;
  const std::string s = v.get<std::string>();
  if (s.empty() || s.size() > 5 || s.find_first_not_of("0123456789") != std::string::npos) return false;
  const uint32_t n = static_cast<uint32_t>(std::stoul(s));
  if (n < lo || n > hi) return false;
  *out = n;
  return true;
}

bool PodReady(const json& pod, const json* status) {
  if (const json* meta = ObjectAt(pod, "metadata");
      meta != nullptr && meta->contains("deletionTimestamp") && !(*meta)["deletionTimestamp"].is_null()) {
    return false;  // terminating
  }
  if (status == nullptr || !status->contains("conditions") || !(*status)["conditions"].is_array()) return false;
  for (const json& c : (*status)["conditions"]) {
    if (StringAt(c, "type") == "Ready") return StringAt(c, "status") == "True";
  }
  return false;
}

// The ports the pod's containers declare, as an EndpointSlice lists them.
json ContainerPorts(const json& pod) {
  json ports = json::array();
  const json* spec = ObjectAt(pod, "spec");
  if (spec == nullptr || !spec->contains("containers") || !(*spec)["containers"].is_array()) return ports;
  for (const json& c : (*spec)["containers"]) {
    if (!c.is_object() || !c.contains("ports") || !c["ports"].is_array()) continue;
    for (const json& port : c["ports"]) {
      if (!port.is_object() || !port.contains("containerPort")) continue;
      ports.push_back({{"name", StringAt(port, "name")}, {"port", port["containerPort"]}});
    }
  }
  return ports;
}

Result<EndpointSlice> PodFrom(const json& j, const KubernetesProviderConfig& p) {
  const json* meta = ObjectAt(j, "metadata");
  if (meta == nullptr || StringAt(*meta, "name").empty()) return Status::InvalidArgument("Pod without metadata.name");
  EndpointSlice s;
  s.name = StringAt(*meta, "name");
  s.resource_version = StringAt(*meta, "resourceVersion");
  const json* status = ObjectAt(j, "status");
  const std::string phase = status != nullptr ? StringAt(*status, "phase") : "";
  const std::string ip = status != nullptr ? StringAt(*status, "podIP") : "";
  // No IP yet (pending), or finished for good: no engine, nothing wrong.
  if (ip.empty() || phase == "Succeeded" || phase == "Failed") return s;
  const json* annotations = ObjectAt(*meta, "annotations");
  std::string model = p.model;
  if (annotations != nullptr && annotations->contains("kvidx.io/model")) {
    const json& m = (*annotations)["kvidx.io/model"];
    model = m.is_string() ? m.get<std::string>() : "";
  }
  uint32_t dp = p.data_parallel_size;
  const json ports = ContainerPorts(j);
  uint32_t resolved[3] = {ResolvePort(p.events_port, ports), ResolvePort(p.replay_port, ports),
                          ResolvePort(p.metrics_port, ports)};
  bool ok = !model.empty() && NumberAnnotation(annotations, "kvidx.io/dp-size", 1, 256, &dp) &&
            NumberAnnotation(annotations, "kvidx.io/events-port", 1, 65535, &resolved[0]) &&
            NumberAnnotation(annotations, "kvidx.io/replay-port", 1, 65535, &resolved[1]) &&
            NumberAnnotation(annotations, "kvidx.io/metrics-port", 1, 65535, &resolved[2]);
  SkipReason why = SkipReason::kBadAnnotation;
  if (ok && !ingest::CheckReplicaName(s.name).ok()) ok = false, why = SkipReason::kBadName;
  if (ok && (resolved[0] == 0 || (!p.replay_port.empty() && resolved[1] == 0) ||
             (!p.metrics_port.empty() && resolved[2] == 0))) {
    ok = false, why = SkipReason::kNoPort;
  }
  for (uint32_t port : resolved) {
    if (ok && port != 0 && port + dp - 1 > 65535) ok = false, why = SkipReason::kBadAnnotation;
  }
  if (!ok) {
    ++s.skipped[static_cast<size_t>(why)];
    return s;
  }
  const std::string host = ip.find(':') != std::string::npos ? "[" + ip + "]" : ip;
  s.engines.push_back(DiscoveredEngine{Build(s.name, host, model, dp, resolved), PodReady(j, status)});
  return s;
}

// The provider's object: a Pod or an EndpointSlice.
Result<EndpointSlice> ObjectFrom(const json& j, const KubernetesProviderConfig& p) {
  if (!j.is_object()) {
    return Status::InvalidArgument(p.pods() ? "a Pod must be an object" : "an EndpointSlice must be an object");
  }
  return p.pods() ? PodFrom(j, p) : SliceFrom(j, p);
}

Result<json> Parse(std::string_view text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::InvalidArgument("not valid JSON");
  return j;
}

}  // namespace

std::string_view SkipReasonName(SkipReason r) {
  switch (r) {
    case SkipReason::kNoAddress: return "no_address";
    case SkipReason::kBadName: return "bad_name";
    case SkipReason::kDuplicate: return "duplicate";
    case SkipReason::kConflict: return "conflict";
    case SkipReason::kNoPort: return "no_port";
    case SkipReason::kMalformed: return "malformed";
    case SkipReason::kBadAnnotation: return "bad_annotation";
  }
  return "unknown";
}

Result<EndpointSlice> ParseEndpointSlice(std::string_view text, const KubernetesProviderConfig& p) {
  Result<json> j = Parse(text);
  if (!j.ok()) return j.status();
  return ObjectFrom(j.value(), p);
}

Result<EndpointSliceList> ParseEndpointSliceList(std::string_view text, const KubernetesProviderConfig& p) {
  Result<json> parsed = Parse(text);
  if (!parsed.ok()) return parsed.status();
  const json& j = parsed.value();
  const json* meta = ObjectAt(j, "metadata");
  EndpointSliceList list;
  list.resource_version = meta != nullptr ? StringAt(*meta, "resourceVersion") : "";
  if (list.resource_version.empty()) return Status::InvalidArgument("list without metadata.resourceVersion");
  auto items = j.find("items");
  if (items == j.end() || items->is_null()) return list;
  if (!items->is_array()) return Status::InvalidArgument("items is not a list");
  for (const json& item : *items) {
    Result<EndpointSlice> s = ObjectFrom(item, p);
    if (!s.ok()) return s.status();
    list.items.push_back(std::move(s.value()));
  }
  return list;
}

Result<WatchEvent> ParseWatchEvent(std::string_view line, const KubernetesProviderConfig& p) {
  Result<json> parsed = Parse(line);
  if (!parsed.ok()) return parsed.status();
  const json& j = parsed.value();
  const std::string type = StringAt(j, "type");
  const json* object = ObjectAt(j, "object");
  if (object == nullptr) return Status::InvalidArgument("watch event without an object");
  WatchEvent e;
  if (type == "ERROR") {
    e.type = WatchEventType::kError;
    auto code = object->find("code");
    e.error_code = code != object->end() && code->is_number_integer() ? code->get<int>() : 0;
    e.error_message = StringAt(*object, "message");
    return e;
  }
  if (type == "BOOKMARK") {
    const json* meta = ObjectAt(*object, "metadata");
    e.type = WatchEventType::kBookmark;
    e.slice.resource_version = meta != nullptr ? StringAt(*meta, "resourceVersion") : "";
    if (e.slice.resource_version.empty()) return Status::InvalidArgument("BOOKMARK without a resourceVersion");
    return e;
  }
  if (type == "ADDED") {
    e.type = WatchEventType::kAdded;
  } else if (type == "MODIFIED") {
    e.type = WatchEventType::kModified;
  } else if (type == "DELETED") {
    e.type = WatchEventType::kDeleted;
  } else {
    return Status::InvalidArgument("unknown watch event type \"" + type.substr(0, 32) + "\"");
  }
  Result<EndpointSlice> s = ObjectFrom(*object, p);
  if (!s.ok()) return s.status();
  e.slice = std::move(s.value());
  return e;
}

std::string StatusMessage(std::string_view text) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || StringAt(j, "kind") != "Status") return "";
  return StringAt(j, "message").substr(0, 512);
}

}  // namespace kvidx::server
