// The `extra_keys` field of a BlockStored event, decoded. The decoder keeps
// it as raw bytes (EventBatch's extra_keys) because nothing on the server
// reads it; tests and the fuzzer decode it to check those bytes against
// what vLLM hashes.
//
// The keys are the hasher's own input type (index/block_hasher.h's
// ExtraKey), viewing the raw bytes: the field is already a view into the
// payload, so owning copies would buy nothing, and decoded keys can go to
// BlockHasher as they are.
#pragma once

#include <string_view>
#include <vector>

#include "index/block_hasher.h"
#include "ingest/decoder.h"

namespace kvidx::ingest {

// Decodes the raw `extra_keys` field of a BlockStored event: one entry per
// block, each absent (nil) or the list of keys (vllm
// generate_block_hash_extra_keys: a LoRA name or cache salt as kStr, a
// prompt-embeds digest as kBytes, a pre-#27211 lora_int_id as kInt, a
// multimodal (identifier, offset-in-block) pair as kMmItem). The keys view
// `raw`, which must outlive them.
struct BlockExtraKeys {
  bool present = false;
  std::vector<kvidx::ExtraKey> keys;
};
bool DecodeExtraKeys(std::string_view raw, std::vector<BlockExtraKeys>* out, DecodeError* err);

}  // namespace kvidx::ingest
