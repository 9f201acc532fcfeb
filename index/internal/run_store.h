// Internal to the block index: the run-compressed core's store
// (docs/RUN_CORE.md), BlockIndex's blocks under IndexCore::kRuns
// (block_index_runs.cc).
//
// Blocks live in runs: arrays of consecutive chain keys. A chained key
// names its whole prefix, so a run needs no parent link; a walk locates a
// key in the block map, compares the following keys with the run's
// entries, and locates the next key again wherever the run ends or
// diverges. A store extends the run its parent ends, gains holdings in
// place for keys already indexed, and opens a run for anything else, so it
// accepts parentless, orphan and out-of-order stores; a run is never
// split. Membership is exact: one bit per run position per owner.
//
// Layout. Run entries (the 64-bit keys) sit in pages of kRunPage entries;
// an entry id is page << kRunPageBits | slot, and a page knows its run, its
// first position and the run's next page. The block map is the index's
// own table (table.h): a control byte and a 4-byte entry id per slot, no
// keys; a probe confirms a candidate by reading its entry. So a block
// costs its 8-byte entry, a table slot and a bit per owner, plus its
// run's holders and the unused tail of its last page.
//
// Hits and recency stamps: per run and owner, ranges of equal counts
// (hit_ranges.h) and of descending stamps (stamp_ranges.h), the writer's;
// readers sum hits from the run's hit view (hit_view.h), rebuilt when a
// call changed them and absent while no owner has any.
//
// Copies: a held position is one copy; extra copies (the same block cached
// twice by one owner) are counted aside as ranges of equal counts, like
// hits, so an owner without any costs nothing and a prefix stored again
// costs one range update.
//
// Concurrency: one writer (the caller excludes others), readers on any
// thread without a lock. Each run has a sequence lock: the writer changes
// a run's entries, length, pages and holdings inside the run's write
// section, and a reader validates each segment it reads against it (as
// the per-block core validates each block) and starts the query again
// when a write overlapped. Memory a reader may reach stays allocated:
// pages and runs live in chunked arenas freed with the store; holder
// blocks, hit views and tables are replaced whole and retired to the
// epoch domain. Readers (SourcePrefixes, LongestPrefixes) must hold a
// ReadGuard of that domain; every other call is the writer's.
//
// Scope: keys in both forms (64-bit wires, bytes-form keys with their
// KeyForm), owners as opaque 32-bit identities, exact copy and hit counts
// and stamps, per-key notes of what a write did, a dump and restore that
// keep runs, clearing or rebasing an owner in time proportional to its
// runs.
#pragma once

#include <atomic>
#include <cstddef>
#include <algorithm>
#include <bit>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "index/epoch.h"
#include "index/internal/hit_ranges.h"
#include "index/internal/hit_view.h"
#include "index/internal/holder_block.h"
#include "index/internal/probe_key.h"
#include "index/internal/ptr_dir.h"
#include "index/internal/seq_lock.h"
#include "index/internal/stamp_ranges.h"
#include "index/internal/table.h"

namespace kvidx::internal {

inline constexpr uint32_t kRunPageBits = 4;
inline constexpr uint32_t kRunPage = 1u << kRunPageBits;   // entries per page

// The rest of a bytes-form key beyond its 64-bit wire value (BlockKey's
// length code and leading digest bytes, as RecordArena's side keys hold
// them); code 0 is integer form. A key matches an entry only when wire and
// form agree, so the two forms never meet. Calls take forms as pointers:
// null (or code 0) for an integer-form key.
struct KeyForm {
  uint32_t code = 0;
  uint32_t head[6] = {};
  friend bool operator==(const KeyForm&, const KeyForm&) = default;
};

// What a run store write did to each of its keys, in the write's order: the
// caller's counters and recency ranks. `stamp` is the owner's stamp
// before the write (kCopy, kHit, kRemoved*; 0 if it had none).
struct KeyNote {
  enum Kind : uint8_t {
    kNone,          // a removal of a key the owner does not hold
    kNew,           // a store of a key the owner did not hold
    kCopy,          // a store of a held key: one more copy
    kHit,           // a store of a held key counted as a hit (StoreRule)
    kRemovedCopy,   // one copy went, others remain
    kRemovedLast,   // the last copy went: the key left the owner
  };
  Kind kind = kNone;
  uint32_t stamp = 0;
};
// How a store counts its keys. `held_hit`: a key the owner holds gains a
// hit instead of a copy (a full-report re-announcement); `new_hit`: a
// key it does not hold arrives with one hit (a declared reuse of a block
// whose store was missed).
struct StoreRule {
  bool held_hit = false;
  bool new_hit = false;
};

class RunStore {
 public:
  // `epoch` retires what the store replaces; it must outlive the store's
  // readers (not the store: retired memory is freed by static deleters).
  explicit RunStore(EpochDomain& epoch);
  ~RunStore();
  RunStore(const RunStore&) = delete;
  RunStore& operator=(const RunStore&) = delete;

