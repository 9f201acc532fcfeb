#include "server/kv_index_service.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/support/proto_buffer_reader.h>

#include "base/bounded_text.h"
#include "server/proto_convert.h"

namespace kvidx::server {

namespace {

using Clock = std::chrono::steady_clock;

grpc::Status Exhausted(std::string msg) { return {grpc::StatusCode::RESOURCE_EXHAUSTED, std::move(msg)}; }

bool DeadlinePassed(const grpc::ServerContextBase* ctx) {
  return ctx->deadline() < std::chrono::system_clock::now();
}

// What a ForEachQuery callback asks for next.
enum class Walk { kNext, kStop, kTruncated };

// Calls `on_query(in, length)` for each query of a FindPrefixBatchRequest
// as gRPC received it, which must consume exactly `length` bytes (or stop
// the walk). Other fields are skipped (nothing of them is kept).
template <class OnQuery>
grpc::Status ForEachQuery(const grpc::ByteBuffer& wire, OnQuery on_query) {
  using google::protobuf::internal::WireFormatLite;
  grpc::ByteBuffer ref(wire);  // shares the slices
  grpc::ProtoBufferReader reader(&ref);
  google::protobuf::io::CodedInputStream in(&reader);
  in.PushLimit(static_cast<int>(std::min<size_t>(wire.Length(), std::numeric_limits<int>::max())));
  auto bad = [&](const char* what) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, std::string("request: not a valid ") +
                                                                 "kvidx.v1.FindPrefixBatchRequest (" + what +
                                                                 " at byte " + std::to_string(in.CurrentPosition()) +
                                                                 ")");
  };
  for (;;) {
    const uint32_t tag = in.ReadTag();
    if (tag == 0) return in.ConsumedEntireMessage() ? grpc::Status::OK : bad("invalid tag");
    const auto wt = WireFormatLite::GetTagWireType(tag);
    if (wt == WireFormatLite::WIRETYPE_START_GROUP || wt == WireFormatLite::WIRETYPE_END_GROUP) {
      return bad("group (unused by kvidx)");
    }
    if (WireFormatLite::GetTagFieldNumber(tag) != v1::FindPrefixBatchRequest::kQueriesFieldNumber ||
        wt != WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      if (!WireFormatLite::SkipField(&in, tag)) return bad("truncated value");
      continue;
    }
    uint32_t len = 0;
    if (!in.ReadVarint32(&len)) return bad("truncated length");
    if (static_cast<int64_t>(len) > in.BytesUntilLimit()) return bad("length past the end");
    const Walk next = on_query(in, len);
    if (next == Walk::kStop) return grpc::Status::OK;
    if (next == Walk::kTruncated) return bad("truncated query");
  }
}

}  // namespace

KvIndexService::KvIndexService(const Node* node, const GrpcConfig& limits, RpcMetrics* metrics,
                               const std::atomic<bool>* serving, const AdminAuth* read_auth)
    : node_(node),
      limits_(limits),
      metrics_(metrics),
      serving_(serving),
      read_auth_(read_auth),
      started_(Clock::now()) {
  // Twice the largest message: room for every legitimate request at the
  // default limits (1M token ids are charged 16 MiB), not for amplification.
  plain_scan_.max_parsed_bytes = 2 * uint64_t{limits_.max_message_bytes};
  query_scan_.max_parsed_bytes = plain_scan_.max_parsed_bytes;
  query_scan_.echo = v1::FindPrefixRequest::descriptor()->FindFieldByName("request_id");
  const std::string tokens = std::to_string(limits_.max_query_tokens);
  const std::string hashes = std::to_string(limits_.max_query_hashes);
  query_scan_.caps.push_back({v1::TokenPrompt::descriptor()->FindFieldByName("token_ids"), limits_.max_query_tokens,
                              "tokens.token_ids: more than " + tokens + " tokens exceed the limit of " + tokens +
                                  " (grpc.max_query_tokens)"});
  for (const char* f : {"u64", "digest"}) {
    query_scan_.caps.push_back({v1::BlockHashes::descriptor()->FindFieldByName(f), limits_.max_query_hashes,
                                "hashes: more than " + hashes + " hashes exceed the limit of " + hashes +
                                    " (grpc.max_query_hashes)"});
  }
  route_scan_ = query_scan_;
  route_scan_.echo = v1::RouteRequest::descriptor()->FindFieldByName("request_id");
}

