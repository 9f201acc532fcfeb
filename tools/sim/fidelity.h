// Fidelity: does kvidx tell the truth about a simulated fleet?
//
// For each sampled query, kvidx's per-source answer (FindPrefix over gRPC,
// through kvidx::client::Client: the path a router uses) is compared with
// every rank's real longest cached prefix (SimRank::CachedPrefix). Only
// sources kvidx reports EXACT must match — that is kvidx's promise; a
// mismatch on a DEGRADED source is kvidx honestly flagging what it lost and
// is counted separately, as are sources in any other state.
//
//   fidelity = queries where every EXACT source matched / queries
//
// A measurement only means something once kvidx has applied everything the
// engines published: Fleet::Settle() then WaitCaughtUp() first (the
// functions below never publish anything themselves).
//
// Shared by kvidx-sim and tests/sim. Not thread-safe with respect to the
// Fleet (one driving thread); the Client may be shared.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "client/client.h"
#include "base/status.h"
#include "tools/sim/fleet.h"

namespace kvidx::sim {

// grpc::Status -> kvidx::Status, keeping the message (for reports).
Status FromGrpc(const grpc::Status& s, const std::string& what);

// One source as kvidx lists it (ListReplicas, no credentials needed).
struct SourceView {
  v1::SourceState state = v1::SOURCE_STATE_UNSPECIFIED;
  bool has_seq = false;
  uint64_t last_seq = 0;
};
// The fleet model's sources by name ("<replica>/dp<rank>").
Result<std::map<std::string, SourceView>> ListSources(const Fleet& fleet, const client::Client& kvidx);
// "EXACT", "DEGRADED", ...
std::string StateName(v1::SourceState s);

// Adds one engine through the admin API; an engine of the same name left by
// an earlier run is replaced (this run's engines are new processes anyway).
// A non-empty `metrics_url` is the engine's /metrics for kvidx to scrape.
Status RegisterEngine(const EngineDesc& e, const client::Client& kvidx, bool quiet,
                      const std::string& metrics_url = {});
// Every engine of the fleet; `metrics_url(replica)` when given.
Status RegisterEngines(const Fleet& fleet, const client::Client& kvidx, bool quiet,
                       const std::function<std::string(const std::string&)>& metrics_url = {});

// Waits until kvidx lists every rank's source in a state other than
// CONNECTING (its SUB reached the engine, or the first replay finished).
Status WaitConnected(const Fleet& fleet, const client::Client& kvidx, std::chrono::milliseconds timeout);

// Flushes the publishers, then waits until, for every rank, kvidx has
// applied (or counted as lost) every batch the rank published — its
// last_seq is the rank's last seq — and the source is EXACT or DEGRADED.
// Unavailable naming the sources still behind on timeout.
Status WaitCaughtUp(Fleet& fleet, const client::Client& kvidx, std::chrono::milliseconds timeout);

// The stopped replicas (Fleet::removed) of which kvidx still lists a source.
Result<std::vector<std::string>> RemovedStillListed(const Fleet& fleet, const client::Client& kvidx);
// Waits until kvidx lists no source of a stopped replica (discovery removes
// them when their grace period ends). Unavailable naming them on timeout.
Status WaitRemovedGone(const Fleet& fleet, const client::Client& kvidx, std::chrono::milliseconds timeout);

// Brings a fresh fleet and kvidx to a known common state before traffic:
// WaitConnected, a pause for subscriptions to reach the publishers, then
// one AllBlocksCleared per rank (vLLM reset_prefix_cache) and WaitCaughtUp
// with every source EXACT. Without replay this is what guarantees no batch
// is lost to ZMQ's slow-joiner window before measurements start.
Status WarmUp(Fleet& fleet, const client::Client& kvidx, std::chrono::milliseconds timeout);

struct FidelityResult {
  uint64_t queries = 0;
  uint64_t queries_ok = 0;            // every EXACT source equal to the truth
  uint64_t comparisons_exact = 0;     // (query, source) pairs with the source EXACT
  uint64_t mismatches_exact = 0;
  uint64_t comparisons_degraded = 0;
  uint64_t mismatches_degraded = 0;
  uint64_t comparisons_other = 0;     // CONNECTING / REPLAYING / DISCONNECTED / unknown
  uint64_t mismatches_other = 0;
  uint64_t rpc_errors = 0;            // failed queries (counted as not ok)
  std::vector<std::string> examples;  // the first few EXACT mismatches, readable

  // 100 * queries_ok / queries (100 with no query).
  double percent() const;
  bool perfect() const { return queries_ok == queries; }
  void Add(const FidelityResult& other);
};

// Asks kvidx about each query and compares every rank (see the header).
Result<FidelityResult> MeasureFidelity(Fleet& fleet, const client::Client& kvidx,
                                       const std::vector<std::vector<int64_t>>& queries, size_t max_examples = 5);

// What kvidx counted for the fleet's sources. With an admin token
// (ListSources) the numbers are per source and summed over the fleet;
// otherwise they are GetStats totals over every source of the server and
// replayed/restarts are unknown (per_source = false).
struct KvidxCounters {
  bool per_source = false;
  uint64_t batches_lost = 0;
  uint64_t gaps = 0;
  uint64_t batches_replayed = 0;
  uint64_t restarts = 0;
  uint64_t events = 0;
  std::map<std::string, uint64_t> sources_by_state;  // fleet sources (ListReplicas)
};
Result<KvidxCounters> ReadCounters(const Fleet& fleet, const client::Client& kvidx);

}  // namespace kvidx::sim
