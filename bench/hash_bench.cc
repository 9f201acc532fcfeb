// Block hashing throughput: BlockHasher (serialize + digest, chained) against
// the bare digest over the very same serialized bytes, prepared up front.
// The ratio is the cost of our pickle/CBOR encoding; the target is
// hasher >= 0.8x raw SHA-256.
//
//   kvidx-bench --benchmark_filter='Hash|Raw' --benchmark_repetitions=3
//
// Workload: an 8192-token prompt (ids spread over a 150k vocabulary, so
// BININT2/BININT pickle opcodes mix like real text), 16-token blocks -> 512
// blocks. bytes_per_second counts serialized bytes; blocks/s counts blocks.
#define OPENSSL_SUPPRESS_DEPRECATED 1

#include <benchmark/benchmark.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <xxhash.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "index/block_hasher.h"

namespace kvidx {
namespace {

constexpr size_t kPromptTokens = 8192;
constexpr size_t kBlockSize = 16;

std::vector<int64_t> MakePrompt() {
  std::vector<int64_t> t(kPromptTokens);
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (auto& v : t) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;  // xorshift64
    v = static_cast<int64_t>(x % 150000);
  }
  return t;
}

BlockHasher MakeHasher(HashAlgo algo) {
  Result<BlockHasher> h = BlockHasher::Create({algo, std::string("0"), kBlockSize});
  return std::move(h).value();
}

// The serialized input of every block of the prompt, exactly as HashRequest
// produces them (each with its real parent).
struct Serialized {
  std::vector<std::vector<uint8_t>> blocks;
  size_t total_bytes = 0;
};

Serialized SerializeAll(HashAlgo algo, const std::vector<int64_t>& prompt) {
  BlockHasher h = MakeHasher(algo);
  Serialized s;
  BlockDigest parent;
  for (size_t b = 0; b + kBlockSize <= prompt.size(); b += kBlockSize) {
    const std::span<const int64_t> tokens(prompt.data() + b, kBlockSize);
    std::span<const uint8_t> bytes = h.SerializeBlock(parent, tokens, {});
    s.blocks.emplace_back(bytes.begin(), bytes.end());
    s.total_bytes += bytes.size();
    parent = h.HashBlock(parent, tokens, {});
  }
  return s;
}

void SetCounters(benchmark::State& state, const Serialized& s) {
  const double iters = static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<int64_t>(iters * static_cast<double>(s.total_bytes)));
  state.counters["blocks/s"] =
      benchmark::Counter(iters * static_cast<double>(s.blocks.size()), benchmark::Counter::kIsRate);
  state.counters["bytes/block"] = static_cast<double>(s.total_bytes) / static_cast<double>(s.blocks.size());
}

void BM_HashRequest(benchmark::State& state, HashAlgo algo) {
  const std::vector<int64_t> prompt = MakePrompt();
  const Serialized s = SerializeAll(algo, prompt);
  BlockHasher h = MakeHasher(algo);
  std::vector<BlockDigest> out;
  for (auto _ : state) {
    Status st = h.HashRequest(prompt, &out);
    benchmark::DoNotOptimize(out.data());
    if (!st.ok()) state.SkipWithError(st.ToString().c_str());
  }
  SetCounters(state, s);
}

// Same workload with LoRA + cache salt, to show the extra-keys cost.
void BM_HashRequestLoraSalt(benchmark::State& state, HashAlgo algo) {
  const std::vector<int64_t> prompt = MakePrompt();
  const Serialized s = SerializeAll(algo, prompt);  // bytes/s uses the plain sizes
  BlockHasher h = MakeHasher(algo);
  RequestExtras extras;
  extras.lora_name = "sql-adapter-v2";
  extras.cache_salt = "tenant-42";
  std::vector<BlockDigest> out;
  for (auto _ : state) {
    Status st = h.HashRequest(prompt, extras, &out);
    benchmark::DoNotOptimize(out.data());
    if (!st.ok()) state.SkipWithError(st.ToString().c_str());
  }
  SetCounters(state, s);
}