grpc::Status KvIndexService::Authorize(const grpc::ServerContextBase& ctx) const {
  return read_auth_ == nullptr ? grpc::Status::OK : CheckCredentials(ctx, *read_auth_);
}

template <class AnswerFn>
grpc::ServerUnaryReactor* KvIndexService::Serve(grpc::CallbackServerContext* ctx, RpcMethod method,
                                                const grpc::ByteBuffer& in, const ScanLimits& limits,
                                                google::protobuf::Message* req, google::protobuf::Message* resp,
                                                grpc::ByteBuffer* out, AnswerFn answer) {
  grpc::Status s;
  {
    RpcTimer timer(metrics_, method);
    s = Authorize(*ctx);
    if (s.ok()) s = ParseRequest(in, limits, req);
    if (s.ok()) s = answer();
    if (s.ok()) s = SerializeResponse(*resp, out);
    s = BoundedStatus(s);
    timer.set_code(s.error_code());
  }
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(s);
  return reactor;
}

grpc::Status KvIndexService::Answer(const v1::FindPrefixRequest& req, v1::FindPrefixResponse* resp) const {
  queries_.fetch_add(1, std::memory_order_relaxed);
  thread_local PrefixQuery query;
  thread_local PrefixAnswer answer;
  thread_local std::vector<MultiModalItem> mm;
  FromProto(req, &query, &mm);
  if (Status s = node_->queries().FindPrefix(query, &answer); !s.ok()) return ToGrpc(s);
  ToProto(req, answer, resp);
  return grpc::Status::OK;
}

grpc::ServerUnaryReactor* KvIndexService::FindPrefix(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                                     grpc::ByteBuffer* resp) {
  v1::FindPrefixRequest q;
  v1::FindPrefixResponse r;
  return Serve(ctx, RpcMethod::kFindPrefix, *req, query_scan_, &q, &r, resp, [&] {
    return DeadlinePassed(ctx) ? grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "deadline passed") : Answer(q, &r);
  });
}

grpc::ServerUnaryReactor* KvIndexService::FindPrefixBatch(grpc::CallbackServerContext* ctx,
                                                          const grpc::ByteBuffer* req, grpc::ByteBuffer* resp) {
  grpc::Status s;
  {
    RpcTimer timer(metrics_, RpcMethod::kFindPrefixBatch);
    s = Authorize(*ctx);
    v1::FindPrefixBatchResponse r;
    if (s.ok()) s = BatchAnswer(ctx, *req, &r);
    if (s.ok()) s = SerializeResponse(r, resp);
    s = BoundedStatus(s);
    timer.set_code(s.error_code());
  }
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(s);
  return reactor;
}

grpc::Status KvIndexService::BatchAnswer(const grpc::ServerContextBase* ctx, const grpc::ByteBuffer& wire,
                                         v1::FindPrefixBatchResponse* resp) const {
  // First pass: framing and the query count, nothing copied; it stops
  // one past the limit (a hostile batch costs no more than a full one).
  uint64_t n = 0;
  const uint64_t max = limits_.max_batch_queries;
  grpc::Status s = ForEachQuery(wire, [&](google::protobuf::io::CodedInputStream& in, uint32_t len) {
    if (++n > max) return Walk::kStop;
    return in.Skip(static_cast<int>(len)) ? Walk::kNext : Walk::kTruncated;
  });
  if (!s.ok()) return s;
  if (n > max) {
    return Exhausted("queries: more than " + std::to_string(max) + " queries exceed the limit of " +
                     std::to_string(max) + " (grpc.max_batch_queries)");
  }
  // Second pass: one query copied out and parsed at a time.
  std::string bytes;
  v1::FindPrefixRequest q;
  return ForEachQuery(wire, [&](google::protobuf::io::CodedInputStream& in, uint32_t len) {
    if (!in.ReadString(&bytes, static_cast<int>(len))) return Walk::kTruncated;
    ScanResult scan;
    const grpc::Status parsed = ParseRequest(std::string_view(bytes), query_scan_, &q, &scan);
    (void)AnswerInto(parsed, q, scan, ctx, resp->add_results());
    return Walk::kNext;
  });
}