  // One BlockStored of `owner`: `keys` follow `parent` (nullptr: none; a
  // parent that is not indexed is treated as none). Each listed key gains
  // one copy for the owner (vLLM sends one BlockStored per physical copy),
  // or a hit as `rule` says, and the recency stamp `top - i` (keys[i];
  // earlier blocks newer). With `notes`, notes[i] says what keys[i] did.
  // `forms` (empty: every key integer form) and `parent_form` give the
  // forms of bytes-form keys.
  void Store(uint32_t owner, std::span<const uint64_t> keys, const uint64_t* parent, uint32_t top,
             StoreRule rule = {}, KeyNote* notes = nullptr, std::span<const KeyForm> forms = {},
             const KeyForm* parent_form = nullptr);
  // One BlockRemoved of `owner`: each listed key loses one copy, and stops
  // being held when its last goes. With `notes`, notes[i] says what
  // keys[i] did (with the stamp of a key that left: the eviction-rank
  // input). Returns how many of `keys` had a copy to lose; the others
  // change nothing (the caller's remove_unknown drift).
  size_t Remove(uint32_t owner, std::span<const uint64_t> keys, KeyNote* notes = nullptr,
                std::span<const KeyForm> forms = {});

  // One engine-confirmed hit (a full-report re-announcement) on each
  // listed key the owner holds, which also takes the stamp `top - i`.
  // Returns how many it held; the others change nothing.
  size_t AddHits(uint32_t owner, std::span<const uint64_t> keys, uint32_t top);

  // Drops every key the owner holds, whatever its copies (ClearSource);
  // with `gone`, their stamps are appended to it in no particular order.
  // Returns how many keys it held. O(runs the owner joined x their rows
  // and words + its keys).
  size_t Clear(uint32_t owner, std::vector<uint32_t>* gone = nullptr);

  // The owner's stamps move down by `base` (older ones become 0: a clock
  // rebase); the new stamp of every key it holds is appended to `stamps`.
  // O(runs the owner joined + its keys).
  void Rebase(uint32_t owner, uint32_t base, std::vector<uint32_t>* stamps);

  // Owners that joined a run since they were last cleared (some may hold
  // nothing now), in no particular order.
  void Owners(std::vector<uint32_t>* out) const;

  // --- Readers (any thread, inside a ReadGuard of the store's domain)
  struct OwnerPrefix {
    uint32_t owner;
    uint32_t blocks;          // leading keys of the query the owner holds, >= 1
    uint64_t hits = 0;        // summed over those blocks, each block's count saturated at 255
    uint32_t hit_blocks = 0;  // those of them with a hit
  };
  // Every owner holding keys[0], with the longest prefix of `keys` it
  // holds and its hits there, in no particular order. `out` is cleared
  // first.
  void LongestPrefixes(std::span<const uint64_t> keys, std::vector<OwnerPrefix>* out) const;

  // What FindPrefix reports per source (prefix_match.h), from owners that
  // a caller's classifier maps to sources: `classify(owner)` returns the
  // owner's source and whether it is its GPU owner, or nullopt for an
  // owner the query does not admit (another group, a filtered tier). It
  // must accept any value (a torn read passes it garbage, whose answer is
  // then discarded).
  struct OwnerClass {
    uint32_t source;
    bool gpu;
  };
  struct SourcePrefix {
    uint32_t source;
    uint32_t any_blocks = 0;   // leading keys held in any admitted tier, >= 1
    uint32_t gpu_blocks = 0;   // leading keys held on GPU
    uint64_t hits = 0;         // over the GPU prefix (each block's count saturated at 255)
    uint32_t hit_blocks = 0;
  };
  // Every source whose admitted owners hold keys[0], in no particular
  // order; `out` is cleared first. A source has at most one GPU owner
  // admitted (one group per query). Each segment (the keys matched in one
  // run) is as it was at one moment, later segments at later moments; a
  // write to a run while the query reads it restarts the query. Hits are
  // as of the end of the last write call (views are published then), so
  // a segment's holders can be a write section newer than its hits. Allocates
  // nothing once `out` and the calling thread's scratch are warm.
  //
  // `keys` is a span of 64-bit keys or any view with size(), wire(i),
  // form(i) (a KeyForm pointer, null for integer form) and any_form():
  // a caller's own key type needs no copy.
  template <typename Keys, typename Classify>
    requires requires(const Keys& k) { k.wire(0) + (k.form(0) == nullptr); }
  void SourcePrefixes(const Keys& keys, Classify classify, std::vector<SourcePrefix>* out) const;
  template <typename Classify>
  void SourcePrefixes(std::span<const uint64_t> keys, Classify classify, std::vector<SourcePrefix>* out) const {
    SourcePrefixes(WireKeys{keys}, classify, out);
  }

