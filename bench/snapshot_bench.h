// Snapshot/restore benchmark (issue 5): `kvidx-bench snapshot [flags]`.
//
// Builds a BlockIndex of N (block, owner) entries (one model, S sources,
// every block held by two sources), then R times: BlockIndex::Dump() while
// a writer thread (Store/Remove of 16 blocks per call, its own source) and a
// reader thread (FindPrefix of 32 blocks) run, reporting the longest write
// call and the longest query seen during the dump, during SnapshotStore::
// Write, and in a quiet baseline; Write() seconds and bytes on disk;
// LoadLatest() + ApplySnapshot() (restore) seconds; peak extra resident
// memory of each phase (VmHWM after /proc/self/clear_refs). Prints each run
// and the medians.
//
// Flags: --n=N (10000000) --sources=S (64) --runs=R (3) --dir=PATH (a new
// directory under $TMPDIR or /tmp, removed afterwards) --core=blocks|runs
// (blocks: the per-block core, its capture sorted as the server sorts it;
// runs: the run core, its capture kept in run order).
#pragma once

// Global namespace: bench/main.cc dispatches `kvidx-bench snapshot ...` to it.
int RunSnapshotBench(int argc, char** argv);
