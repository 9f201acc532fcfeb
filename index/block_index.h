// BlockIndex: which source (replica, DP rank) holds which KV-cache block, in
// which tier and KV-cache group, how many copies, how recently used.
//
// Model. Blocks are keyed by the engine's own chained block hash (BlockKey)
// inside a model namespace: two models may produce equal hash chains and
// never share entries. vLLM's hash already folds LoRA name and cache salt in,
// so the index adds nothing to the key. Ownership is tracked per (block,
// source, tier, group) with a reference count of physical copies: vLLM sends
// one BlockStored and one BlockRemoved per copy, so a block leaves a source
// only when its last copy is removed. Each owner also carries a recency stamp
// (the source's logical clock, 24 bits: a rebase keeps the newest 2^22 ticks
// in order and folds older stamps into 0, the coldest) and an engine-
// confirmed hit count. Copy and hit counts are exact (32-bit, saturating).
//
// Hits (kv_cache_report_mode="full"). vLLM re-announces the blocks a request
// reused as a BlockStored with parent_block_hash = None starting at block 0.
// Rule: with origin kReused, every block of the event is a hit; with origin
// kNew, none is; with origin kUnknown (released vLLM: no origin field) a
// parent-less GPU store of a block the source already holds in that group is
// a hit. Lower tiers never re-announce hits: vLLM's offloading connector
// announces the first block of every CPU chunk without a parent and repeats
// hashes shared between chunks, one BlockStored per reference that its
// removals undo, so a repeated lower-tier store is always another copy. A hit refreshes the block's recency and bumps its hit
// count but never its refcount; otherwise the re-announcement would need a
// removal that never comes. The one ambiguity: a genuine duplicate physical
// copy of a first block (two requests computing the same block 0 before
// either is cached) looks exactly like a re-announcement. It is counted as a
// hit, so the refcount is one short and the second BlockRemoved shows up as
// remove_unknown drift. The proposed origin field (vLLM #51699) removes it.
//
// Groups (hybrid models). A store is indexed when its group is a full-
// attention group (GroupKind::kFullAttention), or group 0 when the engine
// sends no kind, or when the model's options index every group. Other
// groups only count in SourceIndexStats::unindexed_blocks, as do groups >= 63
// (the owner word has 6 bits for the group) and, on the per-block core, a
// new owner of a block that already has 16,384 (source, tier, group) owners
// (the owner array's limit;
// that source's later removal of the block then reads as remove_unknown). Queries match the
// model's primary group (the first full-attention group seen, else 0) unless
// the filter names one. A BlockRemoved carries no kind, so a removal is
// indexed only when its group is full-attention by kind, or the model
// indexes every group, or the model has already indexed a store (by any
// source) of that group; any other removal (e.g. one that precedes the model's first
// indexed store of its group) counts in unindexed_blocks, never as
// remove_unknown drift.
//
// Concurrency. Writers: ingest runs several threads, each source pinned to
// one; calls for the same source must not run concurrently (they are
// serialised by a per-source mutex anyway). Readers: any number of threads.
// Each model's blocks are split over 64 shards by key hash. A writer holds
// the shard's mutex (writer/writer exclusion only; a long event's blocks
// are applied grouped by shard, one hold per shard) and wraps each single-
// block mutation in the shard's sequence counter (seqlock). Readers take no
// lock and write no shared memory: they read a block's entry with relaxed
// atomic loads between two reads of the sequence counter and retry that
// block if it changed. Long operations (ClearSource of millions of blocks,
// clock rebases) are chunks of short single-block sections, and a table that
// must grow is rebuilt on the side and published by one pointer swap, so a
// reader waits at most for one block's mutation, never for a long writer
// operation. Replaced tables are freed through an epoch domain once no
// reader can hold them; records and owner lists live in chunked arenas
// that are never unmapped while the index lives, so a stale read is at worst
// garbage that validation rejects. Why not a RW lock per shard: readers would
// write the lock word on every probe (cache-line ping-pong across many gRPC
// threads) and still queue behind a writer; why not RCU copies of whole
// shards: a 3M-blocks/s ingest cannot copy.
// A query is consistent per block, not across blocks: blocks stored or
// removed while a query runs may or may not be seen.
//
// Memory (per model, per shard): an open-addressing table of 1 control byte
// + 4-byte record id per slot (load 7/16..7/8); 16-byte records (u64 wire
// key + one inline owner, or a handle to an overflow owner array); overflow
// arrays of 8-byte owners (power-of-two sizes from a buddy pool that merges
// freed space back) for blocks held by several sources/tiers; bytes-
// form digests in a side arena allocated only for chunks that need it; per
// source an exact set of its records (RecordSet: <= ~2 bytes per owned
// block, 1 bit when dense) that makes ClearSource proportional to the
// source's blocks, not the index.
//
// Cores (IndexOptions). The above describes the default per-block core.
// The run core (IndexCore::kRuns, docs/RUN_CORE.md) keeps each model's
// blocks as runs of consecutive chain keys (index/internal/run_store.h):
// one writer lock per model instead of per shard (its measured write
// rates are far above a fleet's), the same lock-free, per-segment-
// validated readers, ClearSource through per-owner run lists, no owner
// limit per block. Every call answers and counts as on the default core
// (tests/index/core_equivalence_test.cc); eviction ranks differ only
// within the histogram's resolution (the per-block core updates it in
// shard order, the run core in event order). Bytes-form keys are exact
// on both. A query's hits on the run core are as of the end of the last
// write call (a segment's holders can be a write section newer than its
// hits). A restore into the run core rebuilds the runs of a run-order
// capture (DumpUnsorted: records flagged `follows`) whole, breaking them
// only where a position no owner held was left out, and packs other keys,
// in snapshot order, into runs of up to 64: from a key-sorted
// snapshot (Dump, or a per-block core's) the keys cost what they cost
// stored and answer the same, but a query looks each restored block up
// until the blocks leave and are stored again. Memory walks the model's
// runs under its writer lock (O(runs)).
//
// Errors: calls return Status for unknown models, out-of-range ids and
// capacity limits; event inconsistencies are not errors but drift counters.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "index/block_key.h"
#include "index/drift_stats.h"
#include "index/prefix_match.h"
#include "index/source_registry.h"
#include "base/status.h"
#include "index/tier.h"