  // --- The writer's thread
  // One owner's hold on one key, everything the store knows of it (a
  // snapshot's or LookupBlock's row), and where the key sits: `parent` is
  // the key before it in its run (none at a run's start).
  struct Holding {
    uint64_t key;
    uint32_t owner;
    uint32_t copies;   // >= 1
    uint64_t hits;
    std::optional<uint32_t> stamp;
    std::optional<uint64_t> parent;
    KeyForm form = {}, parent_form = {};
  };
  // fn(const Holding&) for every (key, owner) held, run by run in position
  // order, owners in each run's order. O(runs + holdings).
  template <typename Fn>
  void ForEachHolding(Fn fn) const;
  // Every owner's holding of `key` (none when it is not indexed), in the
  // run's owner order; `out` is cleared first.
  void HoldingsOf(uint64_t key, std::vector<Holding>* out, const KeyForm* form = nullptr) const;

  // Holds each row's key for its owner with the row's copies, hits and
  // stamp, placing a key not yet indexed after its parent when the parent
  // ends a run (as a store would), else in a run of its own. Rows in
  // ForEachHolding's order rebuild the runs they came from, at one lookup
  // per row (across calls too, with `pack`). With `pack`, a row without a
  // parent is placed after the previous row's key, in runs of at most
  // kPackedRun positions: a snapshot without parents (sorted by key)
  // then costs about what its blocks cost stored, instead of a run, a
  // page and a holder block per key. Neighbours that are not a chain
  // change no answer (a run's order only saves lookups; holdings are per
  // position); a query crossing them looks the next key up, as at any run
  // end. Stops at the first row whose owner already holds its key (a
  // duplicate: the caller's corruption) and returns the rows applied
  // before it.
  static constexpr uint32_t kPackedRun = 64;
  size_t Restore(std::span<const Holding> rows, bool pack = false);

  // The owner's `n` coldest keys, oldest stamp first (ties by key): the
  // order an LRU would evict them in. O(runs + holdings); for diagnosis.
  void Coldest(uint32_t owner, size_t n, std::vector<uint64_t>* out) const;

  // The owner's copies of `key`; 0 when it does not hold it.
  uint32_t Copies(uint32_t owner, uint64_t key, const KeyForm* form = nullptr) const;
  // The owner's recency stamp of `key`, if it holds it.
  std::optional<uint32_t> Stamp(uint32_t owner, uint64_t key) const;
  uint64_t HeldBy(uint32_t owner) const;   // O(runs)
  // Keys some owner holds (blocks() less the runs' unheld positions);
  // O(1): the writer counts a key when its first holder comes and its last
  // one goes.
  uint64_t HeldKeys() const { return held_keys_; }
  uint64_t HeldByAll() const;              // (key, owner) pairs; O(runs)
  // Keys indexed: held, or kept as structure (a run's unheld positions
  // before a held one).
  size_t blocks() const { return size_; }
  // Bytes allocated: page and run chunks, holder blocks, hit views, extra
  // copies, hit and stamp ranges, the table.
  size_t MemoryBytes() const;

 private:
  static constexpr uint32_t kNone = ~0u;
  // Pages and their entries in chunks of kChunkPages, runs in chunks of
  // kRunChunk; ids stay below 2^32 entries.
  static constexpr uint32_t kChunkPageBits = 8, kChunkPages = 1u << kChunkPageBits;
  static constexpr uint32_t kChunkEntries = kChunkPages * kRunPage;
  static constexpr uint32_t kRunChunkBits = 10, kRunChunk = 1u << kRunChunkBits;
  // A write section spans at most this many changes, so that readers of a
  // run a long store extends are not held off for the whole store.
  static constexpr uint32_t kSectionChanges = 64;

