// Typed vLLM KV-cache events, as decoded from one ZMQ message.
//
// Layout is flat on purpose (data plane): an EventBatch owns two arrays,
// `keys` and `tokens`, and each event refers to its slice of them by
// (offset, count). Decoding a batch therefore allocates nothing per block,
// and a reused EventBatch (Clear() keeps capacity) allocates nothing at all
// once warm.
//
// Strings (medium, lora_name, ...) and the raw `extra_keys` msgpack are
// string_views into the payload that was decoded: an EventBatch borrows from
// that payload and is valid only while the payload bytes are alive and
// unchanged. Copy what must outlive it.
//
// Field names follow vLLM's `BlockStored` / `BlockRemoved` declarations
// (vllm/distributed/kv_events.py); absent or nil fields are std::nullopt.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "index/block_key.h"

namespace kvidx::ingest {

enum class EventType : uint8_t {
  kBlockStored,
  kBlockRemoved,
  kAllBlocksCleared,
};

std::string_view EventTypeName(EventType t);

// A slice of one of EventBatch's arrays.
struct Slice {
  uint32_t offset = 0;
  uint32_t count = 0;
};

struct KvEvent {
  EventType type = EventType::kAllBlocksCleared;

  // BlockStored and BlockRemoved.
  Slice block_hashes;                              // into EventBatch::keys
  std::optional<std::string_view> medium;          // "GPU", "CPU", "STORAGE", ... (opaque)
  std::optional<int64_t> group_idx;
  std::optional<std::string_view> locality;        // "LOCAL" / "REMOTE"
  std::optional<std::string_view> ownership;

  // BlockStored only.
  std::optional<BlockKey> parent_block_hash;
  Slice token_ids;                                 // into EventBatch::tokens
  int64_t block_size = 0;
  std::optional<int64_t> lora_id;
  std::optional<std::string_view> lora_name;
  // Raw msgpack bytes of the `extra_keys` field (an array with one entry per
  // block hash, each an array or nil). Kept undecoded: the server never
  // reads it. ingest/testing/extra_keys.h decodes it for tests.
  std::optional<std::string_view> extra_keys;
  std::optional<std::string_view> kv_cache_spec_kind;
  std::optional<int64_t> kv_cache_spec_sliding_window;
  std::optional<std::string_view> session_id;
  std::optional<std::string_view> origin;          // proposed (#51699): "NEW" / "REUSED"
};

struct EventBatch {
  double ts = 0;                                   // engine wall clock, seconds
  std::optional<int64_t> data_parallel_rank;       // absent before vLLM #18925
  std::vector<KvEvent> events;
  std::vector<BlockKey> keys;
  std::vector<int64_t> tokens;
  uint32_t unknown_events = 0;                     // events with an unknown tag, skipped
  // BatchFingerprint of the raw payload (ingest/batch_fingerprint.h), set
  // by ingest before delivery: snapshots store it so a restart can tell
  // "same engine" from "restarted".
  uint64_t fingerprint = 0;

  std::span<const BlockKey> HashesOf(const KvEvent& e) const {
    return {keys.data() + e.block_hashes.offset, e.block_hashes.count};
  }
  std::span<const int64_t> TokensOf(const KvEvent& e) const {
    return {tokens.data() + e.token_ids.offset, e.token_ids.count};
  }
  // Empties the batch, keeping capacity.
  void Clear() {
    ts = 0;
    data_parallel_rank.reset();
    events.clear();
    keys.clear();
    tokens.clear();
    unknown_events = 0;
    fingerprint = 0;
  }
};

inline std::string_view EventTypeName(EventType t) {
  switch (t) {
    case EventType::kBlockStored: return "BlockStored";
    case EventType::kBlockRemoved: return "BlockRemoved";
    case EventType::kAllBlocksCleared: return "AllBlocksCleared";
  }
  return "unknown";
}

}  // namespace kvidx::ingest