namespace kvidx {

using ModelId = uint32_t;
inline constexpr ModelId kMaxModels = 1024;

// Whether a BlockStored is new work or a re-announced cache hit (proposed
// vLLM `origin` field; released engines leave it kUnknown).
enum class StoreOrigin : uint8_t { kUnknown = 0, kNew, kReused };

// What ingest knows about a KV-cache group (vLLM kv_cache_spec_kind).
enum class GroupKind : uint8_t {
  kAbsent = 0,        // the engine sent no kind (older engines, non-hybrid)
  kFullAttention,     // "full_attention" (and "mla_attention": full-prefix semantics)
  kOther,             // sliding window, mamba, chunked local, ...
};

struct KvGroup {
  uint32_t idx = 0;
  GroupKind kind = GroupKind::kAbsent;
};

// Which core keeps the blocks (docs/RUN_CORE.md). Both answer every call
// the same; they differ in speed and memory.
enum class IndexCore : uint8_t {
  kBlocks,   // one record per block in 64 shards, a lock per shard (the default)
  kRuns,     // runs of consecutive chain keys (the run store), a writer lock per model
};

struct IndexOptions {
  IndexCore core = IndexCore::kBlocks;
};

struct ModelOptions {
  // Queries longer than this many blocks are truncated (PrefixMatch::truncated).
  uint32_t max_query_blocks = 8192;
  // Index every group, not only the full-attention one.
  bool index_all_groups = false;
};

// One owner of one block, as Dump() reports and Restore() takes it.
struct OwnerRecord {
  ModelId model = 0;
  BlockKey key;
  SourceId source = 0;
  Tier tier = Tier::kGpu;
  uint32_t group = 0;
  uint32_t refcount = 1;
  uint32_t hits = 0;
  uint32_t stamp = 0;   // recency: the source's logical clock at the last touch
  // The key comes right after the previous record's key (same model) in
  // the run core's run (its run-order capture says so; a sorted list never
  // does). A restore into the run core continues the previous key's run
  // with it, so runs come back whole up to any position no owner held;
  // an untrue flag costs structure, not answers. A layout hint, not
  // content: SameContents ignores it.
  bool follows = false;

