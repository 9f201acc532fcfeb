// Source configuration: which vLLM publishers kvidx listens to, and how.
//
// An *engine* is one vLLM deployment (one replica) as an operator configures
// it: replica name, model, PUB endpoint, optional replay endpoint,
// data-parallel size, optional topic. Each data-parallel rank runs its own
// publisher with its own endpoints, so one engine expands into DP-size
// *sources* (SourceSpec). A source is the unit of sequencing, replay, state
// and metrics; its name "<replica>/dp<rank>" is the `source` metric label.
//
// Endpoints are written from kvidx's point of view:
//   - connect mode (default; vLLM binds `tcp://*:5557`): `endpoint` is where
//     kvidx connects its SUB, e.g. "tcp://10.0.0.7:5557";
//   - bind mode (vLLM's endpoint has no `*`, so vLLM connects): `endpoint` is
//     what kvidx binds its SUB to, e.g. "tcp://*:5557". Several engines may
//     share one bound endpoint; they are told apart by topic (exact match).
// The replay endpoint is always connected to (vLLM's ROUTER always binds).
// Per rank, both endpoints follow vLLM's offset_endpoint_port(): tcp port +
// rank, inproc suffix "_dp<rank>", anything else invalid for rank > 0.
//
// Value types; thread-compatible. Errors are Status values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace kvidx::ingest {

enum class ConnectMode : uint8_t {
  kConnect,  // vLLM binds, kvidx connects (vLLM's default)
  kBind,     // kvidx binds, vLLM connects (topics tell engines apart)
};

std::string_view ConnectModeName(ConnectMode m);  // "connect" / "bind"

struct EngineConfig {
  std::string replica;                 // unique among engines; the `source` label prefix
  std::string model;
  std::string endpoint;                // rank-0 PUB endpoint, kvidx's side (see above)
  std::string replay_endpoint;         // rank-0 ROUTER endpoint; empty = no replay
  uint32_t data_parallel_size = 1;
  // The engine's KVEventsConfig.topic. Empty = derive it from the topic
  // template (TopicTemplate) if one is configured, else vLLM's default "".
  std::optional<std::string> topic;
  ConnectMode mode = ConnectMode::kConnect;
};

// One data-parallel rank of one engine: what an ingest thread subscribes to.
struct SourceSpec {
  uint64_t id = 0;                     // process-unique, assigned by Ingester; never reused
  std::string replica;
  std::string model;
  uint32_t dp_rank = 0;
  std::string name;                    // "<replica>/dp<rank>"
  std::string endpoint;                // offset for this rank
  std::string replay_endpoint;         // offset for this rank; empty = no replay
  std::string topic;                   // exact topic this source's batches carry
  ConnectMode mode = ConnectMode::kConnect;

  bool has_replay() const { return !replay_endpoint.empty(); }
};

// vLLM's offset_endpoint_port(endpoint, dp_rank) (spec §2.2): unchanged for
// rank 0 or an empty endpoint; "inproc" anywhere -> "<endpoint>_dp<rank>";
// "tcp" anywhere -> the port after the last ':' plus rank (unchanged if there
// is no ':'); anything else (ipc://) -> InvalidArgument for rank > 0.
Result<std::string> OffsetEndpoint(std::string_view endpoint, uint32_t dp_rank);

// Maps engines to topics and back, for bind mode where one socket carries
// many engines. The template may use {replica} and {model}; llm-d's
// convention is "kv@{replica}@{model}". An empty template means "no
// derivation": an engine without an explicit topic uses "".
class TopicTemplate {
 public:
  TopicTemplate() = default;
  explicit TopicTemplate(std::string pattern) : pattern_(std::move(pattern)) {}

  bool empty() const { return pattern_.empty(); }
  const std::string& pattern() const { return pattern_; }

  // The topic an engine publishes under: its explicit topic if set, else the
  // expanded template, else "".
  std::string TopicFor(const EngineConfig& engine) const;

  // Inverse of the template, for topics seen on a bound socket that no
  // configured source claims (logs, discovery): fills replica/model and
  // returns true if `topic` matches. A placeholder matches non-empty text up
  // to the first occurrence of the literal that follows it (or to the end),
  // which is right for separators that cannot appear in names ("@").
  bool Parse(std::string_view topic, std::string* replica, std::string* model) const;

 private:
  std::string pattern_;
};

// A replica name is part of every metric label, log line and topic of its
// sources: DNS names (253 bytes), pod names, host:port and [IPv6]:port fit.
inline constexpr size_t kMaxReplicaNameBytes = 253;
// 1..kMaxReplicaNameBytes bytes of A-Z a-z 0-9 . - _ : [ ] (so never '/',
// which separates replica and rank, nor '@', the topic template separator).
Status CheckReplicaName(std::string_view replica);

// Checks an engine config (replica name, endpoints, DP size) and expands it
// into one SourceSpec per rank (ids left 0). Endpoints must be tcp://,
// inproc:// or ipc://. A tcp endpoint needs a host and a port in 1..65535,
// and port + dp_size - 1 must stay <= 65535; where kvidx binds the port may
// be "*", where it connects (connect mode, replay) the host may not be "*".
// Every error is InvalidArgument; messages quote at most 128 bytes of an
// endpoint.
Result<std::vector<SourceSpec>> ExpandEngine(const EngineConfig& engine, const TopicTemplate& topics);

// "<replica>/dp<rank>".
std::string SourceName(std::string_view replica, uint32_t dp_rank);

}  // namespace kvidx::ingest
