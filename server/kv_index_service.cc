#include "server/kv_index_service.h"

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "index/block_hasher.h"
#include "index/prefix_match.h"

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
  switch (s.code()) {
    case StatusCode::kOk: return grpc::Status::OK;
    case StatusCode::kInvalidArgument: return {grpc::StatusCode::INVALID_ARGUMENT, s.message()};
    case StatusCode::kNotFound: return {grpc::StatusCode::NOT_FOUND, s.message()};
    case StatusCode::kOutOfRange: return {grpc::StatusCode::RESOURCE_EXHAUSTED, s.message()};
    case StatusCode::kCorruption: return {grpc::StatusCode::DATA_LOSS, s.message()};
    case StatusCode::kUnavailable: return {grpc::StatusCode::UNAVAILABLE, s.message()};
    case StatusCode::kFailedPrecondition: return {grpc::StatusCode::FAILED_PRECONDITION, s.message()};
    case StatusCode::kInternal: return {grpc::StatusCode::INTERNAL, s.message()};
  }
  return {grpc::StatusCode::UNKNOWN, s.message()};
}

KvIndexService::KvIndexService(const Node* node, const GrpcConfig& limits, RpcMetrics* metrics,
                               const std::atomic<bool>* serving)
    : node_(node), limits_(limits), metrics_(metrics), serving_(serving), started_(Clock::now()) {}

grpc::Status KvIndexService::Answer(const v1::FindPrefixRequest& req, v1::FindPrefixResponse* resp) const {
  queries_.fetch_add(1, std::memory_order_relaxed);
  if (req.model().empty()) return Invalid("model: required");
  const ModelRuntime* model = node_->FindModel(req.model());
  if (model == nullptr) return {grpc::StatusCode::NOT_FOUND, "model: unknown model \"" + req.model() + "\""};
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
        if (d.empty() || d.size() > 1024) {
          return Invalid("hashes.digest[" + std::to_string(i) + "]: length " + std::to_string(d.size()) +
                         " is not a digest (1..1024 bytes)");
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

grpc::ServerUnaryReactor* KvIndexService::FindPrefix(grpc::CallbackServerContext* ctx,
                                                     const v1::FindPrefixRequest* req, v1::FindPrefixResponse* resp) {
  grpc::Status s;
  {
    RpcTimer timer(metrics_, RpcMethod::kFindPrefix);
    s = DeadlinePassed(ctx) ? grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "deadline passed")
                            : Answer(*req, resp);
    timer.set_code(s.error_code());
  }
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(s);
  return reactor;
}

grpc::ServerUnaryReactor* KvIndexService::FindPrefixBatch(grpc::CallbackServerContext* ctx,
                                                          const v1::FindPrefixBatchRequest* req,
                                                          v1::FindPrefixBatchResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(BatchAnswer(ctx, req, resp));
  return reactor;
}

grpc::Status KvIndexService::BatchAnswer(const grpc::ServerContextBase* ctx, const v1::FindPrefixBatchRequest* req,
                                         v1::FindPrefixBatchResponse* resp) const {
  RpcTimer timer(metrics_, RpcMethod::kFindPrefixBatch);
  grpc::Status s = grpc::Status::OK;
  if (static_cast<uint64_t>(req->queries_size()) > limits_.max_batch_queries) {
    s = Exhausted("queries: " + std::to_string(req->queries_size()) + " queries exceed the limit of " +
                  std::to_string(limits_.max_batch_queries) + " (grpc.max_batch_queries)");
  } else {
    for (const v1::FindPrefixRequest& q : req->queries()) {
      v1::FindPrefixResult* r = resp->add_results();
      r->set_request_id(q.request_id());
      grpc::Status qs = DeadlinePassed(ctx) ? grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "deadline passed")
                                            : Answer(q, r->mutable_response());
      if (!qs.ok()) {
        r->clear_response();
        r->set_code(qs.error_code());
        r->set_message(qs.error_message());
      }
    }
  }
  timer.set_code(s.error_code());
  return s;
}

namespace {

using StreamReactor = grpc::ServerBidiReactor<v1::FindPrefixRequest, v1::FindPrefixResult>;

// One FindPrefixStream call: read a query, answer it, write its result,
// read the next. One operation is outstanding at a time, so the reactions
// never run concurrently and need no lock. `open` counts the calls alive.
class FindPrefixStreamReactor final : public StreamReactor {
 public:
  FindPrefixStreamReactor(const KvIndexService* service, RpcMetrics* metrics, std::atomic<uint32_t>* open)
      : service_(service), metrics_(metrics), open_(open) {
    StartRead(&req_);
  }