  struct PageMeta {
    std::atomic<uint32_t> run{kNone};   // kNone: free
    std::atomic<uint32_t> base{0};      // run position of the page's first entry
    std::atomic<uint32_t> next{kNone};  // the run's next page
  };
  // Forms of a chunk's entries, allocated with the chunk's first
  // bytes-form key (zeroed: integer form).
  struct FormSlot {
    std::atomic<uint32_t> w[7];   // code, head[6]
  };
  struct PageChunk {
    PageMeta meta[kChunkPages];
    std::atomic<uint64_t> keys[kChunkEntries];   // by entry id
    std::atomic<FormSlot*> forms{nullptr};
  };
  // An owner's hits and stamps over a run's positions (present once the
  // owner was stamped there).
  struct OwnerRanges {
    uint32_t owner;
    HitRanges hits;
    StampRanges stamps;
    HitRanges extra;   // copies beyond the first
    uint32_t row = 0;  // the owner's holder row when last looked up (a hint)
    bool empty() const { return hits.empty() && stamps.empty() && extra.empty(); }
    uint32_t ExtraAt(uint32_t pos) const {
      return extra.empty() ? 0 : static_cast<uint32_t>(extra.Over(pos, pos + 1).hits);
    }
  };
  struct Run {
    SeqLock lock;
    // Read by readers inside the run's read sections.
    std::atomic<uint32_t> length{0};
    std::atomic<HolderBlock*> holders{nullptr};
    std::atomic<const HitView*> hits{nullptr};
    // The writer's.
    uint32_t first_page = kNone, last_page = kNone;
    std::vector<OwnerRanges> ranges;  // by owner, unsorted
    uint32_t len() const { return length.load(std::memory_order_relaxed); }
    HolderBlock* block() const { return holders.load(std::memory_order_relaxed); }
  };
  struct RunChunk {
    Run runs[kRunChunk];
  };
  // Consecutive positions [begin, end) of one run whose stamps descend
  // from `top`: one range update instead of one per block.
  struct Batch {
    uint32_t run = ~0u, begin = 0, end = 0, top = 0;
  };
  // A run entry: its id, run and position.
  struct Place {
    uint32_t id = kNone, run = kNone, pos = 0;
  };
  // A query's next segment: keys [i, i + k) are positions [pos, pos + k)
  // of `run`, read in the section that began at `seq`; k = 0 when keys[i]
  // is not indexed.
  struct Segment {
    const Run* run = nullptr;
    uint32_t pos = 0, k = 0;
    uint64_t seq = 0;
  };
  // --- Reader side: bounds-checked, for ids and runs that may be stale.
  const std::atomic<uint64_t>* KeyWord(uint32_t id) const {
    if ((id >> kRunPageBits) >= pages_top_.load(std::memory_order_acquire)) return nullptr;
    const PageChunk* c = pages_.Get(id / kChunkEntries);
    return c == nullptr ? nullptr : &c->keys[id % kChunkEntries];
  }
  const PageMeta* MetaOf(uint32_t page) const {
    if (page >= pages_top_.load(std::memory_order_acquire)) return nullptr;
    const PageChunk* c = pages_.Get(page >> kChunkPageBits);
    return c == nullptr ? nullptr : &c->meta[page % kChunkPages];
  }
  const Run* RunOf(uint32_t run) const {
    if (run >= runs_top_.load(std::memory_order_acquire)) return nullptr;
    const RunChunk* c = runs_.Get(run >> kRunChunkBits);
    return c == nullptr ? nullptr : &c->runs[run % kRunChunk];
  }
  // The entry holding `key` (of form `form`), or kNone.
  uint32_t Find(uint64_t key, uint64_t hash, uint32_t* free_slot = nullptr, const KeyForm* form = nullptr) const;
  uint32_t Find(uint64_t key, const KeyForm* form = nullptr) const {
    return Find(key, MixKey(key), nullptr, form);
  }
  // Whether entry `id` has form `form` (null: integer). One load while
  // the store holds no bytes-form key.
  bool SameForm(uint32_t id, const KeyForm* form) const {
    if (!has_forms_.load(std::memory_order_acquire)) return form == nullptr;
    const PageChunk* c = ChunkOf(id);
    if (c == nullptr) return false;   // a stale id (readers)
    const FormSlot* s = c->forms.load(std::memory_order_acquire);
    const uint32_t code = s == nullptr ? 0 : s[id % kChunkEntries].w[0].load(std::memory_order_relaxed);
    if (form == nullptr || code != form->code) return form == nullptr && code == 0;
    for (int i = 0; i < 6; ++i) {
      if (s[id % kChunkEntries].w[1 + i].load(std::memory_order_relaxed) != form->head[i]) return false;
    }
    return true;
  }
  const PageChunk* ChunkOf(uint32_t id) const { return pages_.Get(id / kChunkEntries); }
  // The form of entry `id` (the writer's).
  KeyForm FormAt(uint32_t id) const;
  // Inline for the usual case: an integer key in a store without forms.
  void SetForm(uint32_t id, const KeyForm* form) {
    if (form == nullptr && !has_forms_.load(std::memory_order_relaxed)) return;
    SetFormSlow(id, form);
  }
  void SetFormSlow(uint32_t id, const KeyForm* form);
  // 64-bit keys as SourcePrefixes takes them.
  struct WireKeys {
    std::span<const uint64_t> keys;
    size_t size() const { return keys.size(); }
    uint64_t wire(size_t i) const { return keys[i]; }
    static constexpr const KeyForm* form(size_t) { return nullptr; }
    static constexpr bool any_form() { return false; }
  };
  // The segment at keys[i], validated by the caller with its run's lock;
  // nullopt when what it read was torn (read it again).
  template <typename Keys>
  std::optional<Segment> ReadSegmentAt(const Keys& keys, size_t i) const;
  // How many of the k entries from `id` (keys [i, i + k), wires equal)
  // also have the keys' forms.
  template <typename Keys>
  uint32_t FormsAgree(const Keys& keys, size_t i, uint32_t id, uint32_t k) const;
  // SourcePrefixes once: false when a write overlapped a segment (`out`
  // is then partial).
  template <typename Keys, typename Classify>
  bool ReadPrefixes(const Keys& keys, Classify& classify, std::vector<SourcePrefix>* out) const;
  // Credits segment `seg` at keys[i] to the sources that matched all of
  // keys [0, i); false when none matched all of it.
  template <typename Classify>
  bool SourceSegment(const Segment& seg, uint32_t i, Classify& classify, std::vector<SourcePrefix>* out) const;

