// Memory per owner: what one more replica (or tier) holding the same blocks
// costs the index.
//
// `kvidx-bench owners --blocks=N --owners=1,2,4,8,64 [--runs=R] [--tiers]`
// inserts N distinct blocks (16-block chains, random 64-bit hashes) held by
// K owners, for each K in the list, each in a fresh forked child, and prints
// the resident-memory growth per block and, against the K=1 run, per
// additional owner: (RSS(K) - RSS(1)) / (N * (K - 1)). Owners are K
// sources (replicas) by default; with --tiers they are one source's GPU,
// CPU and STORAGE copies (K <= 3). Medians over R runs (default 3).
#pragma once

int RunOwnersBench(int argc, char** argv);