  friend bool operator==(const OwnerRecord&, const OwnerRecord&) = default;
};

struct IndexSnapshot {
  std::vector<std::pair<std::string, ModelOptions>> models;   // by ModelId
  std::vector<std::pair<SourceId, uint64_t>> source_clocks;   // sources with a non-zero clock
  std::vector<OwnerRecord> owners;   // sorted: model, key, source, tier, group
};

// Bytes allocated, by part. Chunks are committed as they are written, so
// resident memory can be less than this. tables: the per-shard hash tables
// (a control byte and a 4-byte id per slot); records: 16 bytes per record
// handed out, live or free for reuse; owners: the pool of owner arrays for
// blocks held by more than one (source, tier, group); spill: exact counts
// past an owner word's range (estimated); sources: per-source membership
// sets and recency histograms; runs: the run core's stores (all of their
// parts).
struct IndexMemory {
  size_t tables = 0, records = 0, owners = 0, spill = 0, sources = 0, runs = 0;
  size_t total() const { return tables + records + owners + spill + sources + runs; }
};

class BlockIndex {
 public:
  BlockIndex();
  explicit BlockIndex(const IndexOptions& options);
  ~BlockIndex();
  BlockIndex(const BlockIndex&) = delete;
  BlockIndex& operator=(const BlockIndex&) = delete;

  // --- Models -------------------------------------------------------------
  // Returns the model's id, creating its namespace on first sight (options
  // apply only on creation). Thread-safe; not on the hot path.
  Result<ModelId> AddModel(std::string_view name, const ModelOptions& options = {});
  std::optional<ModelId> FindModel(std::string_view name) const;

  // --- Ingest (one writer per source) --------------------------------------
  // Applies one BlockStored. `hashes` are consecutive blocks of one request;
  // `parent` is the block before hashes[0], absent for a chain start.
  Status Store(ModelId model, SourceId source, Tier tier, KvGroup group,
               std::span<const BlockKey> hashes, std::optional<BlockKey> parent,
               StoreOrigin origin = StoreOrigin::kUnknown);
  // Applies one BlockRemoved: one copy of each listed block goes away.
  Status Remove(ModelId model, SourceId source, Tier tier, KvGroup group,
                std::span<const BlockKey> hashes);
  // Drops every block the source holds in `tier` (all tiers when nullopt),
  // across models and groups, whatever the refcounts. AllBlocksCleared is
  // ClearSource(source, Tier::kGpu). Cost is proportional to the source's
  // blocks, done in short steps that never hold up readers. A source left
  // without any block restarts its recency clock at 0.
  Status ClearSource(SourceId source, std::optional<Tier> tier);
  // For a source that no longer exists: ClearSource of every tier, then frees
  // the source's working memory (recency histogram, membership sets) and
  // forgets its capacity. Its counters (~200 bytes) stay: a source
  // registered again under the same name continues them. Calls for the
  // source may follow (it is then simply live again); none may run
  // concurrently, as for every writer call.
  Status ReleaseSource(SourceId source);
  // For a released id that now names another source (SourceRegistry
  // reused it): zeroes its counters and state. FailedPrecondition if the
  // source still holds a block (ReleaseSource did not run or failed).
  Status ResetSource(SourceId source);

