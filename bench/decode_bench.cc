// Decoder (and encoder) throughput on realistic vLLM batches.
//
// A batch is 8 BlockStored events as the GPU block pool emits them: 16-token
// blocks, 1..64 blocks per event, int (u64) hashes, a parent hash, token ids
// from a 150k vocabulary, medium "GPU", group_idx 0, kind "full_attention",
// extra_keys [nil, ...]. Each benchmark decodes one pre-encoded payload into
// one reused EventBatch, as the ingest loop does, so the steady state
// allocates nothing.
//
//   kvidx-bench --benchmark_filter=Decode
#include <benchmark/benchmark.h>

#include <random>
#include <string>
#include <vector>

#include "ingest/decoder.h"
#include "ingest/testing/encoder.h"

namespace kvidx::ingest {
namespace {

constexpr int kEventsPerBatch = 8;
constexpr int kBlockSize = 16;

// blocks_per_event == 0: uniform in 1..64 per event (fixed seed).
struct BenchBatch {
  EventBatch batch;
  std::vector<std::string> extra_keys;  // backing store for the raw views
  size_t blocks = 0;
};

void MakeBatch(int blocks_per_event, BenchBatch* out) {
  std::mt19937_64 rng(12345);
  EventBatch& b = out->batch;
  b.ts = 1700000000.25;
  b.data_parallel_rank = 0;
  out->extra_keys.reserve(kEventsPerBatch);
  for (int i = 0; i < kEventsPerBatch; ++i) {
    const int n = blocks_per_event > 0 ? blocks_per_event : 1 + static_cast<int>(rng() % 64);
    KvEvent& e = b.events.emplace_back();
    e.type = EventType::kBlockStored;
    e.block_hashes = {static_cast<uint32_t>(b.keys.size()), static_cast<uint32_t>(n)};
    for (int k = 0; k < n; ++k) b.keys.push_back(BlockKey::FromU64(rng() | (uint64_t{1} << 63)));
    e.parent_block_hash = BlockKey::FromU64(rng() | (uint64_t{1} << 63));
    e.token_ids = {static_cast<uint32_t>(b.tokens.size()), static_cast<uint32_t>(n * kBlockSize)};
    for (int k = 0; k < n * kBlockSize; ++k) b.tokens.push_back(static_cast<int64_t>(rng() % 150000));
    e.block_size = kBlockSize;
    e.medium = "GPU";
    e.group_idx = 0;
    e.kv_cache_spec_kind = "full_attention";
    // [nil] * n, as vLLM sends for requests without extra keys.
    std::string& ek = out->extra_keys.emplace_back();
    if (n < 16) {
      ek.push_back(static_cast<char>(0x90 | n));
    } else {
      ek += {'\xdc', '\0', static_cast<char>(n)};
    }
    ek.append(static_cast<size_t>(n), '\xc0');
    e.extra_keys = ek;
    out->blocks += static_cast<size_t>(n);
  }
}

WireEra EraOf(int64_t form) { return form == 0 ? WireEra::Newest() : WireEra::Array(6); }

void BM_Decode(benchmark::State& state) {
  BenchBatch src;
  MakeBatch(static_cast<int>(state.range(1)), &src);
  const std::string payload = EncodePayload(src.batch, EraOf(state.range(0)));
  const Decoder decoder;
  EventBatch batch;  // reused across iterations
  DecodeError err;
  for (auto _ : state) {
    if (!decoder.DecodePayload(payload, &batch, &err)) {
      state.SkipWithError(err.detail.c_str());
      break;
    }
    benchmark::DoNotOptimize(batch.keys.data());
    benchmark::ClobberMemory();
  }
  const auto iters = static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(payload.size()));
  state.counters["events/s"] = benchmark::Counter(iters * kEventsPerBatch, benchmark::Counter::kIsRate);
  state.counters["blocks/s"] = benchmark::Counter(iters * static_cast<double>(src.blocks), benchmark::Counter::kIsRate);
  state.counters["payload_B"] = static_cast<double>(payload.size());
}

void BM_Encode(benchmark::State& state) {
  BenchBatch src;
  MakeBatch(static_cast<int>(state.range(1)), &src);
  const WireEra era = EraOf(state.range(0));
  std::string out;  // reused across iterations
  for (auto _ : state) {
    EncodePayload(src.batch, era, &out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(out.size()));
  state.counters["blocks/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * static_cast<double>(src.blocks),
                         benchmark::Counter::kIsRate);
}

// Args: {form (0 = map, newest; 1 = array schema v6), blocks per event (0 = mixed 1..64)}.
void DecodeArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"array", "blocks"});
  for (int form : {0, 1}) {
    for (int blocks : {1, 16, 64, 0}) b->Args({form, blocks});
  }
}

BENCHMARK(BM_Decode)->Apply(DecodeArgs);
BENCHMARK(BM_Encode)->ArgNames({"array", "blocks"})->Args({0, 0})->Args({1, 0});

}  // namespace
}  // namespace kvidx::ingest
