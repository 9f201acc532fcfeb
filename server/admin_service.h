// AdminService: kvidx.v1.KvIndexAdmin (engines, sources, snapshots,
// resync; a simulated route clock) and the credential check every admin call passes first.
//
// Credentials: CheckCredentials (server/credentials.h) on every call,
// before the request is read. Requests are then read as raw bytes and
// scanned (request_scan.h): bytes that are not the request message get
// INVALID_ARGUMENT and are counted like every other outcome.
//
// Thread-safety: handlers run on gRPC threads; Node serialises control
// calls. `node`, `metrics` and `snapshot` outlive the service.
#pragma once

#include <functional>
#include <string>

#include "kvidx/v1/kvidx.grpc.pb.h"
#include "server/credentials.h"
#include "server/node.h"
#include "server/rpc_metrics.h"

namespace kvidx::server {

class AdminService final : public v1::KvIndexAdmin::Service {
 public:
  using SnapshotFn = std::function<Result<SnapshotOutcome>()>;
  AdminService(Node* node, AdminAuth auth, RpcMetrics* metrics, SnapshotFn snapshot);

  grpc::Status AddEngine(grpc::ServerContext* ctx, const v1::AddEngineRequest* req,
                         v1::AddEngineResponse* resp) override;
  grpc::Status RemoveEngine(grpc::ServerContext* ctx, const v1::RemoveEngineRequest* req,
                            v1::RemoveEngineResponse* resp) override;
  grpc::Status ListSources(grpc::ServerContext* ctx, const v1::ListSourcesRequest* req,
                           v1::ListSourcesResponse* resp) override;
  grpc::Status TriggerSnapshot(grpc::ServerContext* ctx, const v1::TriggerSnapshotRequest* req,
                               v1::TriggerSnapshotResponse* resp) override;
  grpc::Status Resync(grpc::ServerContext* ctx, const v1::ResyncRequest* req, v1::ResyncResponse* resp) override;
  grpc::Status AdvanceClock(grpc::ServerContext* ctx, const v1::AdvanceClockRequest* req,
                            v1::AdvanceClockResponse* resp) override;
  grpc::Status ScrapeLoads(grpc::ServerContext* ctx, const v1::ScrapeLoadsRequest* req,
                           v1::ScrapeLoadsResponse* resp) override;

 private:
  // A handler that authenticates, reads and parses the request, then calls
  // `fn` (the typed method above) and writes its response.
  template <class Req, class Resp>
  grpc::internal::MethodHandler* Scanned(RpcMethod method,
                                         grpc::Status (AdminService::*fn)(grpc::ServerContext*, const Req*, Resp*));

  Node* node_;
  const AdminAuth auth_;
  RpcMetrics* metrics_;
  SnapshotFn snapshot_;
};

// Builds an EngineEntry from the API's EngineSpec (INVALID_ARGUMENT naming
// the field).
Result<EngineEntry> EngineFromSpec(const v1::EngineSpec& spec);

}  // namespace kvidx::server
