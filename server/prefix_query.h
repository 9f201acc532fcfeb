// PrefixQuery / PrefixAnswer: "which replicas hold how much of this prompt",
// as the domain states it, without any RPC type.
//
// A query names a model and carries its prompt in one of two forms: token
// ids (hashed with the model's vLLM hasher, with the request's extra keys)
// or block hashes as the engines publish them (integers, or digests of the
// model's hash algorithm). The answer lists every source (replica, DP rank)
// holding block 0 of the prompt, most GPU blocks first, with the source's
// state and the last batch applied from it.
//
// Both are views: a PrefixQuery borrows its prompt, filters and extras from
// the caller, and a PrefixAnswer's replica names and block hashes point into
// the Node and the answering thread's scratch. They are valid until that
// thread's next query. Reuse one of each per thread: capacity is kept, so a
// warm query allocates nothing.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "index/block_hasher.h"
#include "index/block_key.h"
#include "index/source_registry.h"

namespace kvidx::server {

// kText: a completions prompt string; kChat: a chat-completions request
// body (JSON). Both need the model's tokenizer (PromptEncoder).
enum class PromptForm { kNone, kTokens, kHashes, kText, kChat };

struct PrefixQuery {
  std::string_view model;
  PromptForm form = PromptForm::kNone;
  // kTokens: the prompt and its extra keys (LoRA, cache salt, multimodal
  // items sorted by offset).
  std::span<const int64_t> token_ids;
  RequestExtras extras;
  // kHashes: integer hashes, or digests of the model's algorithm; not both.
  std::span<const uint64_t> hashes;
  std::vector<std::string_view> digests;
  // kText / kChat: the prompt string or the chat request body, tokenized
  // with the extras above; add_special_tokens unset = the endpoint's default.
  std::string_view text;
  std::optional<bool> add_special_tokens;
  // Tiers admitted beside GPU (which always is); empty = every tier.
  // Unknown names admit nothing more.
  std::vector<std::string_view> tiers;
  // Only these replicas are answered; empty = all.
  std::vector<std::string_view> replicas;
  // kTokens: the answer carries the prompt's block hashes.
  bool include_block_hashes = false;

  // Empties the query, keeping capacity.
  void Clear() {
    model = {};
    form = PromptForm::kNone;
    token_ids = {};
    extras = {};
    hashes = {};
    digests.clear();
    text = {};
    add_special_tokens.reset();
    tiers.clear();
    replicas.clear();
    include_block_hashes = false;
  }
};

// One source's share of the prompt.
struct ReplicaPrefix {
  std::string_view replica;   // into PrefixAnswer::replica_names
  uint32_t dp_rank = 0;
  SourceId source = 0;
  uint32_t gpu_blocks = 0;
  uint32_t blocks_with_lower_tiers = 0;
  uint32_t hit_blocks = 0;
  uint64_t hits = 0;
  SourceState state = SourceState::kConnecting;
  int64_t last_seq = -1;   // the last batch applied from the source; -1 = none yet
};

struct PrefixAnswer {
  uint32_t query_blocks = 0;    // blocks considered (after the model's cap)
  uint32_t block_size = 0;      // tokens per block
  // The prompt's length in tokens (0 for hashes), and for kText/kChat its ids.
  uint64_t prompt_tokens = 0;
  std::span<const int64_t> token_ids;
  bool truncated = false;       // the prompt was longer than the model's cap
  // Batches applied when the answer was read (monotone: orders answers).
  uint64_t applied_batches = 0;
  // Most GPU blocks first, then by replica name and DP rank.
  std::vector<ReplicaPrefix> replicas;
  // The replicas' names, copied: a removed source's id may name another
  // source, and its old name be freed, while the answer is still read.
  std::string replica_names;
  // kTokens with include_block_hashes: the prompt's hashes, in the form
  // the model's engines publish (integers when int_block_hashes).
  std::span<const BlockDigest> block_hashes;
  bool int_block_hashes = false;
  // The prompt's block keys as the index was asked for them.
  std::span<const BlockKey> keys;

  void Clear() {
    query_blocks = block_size = 0;
    prompt_tokens = 0;
    token_ids = {};
    truncated = false;
    applied_batches = 0;
    replicas.clear();
    replica_names.clear();
    block_hashes = {};
    int_block_hashes = false;
    keys = {};
  }
};

}  // namespace kvidx::server