  // --- Source metadata ------------------------------------------------------
  void SetSourceState(SourceId source, SourceState state);
  SourceState GetSourceState(SourceId source) const;
  // vLLM's num_gpu_blocks for the source's engine; 0 = unknown.
  void SetSourceCapacity(SourceId source, uint64_t gpu_blocks);

  // --- Queries (any thread, lock-free) -------------------------------------
  // Longest cached prefix of `keys` on every source holding keys[0]. Work per
  // probed block is O(min(its owners, alive candidates * log owners)); the
  // walk stops at the first block no candidate source continues. No heap
  // allocation with a warm `out`, nothing proportional to the source-id space.
  Status FindPrefix(ModelId model, std::span<const BlockKey> keys, const PrefixFilter& filter,
                    PrefixMatch* out) const;

  // The source's `n` coldest GPU blocks of `model` in the order an LRU would
  // evict them (oldest first). O(source's blocks); for diagnosis, not routing.
  Status PeekEvictionOrder(ModelId model, SourceId source, size_t n,
                           std::vector<BlockKey>* out) const;

  // Every owner of one block (tiers, groups, refcounts, hits, recency), in
  // owner order (source, tier, group). Empty when nobody holds it. Takes the
  // block's shard mutex (the model's writer lock on the run core): for
  // diagnosis (GetBlock RPC), not for routing.
  Status LookupBlock(ModelId model, const BlockKey& key, std::vector<OwnerRecord>* out) const;

  // --- Stats ------------------------------------------------------------------
  SourceIndexStats GetSourceStats(SourceId source) const;
  RecencyRankHistogram GetEvictionRankHistogram() const;
  // Heap bytes of the source's per-source state (0 if it never had any);
  // takes the source's writer mutex: for tests and diagnosis.
  size_t SourceMemoryBytes(SourceId source) const;
  // Distinct blocks (any owner) per model.
  uint64_t BlockCount(ModelId model) const;
  // Heap bytes the index has allocated, by part, over every model and
  // source. Takes each shard's and source's writer mutex in turn: for
  // /metrics and diagnosis, not per request.
  IndexMemory Memory() const;

  // --- Persistence hooks -----------------------------------------------------
  // A deterministic snapshot of everything the index believes. Consistent if
  // writers are quiescent; otherwise each block is consistent on its own.
  void Dump(IndexSnapshot* out) const;
  // Dump() without the final sort, for a caller that holds writers back
  // while it copies: capture under the pause, SortSnapshot() after it. On
  // the run core the capture is in run order, which a restore into the
  // run core turns back into runs (keep it unsorted there).
  void DumpUnsorted(IndexSnapshot* out) const;
  // Rebuilds from a snapshot into an empty index (models by name, in order).
  // Owners in Dump() order take a fast path (no lookup per owner); any other
  // order is accepted too, just slower. Duplicate owners, owners of a
  // group >= 63 and a block's owners past 16,384 are Corruption; owners
  // applied before the error stay fully indexed. Clocks and stamps wider than 24 bits (snapshots of builds
  // with 32-bit stamps) are rebased as a Store would rebase them. Group
  // kinds are not in a snapshot: a group with a restored owner counts as
  // indexed, as after the store that made the owner (its removals, which
  // carry no kind, apply); the primary group is restored when the owners
  // name it unambiguously (no index_all_groups, owners in one group other
  // than 0), else it is learnt from the next full-attention store.
  Status Restore(const IndexSnapshot& snapshot);

  // Test hook: sets a source's logical clock (exercises stamp rebasing).
  void TestOnlySetClock(SourceId source, uint64_t clock);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Puts a DumpUnsorted() capture into Dump()'s order (model, key, source,
// tier, group); no record follows another in that order.
void SortSnapshot(IndexSnapshot* snapshot);

// Equality of two snapshots (the persistence issue's round-trip check);
// OwnerRecord::follows, a layout hint, is not compared.
bool SameContents(const IndexSnapshot& a, const IndexSnapshot& b);

}  // namespace kvidx
