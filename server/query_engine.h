// QueryEngine: the domain queries a router asks of one kvidx node, without
// any RPC. A query is validated, its prompt turned into block keys (hashed
// with the model's vLLM hasher, or taken as given), the index walked, and
// the answer assembled with source names, states and the last applied
// batch of each source. gRPC services, benchmarks and tests all call this;
// they only translate their own types to and from PrefixQuery/PrefixAnswer.
//
// Errors (Status, the message starting with the offending field as the
// request names it, e.g. "tokens.mm_items[2].offset: "):
//   InvalidArgument  a missing or malformed field;
//   NotFound         an unknown model;
//   OutOfRange       a prompt longer than QueryLimits allows;
//   FailedPrecondition  text or chat for a model without a tokenizer (or
//                    chat template).
//
// Thread-safety: every method may be called from any thread at once; the
// engine holds a const Node and its limits, and each thread answers into
// its own scratch (a warm query allocates nothing). `node` outlives it.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "index/block_key.h"
#include "index/source_registry.h"
#include "server/prefix_query.h"

namespace kvidx::server {

class Node;
struct ModelRuntime;

struct QueryLimits {
  uint64_t max_query_tokens = 0;
  uint64_t max_query_hashes = 0;
  uint64_t max_query_text_bytes = 0;
};

// One holder of a block, as GetBlock reports it.
struct BlockHolder {
  bool registered = false;    // false: the source is gone (no name to give)
  std::string replica;
  uint32_t dp_rank = 0;
  std::string_view tier;
  uint32_t group = 0;
  uint32_t refcount = 0;
  uint32_t hits = 0;
  uint32_t recency = 0;
};

// One source of a replica, as ListReplicas reports it.
struct SourceStatusView {
  std::string name;    // "<replica>/dp<rank>"
  uint32_t dp_rank = 0;
  SourceState state = SourceState::kConnecting;
  int64_t last_seq = -1;  // -1 = no batch applied yet
  std::vector<std::pair<std::string, uint64_t>> blocks_per_tier;  // tier name, distinct blocks
  uint64_t gpu_capacity = 0;
};

struct ReplicaStatus {
  std::string replica;
  std::string model;
  std::vector<SourceStatusView> sources;  // by DP rank
  std::string origin;  // Node::EngineOrigins: "config", "admin", "dns:<p>", "kubernetes:<p>"
};

// The node's counters as GetStats reports them.
struct NodeStats {
  struct Model {
    std::string name;
    std::string hash_algo;
    uint32_t block_size = 0;
    uint64_t blocks = 0;
  };
  std::vector<Model> models;
  std::array<uint64_t, kNumSourceStates> sources_by_state{};
  uint64_t applied_batches = 0;
  uint64_t events = 0;
  uint64_t batches_lost = 0;
  uint64_t gaps = 0;
  double snapshot_age_seconds = -1;  // -1 = no snapshot (or no persistence)
};

class QueryEngine {
 public:
  QueryEngine(const Node* node, QueryLimits limits) : node_(node), limits_(limits) {}

  // The longest cached prefix of `q`'s prompt per source. `answer` is
  // cleared first; its views stay valid until this thread's next query.
  Status FindPrefix(const PrefixQuery& q, PrefixAnswer* answer) const;

  // A kText or kChat query's token ids, as FindPrefix computes them, and
  // for chat the rendered template (else empty).
  Status Tokenize(const PrefixQuery& q, std::vector<int64_t>* ids, std::string* rendered) const;

  // Every holder of one block of `model`: exactly one of `hash` (integer
  // form) or `digest` (bytes form, the model's algorithm) is set.
  // NotFound when no source holds it.
  Status GetBlock(std::string_view model, const uint64_t* hash, const std::string_view* digest,
                  std::vector<BlockHolder>* holders) const;

  // Every replica (of `model`, or all when empty), sorted by name, each
  // with its sources' state, position and blocks per tier. NotFound for an
  // unknown model.
  Status ListReplicas(std::string_view model, std::vector<ReplicaStatus>* out) const;
  NodeStats Stats() const;

  const Node& node() const { return *node_; }

 private:
  // Fills the thread's key scratch from `q`'s prompt.
  Status PromptKeys(const PrefixQuery& q, const ModelRuntime& model, PrefixAnswer* answer) const;
  Status TokenKeys(const PrefixQuery& q, std::span<const int64_t> tokens, const RequestExtras& extras,
                   const ModelRuntime& model, PrefixAnswer* answer) const;
  Status TextKeys(const PrefixQuery& q, const ModelRuntime& model, PrefixAnswer* answer) const;
  Status EncodeText(const PrefixQuery& q, const ModelRuntime& model, std::vector<int64_t>* ids,
                    std::string* rendered, std::string* body_cache_salt) const;
  Status HashKeys(const PrefixQuery& q, const ModelRuntime& model) const;
  uint64_t TierMask(const PrefixQuery& q) const;
  // Orders and decorates the index's match into `answer`.
  void Assemble(const PrefixQuery& q, PrefixAnswer* answer) const;

  const Node* node_;
  const QueryLimits limits_;
};

}  // namespace kvidx::server