grpc::Status KvIndexService::AnswerInto(grpc::Status parsed, const v1::FindPrefixRequest& q, const ScanResult& scan,
                                        const grpc::ServerContextBase* ctx, v1::FindPrefixResult* r) const {
  grpc::Status qs = std::move(parsed);
  r->set_request_id(qs.ok() ? q.request_id() : scan.echo);
  if (qs.ok()) {
    qs = ctx != nullptr && DeadlinePassed(ctx) ? grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "deadline passed")
                                               : Answer(q, r->mutable_response());
  }
  if (!qs.ok()) {
    r->clear_response();
    r->set_code(qs.error_code());
    r->set_message(Clamp(qs.error_message()));
  }
  return qs;
}

grpc::StatusCode KvIndexService::StreamAnswer(const grpc::ByteBuffer& in, grpc::ByteBuffer* out) const {
  v1::FindPrefixRequest req;
  v1::FindPrefixResult result;
  ScanResult scan;
  const grpc::Status parsed = ParseRequest(in, query_scan_, &req, &scan);
  const grpc::Status qs = AnswerInto(parsed, req, scan, /*ctx=*/nullptr, &result);
  out->Clear();
  if (grpc::Status ss = SerializeResponse(result, out); !ss.ok()) return ss.error_code();
  return qs.error_code();
}

// One FindPrefixStream call: read a message, answer it, write its result,
// read the next. One operation is outstanding at a time, so the reactions
// never run concurrently and need no lock. A malformed message fails only
// its own result. `open_streams_` counts the calls alive.
class KvIndexService::StreamReactor final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  // Finishes at once with `refused` if it is not OK.
  // The caller has counted the call in open_streams_; OnDone uncounts it.
  StreamReactor(KvIndexService* service, const grpc::Status& refused) : service_(service) {
    if (!refused.ok()) {
      RpcTimer timer(service_->metrics_, RpcMethod::kFindPrefixStream);
      timer.set_code(refused.error_code());
      Finish(refused);
      return;
    }
    StartRead(&in_);
  }

  void OnReadDone(bool ok) override {
    // Not ok: the client closed its side or the call was cancelled.
    if (!ok) return Finish(grpc::Status::OK);
    RpcTimer timer(service_->metrics_, RpcMethod::kFindPrefixStream);
    timer.set_code(service_->StreamAnswer(in_, &out_));
    in_.Clear();
    StartWrite(&out_);
  }

  void OnWriteDone(bool ok) override {
    if (!ok) return Finish(grpc::Status::OK);
    StartRead(&in_);
  }

  void OnDone() override {
    service_->open_streams_.fetch_sub(1, std::memory_order_relaxed);
    delete this;
  }

 private:
  KvIndexService* service_;
  grpc::ByteBuffer in_;
  grpc::ByteBuffer out_;
};

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* KvIndexService::FindPrefixStream(
    grpc::CallbackServerContext* ctx) {
  const uint32_t open = open_streams_.fetch_add(1, std::memory_order_relaxed);
  grpc::Status refused = Authorize(*ctx);
  if (refused.ok() && open >= limits_.max_open_streams) {
    refused = Exhausted("FindPrefixStream: " + std::to_string(limits_.max_open_streams) +
                        " streams are open, the limit (grpc.max_open_streams)");
  }
  return new StreamReactor(this, refused);
}

grpc::ServerUnaryReactor* KvIndexService::ListReplicas(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                                       grpc::ByteBuffer* resp) {
  v1::ListReplicasRequest q;
  v1::ListReplicasResponse r;
  return Serve(ctx, RpcMethod::kListReplicas, *req, plain_scan_, &q, &r, resp,
               [&] { return ListReplicasAnswer(q, &r); });
}

grpc::ServerUnaryReactor* KvIndexService::GetStats(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                                   grpc::ByteBuffer* resp) {
  v1::GetStatsRequest q;
  v1::GetStatsResponse r;
  return Serve(ctx, RpcMethod::kGetStats, *req, plain_scan_, &q, &r, resp, [&] { return GetStatsAnswer(&r); });
}

grpc::ServerUnaryReactor* KvIndexService::GetBlock(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                                   grpc::ByteBuffer* resp) {
  v1::GetBlockRequest q;
  v1::GetBlockResponse r;
  return Serve(ctx, RpcMethod::kGetBlock, *req, plain_scan_, &q, &r, resp, [&] { return GetBlockAnswer(q, &r); });
}