  void OnReadDone(bool ok) override {
    // Not ok: the client closed its side or the call was cancelled.
    if (!ok) return Finish(grpc::Status::OK);
    RpcTimer timer(metrics_, RpcMethod::kFindPrefixStream);
    result_.Clear();
    result_.set_request_id(req_.request_id());
    grpc::Status qs = service_->Answer(req_, result_.mutable_response());
    if (!qs.ok()) {
      result_.clear_response();
      result_.set_code(qs.error_code());
      result_.set_message(qs.error_message());
    }
    timer.set_code(qs.error_code());
    StartWrite(&result_);
  }

  void OnWriteDone(bool ok) override {
    if (!ok) return Finish(grpc::Status::OK);
    StartRead(&req_);
  }

  void OnDone() override {
    open_->fetch_sub(1, std::memory_order_relaxed);
    delete this;
  }

 private:
  const KvIndexService* service_;
  RpcMetrics* metrics_;
  std::atomic<uint32_t>* open_;
  v1::FindPrefixRequest req_;
  v1::FindPrefixResult result_;
};

// A stream refused before its first read.
class RefusedStreamReactor final : public StreamReactor {
 public:
  explicit RefusedStreamReactor(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace

grpc::ServerBidiReactor<v1::FindPrefixRequest, v1::FindPrefixResult>* KvIndexService::FindPrefixStream(
    grpc::CallbackServerContext*) {
  const uint32_t open = open_streams_.fetch_add(1, std::memory_order_relaxed);
  if (open >= limits_.max_open_streams) {
    open_streams_.fetch_sub(1, std::memory_order_relaxed);
    RpcTimer timer(metrics_, RpcMethod::kFindPrefixStream);
    timer.set_code(grpc::StatusCode::RESOURCE_EXHAUSTED);
    return new RefusedStreamReactor(Exhausted("FindPrefixStream: " + std::to_string(limits_.max_open_streams) +
                                              " streams are open, the limit (grpc.max_open_streams)"));
  }
  return new FindPrefixStreamReactor(this, metrics_, &open_streams_);
}

grpc::Status KvIndexService::ListReplicas(grpc::ServerContext*, const v1::ListReplicasRequest* req,
                                          v1::ListReplicasResponse* resp) {
  RpcTimer timer(metrics_, RpcMethod::kListReplicas);
  if (!req->model().empty() && node_->FindModel(req->model()) == nullptr) {
    timer.set_code(grpc::StatusCode::NOT_FOUND);
    return {grpc::StatusCode::NOT_FOUND, "model: unknown model \"" + req->model() + "\""};
  }
  std::map<std::string, v1::ReplicaSummary*> by_replica;
  std::vector<ingest::SourceStatus> sources = node_->ingester().ListSources();
  std::sort(sources.begin(), sources.end(), [](const auto& a, const auto& b) {
    return std::tie(a.spec.replica, a.spec.dp_rank) < std::tie(b.spec.replica, b.spec.dp_rank);
  });
  for (const ingest::SourceStatus& s : sources) {
    if (!req->model().empty() && s.spec.model != req->model()) continue;
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

grpc::Status KvIndexService::GetStats(grpc::ServerContext*, const v1::GetStatsRequest*, v1::GetStatsResponse* resp) {
  RpcTimer timer(metrics_, RpcMethod::kGetStats);
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

grpc::Status KvIndexService::GetBlock(grpc::ServerContext*, const v1::GetBlockRequest* req,
                                      v1::GetBlockResponse* resp) {
  RpcTimer timer(metrics_, RpcMethod::kGetBlock);
  auto fail = [&](grpc::Status s) {
    timer.set_code(s.error_code());
    return s;
  };
  if (req->model().empty()) return fail(Invalid("model: required"));
  const ModelRuntime* model = node_->FindModel(req->model());
  if (model == nullptr) return fail({grpc::StatusCode::NOT_FOUND, "model: unknown model \"" + req->model() + "\""});
  const v1::BlockHashes& h = req->hash();
  if (h.u64_size() + h.digest_size() != 1) return fail(Invalid("hash: exactly one hash (u64 or digest) required"));
  BlockKey key;
  if (h.u64_size() == 1) {
    key = BlockKey::FromU64(h.u64(0));
  } else {
    const std::string& d = h.digest(0);
    if (d.empty() || d.size() > 1024) return fail(Invalid("hash.digest[0]: not a digest (1..1024 bytes)"));
    key = BlockKey::FromBytes(reinterpret_cast<const uint8_t*>(d.data()), d.size());
  }
  std::vector<OwnerRecord> owners;
  if (Status s = node_->index().LookupBlock(model->id, key, &owners); !s.ok()) return fail(ToGrpc(s));
  if (owners.empty()) return fail({grpc::StatusCode::NOT_FOUND, "hash: no source holds this block"});
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