  // --- The writer's side: its own copies of the chunk directories (plain
  // vectors, no acquire loads or bounds branches).
  Run& RunAt(uint32_t run) const { return run_chunks_[run >> kRunChunkBits]->runs[run % kRunChunk]; }
  PageMeta& MetaAt(uint32_t page) const { return page_chunks_[page >> kChunkPageBits]->meta[page % kChunkPages]; }
  std::atomic<uint64_t>& KeyAt(uint32_t id) const { return page_chunks_[id / kChunkEntries]->keys[id % kChunkEntries]; }
  uint64_t KeyOf(uint32_t id) const { return KeyAt(id).load(std::memory_order_relaxed); }
  // Run `run`, inside its write section (opened here when another run's,
  // or none, is open, or the open one is long enough).
  Run& Write(uint32_t run) {
    if (open_run_ == run && ++open_changes_ < kSectionChanges) return RunAt(run);
    return OpenSection(run);
  }
  Run& OpenSection(uint32_t run);
  void CloseSection();
  // The end of every writing call: closes the section, publishes the hit
  // views of runs whose hits changed and retires what was replaced.
  void Finish();
  void Retire(void* p, void (*deleter)(void*)) { garbage_.emplace_back(p, deleter); }

  Place PlaceOf(uint32_t id) const;
  // The entry after `at` in its run (which must have one).
  Place Next(const Place& at) const;
  // The entry at position `pos` of run `run` (pos < its length).
  uint32_t EntryAt(uint32_t run, uint32_t pos) const;
  // Appends `key` (not indexed; of form `form`) to run `run`; its place.
  Place Append(uint32_t run, uint64_t key, uint64_t hash, uint32_t free_slot, const KeyForm* form = nullptr);
  // A store's count on the entry at `at` for `owner`, as `rule` says: a
  // hold, a copy beyond the first (joins `extra`) or a hit (joins `hits`);
  // batches are positions of one run, counted when applied. `stamps` is
  // the store's pending stamp batch (a repeated key's old stamp may be in
  // it). Fills `note` when given. `new_key`: the entry was just appended
  // (no other owner can hold it).
  void Count(const Place& at, uint32_t owner, StoreRule rule, const Batch& stamps, Batch& extra, Batch& hits,
             KeyNote* note, bool new_key = false);
  // One more count over the batch's positions in the owner's `which`.
  void ApplyCounts(Batch& batch, uint32_t owner, HitRanges OwnerRanges::*which);
  // Adds `at` to `batch` (applied first when `at` does not continue it).
  void AddTo(Batch& batch, const Place& at, uint32_t owner, HitRanges OwnerRanges::*which);
  // Sets / clears the owner's hold on `at`; false if it already was / was
  // not held. Unhold drops the owner's row when it held nothing else.
  // Inline: a store or removal calls one per block, and the usual case
  // (the owner's row exists and the bit has room) is a few loads.
  // `new_key`: nobody else can hold the entry (it was just appended), so
  // the held-key count needs no look at the other rows.
  bool Hold(Run& run, const Place& at, uint32_t owner, bool new_key = false) {
    HolderBlock* h = run.block();
    const uint32_t row = h == nullptr ? HolderBlock::kNoRow : h->Find(owner);
    if (row == HolderBlock::kNoRow || at.pos / 64 >= h->words()) return HoldGrowing(run, at, owner, row, new_key);
    if (h->Has(row, at.pos)) return false;
    Write(at.run);
    h->Set(row, at.pos);
    if (new_key || !h->HeldByOther(row, at.pos)) ++held_keys_;
    return true;
  }
  bool Unhold(Run& run, const Place& at, uint32_t owner) {
    HolderBlock* h = run.block();
    const uint32_t row = h == nullptr ? HolderBlock::kNoRow : h->Find(owner);
    if (row == HolderBlock::kNoRow || !h->Has(row, at.pos)) return false;
    Write(at.run);
    h->Clear(row, at.pos);
    if (!h->HeldByOther(row, at.pos)) --held_keys_;
    if (h->held(row) == 0) {
      h->Drop(row);   // the last row moves here: the hit view's row order is stale
      if (run.hits.load(std::memory_order_relaxed) != nullptr) hits_dirty_.push_back(at.run);
    }
    return true;
  }
  // Hold when the block needs a row for the owner or more words (`row`:
  // the owner's, or kNoRow).
  bool HoldGrowing(Run& run, const Place& at, uint32_t owner, uint32_t row, bool new_key);
  // The owner's holding of position `pos` (key `key`) of `run`.
  Holding HoldingAt(const Run& run, uint32_t owner, uint32_t pos, uint64_t key,
                    std::optional<uint64_t> parent) const {
    Holding out{key, owner, 1, 0, std::nullopt, parent};
    if (const OwnerRanges* r = RangesOf(run, owner)) {
      out.copies += r->ExtraAt(pos);
      out.hits = r->hits.Over(pos, pos + 1).hits;
      out.stamp = r->stamps.At(pos);
    }
    return out;
  }
  // The owner's ranges in `run`, or null / added.
  static const OwnerRanges* RangesOf(const Run& run, uint32_t owner);
  static OwnerRanges* RangesOf(Run& run, uint32_t owner) {
    return const_cast<OwnerRanges*>(RangesOf(static_cast<const Run&>(run), owner));
  }
  static OwnerRanges& RangesFor(Run& run, uint32_t owner);
  // Adds (at, stamp) to `batch`, first applying it (with `hit`) when `at`
  // does not continue it.
  void Batched(Batch& batch, const Place& at, uint32_t stamp, uint32_t owner, bool hit);
  void Apply(Batch& batch, uint32_t owner, bool hit);
  // Position `pos` of `run` left `owner`: its hits and stamp go; the stamp
  // is noted in `note` when given. `ranges` are the owner's in `run` (run
  // id `run_id`), or null.
  void Forget(Run& run, uint32_t run_id, OwnerRanges* ranges, uint32_t pos, KeyNote* note);
  // The owner's runs, deduplicated, with those it left dropped.
  std::vector<uint32_t> RunsOf(uint32_t owner);
  // A write's key hashes, each computed once when its lookup is started
  // (kRing > the furthest stage ahead).
  static constexpr size_t kRing = 16;
  using HashRing = uint64_t[kRing];
  // Starts the lookups of keys[i + 8]'s table group and keys[i + 4]'s
  // entry while key i is handled (a store's or removal's keys are known
  // upfront, and each lookup is a chain of two cache misses); the first
  // call (i = 0) also starts keys 0-7. Hints only: they never change a
  // result. Afterwards ring[i % kRing] is keys[i]'s hash.
  void StartAhead(std::span<const uint64_t> keys, size_t i, HashRing& ring) const;
  // Where `key` goes for a restore: its entry, or a new one after the
  // entry `before` (kNone: none) when that ends its run, else in a new run.
  Place Locate(uint64_t key, const KeyForm* form, uint32_t before);
  // The owner's row was added to `run`'s holder block: remember the run
  // for Clear.
  void Joined(uint32_t owner, uint32_t run);
  uint32_t NewRun();
  uint32_t NewPage(uint32_t run, uint32_t base);
  void GrowTable();
  // packed_ at its current place while its entry still holds packed_key_
  // (of packed_form_); else no place.
  Place LastRestored() const;
  // Drops the run's unheld tail, and the run if nothing is left.
  void Prune(uint32_t run);
  // Publishes a new hit view of `run` from its ranges.
  void PublishHits(uint32_t run);
  // fn(pos, id) for every entry of `run`, in position order.
  template <typename Fn>
  void ForEachEntry(const Run& run, Fn fn) const {
    uint32_t page = run.first_page;
    for (uint32_t pos = 0; pos < run.len(); ++pos) {
      if (pos > 0 && pos % kRunPage == 0) page = MetaAt(page).next.load(std::memory_order_relaxed);
      fn(pos, page << kRunPageBits | pos % kRunPage);
    }
  }
  // fn(run) for every run handed out (live or free).
  template <typename Fn>
  void ForEachRun(Fn fn) const {
    const uint32_t n = runs_top_.load(std::memory_order_relaxed);
    for (uint32_t r = 0; r < n; ++r) fn(RunAt(r));
  }