grpc::ServerUnaryReactor* KvIndexService::Route(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                                grpc::ByteBuffer* resp) {
  v1::RouteRequest q;
  v1::RouteResponse r;
  return Serve(ctx, RpcMethod::kRoute, *req, route_scan_, &q, &r, resp, [&] {
    return DeadlinePassed(ctx) ? grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "deadline passed")
                               : RouteAnswer(q, &r);
  });
}

grpc::ServerUnaryReactor* KvIndexService::RouteDone(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                                    grpc::ByteBuffer* resp) {
  v1::RouteDoneRequest q;
  v1::RouteDoneResponse r;
  return Serve(ctx, RpcMethod::kRouteDone, *req, plain_scan_, &q, &r, resp, [&] { return RouteDoneAnswer(q, &r); });
}

grpc::ServerUnaryReactor* KvIndexService::Tokenize(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                                   grpc::ByteBuffer* resp) {
  v1::TokenizeRequest q;
  v1::TokenizeResponse r;
  return Serve(ctx, RpcMethod::kTokenize, *req, plain_scan_, &q, &r, resp, [&] { return TokenizeAnswer(q, &r); });
}

grpc::Status KvIndexService::TokenizeAnswer(const v1::TokenizeRequest& req, v1::TokenizeResponse* resp) const {
  thread_local PrefixQuery query;
  thread_local std::vector<int64_t> ids;
  FromProto(req, &query);
  if (Status s = node_->queries().Tokenize(query, &ids, resp->mutable_rendered_prompt()); !s.ok()) return ToGrpc(s);
  resp->mutable_token_ids()->Add(ids.begin(), ids.end());
  return grpc::Status::OK;
}

grpc::Status KvIndexService::RouteAnswer(const v1::RouteRequest& req, v1::RouteResponse* resp) {
  thread_local RouteQuery query;
  thread_local server::RouteAnswer answer;
  thread_local std::vector<MultiModalItem> mm;
  FromProto(req, &query, &mm);
  if (Status s = node_->routes().Route(query, &answer); !s.ok()) return ToGrpc(s);
  ToProto(req, answer, resp);
  return grpc::Status::OK;
}

grpc::Status KvIndexService::RouteDoneAnswer(const v1::RouteDoneRequest& req, v1::RouteDoneResponse* resp) {
  const std::optional<uint64_t> cached =
      req.prompt_tokens() > 0 ? std::optional<uint64_t>(req.cached_tokens()) : std::nullopt;
  Result<RouteEnd> end = node_->routes().RouteDone(req.route_id(), cached);
  if (!end.ok()) return ToGrpc(end.status());
  resp->set_predicted_cached_tokens(end->predicted_cached_tokens);
  return grpc::Status::OK;
}

grpc::Status KvIndexService::ListReplicasAnswer(const v1::ListReplicasRequest& req,
                                                v1::ListReplicasResponse* resp) const {
  std::vector<ReplicaStatus> replicas;
  if (Status s = node_->queries().ListReplicas(req.model(), &replicas); !s.ok()) return ToGrpc(s);
  for (const ReplicaStatus& r : replicas) ToProto(r, resp->add_replicas());
  return grpc::Status::OK;
}

grpc::Status KvIndexService::GetStatsAnswer(v1::GetStatsResponse* resp) const {
  resp->set_version(KVIDX_VERSION);
  resp->set_uptime_seconds(std::chrono::duration<double>(Clock::now() - started_).count());
  ToProto(node_->queries().Stats(), resp);
  resp->set_queries(queries());
  resp->set_serving(serving_->load(std::memory_order_acquire));
  return grpc::Status::OK;
}

grpc::Status KvIndexService::GetBlockAnswer(const v1::GetBlockRequest& req, v1::GetBlockResponse* resp) const {
  const v1::BlockHashes& h = req.hash();
  const bool one = h.u64_size() + h.digest_size() == 1;
  const uint64_t hash = one && h.u64_size() == 1 ? h.u64(0) : 0;
  const std::string_view digest = one && h.digest_size() == 1 ? std::string_view(h.digest(0)) : std::string_view();
  std::vector<BlockHolder> holders;
  Status s = node_->queries().GetBlock(req.model(), one && h.u64_size() == 1 ? &hash : nullptr,
                              one && h.digest_size() == 1 ? &digest : nullptr, &holders);
  if (!s.ok()) return ToGrpc(s);
  for (const BlockHolder& holder : holders) ToProto(holder, resp->add_owners());
  return grpc::Status::OK;
}

}  // namespace kvidx::server
