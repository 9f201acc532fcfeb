// The hash functions shared by workloads W1 and W2 (../shared/bench/workload.md),
// bit for bit as the workload specifies, so that every driver (and every peer
// index run on the same inputs) derives the same block hashes.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvidx::bench {

inline uint64_t SplitMix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Chained block hashes of `n` contents: out[j] covers content[0..j], the way
// vLLM's chained hash makes equal prefixes give equal hashes.
inline void ChainHashes(const uint64_t* content, size_t n, uint64_t* out) {
  uint64_t parent = 0x5eed;
  for (size_t j = 0; j < n; ++j) {
    parent = SplitMix(parent ^ SplitMix(content[j]));
    out[j] = parent;
  }
}

}  // namespace kvidx::bench