// Raw digests over the pre-serialized bytes: the ceiling for BlockHasher.
void BM_RawSha256(benchmark::State& state) {
  const Serialized s = SerializeAll(HashAlgo::kSha256, MakePrompt());
  uint8_t md[32];
  for (auto _ : state) {
    for (const auto& b : s.blocks) {
      SHA256_CTX ctx;  // the call BlockHasher uses
      SHA256_Init(&ctx);
      SHA256_Update(&ctx, b.data(), b.size());
      SHA256_Final(md, &ctx);
      benchmark::DoNotOptimize(md);
    }
  }
  SetCounters(state, s);
}

// As BM_RawSha256, but each block's input embeds the previous block's digest
// (copied into the prepared bytes at the parent's offset) before hashing, as
// the chain requires. Blocks can then no longer overlap in the CPU; this is
// the floor for any implementation of vLLM's chained hash.
void BM_RawSha256Chained(benchmark::State& state) {
  Serialized s = SerializeAll(HashAlgo::kSha256, MakePrompt());
  constexpr size_t kParentOffset = 2 + 9 + 2;  // PROTO, FRAME, SHORT_BINBYTES 32
  uint8_t md[32] = {};
  for (auto _ : state) {
    for (auto& b : s.blocks) {
      std::memcpy(b.data() + kParentOffset, md, 32);
      SHA256_CTX ctx;
      SHA256_Init(&ctx);
      SHA256_Update(&ctx, b.data(), b.size());
      SHA256_Final(md, &ctx);
    }
    benchmark::DoNotOptimize(md);
  }
  SetCounters(state, s);
}

void BM_RawSha256Evp(benchmark::State& state) {
  const Serialized s = SerializeAll(HashAlgo::kSha256, MakePrompt());
  EVP_MD* md_type = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  uint8_t md[32];
  unsigned int len = 0;
  for (auto _ : state) {
    for (const auto& b : s.blocks) {
      EVP_DigestInit_ex2(ctx, md_type, nullptr);
      EVP_DigestUpdate(ctx, b.data(), b.size());
      EVP_DigestFinal_ex(ctx, md, &len);
      benchmark::DoNotOptimize(md);
    }
  }
  EVP_MD_CTX_free(ctx);
  EVP_MD_free(md_type);
  SetCounters(state, s);
}

void BM_RawSha256OneShot(benchmark::State& state) {
  const Serialized s = SerializeAll(HashAlgo::kSha256, MakePrompt());
  uint8_t md[32];
  for (auto _ : state) {
    for (const auto& b : s.blocks) {
      SHA256(b.data(), b.size(), md);
      benchmark::DoNotOptimize(md);
    }
  }
  SetCounters(state, s);
}

void BM_RawXxh3_128(benchmark::State& state) {
  const Serialized s = SerializeAll(HashAlgo::kXxhash, MakePrompt());
  for (auto _ : state) {
    for (const auto& b : s.blocks) {
      XXH128_hash_t h = XXH3_128bits(b.data(), b.size());
      benchmark::DoNotOptimize(h);
    }
  }
  SetCounters(state, s);
}

BENCHMARK_CAPTURE(BM_HashRequest, sha256, HashAlgo::kSha256);
BENCHMARK(BM_RawSha256);
BENCHMARK(BM_RawSha256Chained);
BENCHMARK(BM_RawSha256Evp);
BENCHMARK(BM_RawSha256OneShot);
BENCHMARK_CAPTURE(BM_HashRequest, sha256_cbor, HashAlgo::kSha256Cbor);
BENCHMARK_CAPTURE(BM_HashRequest, xxhash, HashAlgo::kXxhash);
BENCHMARK(BM_RawXxh3_128);
BENCHMARK_CAPTURE(BM_HashRequest, xxhash_cbor, HashAlgo::kXxhashCbor);
BENCHMARK_CAPTURE(BM_HashRequestLoraSalt, sha256, HashAlgo::kSha256);

}  // namespace
}  // namespace kvidx
