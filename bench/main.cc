// kvidx-bench entry point.
//
//   kvidx-bench [google-benchmark flags]   microbenchmarks (decode, hash, discovery diff, ...)
//   kvidx-bench w1 [--prompts=N ...]        workload W1 (shared/bench/workload.md)
//   kvidx-bench w2 [--trace F ...]          workload W2: a Mooncake trace through an LRU fleet
//   kvidx-bench owners [--blocks=N ...]     bytes per block and per additional owner
//   kvidx-bench snapshot [--n=N]           snapshot / restore of N index entries
//   kvidx-bench ingest ...                 PUB -> decode -> sink, end to end
//   kvidx-bench grpc ...                   FindPrefix over gRPC while ingest runs
//   kvidx-bench chat-prefix ...            a chat request -> FindPrefix in process
//   kvidx-bench tokenize [--texts=N ...]   encode throughput beside Hugging Face's Rust tokenizers
//   kvidx-bench chat [--iterations=N]      chat-template render of an 8K-token request
//
// Custom drivers exist where Google Benchmark's per-iteration model does not
// fit: W1 and W2 report a checksum, latency percentiles and resident-memory
// growth, kvidx beside a naive baseline in the same run.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstring>

#if __has_include("bench/w1_bench.h")
#include "bench/w1_bench.h"
#define KVIDX_HAVE_W1 1
#endif
#include "bench/w2_bench.h"
#if __has_include("bench/snapshot_bench.h")
#include "bench/snapshot_bench.h"
#define KVIDX_HAVE_SNAPSHOT 1
#endif
#if __has_include("bench/grpc_bench.h")
#include "bench/grpc_bench.h"
#define KVIDX_HAVE_GRPC 1
#endif
#include "bench/chat_prefix_bench.h"
#include "bench/chat_bench.h"
#include "bench/owners_bench.h"
#include "bench/tokenize_bench.h"
#if __has_include("bench/ingest_bench.h")
#include "bench/ingest_bench.h"
#define KVIDX_HAVE_INGEST 1
#endif

int main(int argc, char** argv) {
  if (argc >= 2 && argv[1][0] != '-') {
#ifdef KVIDX_HAVE_W1
    if (std::strcmp(argv[1], "w1") == 0) return RunW1Bench(argc - 1, argv + 1);
#endif
    if (std::strcmp(argv[1], "w2") == 0) return RunW2Bench(argc - 1, argv + 1);
    if (std::strcmp(argv[1], "chat") == 0) return RunChatBench(argc - 1, argv + 1);
#ifdef KVIDX_HAVE_SNAPSHOT
    if (std::strcmp(argv[1], "snapshot") == 0) return RunSnapshotBench(argc - 1, argv + 1);
#endif
#ifdef KVIDX_HAVE_GRPC
    if (std::strcmp(argv[1], "grpc") == 0) return RunGrpcBench(argc - 1, argv + 1);
#endif
    if (std::strcmp(argv[1], "chat-prefix") == 0) return kvidx::RunChatPrefixBench(argc - 1, argv + 1);
    if (std::strcmp(argv[1], "owners") == 0) return RunOwnersBench(argc - 1, argv + 1);
    if (std::strcmp(argv[1], "tokenize") == 0) return RunTokenizeBench(argc - 1, argv + 1);
#ifdef KVIDX_HAVE_INGEST
    if (std::strcmp(argv[1], "ingest") == 0) return RunIngestBench(argc - 1, argv + 1);
#endif
    std::fprintf(stderr, "kvidx-bench: unknown driver '%s'\n", argv[1]);
    return 2;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
