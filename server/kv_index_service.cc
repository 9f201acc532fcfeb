#include "server/kv_index_service.h"

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/support/proto_buffer_reader.h>

#include "index/block_hasher.h"
#include "index/prefix_match.h"
#include "server/error_text.h"

namespace kvidx::server {

namespace {

using Clock = std::chrono::steady_clock;

// Per-thread query scratch: capacity survives across calls.
struct Scratch {
  std::vector<BlockKey> keys;
  std::vector<BlockDigest> digests;
  std::vector<MultiModalItem> mm;
  PrefixMatch match;
  std::vector<std::pair<uint64_t, BlockHasher>> hashers;  // by ModelRuntime::uid
  std::vector<uint32_t> order;

  BlockHasher& HasherFor(const ModelRuntime& m) {
    for (auto& [uid, h] : hashers) {
      if (uid == m.uid) return h;
    }
    // Forget hashers of models of servers that are gone (tests start many).
    if (hashers.size() >= 16) hashers.clear();
    hashers.emplace_back(m.uid, m.hasher);
    return hashers.back().second;
  }
};

Scratch& TlsScratch() {
  thread_local Scratch s;
  return s;
}

grpc::Status Invalid(std::string msg) { return {grpc::StatusCode::INVALID_ARGUMENT, std::move(msg)}; }
grpc::Status Exhausted(std::string msg) { return {grpc::StatusCode::RESOURCE_EXHAUSTED, std::move(msg)}; }

bool DeadlinePassed(const grpc::ServerContextBase* ctx) {
  return ctx->deadline() < std::chrono::system_clock::now();
}

grpc::Status UnknownModel(const std::string& name) {
  return {grpc::StatusCode::NOT_FOUND, "model: unknown model " + Quote(name)};
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

v1::SourceState ToProto(SourceState s) {
  switch (s) {
    case SourceState::kConnecting: return v1::SOURCE_STATE_CONNECTING;
    case SourceState::kReplaying: return v1::SOURCE_STATE_REPLAYING;
    case SourceState::kExact: return v1::SOURCE_STATE_EXACT;
    case SourceState::kDegraded: return v1::SOURCE_STATE_DEGRADED;
    case SourceState::kDisconnected: return v1::SOURCE_STATE_DISCONNECTED;
  }
  return v1::SOURCE_STATE_UNSPECIFIED;
}

grpc::Status ToGrpc(const Status& s) {
  // Node errors quote names from requests (a replica, a source).
  const std::string msg = Clamp(s.message());
  switch (s.code()) {
    case StatusCode::kOk: return grpc::Status::OK;
    case StatusCode::kInvalidArgument: return {grpc::StatusCode::INVALID_ARGUMENT, msg};
    case StatusCode::kNotFound: return {grpc::StatusCode::NOT_FOUND, msg};
    case StatusCode::kOutOfRange: return {grpc::StatusCode::RESOURCE_EXHAUSTED, msg};
    case StatusCode::kCorruption: return {grpc::StatusCode::DATA_LOSS, msg};
    case StatusCode::kUnavailable: return {grpc::StatusCode::UNAVAILABLE, msg};
    case StatusCode::kFailedPrecondition: return {grpc::StatusCode::FAILED_PRECONDITION, msg};
    case StatusCode::kInternal: return {grpc::StatusCode::INTERNAL, msg};
  }
  return {grpc::StatusCode::UNKNOWN, msg};
}

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
  if (req.model().empty()) return Invalid("model: required");
  const ModelRuntime* model = node_->FindModel(req.model());
  if (model == nullptr) return UnknownModel(req.model());
  Scratch& sc = TlsScratch();
  sc.keys.clear();
  const bool int_keys = model->config.int_block_hashes;

  switch (req.query_case()) {
    case v1::FindPrefixRequest::kTokens: {
      const v1::TokenPrompt& tp = req.tokens();
      if (static_cast<uint64_t>(tp.token_ids_size()) > limits_.max_query_tokens) {
        return Exhausted("tokens.token_ids: " + std::to_string(tp.token_ids_size()) + " tokens exceed the limit of " +
                         std::to_string(limits_.max_query_tokens) + " (grpc.max_query_tokens)");
      }
      RequestExtras extras;
      if (tp.has_lora_name()) extras.lora_name = tp.lora_name();
      extras.cache_salt = tp.cache_salt();
      sc.mm.clear();
      int64_t prev = -1;
      for (int i = 0; i < tp.mm_items_size(); ++i) {
        const v1::MultiModalItem& it = tp.mm_items(i);
        const std::string field = "tokens.mm_items[" + std::to_string(i) + "]";
        if (it.identifier().empty()) return Invalid(field + ".identifier: required");
        if (it.offset() < 0 || it.length() <= 0) return Invalid(field + ": offset must be >= 0 and length > 0");
        if (it.offset() < prev) return Invalid(field + ".offset: items must be sorted by offset");
        if (it.offset() > tp.token_ids_size() || it.length() > tp.token_ids_size() - it.offset()) {
          return Invalid(field + ": range [offset, offset+length) exceeds the prompt");
        }
        prev = it.offset();
        sc.mm.push_back(MultiModalItem{it.identifier(), it.offset(), it.length()});
      }
      extras.mm_items = sc.mm;
      const auto& ids = tp.token_ids();
      Status hs = sc.HasherFor(*model).HashRequest(std::span<const int64_t>(ids.data(), ids.size()), extras,
                                                   &sc.digests);
      if (!hs.ok()) return Invalid("tokens: " + hs.message());
      sc.keys.reserve(sc.digests.size());
      for (const BlockDigest& d : sc.digests) sc.keys.push_back(int_keys ? d.ToKey() : d.ToBytesKey());
      if (req.include_block_hashes()) {
        v1::BlockHashes* out = resp->mutable_block_hashes();
        for (const BlockDigest& d : sc.digests) {
          if (int_keys) {
            out->add_u64(d.wire_u64());
          } else {
            out->add_digest(reinterpret_cast<const char*>(d.bytes.data()), d.size);
          }
        }
      }
      break;
    }
    case v1::FindPrefixRequest::kHashes: {
      const v1::BlockHashes& h = req.hashes();
      if (h.u64_size() > 0 && h.digest_size() > 0) return Invalid("hashes: set u64 or digest, not both");
      const int n = h.u64_size() + h.digest_size();
      if (static_cast<uint64_t>(n) > limits_.max_query_hashes) {
        return Exhausted("hashes: " + std::to_string(n) + " hashes exceed the limit of " +
                         std::to_string(limits_.max_query_hashes) + " (grpc.max_query_hashes)");
      }
      sc.keys.reserve(n);
      for (uint64_t v : h.u64()) sc.keys.push_back(BlockKey::FromU64(v));
      for (int i = 0; i < h.digest_size(); ++i) {
        const std::string& d = h.digest(i);
        if (Status ds = CheckDigestLength(model->hasher.algo(), d.size()); !ds.ok()) {
          return Invalid("hashes.digest[" + std::to_string(i) + "]: " + ds.message());
        }
        sc.keys.push_back(BlockKey::FromBytes(reinterpret_cast<const uint8_t*>(d.data()), d.size()));
      }
      break;
    }
    case v1::FindPrefixRequest::QUERY_NOT_SET:
      return Invalid("query: set tokens or hashes");
  }

  PrefixFilter filter;
  if (req.tiers_size() > 0) {
    filter.tier_mask = uint64_t{1} << static_cast<unsigned>(Tier::kGpu);
    for (const std::string& t : req.tiers()) {
      std::optional<Tier> tier = node_->tiers().Find(t);
      if (tier) filter.tier_mask |= uint64_t{1} << static_cast<unsigned>(*tier);
    }
  }
  Status st = node_->index().FindPrefix(model->id, sc.keys, filter, &sc.match);
  if (!st.ok()) return ToGrpc(st);

  resp->set_model(req.model());
  resp->set_blocks_in_query(sc.match.query_blocks);
  resp->set_block_size(model->config.block_size);
  resp->set_truncated(sc.match.truncated);
  resp->set_applied_batches(node_->sink().stats().applied_batches.load(std::memory_order_relaxed));
  resp->set_request_id(req.request_id());

  // Order: most GPU blocks first, then source name (stable for callers).
  sc.order.clear();
  for (uint32_t i = 0; i < sc.match.sources.size(); ++i) {
    const SourceInfo* info = node_->sources().Get(sc.match.sources[i].source);
    if (info == nullptr) continue;
    if (req.replicas_size() > 0 &&
        std::find(req.replicas().begin(), req.replicas().end(), info->replica) == req.replicas().end()) {
      continue;
    }
    sc.order.push_back(i);
  }
  std::sort(sc.order.begin(), sc.order.end(), [&](uint32_t a, uint32_t b) {
    const SourceMatch& x = sc.match.sources[a];
    const SourceMatch& y = sc.match.sources[b];
    if (x.gpu_blocks != y.gpu_blocks) return x.gpu_blocks > y.gpu_blocks;
    const SourceInfo* ix = node_->sources().Get(x.source);
    const SourceInfo* iy = node_->sources().Get(y.source);
    if (ix->replica != iy->replica) return ix->replica < iy->replica;
    return ix->dp_rank < iy->dp_rank;
  });
  const uint64_t bs = model->config.block_size;
  resp->mutable_replicas()->Reserve(static_cast<int>(sc.order.size()));
  for (uint32_t i : sc.order) {
    const SourceMatch& m = sc.match.sources[i];
    const SourceInfo* info = node_->sources().Get(m.source);
    v1::ReplicaMatch* r = resp->add_replicas();
    r->set_replica(info->replica);
    r->set_dp_rank(info->dp_rank);
    r->set_source(ingest::SourceName(info->replica, info->dp_rank));
    r->set_matched_blocks(m.gpu_blocks);
    r->set_matched_blocks_with_lower_tiers(m.blocks_with_lower_tiers);
    r->set_matched_tokens(m.gpu_blocks * bs);
    r->set_matched_tokens_with_lower_tiers(m.blocks_with_lower_tiers * bs);
    r->set_hit_blocks(m.hit_blocks);
    r->set_hits(m.hits);
    r->set_state(ToProto(m.state));
    const int64_t seq = node_->sink().LastSeq(m.source);
    r->set_has_seq(seq >= 0);
    r->set_last_seq(seq >= 0 ? static_cast<uint64_t>(seq) : 0);
  }
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

grpc::Status KvIndexService::ListReplicasAnswer(const v1::ListReplicasRequest& req,
                                                v1::ListReplicasResponse* resp) const {
  if (!req.model().empty() && node_->FindModel(req.model()) == nullptr) return UnknownModel(req.model());
  std::map<std::string, v1::ReplicaSummary*> by_replica;
  std::vector<ingest::SourceStatus> sources = node_->ingester().ListSources();
  std::sort(sources.begin(), sources.end(), [](const auto& a, const auto& b) {
    return std::tie(a.spec.replica, a.spec.dp_rank) < std::tie(b.spec.replica, b.spec.dp_rank);
  });
  for (const ingest::SourceStatus& s : sources) {
    if (!req.model().empty() && s.spec.model != req.model()) continue;
    v1::ReplicaSummary*& rs = by_replica[s.spec.replica];
    if (rs == nullptr) {
      rs = resp->add_replicas();
      rs->set_replica(s.spec.replica);
      rs->set_model(s.spec.model);
    }
    v1::SourceSummary* ss = rs->add_sources();
    ss->set_source(s.spec.name);
    ss->set_dp_rank(s.spec.dp_rank);
    ss->set_state(ToProto(s.state));
    ss->set_has_seq(s.last_seq >= 0);
    ss->set_last_seq(s.last_seq >= 0 ? static_cast<uint64_t>(s.last_seq) : 0);
    if (std::optional<SourceId> id = node_->sources().Find(s.spec.replica, s.spec.dp_rank)) {
      SourceStats st = node_->index().GetSourceStats(*id);
      for (const auto& [tier, n] : st.blocks_per_tier) {
        v1::TierCount* tc = ss->add_blocks();
        tc->set_tier(std::string(node_->tiers().Name(tier)));
        tc->set_blocks(n);
      }
      ss->set_gpu_capacity(st.gpu_capacity);
    }
  }
  return grpc::Status::OK;
}

grpc::Status KvIndexService::GetStatsAnswer(v1::GetStatsResponse* resp) const {
  resp->set_version(KVIDX_VERSION);
  resp->set_uptime_seconds(std::chrono::duration<double>(Clock::now() - started_).count());
  for (const auto& m : node_->models()) {
    v1::ModelStats* ms = resp->add_models();
    ms->set_name(m->config.name);
    ms->set_hash_algo(m->config.hash_algo);
    ms->set_block_size(m->config.block_size);
    ms->set_blocks(node_->index().BlockCount(m->id));
  }
  uint64_t by_state[kNumSourceStates] = {};
  uint64_t lost = 0, gaps = 0, events = 0;
  for (const ingest::SourceStatus& s : node_->ingester().ListSources()) {
    ++by_state[static_cast<size_t>(s.state)];
    if (s.stats) {
      lost += s.stats->batches_lost.load(std::memory_order_relaxed);
      gaps += s.stats->seq_gaps.load(std::memory_order_relaxed);
      for (const auto& e : s.stats->events) events += e.load(std::memory_order_relaxed);
    }
  }
  for (size_t i = 0; i < kNumSourceStates; ++i) {
    v1::StateCount* sc = resp->add_sources_by_state();
    sc->set_state(ToProto(static_cast<SourceState>(i)));
    sc->set_sources(by_state[i]);
  }
  resp->set_applied_batches(node_->sink().stats().applied_batches.load(std::memory_order_relaxed));
  resp->set_events(events);
  resp->set_batches_lost(lost);
  resp->set_gaps(gaps);
  resp->set_queries(queries());
  double age = -1;
  if (const snapshot::SnapshotStats* st = node_->snapshot_stats()) {
    age = st->AgeSeconds(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                   std::chrono::system_clock::now().time_since_epoch())
                                                   .count()));
  }
  resp->set_snapshot_age_seconds(age);
  resp->set_serving(serving_->load(std::memory_order_acquire));
  return grpc::Status::OK;
}

grpc::Status KvIndexService::GetBlockAnswer(const v1::GetBlockRequest& req, v1::GetBlockResponse* resp) const {
  if (req.model().empty()) return Invalid("model: required");
  const ModelRuntime* model = node_->FindModel(req.model());
  if (model == nullptr) return UnknownModel(req.model());
  const v1::BlockHashes& h = req.hash();
  if (h.u64_size() + h.digest_size() != 1) return Invalid("hash: exactly one hash (u64 or digest) required");
  BlockKey key;
  if (h.u64_size() == 1) {
    key = BlockKey::FromU64(h.u64(0));
  } else {
    const std::string& d = h.digest(0);
    if (Status ds = CheckDigestLength(model->hasher.algo(), d.size()); !ds.ok()) {
      return Invalid("hash.digest[0]: " + ds.message());
    }
    key = BlockKey::FromBytes(reinterpret_cast<const uint8_t*>(d.data()), d.size());
  }
  std::vector<OwnerRecord> owners;
  if (Status s = node_->index().LookupBlock(model->id, key, &owners); !s.ok()) return ToGrpc(s);
  if (owners.empty()) return {grpc::StatusCode::NOT_FOUND, "hash: no source holds this block"};
  for (const OwnerRecord& o : owners) {
    v1::BlockOwner* bo = resp->add_owners();
    if (const SourceInfo* info = node_->sources().Get(o.source)) {
      bo->set_replica(info->replica);
      bo->set_dp_rank(info->dp_rank);
      bo->set_source(ingest::SourceName(info->replica, info->dp_rank));
    }
    bo->set_tier(std::string(node_->tiers().Name(o.tier)));
    bo->set_group(o.group);
    bo->set_refcount(o.refcount);
    bo->set_hits(o.hits);
    bo->set_recency(o.stamp);
  }
  return grpc::Status::OK;
}

}  // namespace kvidx::server
