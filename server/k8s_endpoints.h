// The Kubernetes objects discovery reads, as engines: EndpointSlices
// (discovery.k8s.io/v1) or Pods (v1), their lists and watch events, parsed
// from the API server's JSON. Which of the two is the provider's
// (KubernetesProviderConfig::pods()); a Pod is read as a slice of at most
// one engine, so the rest of discovery handles both alike.
//
// An EndpointSlice gives one engine per endpoint: replica = its pod's name
// (targetRef.name), else its hostname; host = its first address (IPv6 in
// brackets); ports by name from the slice's ports (or the provider's fixed
// numbers). conditions.ready absent counts as ready, as the API documents.
//
// A Pod gives one engine once it has an IP and until it has Succeeded or
// Failed: replica = its name, host = status.podIP, ready = its Ready
// condition is "True" and it is not being deleted; ports by name from its
// containers' ports. Its annotations override the provider's defaults:
//   kvidx.io/model, kvidx.io/dp-size, kvidx.io/events-port,
//   kvidx.io/replay-port, kvidx.io/metrics-port (numbers, as strings)
// A malformed annotation skips the pod, whole (bad_annotation).
// An endpoint no engine can be made of is skipped and counted by reason
// (SkipReason); an object or event that is not the documented shape is an
// error (the caller counts it and skips it), never a half-added engine.
//
// Pure functions; no exception escapes (nlohmann's are caught inside).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "server/config.h"

namespace kvidx::server {

// Records (endpoints, DNS records, events) a provider got but no engine came
// of, by reason.
enum class SkipReason : uint8_t {
  kNoAddress,
  kBadName,
  kDuplicate,
  kConflict,
  kNoPort,
  kMalformed,
  kBadAnnotation,
};
inline constexpr size_t kNumSkipReasons = 7;
std::string_view SkipReasonName(SkipReason r);
using SkipCounts = std::array<uint64_t, kNumSkipReasons>;

// An engine a provider found, with its readiness: a not-ready engine is
// subscribed (its cache is real) but Route does not pick it.
struct DiscoveredEngine {
  EngineEntry entry;
  bool ready = true;
};

// An EndpointSlice's engines, or a Pod's (at most one).
struct EndpointSlice {
  std::string name;
  std::string resource_version;
  std::vector<DiscoveredEngine> engines;
  SkipCounts skipped{};
};

struct EndpointSliceList {
  std::string resource_version;  // the list's: where the watch starts
  std::vector<EndpointSlice> items;
};

enum class WatchEventType : uint8_t { kAdded, kModified, kDeleted, kBookmark, kError };

struct WatchEvent {
  WatchEventType type = WatchEventType::kError;
  EndpointSlice slice;      // ADDED / MODIFIED / DELETED (name, engines); BOOKMARK: resource_version only
  int error_code = 0;       // ERROR: the Status object's code (410 = resourceVersion too old)
  std::string error_message;
};

// InvalidArgument (naming what is wrong) for text that is not the object.
Result<EndpointSlice> ParseEndpointSlice(std::string_view json, const KubernetesProviderConfig& p);
Result<EndpointSliceList> ParseEndpointSliceList(std::string_view json, const KubernetesProviderConfig& p);
// One line of a watch stream.
Result<WatchEvent> ParseWatchEvent(std::string_view line, const KubernetesProviderConfig& p);

// The message of an API server Status object (an error response body), or
// "" if the body is not one.
std::string StatusMessage(std::string_view json);

}  // namespace kvidx::server
