// W2: the trace-replay workload of ../shared/bench/workload.md.
//
// RunW2Bench replays a Mooncake-format JSONL trace through a fleet of LRU
// replicas (w2_fleet.h) against kvidx::BlockIndex and the naive baseline
// (w2_indexes.h), with the same loop (w2_replay.h), and prints the
// parameters and, per implementation: requests/s, stored and removed
// blocks/s, query p50/p99, resident-memory growth per block held at the end,
// and the checksum line. Each run of each implementation happens in a forked
// child (fresh resident-memory baseline); with --runs=R the figures are
// medians over R runs, the implementations alternating in order run by run.
// When every implementation run agrees, two lines close the output: the
// routed replica's match length percentiles (how long the query walks are;
// a property of the workload) and the bare checksum line, in workload.md's
// exact form.
//
// Rates: requests_per_s counts only time inside index calls (query + store
// + remove), i.e. what the index costs per request; loop_requests_per_s is
// the whole loop, fleet simulation included (the same work for every
// implementation). loop_cpu_requests_per_s divides by the loop's CPU time
// instead of its wall time: a busy machine disturbs it far less, though the
// fleet's share dilutes its ratio (a per-call CPU clock is a system call,
// ~7 us on the `cpp` machine kind: too dear to wrap every index call).
// stored/removed blocks/s count time inside Store and Remove calls;
// index_time_split says where the index time went. cpu_share is the loop's
// CPU time over its wall time: how much of the wall time this process ran.
//
// Flags (`--flag=V` or `--flag V`; all optional): --trace=F (the shared
// synthetic trace), --replicas=P (16), --capacity=C (32768 blocks per
// replica), --expand=E (32, at most 1024), --runs=R (3),
// --impl=all|both|kvidx|naive|radix|runs|core|kvidx-runs (all; both:
// kvidx and naive; kvidx-runs: BlockIndex on the run core), --passes=N
// (1, at most 1000: a soak replays the trace N times, each pass with new contents
// that evict the last pass's, and adds a line with the index's allocated
// bytes, resident growth and the fleet's held blocks after the first and
// the last pass (a fair comparison once the first pass filled the fleet); the
// checksum is then the soak's, not workload.md's).
// Returns 0 on success; 1 on bad flags or a failed run (an index call
// failed, or the index's blocks per replica differ from the fleet's at the
// end); 2 if the trace cannot be read or is malformed (the message names the
// line), or the implementations disagree on the checksum.
#pragma once

// Global namespace: bench/main.cc dispatches `kvidx-bench w2 ...` to it.
int RunW2Bench(int argc, char** argv);
