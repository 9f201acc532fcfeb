// Server: one kvidx service instance — the index, ingest, snapshots, the
// gRPC services (kvidx.v1 KvIndex + KvIndexAdmin, grpc.health.v1, reflection)
// and the Prometheus endpoint, wired together from a ServerConfig.
//
// Lifecycle: Create() checks the config and restores the latest snapshot
// (or fails naming the problem: a corrupt data directory is an error unless
// the config says on_corrupt: start-empty); Start() binds the listeners
// (port 0 picks a free port; see grpc_port()/metrics_port()), adds every
// configured engine with the snapshot's watermarks so ingest replays only
// what was missed, and reports SERVING on the health service once every
// source has finished its first replay pass (or left REPLAYING any other
// way). Shutdown() stops accepting calls, lets in-flight calls finish within
// `grace`, stops ingest, writes a final snapshot (snapshot.on_shutdown) and
// returns its outcome. The destructor calls Shutdown() if needed.
//
// Thread-safety: every method may be called from any thread. Reload() and
// SnapshotNow() are control-plane calls serialised by an internal mutex;
// they never block queries.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "server/config.h"
#include "server/snapshot_outcome.h"

namespace kvidx::server {

class Node;

class Server {
 public:
  static Result<std::unique_ptr<Server>> Create(ServerConfig config);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  Status Start();
  // Bound ports after Start() (0 if that listener is disabled).
  int grpc_port() const;
  int metrics_port() const;
  // True once the health service reports SERVING.
  bool serving() const;

  // Applies the engine list of `next` (added, removed, changed engines).
  // Other settings need a restart; differences are logged, not applied.
  Status Reload(const ServerConfig& next);
  // Writes a snapshot now (the admin RPC and the timer use this too).
  Result<SnapshotOutcome> SnapshotNow();
  // Graceful stop; idempotent. Returns the final snapshot's status.
  Status Shutdown(std::chrono::milliseconds grace = std::chrono::seconds(5));

  // The wiring underneath (tests, benchmarks).
  Node& node();

 private:
  Server();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvidx::server
