#include "server/proto_convert.h"

#include <span>

#include "base/bounded_text.h"
#include "ingest/source_config.h"

namespace kvidx::server {

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

grpc::Status BoundedStatus(const grpc::Status& s) {
  if (s.error_message().size() <= kMaxStatusMessage) return s;
  return {s.error_code(), Clamp(s.error_message())};
}

namespace {

void TokensFromProto(const v1::TokenPrompt& tp, PrefixQuery* q, std::vector<MultiModalItem>* mm) {
  q->form = PromptForm::kTokens;
  q->token_ids = std::span<const int64_t>(tp.token_ids().data(), tp.token_ids_size());
  if (tp.has_lora_name()) q->extras.lora_name = tp.lora_name();
  q->extras.cache_salt = tp.cache_salt();
  mm->clear();
  for (const v1::MultiModalItem& it : tp.mm_items()) mm->push_back({it.identifier(), it.offset(), it.length()});
  q->extras.mm_items = *mm;
}

void TextFromProto(const v1::TextPrompt& tp, PrefixQuery* q) {
  switch (tp.input_case()) {
    case v1::TextPrompt::kText:
      q->form = PromptForm::kText;
      q->text = tp.text();
      break;
    case v1::TextPrompt::kChatRequestJson:
      q->form = PromptForm::kChat;
      q->text = tp.chat_request_json();
      break;
    case v1::TextPrompt::INPUT_NOT_SET: break;  // kNone: the engine names the missing prompt
  }
  if (tp.has_add_special_tokens()) q->add_special_tokens = tp.add_special_tokens();
  if (tp.has_lora_name()) q->extras.lora_name = tp.lora_name();
  q->extras.cache_salt = tp.cache_salt();
}

void HashesFromProto(const v1::BlockHashes& h, PrefixQuery* q) {
  q->form = PromptForm::kHashes;
  q->hashes = std::span<const uint64_t>(h.u64().data(), h.u64_size());
  for (const std::string& d : h.digest()) q->digests.push_back(d);
}

}  // namespace

void FromProto(const v1::FindPrefixRequest& req, PrefixQuery* q, std::vector<MultiModalItem>* mm) {
  q->Clear();
  q->model = req.model();
  switch (req.query_case()) {
    case v1::FindPrefixRequest::kTokens: TokensFromProto(req.tokens(), q, mm); break;
    case v1::FindPrefixRequest::kHashes: HashesFromProto(req.hashes(), q); break;
    case v1::FindPrefixRequest::kText: TextFromProto(req.text(), q); break;
    case v1::FindPrefixRequest::QUERY_NOT_SET: break;
  }
  for (const std::string& t : req.tiers()) q->tiers.push_back(t);
  for (const std::string& r : req.replicas()) q->replicas.push_back(r);
  q->include_block_hashes = req.include_block_hashes();
}

void ToProto(const v1::FindPrefixRequest& req, const PrefixAnswer& answer, v1::FindPrefixResponse* resp) {
  if (req.include_block_hashes() && req.query_case() != v1::FindPrefixRequest::kHashes) {
    v1::BlockHashes* out = resp->mutable_block_hashes();
    for (const BlockDigest& d : answer.block_hashes) {
      if (answer.int_block_hashes) {
        out->add_u64(d.wire_u64());
      } else {
        out->add_digest(reinterpret_cast<const char*>(d.bytes.data()), d.size);
      }
    }
  }
  if (req.include_token_ids()) resp->mutable_token_ids()->Add(answer.token_ids.begin(), answer.token_ids.end());
  resp->set_prompt_tokens(answer.prompt_tokens);
  resp->set_model(req.model());
  resp->set_blocks_in_query(answer.query_blocks);
  resp->set_block_size(answer.block_size);
  resp->set_truncated(answer.truncated);
  resp->set_applied_batches(answer.applied_batches);
  resp->set_request_id(req.request_id());
  resp->mutable_replicas()->Reserve(static_cast<int>(answer.replicas.size()));
  const uint64_t bs = answer.block_size;
  for (const ReplicaPrefix& m : answer.replicas) {
    v1::ReplicaMatch* r = resp->add_replicas();
    r->set_replica(m.replica.data(), m.replica.size());
    r->set_dp_rank(m.dp_rank);
    r->set_source(ingest::SourceName(m.replica, m.dp_rank));
    r->set_matched_blocks(m.gpu_blocks);
    r->set_matched_blocks_with_lower_tiers(m.blocks_with_lower_tiers);
    r->set_matched_tokens(m.gpu_blocks * bs);
    r->set_matched_tokens_with_lower_tiers(m.blocks_with_lower_tiers * bs);
    r->set_hit_blocks(m.hit_blocks);
    r->set_hits(m.hits);
    r->set_state(ToProto(m.state));
    r->set_has_seq(m.last_seq >= 0);
    r->set_last_seq(m.last_seq >= 0 ? static_cast<uint64_t>(m.last_seq) : 0);
  }
}

void FromProto(const v1::RouteRequest& req, RouteQuery* q, std::vector<MultiModalItem>* mm) {
  PrefixQuery& p = q->prompt;
  p.Clear();
  p.model = req.model();
  switch (req.query_case()) {
    case v1::RouteRequest::kTokens: TokensFromProto(req.tokens(), &p, mm); break;
    case v1::RouteRequest::kHashes: HashesFromProto(req.hashes(), &p); break;
    case v1::RouteRequest::kText: TextFromProto(req.text(), &p); break;
    case v1::RouteRequest::QUERY_NOT_SET: break;
  }
  for (const std::string& r : req.replicas()) p.replicas.push_back(r);
  q->prompt_tokens = req.prompt_tokens();
  q->expected_output_tokens = req.expected_output_tokens();
  q->n = req.n() == 0 ? 1 : req.n();
}

void FromProto(const v1::TokenizeRequest& req, PrefixQuery* q) {
  q->Clear();
  q->model = req.model();
  TextFromProto(req.prompt(), q);
}

namespace {

v1::RouteReason ReasonToProto(RouteReason r) {
  switch (r) {
    case RouteReason::kAffinity: return v1::ROUTE_REASON_AFFINITY;
    case RouteReason::kLoad: return v1::ROUTE_REASON_LOAD;
    case RouteReason::kWarmup: return v1::ROUTE_REASON_WARMUP;
    case RouteReason::kNoPrefix: return v1::ROUTE_REASON_NO_PREFIX;
  }
  return v1::ROUTE_REASON_UNSPECIFIED;
}

void CandidateToProto(const RouteCandidate& c, v1::RouteCandidate* out) {
  out->set_replica(c.replica.data(), c.replica.size());
  out->set_dp_rank(c.dp_rank);
  out->set_source(ingest::SourceName(c.replica, c.dp_rank));
  out->set_state(ToProto(c.state));
  out->set_gpu_blocks(c.signals.gpu_blocks);
  out->set_cpu_blocks(c.signals.cpu_blocks);
  out->set_storage_blocks(c.signals.storage_blocks);
  out->set_predicted_blocks(c.signals.predicted_blocks);
  out->set_cost(c.score.cost);
  out->set_cached_tokens(c.score.cached_tokens);
  out->set_uncached_tokens(c.score.uncached_tokens);
  out->set_queued_tokens(c.score.queued_tokens);
  out->set_decode_factor(c.score.decode_factor);
  out->set_kv_factor(c.score.kv_factor);
  out->set_warmup_factor(c.score.warmup_factor);
}

}  // namespace

void ToProto(const v1::RouteRequest& req, const RouteAnswer& answer, v1::RouteResponse* resp) {
  if (!answer.candidates.empty()) {
    const RouteCandidate& w = answer.candidates.front();
    resp->set_replica(w.replica.data(), w.replica.size());
    resp->set_dp_rank(w.dp_rank);
    resp->set_source(ingest::SourceName(w.replica, w.dp_rank));
  }
  resp->set_route_id(answer.route_id);
  resp->set_reason(ReasonToProto(answer.reason));
  for (const RouteCandidate& c : answer.candidates) CandidateToProto(c, resp->add_candidates());
  resp->set_block_size(answer.block_size);
  resp->set_prompt_tokens(answer.prompt_tokens);
  resp->set_request_id(req.request_id());
}

void ToProto(const ReplicaStatus& r, v1::ReplicaSummary* out) {
  out->set_replica(r.replica);
  out->set_model(r.model);
  out->set_origin(r.origin);
  for (const SourceStatusView& s : r.sources) {
    v1::SourceSummary* ss = out->add_sources();
    ss->set_source(s.name);
    ss->set_dp_rank(s.dp_rank);
    ss->set_state(ToProto(s.state));
    ss->set_has_seq(s.last_seq >= 0);
    ss->set_last_seq(s.last_seq >= 0 ? static_cast<uint64_t>(s.last_seq) : 0);
    for (const auto& [tier, n] : s.blocks_per_tier) {
      v1::TierCount* tc = ss->add_blocks();
      tc->set_tier(tier);
      tc->set_blocks(n);
    }
    ss->set_gpu_capacity(s.gpu_capacity);
  }
}

void ToProto(const NodeStats& s, v1::GetStatsResponse* out) {
  for (const NodeStats::Model& m : s.models) {
    v1::ModelStats* ms = out->add_models();
    ms->set_name(m.name);
    ms->set_hash_algo(m.hash_algo);
    ms->set_block_size(m.block_size);
    ms->set_blocks(m.blocks);
  }
  for (size_t i = 0; i < kNumSourceStates; ++i) {
    v1::StateCount* sc = out->add_sources_by_state();
    sc->set_state(ToProto(static_cast<SourceState>(i)));
    sc->set_sources(s.sources_by_state[i]);
  }
  out->set_applied_batches(s.applied_batches);
  out->set_events(s.events);
  out->set_batches_lost(s.batches_lost);
  out->set_gaps(s.gaps);
  out->set_snapshot_age_seconds(s.snapshot_age_seconds);
}

void ToProto(const BlockHolder& h, v1::BlockOwner* out) {
  if (h.registered) {
    out->set_replica(h.replica.data(), h.replica.size());
    out->set_dp_rank(h.dp_rank);
    out->set_source(ingest::SourceName(h.replica, h.dp_rank));
  }
  out->set_tier(h.tier.data(), h.tier.size());
  out->set_group(h.group);
  out->set_refcount(h.refcount);
  out->set_hits(h.hits);
  out->set_recency(h.recency);
}

}  // namespace kvidx::server
