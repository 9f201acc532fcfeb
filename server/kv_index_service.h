// KvIndexService: the router-facing kvidx.v1.KvIndex gRPC service.
//
// The service translates (proto_convert.h) and serves; the queries
// themselves are QueryEngine's (query_engine.h). A FindPrefix runs on the
// gRPC thread that read it, without locks: per-thread scratch (the domain
// query and answer, keys, digests, hasher copies) makes a warm query
// allocation-free up to the protobuf response.
//
// Requests arrive as raw bytes and pass ScanRequest (request_scan.h)
// before anything is parsed: counts over the configured limits and
// requests whose parsed form would pass 2 x grpc.max_message_bytes are
// refused before memory is spent on them. A batch is parsed one query at a
// time.
//
// Errors: INVALID_ARGUMENT naming the field (or for bytes that are not the
// request message), NOT_FOUND for an unknown model, RESOURCE_EXHAUSTED over
// a configured limit, DEADLINE_EXCEEDED if the deadline passed before the
// query ran, UNAUTHENTICATED without credentials when reads require them
// (grpc.require_auth_for_reads). Every outcome is counted in RpcMetrics;
// quoted request values are cut short (base/bounded_text.h).
//
// Thread-safety: gRPC calls the handlers from many threads; the service
// holds only const references and atomics. `node` and `metrics` must
// outlive it.
#pragma once

#include <atomic>
#include <chrono>

#include "kvidx/v1/kvidx.grpc.pb.h"
#include "server/config.h"
#include "server/credentials.h"
#include "server/node.h"
#include "server/request_scan.h"
#include "server/rpc_metrics.h"

namespace kvidx::server {

// Every method uses gRPC's raw callback API. The answer is computed inline
// on the thread that read the request (it never blocks and takes
// microseconds), saving the sync API's hand-off to a handler thread and
// back -- about half the loopback latency (docs/BENCHMARKS.md) -- and each
// request is scanned on its wire bytes before it is parsed (request_scan.h).
// An open FindPrefixStream holds no thread while it waits for its client;
// at most grpc.max_open_streams are open at once, and a stream over the
// limit ends at once with RESOURCE_EXHAUSTED naming it.
using KvIndexServiceBase = v1::KvIndex::WithRawCallbackMethod_FindPrefix<v1::KvIndex::WithRawCallbackMethod_FindPrefixBatch<
    v1::KvIndex::WithRawCallbackMethod_FindPrefixStream<v1::KvIndex::WithRawCallbackMethod_ListReplicas<
        v1::KvIndex::WithRawCallbackMethod_GetStats<v1::KvIndex::WithRawCallbackMethod_GetBlock<
            v1::KvIndex::WithRawCallbackMethod_Route<v1::KvIndex::WithRawCallbackMethod_RouteDone<
                v1::KvIndex::WithRawCallbackMethod_Tokenize<v1::KvIndex::Service>>>>>>>>>;

class KvIndexService final : public KvIndexServiceBase {
 public:
  // `read_auth`: null = queries are public; else the credentials every call
  // must carry. Outlives the service.
  KvIndexService(const Node* node, const GrpcConfig& limits, RpcMetrics* metrics, const std::atomic<bool>* serving,
                 const AdminAuth* read_auth = nullptr);

  grpc::ServerUnaryReactor* FindPrefix(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                       grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* FindPrefixBatch(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                            grpc::ByteBuffer* resp) override;
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* FindPrefixStream(
      grpc::CallbackServerContext* ctx) override;
  grpc::ServerUnaryReactor* ListReplicas(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                         grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* GetStats(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                     grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* GetBlock(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                     grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* Route(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                  grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* RouteDone(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                      grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                     grpc::ByteBuffer* resp) override;

  // The query itself, shared by the three FindPrefix forms (and benches).
  grpc::Status Answer(const v1::FindPrefixRequest& req, v1::FindPrefixResponse* resp) const;
  // A batch from its wire bytes as received, parsing one query at a time.
  grpc::Status BatchAnswer(const grpc::ServerContextBase* ctx, const grpc::ByteBuffer& wire,
                           v1::FindPrefixBatchResponse* resp) const;

  uint64_t queries() const { return queries_.load(std::memory_order_relaxed); }
  // FindPrefixStream calls open now.
  uint32_t open_streams() const { return open_streams_.load(std::memory_order_relaxed); }

 private:
  grpc::Status ListReplicasAnswer(const v1::ListReplicasRequest& req, v1::ListReplicasResponse* resp) const;
  grpc::Status GetStatsAnswer(v1::GetStatsResponse* resp) const;
  grpc::Status GetBlockAnswer(const v1::GetBlockRequest& req, v1::GetBlockResponse* resp) const;
  grpc::Status RouteAnswer(const v1::RouteRequest& req, v1::RouteResponse* resp);
  grpc::Status RouteDoneAnswer(const v1::RouteDoneRequest& req, v1::RouteDoneResponse* resp);
  grpc::Status TokenizeAnswer(const v1::TokenizeRequest& req, v1::TokenizeResponse* resp) const;
  // Authenticates, parses `in` into `req` under `limits`, runs `answer`,
  // serialises `resp` into `out`, counts the outcome as `method`.
  template <class Answer>
  grpc::ServerUnaryReactor* Serve(grpc::CallbackServerContext* ctx, RpcMethod method, const grpc::ByteBuffer& in,
                                  const ScanLimits& limits, google::protobuf::Message* req,
                                  google::protobuf::Message* resp, grpc::ByteBuffer* out, Answer answer);
  grpc::Status Authorize(const grpc::ServerContextBase& ctx) const;
  // One query of a batch or stream: `parsed` is ParseRequest's outcome for
  // `q` (and `scan`). Answers it unless `ctx`'s deadline passed (null: no
  // deadline), fills `r` with the answer or the error, returns the latter.
  grpc::Status AnswerInto(grpc::Status parsed, const v1::FindPrefixRequest& q, const ScanResult& scan,
                          const grpc::ServerContextBase* ctx, v1::FindPrefixResult* r) const;
  // One FindPrefixStream message: `in` scanned, parsed and answered into
  // the serialised FindPrefixResult `out`; the result's code as returned.
  grpc::StatusCode StreamAnswer(const grpc::ByteBuffer& in, grpc::ByteBuffer* out) const;
  class StreamReactor;

  const Node* node_;
  const GrpcConfig limits_;
  RpcMetrics* metrics_;
  const std::atomic<bool>* serving_;
  const AdminAuth* read_auth_;
  const std::chrono::steady_clock::time_point started_;
  ScanLimits query_scan_;   // one FindPrefixRequest
  ScanLimits route_scan_;   // one RouteRequest
  ScanLimits plain_scan_;   // the other requests: size only
  mutable std::atomic<uint64_t> queries_{0};
  std::atomic<uint32_t> open_streams_{0};
};

}  // namespace kvidx::server
