// W2's input: a request trace in Mooncake's JSONL format, expanded into the
// chained block hashes every W2 driver replays (../shared/bench/workload.md).
//
// Format: one JSON object per line; only "hash_ids" is used (an array of
// non-negative integer ids of 512-token blocks, equal ids = equal prefix
// blocks). "timestamp", "input_length", "output_length" and any other field
// are ignored, so every trace in Mooncake's format works unchanged. Blank
// lines are skipped. A request may have no blocks; the trace must hold at
// least one request.
//
// Expansion (W2 step 1): each id h becomes `expand` contents (h << 5) | k,
// k = 0..expand-1, chained as in W1. The formula is the workload's, verbatim:
// with expand > 32 the contents of neighbouring ids overlap, which is still
// deterministic, so it is accepted rather than silently "fixed".
//
// Errors (Status kCorruption / kNotFound) name the file and the 1-based line.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace kvidx::bench {

struct W2Trace {
  std::vector<uint64_t> hashes;          // every request's block hashes, back to back
  std::vector<uint64_t> offsets{0};      // request i: hashes[offsets[i], offsets[i + 1])
  uint32_t max_request_blocks = 0;

  size_t requests() const { return offsets.size() - 1; }
  std::span<const uint64_t> Request(size_t i) const {
    return {hashes.data() + offsets[i], hashes.data() + offsets[i + 1]};
  }
};

Result<W2Trace> LoadW2Trace(const std::string& path, uint32_t expand);

}  // namespace kvidx::bench
