#include "server/query_engine.h"

#include <algorithm>
#include <map>
#include <optional>
#include <tuple>
#include <string>
#include <utility>

#include "base/bounded_text.h"
#include "base/clock.h"
#include "index/prefix_match.h"
#include "server/node.h"

namespace kvidx::server {

namespace {

// Per-thread query scratch: capacity survives across calls.
struct Scratch {
  std::vector<BlockKey> keys;
  std::vector<BlockDigest> digests;
  std::vector<int64_t> text_tokens;
  std::string body_cache_salt;  // a chat body's cache_salt
  PrefixMatch match;
  std::vector<std::pair<uint64_t, BlockHasher>> hashers;  // by ModelRuntime::uid

  BlockHasher& HasherFor(const ModelRuntime& m) {
    for (auto& [uid, h] : hashers) {
      if (uid == m.uid) return h;
    }
    // Forget hashers of models of nodes that are gone (tests start many).
    if (hashers.size() >= 16) hashers.clear();
    hashers.emplace_back(m.uid, m.hasher);
    return hashers.back().second;
  }
};

Scratch& TlsScratch() {
  thread_local Scratch s;
  return s;
}

Result<const ModelRuntime*> LookUpModel(const Node& node, std::string_view name) {
  if (name.empty()) return Status::InvalidArgument("model: required");
  const ModelRuntime* model = node.FindModel(name);
  if (model == nullptr) return Status::NotFound("model: unknown model " + Quote(name));
  return model;
}

Status OverLimit(std::string_view field, uint64_t n, const char* what, uint64_t max, const char* setting) {
  return Status::OutOfRange(std::string(field) + ": " + std::to_string(n) + " " + what + " exceed the limit of " +
                            std::to_string(max) + " (" + setting + ")");
}

// vLLM walks multimodal items in offset order and never past the prompt.
Status CheckMmItems(std::span<const MultiModalItem> items, size_t prompt_tokens) {
  const auto n = static_cast<int64_t>(prompt_tokens);
  int64_t prev = -1;
  for (size_t i = 0; i < items.size(); ++i) {
    const MultiModalItem& it = items[i];
    const std::string field = "tokens.mm_items[" + std::to_string(i) + "]";
    if (it.identifier.empty()) return Status::InvalidArgument(field + ".identifier: required");
    if (it.offset < 0 || it.length <= 0) {
      return Status::InvalidArgument(field + ": offset must be >= 0 and length > 0");
    }
    if (it.offset < prev) return Status::InvalidArgument(field + ".offset: items must be sorted by offset");
    if (it.offset > n || it.length > n - it.offset) {
      return Status::InvalidArgument(field + ": range [offset, offset+length) exceeds the prompt");
    }
    prev = it.offset;
  }
  return Status::Ok();
}

}  // namespace

Status QueryEngine::FindPrefix(const PrefixQuery& q, PrefixAnswer* answer) const {
  answer->Clear();
  Result<const ModelRuntime*> model = LookUpModel(*node_, q.model);
  if (!model.ok()) return model.status();
  if (Status s = PromptKeys(q, **model, answer); !s.ok()) return s;
  Scratch& sc = TlsScratch();
  PrefixFilter filter;
  filter.tier_mask = TierMask(q);
  if (Status s = node_->index().FindPrefix((*model)->id, sc.keys, filter, &sc.match); !s.ok()) return s;
  answer->query_blocks = sc.match.query_blocks;
  answer->block_size = (*model)->config.block_size;
  answer->truncated = sc.match.truncated;
  answer->keys = sc.keys;
  answer->applied_batches = node_->sink().stats().applied_batches.load(std::memory_order_relaxed);
  Assemble(q, answer);
  return Status::Ok();
}

Status QueryEngine::PromptKeys(const PrefixQuery& q, const ModelRuntime& model, PrefixAnswer* answer) const {
  TlsScratch().keys.clear();
  switch (q.form) {
    case PromptForm::kTokens: return TokenKeys(q, q.token_ids, q.extras, model, answer);
    case PromptForm::kHashes: return HashKeys(q, model);
    case PromptForm::kText:
    case PromptForm::kChat: return TextKeys(q, model, answer);
    case PromptForm::kNone: break;
  }
  return Status::InvalidArgument("query: set tokens, hashes or text");
}

Status QueryEngine::EncodeText(const PrefixQuery& q, const ModelRuntime& model, std::vector<int64_t>* ids,
                               std::string* rendered, std::string* body_cache_salt) const {
  const bool chat = q.form == PromptForm::kChat;
  const char* field = chat ? "messages" : "text";
  if (model.prompt == nullptr) {
    return Status::FailedPrecondition(std::string(field) + ": model " + Quote(model.config.name) +
                                      " has no tokenizer (set models[].tokenizer)");
  }
  if (q.text.size() > limits_.max_query_text_bytes) {
    return OverLimit(field, q.text.size(), "bytes", limits_.max_query_text_bytes, "grpc.max_query_text_bytes");
  }
  return model.prompt->Encode(chat ? PromptKind::kChat : PromptKind::kText, q.text, q.add_special_tokens, ids,
                              rendered, body_cache_salt);
}

Status QueryEngine::TextKeys(const PrefixQuery& q, const ModelRuntime& model, PrefixAnswer* answer) const {
  Scratch& sc = TlsScratch();
  if (Status s = EncodeText(q, model, &sc.text_tokens, nullptr, &sc.body_cache_salt); !s.ok()) return s;
  answer->token_ids = sc.text_tokens;
  // The query's own cache_salt (the gRPC field) wins over the body's.
  if (!q.extras.cache_salt.empty() || sc.body_cache_salt.empty()) {
    return TokenKeys(q, sc.text_tokens, q.extras, model, answer);
  }
  RequestExtras extras = q.extras;
  extras.cache_salt = sc.body_cache_salt;
  return TokenKeys(q, sc.text_tokens, extras, model, answer);
}

Status QueryEngine::Tokenize(const PrefixQuery& q, std::vector<int64_t>* ids, std::string* rendered) const {
  ids->clear();
  rendered->clear();
  Result<const ModelRuntime*> model = LookUpModel(*node_, q.model);
  if (!model.ok()) return model.status();
  if (q.form != PromptForm::kText && q.form != PromptForm::kChat) {
    return Status::InvalidArgument("prompt: set text or chat_request_json");
  }
  if (Status s = EncodeText(q, **model, ids, rendered, nullptr); !s.ok()) return s;
  if (ids->size() > limits_.max_query_tokens) {
    return OverLimit("prompt", ids->size(), "tokens", limits_.max_query_tokens, "grpc.max_query_tokens");
  }
  return Status::Ok();
}

Status QueryEngine::TokenKeys(const PrefixQuery& q, std::span<const int64_t> tokens, const RequestExtras& extras,
                              const ModelRuntime& model, PrefixAnswer* answer) const {
  if (tokens.size() > limits_.max_query_tokens) {
    return OverLimit(q.form == PromptForm::kTokens ? "tokens.token_ids" : "prompt", tokens.size(), "tokens",
                     limits_.max_query_tokens, "grpc.max_query_tokens");
  }
  if (Status s = CheckMmItems(extras.mm_items, tokens.size()); !s.ok()) return s;
  answer->prompt_tokens = tokens.size();
  Scratch& sc = TlsScratch();
  if (Status s = sc.HasherFor(model).HashRequest(tokens, extras, &sc.digests); !s.ok()) {
    return Status::InvalidArgument("tokens: " + s.message());
  }
  const bool int_keys = model.config.int_block_hashes;
  sc.keys.reserve(sc.digests.size());
  for (const BlockDigest& d : sc.digests) sc.keys.push_back(int_keys ? d.ToKey() : d.ToBytesKey());
  if (q.include_block_hashes) {
    answer->block_hashes = sc.digests;
    answer->int_block_hashes = int_keys;
  }
  return Status::Ok();
}

Status QueryEngine::HashKeys(const PrefixQuery& q, const ModelRuntime& model) const {
  if (!q.hashes.empty() && !q.digests.empty()) return Status::InvalidArgument("hashes: set u64 or digest, not both");
  const size_t n = q.hashes.size() + q.digests.size();
  if (n > limits_.max_query_hashes) {
    return OverLimit("hashes", n, "hashes", limits_.max_query_hashes, "grpc.max_query_hashes");
  }
  std::vector<BlockKey>& keys = TlsScratch().keys;
  keys.reserve(n);
  for (uint64_t v : q.hashes) keys.push_back(BlockKey::FromU64(v));
  for (size_t i = 0; i < q.digests.size(); ++i) {
    const std::string_view d = q.digests[i];
    if (Status s = CheckDigestLength(model.hasher.algo(), d.size()); !s.ok()) {
      return Status::InvalidArgument("hashes.digest[" + std::to_string(i) + "]: " + s.message());
    }
    keys.push_back(BlockKey::FromBytes(reinterpret_cast<const uint8_t*>(d.data()), d.size()));
  }
  return Status::Ok();
}

uint64_t QueryEngine::TierMask(const PrefixQuery& q) const {
  if (q.tiers.empty()) return ~uint64_t{0};
  uint64_t mask = uint64_t{1} << static_cast<unsigned>(Tier::kGpu);
  for (std::string_view t : q.tiers) {
    if (std::optional<Tier> tier = node_->tiers().Find(t)) mask |= uint64_t{1} << static_cast<unsigned>(*tier);
  }
  return mask;
}

void QueryEngine::Assemble(const PrefixQuery& q, PrefixAnswer* answer) const {
  {
    const SourceRegistry::Reader names(node_->sources());
    auto named = [&](const SourceMatch& m) -> const SourceInfo* {
      const SourceInfo* info = names.Get(m.source);
      if (info == nullptr) return nullptr;
      if (!q.replicas.empty() && std::find(q.replicas.begin(), q.replicas.end(), info->replica) == q.replicas.end()) {
        return nullptr;
      }
      return info;
    };
    // Sized first, so the views below stay valid.
    size_t bytes = 0;
    for (const SourceMatch& m : TlsScratch().match.sources) {
      if (const SourceInfo* info = named(m)) bytes += info->replica.size();
    }
    answer->replica_names.reserve(answer->replica_names.size() + bytes);
    for (const SourceMatch& m : TlsScratch().match.sources) {
      const SourceInfo* info = named(m);
      if (info == nullptr) continue;
      const size_t at = answer->replica_names.size();
      answer->replica_names += info->replica;
      const std::string_view name = std::string_view(answer->replica_names).substr(at, info->replica.size());
      answer->replicas.push_back(ReplicaPrefix{name, info->dp_rank, m.source, m.gpu_blocks, m.blocks_with_lower_tiers,
                                               m.hit_blocks, m.hits, m.state, node_->sink().LastSeq(m.source)});
    }
  }
  // Most GPU blocks first, then by name: stable for callers.
  std::sort(answer->replicas.begin(), answer->replicas.end(), [](const ReplicaPrefix& x, const ReplicaPrefix& y) {
    if (x.gpu_blocks != y.gpu_blocks) return x.gpu_blocks > y.gpu_blocks;
    if (x.replica != y.replica) return x.replica < y.replica;
    return x.dp_rank < y.dp_rank;
  });
}

Status QueryEngine::ListReplicas(std::string_view model, std::vector<ReplicaStatus>* out) const {
  out->clear();
  if (!model.empty()) {
    if (Result<const ModelRuntime*> m = LookUpModel(*node_, model); !m.ok()) return m.status();
  }
  std::vector<ingest::SourceStatus> sources = node_->ingester().ListSources();
  std::sort(sources.begin(), sources.end(), [](const auto& a, const auto& b) {
    return std::tie(a.spec.replica, a.spec.dp_rank) < std::tie(b.spec.replica, b.spec.dp_rank);
  });
  const std::map<std::string, std::string, std::less<>> origins = node_->EngineOrigins();
  for (const ingest::SourceStatus& s : sources) {
    if (!model.empty() && s.spec.model != model) continue;
    if (out->empty() || out->back().replica != s.spec.replica) {
      auto o = origins.find(s.spec.replica);
      out->push_back({s.spec.replica, s.spec.model, {}, o == origins.end() ? std::string() : o->second});
    }
    SourceStatusView v{s.spec.name, s.spec.dp_rank, s.state, s.last_seq, {}, 0};
    if (std::optional<SourceId> id = node_->sources().Find(s.spec.replica, s.spec.dp_rank)) {
      SourceIndexStats st = node_->index().GetSourceStats(*id);
      for (const auto& [tier, n] : st.blocks_per_tier) v.blocks_per_tier.emplace_back(node_->tiers().Name(tier), n);
      v.gpu_capacity = st.gpu_capacity;
    }
    out->back().sources.push_back(std::move(v));
  }
  return Status::Ok();
}

NodeStats QueryEngine::Stats() const {
  NodeStats out;
  for (const auto& m : node_->models()) {
    out.models.push_back({m->config.name, m->config.hash_algo, m->config.block_size, node_->index().BlockCount(m->id)});
  }
  for (const ingest::SourceStatus& s : node_->ingester().ListSources()) {
    ++out.sources_by_state[static_cast<size_t>(s.state)];
    if (!s.stats) continue;
    out.batches_lost += s.stats->batches_lost.load(std::memory_order_relaxed);
    out.gaps += s.stats->seq_gaps.load(std::memory_order_relaxed);
    for (const auto& e : s.stats->events) out.events += e.load(std::memory_order_relaxed);
  }
  out.applied_batches = node_->sink().stats().applied_batches.load(std::memory_order_relaxed);
  if (const snapshot::SnapshotStats* st = node_->snapshot_stats()) out.snapshot_age_seconds = st->AgeSeconds(WallMillis());
  return out;
}

Status QueryEngine::GetBlock(std::string_view model_name, const uint64_t* hash, const std::string_view* digest,
                             std::vector<BlockHolder>* holders) const {
  holders->clear();
  Result<const ModelRuntime*> model = LookUpModel(*node_, model_name);
  if (!model.ok()) return model.status();
  if ((hash == nullptr) == (digest == nullptr)) {
    return Status::InvalidArgument("hash: exactly one hash (u64 or digest) required");
  }
  BlockKey key;
  if (hash != nullptr) {
    key = BlockKey::FromU64(*hash);
  } else {
    if (Status s = CheckDigestLength((*model)->hasher.algo(), digest->size()); !s.ok()) {
      return Status::InvalidArgument("hash.digest[0]: " + s.message());
    }
    key = BlockKey::FromBytes(reinterpret_cast<const uint8_t*>(digest->data()), digest->size());
  }
  std::vector<OwnerRecord> owners;
  if (Status s = node_->index().LookupBlock((*model)->id, key, &owners); !s.ok()) return s;
  if (owners.empty()) return Status::NotFound("hash: no source holds this block");
  const SourceRegistry::Reader names(node_->sources());
  for (const OwnerRecord& o : owners) {
    BlockHolder h{false, {}, 0, node_->tiers().Name(o.tier), o.group, o.refcount, o.hits, o.stamp};
    if (const SourceInfo* info = names.Get(o.source)) {
      h.registered = true;
      h.replica = info->replica;
      h.dp_rank = info->dp_rank;
    }
    holders->push_back(h);
  }
  return Status::Ok();
}

}  // namespace kvidx::server
