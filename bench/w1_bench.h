// W1: the prefix-index comparison workload of ../shared/bench/workload.md.
//
// RunW1Bench runs the workload against kvidx::BlockIndex and a naive
// baseline (std::unordered_map<key, std::vector<owner>>) and prints the
// parameters, the checksum and, per implementation, inserted blocks/s,
// queries/s, p50/p99 query latency and bytes per indexed block from
// resident-memory growth. Each run of each implementation happens in a
// forked child so that resident-memory growth is measured in a fresh
// process; with --runs=R the printed figures are medians over R runs.
//
// Flags (all optional; non-flag arguments such as the subcommand name are
// ignored): --prompts=N (20000) --blocks=B (32) --shared=S (16)
// --groups=G (200) --replicas=P (8) --queries=Q (20000) --runs=R (3)
// --impl=all|both|kvidx|naive|radix|runs|core|kvidx-runs (all; both:
// kvidx and naive; kvidx-runs: BlockIndex on the run core).
// KVIDX_W1_VERBOSE=1 prints the kvidx
// resident-memory phases (empty index, after inserts) to stderr.
// Returns 0 on success, 1 on bad flags, 2 if the implementations disagree
// on the checksum.
#pragma once

// Global namespace: bench/main.cc dispatches `kvidx-bench w1 ...` to it.
int RunW1Bench(int argc, char** argv);
