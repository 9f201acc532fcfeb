// The `extra_keys` field of a BlockStored event, decoded. The decoder keeps
// it as raw bytes (EventBatch's extra_keys) because nothing on the server
// reads it; tests and the fuzzer decode it to check those bytes against
// what vLLM hashes (index/block_hasher.h's ExtraKey).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ingest/decoder.h"

namespace kvidx::ingest {

// One entry of a block's extra keys (vllm generate_block_hash_extra_keys):
// a LoRA name or cache salt (str), a multimodal (identifier, offset) pair,
// a prompt-embeds digest (bytes), or an int (pre-#27211 lora_int_id).
struct ExtraKey {
  enum class Kind : uint8_t { kStr, kInt, kBytes, kMm } kind = Kind::kStr;
  std::string str;        // kStr, kBytes, kMm identifier
  int64_t num = 0;        // kInt value, kMm offset
  friend bool operator==(const ExtraKey&, const ExtraKey&) = default;
};

// Decodes the raw `extra_keys` field of a BlockStored event: one entry per
// block, each nullopt (nil) or the list of keys.
struct BlockExtraKeys {
  bool present = false;
  std::vector<ExtraKey> keys;
};
bool DecodeExtraKeys(std::string_view raw, std::vector<BlockExtraKeys>* out, DecodeError* err);

}  // namespace kvidx::ingest