  EpochDomain& epoch_;
  std::atomic<Table*> table_;
  PtrDir<PageChunk> pages_{(size_t{1} << (32 - kRunPageBits)) / kChunkPages};
  PtrDir<RunChunk> runs_{(size_t{1} << (32 - kRunPageBits)) / kRunChunk};
  std::atomic<uint32_t> pages_top_{0}, runs_top_{0};   // handed out (live or free)
  std::atomic<bool> has_forms_{false};                  // some entry was bytes form
  // The writer's.
  std::vector<PageChunk*> page_chunks_;   // as in pages_
  std::vector<RunChunk*> run_chunks_;     // as in runs_
  std::vector<uint32_t> free_pages_;
  std::vector<uint32_t> free_runs_;
  size_t size_ = 0;            // ids in the table
  uint64_t held_keys_ = 0;     // positions some owner holds (HeldKeys)
  uint32_t growth_left_ = 0;   // inserts into empty slots before the table is rebuilt
  uint32_t open_run_ = kNone;  // whose write section is open
  uint32_t open_changes_ = 0;
  std::vector<uint32_t> touched_;      // Remove's scratch
  std::vector<uint32_t> hits_dirty_;   // runs whose hit view is stale
  std::vector<std::pair<uint32_t, const HitRanges*>> hit_owners_;   // PublishHits' scratch
  std::vector<std::pair<void*, void (*)(void*)>> garbage_;   // to retire at Finish
  // Per owner, the runs it joined (a row added to their holder block), so
  // that Clear visits those only. A run the owner has left since stays
  // listed (maybe twice, if it was freed and reused) until the list
  // reaches `compact_at` and is compacted: at most about twice the runs
  // the owner holds a row in, amortised O(1) per join.
  struct OwnerRuns {
    std::vector<uint32_t> runs;
    size_t compact_at = 16;
  };
  std::unordered_map<uint32_t, OwnerRuns> owner_runs_;
  // Restore's packing: the last row placed, and its key to check that the
  // entry still holds it.
  Place packed_;
  uint64_t packed_key_ = 0;
  KeyForm packed_form_;
};

template <typename Fn>
void RunStore::ForEachHolding(Fn fn) const {
  ForEachRun([&](const Run& run) {
    const HolderBlock* h = run.block();
    if (h == nullptr) return;
    std::optional<uint64_t> parent;
    KeyForm parent_form;
    ForEachEntry(run, [&](uint32_t pos, uint32_t id) {
      const uint64_t key = KeyOf(id);
      const KeyForm form = FormAt(id);
      for (uint32_t row = 0; row < h->count(); ++row) {
        if (!h->Has(row, pos)) continue;
        Holding out = HoldingAt(run, h->owner(row), pos, key, parent);
        out.form = form;
        out.parent_form = parent_form;
        fn(out);
      }
      parent = key;
      parent_form = form;
    });
  });
}

template <typename Keys, typename Classify>
  requires requires(const Keys& k) { k.wire(0) + (k.form(0) == nullptr); }
void RunStore::SourcePrefixes(const Keys& keys, Classify classify, std::vector<SourcePrefix>* out) const {
  do {
    out->clear();
  } while (!ReadPrefixes(keys, classify, out));
}

template <typename Keys>
std::optional<RunStore::Segment> RunStore::ReadSegmentAt(const Keys& keys, size_t i) const {
  Segment seg;
  const uint32_t id = Find(keys.wire(i), keys.form(i));
  if (id == kNone) return seg;
  const PageMeta* meta = MetaOf(id >> kRunPageBits);
  if (meta == nullptr) return std::nullopt;
  const uint32_t run = meta->run.load(std::memory_order_relaxed);
  seg.run = RunOf(run);
  if (seg.run == nullptr) return std::nullopt;
  seg.seq = seg.run->lock.ReadBegin();
  // Inside the section: the entry must still be keys[i] in this run (its
  // page may have moved to another run since the table said where it was).
  const std::atomic<uint64_t>* entry = KeyWord(id);
  const bool forms = has_forms_.load(std::memory_order_acquire);
  if (meta->run.load(std::memory_order_relaxed) != run || entry->load(std::memory_order_relaxed) != keys.wire(i) ||
      ((forms || keys.any_form()) && !SameForm(id, keys.form(i)))) {
    return std::nullopt;
  }
  seg.pos = meta->base.load(std::memory_order_relaxed) + (id & (kRunPage - 1));
  const uint32_t length = seg.run->length.load(std::memory_order_relaxed);
  if (seg.pos >= length) return seg;   // k = 0; the caller validates it
  const size_t limit = std::min<size_t>(length - seg.pos, keys.size() - i);
  // Entries compared a page at a time: a page's 16 keys are one array.
  const std::atomic<uint64_t>* page = entry - (id & (kRunPage - 1));
  uint32_t slot = id & (kRunPage - 1), at_page = id >> kRunPageBits;
  for (seg.k = 1; seg.k < limit; ++seg.k) {
    if (++slot == kRunPage) {
      const PageMeta* m = MetaOf(at_page);
      if (m == nullptr) return std::nullopt;
      at_page = m->next.load(std::memory_order_relaxed);
      page = KeyWord(at_page << kRunPageBits);
      if (page == nullptr) return std::nullopt;
      slot = 0;
    }
    if (page[slot].load(std::memory_order_relaxed) != keys.wire(i + seg.k)) break;
  }
  // Forms apart from the wire loop, only when some key or entry has one.
  if (forms || keys.any_form()) seg.k = FormsAgree(keys, i, id, seg.k);
  return seg;
}

template <typename Keys>
uint32_t RunStore::FormsAgree(const Keys& keys, size_t i, uint32_t id, uint32_t k) const {
  uint32_t slot = id & (kRunPage - 1), page = id >> kRunPageBits;
  for (uint32_t j = 1; j < k; ++j) {
    if (++slot == kRunPage) {
      const PageMeta* m = MetaOf(page);
      if (m == nullptr) return j;   // torn: the caller's validation catches it
      page = m->next.load(std::memory_order_relaxed);
      slot = 0;
    }
    if (!SameForm(page << kRunPageBits | slot, keys.form(i + j))) return j;
  }
  return k;
}

template <typename Keys, typename Classify>
bool RunStore::ReadPrefixes(const Keys& keys, Classify& classify, std::vector<SourcePrefix>* out) const {
  for (size_t i = 0; i < keys.size();) {
    const std::optional<Segment> seg = ReadSegmentAt(keys, i);
    if (!seg) return false;
    const bool through = seg->k > 0 && SourceSegment(*seg, static_cast<uint32_t>(i), classify, out);
    if (seg->run != nullptr && !seg->run->lock.ReadValid(seg->seq)) return false;
    if (!through) return true;
    i += seg->k;
  }
  return true;
}

template <typename Classify>
bool RunStore::SourceSegment(const Segment& seg, uint32_t i, Classify& classify, std::vector<SourcePrefix>* out) const {
  const HolderBlock* h = seg.run->holders.load(std::memory_order_acquire);
  if (h == nullptr) return false;
  const uint32_t from = seg.pos, k = seg.k;
  // The admitted holders of sources that matched all of keys [0, i),
  // grouped by source; the thread's scratch, so a warm query allocates
  // nothing.
  struct Admitted {
    uint32_t source, owner, row;
    uint32_t entry;   // the source's index in `out`, or kNone on the first segment
    bool gpu;
  };
  thread_local std::vector<Admitted> scratch;
  const uint32_t n = h->count();
  if (scratch.size() < n) scratch.resize(n);   // then filled by index: no capacity check per row
  Admitted* const admitted = scratch.data();
  uint32_t m = 0;   // rows admitted
  uint64_t seen = 0, shared = 0;
  for (uint32_t row = 0; row < n; ++row) {
    const uint32_t owner = h->owner(row);
    const std::optional<OwnerClass> c = classify(owner);
    if (!c) continue;
    uint32_t entry = kNone;
    if (i > 0) {
      auto e = std::find_if(out->begin(), out->end(), [&](const SourcePrefix& x) { return x.source == c->source; });
      if (e == out->end() || e->any_blocks != i) continue;   // did not reach this segment
      entry = static_cast<uint32_t>(e - out->begin());
    }
    admitted[m++] = Admitted{c->source, owner, row, entry, c->gpu};
    const uint64_t bit = uint64_t{1} << (c->source & 63);
    shared |= seen & bit;   // maybe a second owner of a source seen before
    seen |= bit;
  }
  // Grouping by source matters only when a source has several admitted
  // owners (GPU and CPU copies, say); without a possible repeat, skip it.
  if (shared != 0) {
    std::sort(admitted, admitted + m, [](const Admitted& a, const Admitted& b) { return a.source < b.source; });
  }
  const HitView* hits = seg.run->hits.load(std::memory_order_acquire);
  uint32_t through = 0;
  for (uint32_t g = 0; g < m;) {
    uint32_t end = g;
    const Admitted* gpu = nullptr;
    while (end < m && admitted[end].source == admitted[g].source) {
      if (admitted[end].gpu) gpu = &admitted[end];
      ++end;
    }
    // Leading positions from `from` that some admitted owner of the source
    // holds: the union of their bits, a word at a time (one owner, the
    // usual case: its own row).
    uint32_t any = end - g == 1 ? h->LeadingFrom(admitted[g].row, from, k) : 0;
    for (uint32_t w = from / 64; end - g > 1 && any < k; ++w) {
      uint64_t bits = 0;
      for (uint32_t j = g; j < end; ++j) bits |= h->word(admitted[j].row, w);
      const uint32_t skip = w == from / 64 ? from % 64 : 0;
      const uint32_t ones = static_cast<uint32_t>(std::countr_one(bits >> skip));
      any += std::min(ones, 64 - skip);
      if (ones < 64 - skip) break;
    }
    any = std::min(any, k);
    if (any > 0) {
      SourcePrefix* e = admitted[g].entry != kNone ? &(*out)[admitted[g].entry]
                                                   : &out->emplace_back(SourcePrefix{admitted[g].source});
      const bool gpu_alive = e->gpu_blocks == i;   // every block so far held on GPU
      e->any_blocks += any;
      if (gpu_alive && gpu != nullptr) {
        const uint32_t on_gpu = end - g == 1 ? any : h->LeadingFrom(gpu->row, from, k);
        e->gpu_blocks += on_gpu;
        if (on_gpu > 0 && hits != nullptr) {
          const HitRanges::Sum sum = hits->Over(gpu->owner, from, from + on_gpu, gpu->row);
          e->hits += sum.hits;
          e->hit_blocks += sum.hit_blocks;
        }
      }
      through += any == k;
    }
    g = end;
  }
  return through > 0;
}

}  // namespace kvidx::internal
