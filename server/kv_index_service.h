// KvIndexService: the router-facing kvidx.v1.KvIndex gRPC service.
//
// FindPrefix turns a request into block keys (hashing token ids with the
// model's configured vLLM hasher, or taking the hashes as given), asks the
// BlockIndex for the longest prefix per source, and decorates the answer
// with names, states and positions. The whole path runs on the gRPC thread
// without locks: per-thread scratch (keys, digests, PrefixMatch, hasher
// copies) makes a warm query allocation-free up to the protobuf response.
//
// Errors: INVALID_ARGUMENT naming the field, NOT_FOUND for an unknown
// model, RESOURCE_EXHAUSTED over a configured limit, DEADLINE_EXCEEDED if
// the deadline passed before the query ran.
//
// Thread-safety: gRPC calls the handlers from many threads; the service
// holds only const references and atomics. `node` and `metrics` must
// outlive it.
#pragma once

#include <atomic>
#include <chrono>

#include "kvidx/v1/kvidx.grpc.pb.h"
#include "server/config.h"
#include "server/node.h"
#include "server/rpc_metrics.h"

namespace kvidx::server {

// FindPrefix and FindPrefixBatch use gRPC's callback API: the answer is
// computed inline on the thread that read the request (it never blocks and
// takes microseconds), saving the sync API's hand-off to a handler thread
// and back -- about half the loopback latency (docs/BENCHMARKS.md).
// FindPrefixStream does too, so an open stream holds no thread while it
// waits for its client; at most grpc.max_open_streams are open at once, a
// stream over the limit ends at once with RESOURCE_EXHAUSTED naming it.
// The other methods are rare and stay synchronous.
using KvIndexServiceBase = v1::KvIndex::WithCallbackMethod_FindPrefix<v1::KvIndex::WithCallbackMethod_FindPrefixBatch<
    v1::KvIndex::WithCallbackMethod_FindPrefixStream<v1::KvIndex::Service>>>;

class KvIndexService final : public KvIndexServiceBase {
 public:
  KvIndexService(const Node* node, const GrpcConfig& limits, RpcMetrics* metrics, const std::atomic<bool>* serving);

  grpc::ServerUnaryReactor* FindPrefix(grpc::CallbackServerContext* ctx, const v1::FindPrefixRequest* req,
                                       v1::FindPrefixResponse* resp) override;
  grpc::ServerUnaryReactor* FindPrefixBatch(grpc::CallbackServerContext* ctx, const v1::FindPrefixBatchRequest* req,
                                            v1::FindPrefixBatchResponse* resp) override;
  grpc::ServerBidiReactor<v1::FindPrefixRequest, v1::FindPrefixResult>* FindPrefixStream(
      grpc::CallbackServerContext* ctx) override;
  grpc::Status ListReplicas(grpc::ServerContext* ctx, const v1::ListReplicasRequest* req,
                            v1::ListReplicasResponse* resp) override;
  grpc::Status GetStats(grpc::ServerContext* ctx, const v1::GetStatsRequest* req, v1::GetStatsResponse* resp) override;
  grpc::Status GetBlock(grpc::ServerContext* ctx, const v1::GetBlockRequest* req, v1::GetBlockResponse* resp) override;

  // The query itself, shared by the three FindPrefix forms (and benches).
  grpc::Status Answer(const v1::FindPrefixRequest& req, v1::FindPrefixResponse* resp) const;

  grpc::Status BatchAnswer(const grpc::ServerContextBase* ctx, const v1::FindPrefixBatchRequest* req,
                           v1::FindPrefixBatchResponse* resp) const;

  uint64_t queries() const { return queries_.load(std::memory_order_relaxed); }
  // FindPrefixStream calls open now.
  uint32_t open_streams() const { return open_streams_.load(std::memory_order_relaxed); }

 private:
  const Node* node_;
  const GrpcConfig limits_;
  RpcMetrics* metrics_;
  const std::atomic<bool>* serving_;
  const std::chrono::steady_clock::time_point started_;
  mutable std::atomic<uint64_t> queries_{0};
  std::atomic<uint32_t> open_streams_{0};
};

// kvidx::SourceState -> kvidx.v1.SourceState.
v1::SourceState ToProto(SourceState s);
// Status -> grpc::Status with the matching code.
grpc::Status ToGrpc(const Status& s);

}  // namespace kvidx::server
