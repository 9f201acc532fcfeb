// SnapshotStore: crash-safe snapshots of the index in a RocksDB directory.
//
// Layout and atomicity. Each Write() is one generation G (keys in
// snapshot_format.h). All chunks of G are streamed into one SST file
// (rocksdb::SstFileWriter, fsynced on Finish) and ingested with
// IngestExternalFile (hard link + synced MANIFEST edit: all or nothing).
// Only then is the manifest key "kvidx/current" -> G written and flushed;
// the flush's synced MANIFEST edit is the commit point. Older generations
// are then dropped (DeleteFilesInRange drops their SST files outright,
// DeleteRange covers the rest). A crash before the commit leaves G-1 current
// and G an orphan, which Open() deletes; a crash after it leaves G complete.
// Why SST ingestion rather than WriteBatches: a 10M-owner snapshot is
// ~150 MB; through WAL + memtable it would be written twice and then
// compacted again, competing with ingest for the two cores; an ingested
// file at the bottom level is written once and deleted whole.
//
// No write-ahead log. The store's own keys (format record, manifest key,
// pending marker, deletions) bypass RocksDB's WAL and are flushed to an SST
// file before anything relies on them; Open() also flushes whatever it
// recovered from a WAL left by an earlier kvidx. Why: RocksDB's Close()
// does not flush while the WAL is on, so such keys would live only in the
// WAL at rest, and a damaged or truncated WAL would then lose e.g. the
// manifest key -- and with it, silently, the snapshot. With nothing in the
// WAL, RocksDB can open it with kAbsoluteConsistency: any damage to a
// WAL (a flipped byte, a truncated record) is a Corruption naming the file,
// and no crash can leave a torn record there. (StoreOptions::sync = false
// gives all this up.)
//
// Lost commits. RocksDB also drops a truncated tail of its MANIFEST without
// an error (a crash may tear the last edit), and the last edit may be a
// commit. So after each commit the store records the generation in
// "<dir>/rocksdb/kvidx-committed" (temp file + rename, synced). Open()
// checks, through a read-only open (no file of the store changes), that
// the manifest key is at least that generation, and refuses the directory
// otherwise -- before the read-write open, which would delete the SST
// files the damaged MANIFEST no longer lists. The record trails the commit, so a crash
// between the two leaves it older, never newer; a store without it (none
// committed yet) is not checked.
//
// Directory. The RocksDB lives in "<dir>/rocksdb". Besides it, "<dir>" may
// hold "lost+found" (a fresh ext4 volume) and "corrupt-*" (contents moved
// aside in place, see StoreOptions); anything else there is not ours. A new store is created
// in "<dir>/rocksdb.init", given its format record (synced) and renamed
// into place, so a crash during creation leaves nothing that looks like a
// store (Open() starts over), and a "<dir>/rocksdb" without CURRENT always
// means damage. "<dir>" itself may be a volume mount point.
//
// Loading. LoadLatest() reads generation G in key order, checks every
// chunk's own checksum, generation and index, and the manifest's chunk count
// and digest over all chunk checksums, then Validate()s cross references.
// The store never returns a partial or silently empty snapshot: a fresh or
// empty directory has no snapshot (nullopt); anything else that cannot be
// read is an error.
//
// Errors. Corruption names the file/key/chunk and what is wrong (RocksDB
// open failures such as a truncated MANIFEST/CURRENT/SST are passed on with
// the directory named, a damaged WAL with the WAL named; a CURRENT naming a
// MANIFEST that is not there, or any other file of the store reported
// missing, is Corruption too, not an I/O error; a store without CURRENT, or
// a non-empty directory without a store, is never recreated over).
// FailedPrecondition: a format version this build does not know.
// Unavailable: I/O errors that are not about the contents (lock held by
// another process, permissions). With OnCorrupt::kStartEmpty, a
// Corruption or FailedPrecondition from Open() or LoadLatest() instead moves
// the directory aside to "<dir>.corrupt-<unix seconds>", starts empty,
// counts it in stats().corrupt_start_empty_total and keeps the reason in
// corruption() so the caller can log it. Never silently: only that option
// does this.
//
// Data-path pauses. The store only sees SnapshotData; the index pause is
// the caller's BlockIndex::Dump() (see bench/snapshot_bench.cc for figures).
// Write() runs on the caller's thread (a snapshot thread, never ingest).
//
// Consistency of the cut is the caller's job: the watermarks must describe
// exactly the batches the dumped index contains (e.g. pause each source's
// batch application, or all of ingest, while Dump() runs and read the
// watermarks in the same pause). Replaying a batch twice is not idempotent
// (reference counts), hence the exact-seq check on resume.
//
// Thread-safety: all methods may be called from any thread; Write and
// LoadLatest are serialised by an internal mutex. stats() may be read
// concurrently with anything. Not multi-process: RocksDB's LOCK file makes
// a second Open of the same directory fail with Unavailable.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "index/block_index.h"
#include "index/source_registry.h"
#include "base/status.h"
#include "index/tier.h"
#include "server/snapshot_format.h"

namespace rocksdb {
class DB;
}

namespace kvidx::snapshot {

enum class OnCorrupt : uint8_t {
  kFail,        // return the error (the server exits non-zero)
  kStartEmpty,  // move the directory aside, start empty, count it (--on-corrupt=start-empty)
};

struct StoreOptions {
  OnCorrupt on_corrupt = OnCorrupt::kFail;
  uint32_t owners_per_chunk = kDefaultOwnersPerChunk;  // records per owner chunk value
  // Make every write durable (fsynced SST, flushed keys) before it is
  // relied on. Off only for tests that do not test crash safety: the small
  // keys then go through an unsynced, unflushed WAL, so a power loss can
  // lose the latest snapshot and a truncated WAL can lose it silently.
  bool sync = true;
  // kStartEmpty moves a bad directory aside by renaming "<dir>" to
  // "<dir>.corrupt-<unix seconds>". When "<dir>" cannot be renamed (a volume
  // mount point) -- or always, with this set -- it moves the directory's
  // entries into "<dir>/corrupt-<unix seconds>/" instead.
  bool move_aside_in_place = false;
};

// Plain counters for the metrics issue (names are the Prometheus ones).
// All fields may be read from any thread at any time.
struct SnapshotStats {
  std::atomic<uint64_t> snapshots_ok{0};               // kvidx_snapshots_total{result="ok"}
  std::atomic<uint64_t> snapshots_failed{0};           // kvidx_snapshots_total{result="error"}
  std::atomic<uint64_t> last_duration_us{0};           // kvidx_snapshot_duration_seconds (last Write)
  std::atomic<uint64_t> last_bytes{0};                 // kvidx_snapshot_bytes (SST of the last Write)
  std::atomic<uint64_t> last_snapshot_unix_ms{0};      // created_unix_ms of the newest complete snapshot
  std::atomic<uint64_t> restore_duration_us{0};        // kvidx_restore_duration_seconds
  std::atomic<uint64_t> restored_blocks{0};            // kvidx_restored_blocks (owner records)
  std::atomic<uint64_t> corrupt_start_empty_total{0};  // directories moved aside by kStartEmpty

  // kvidx_snapshot_age_seconds at `now_unix_ms`; negative if there is none.
  double AgeSeconds(uint64_t now_unix_ms) const {
    uint64_t t = last_snapshot_unix_ms.load(std::memory_order_relaxed);
    if (t == 0) return -1;
    return now_unix_ms >= t ? static_cast<double>(now_unix_ms - t) / 1000.0 : 0.0;
  }
};

class SnapshotStore {
 public:
  // Opens (creating if missing or empty) the snapshot directory `dir`,
  // checks its format version and manifest, and deletes generations other
  // than the current one (leftovers of an interrupted Write). Does not read
  // the snapshot itself; LoadLatest() does.
  static Result<std::unique_ptr<SnapshotStore>> Open(const std::string& dir, const StoreOptions& options = {});
  ~SnapshotStore();
  SnapshotStore(const SnapshotStore&) = delete;
  SnapshotStore& operator=(const SnapshotStore&) = delete;

  // Persists `data` as the new current snapshot. On any error the previous
  // snapshot stays current, except when only the flush of the commit fails
  // (Unavailable, saying so): the new one is then current in this process,
  // and after a restart one of the two is, never neither.
  // InvalidArgument if Validate(data) fails.
  // created_unix_ms == 0 is replaced by the wall clock.
  Status Write(const SnapshotData& data);

  // The current snapshot, nullopt if none was ever written (or kStartEmpty
  // just discarded a corrupt one). Verifies every checksum.
  Result<std::optional<SnapshotData>> LoadLatest();

  // Generation of the current snapshot; 0 = none.
  uint64_t current_generation() const;
  const std::string& dir() const { return dir_; }
  SnapshotStats& stats() { return *stats_; }
  // The error kStartEmpty recovered from (OK if none); for the caller's log.
  Status corruption() const;
  // Where kStartEmpty moved the bad directory ("" if it did not).
  std::string moved_aside_to() const;

 private:
  SnapshotStore(std::string dir, const StoreOptions& options);
  Status OpenDb();
  std::filesystem::path DbPath() const { return std::filesystem::path(dir_) / "rocksdb"; }
  Status LoadLocked(std::optional<SnapshotData>* out);
  Status StartEmpty(const Status& why);
  void CloseDb();

  const std::string dir_;
  const StoreOptions opts_;
  std::unique_ptr<SnapshotStats> stats_;
  mutable std::mutex mu_;
  std::unique_ptr<rocksdb::DB> db_;
  uint64_t current_gen_ = 0;  // 0 = no snapshot
  uint64_t next_gen_ = 1;
  Status corruption_;
  std::string moved_to_;
};

// Rebuilds the registries and the index of a fresh process from a loaded
// snapshot: interns tier names in id order, registers sources in id order
// (ids must come out identical: the registries and the index must be
// empty), then BlockIndex::Restore. Also sets each source's index state and
// GPU capacity. Records restore duration and restored blocks in `stats` if
// given (the caller may add its LoadLatest time).
Status ApplySnapshot(const SnapshotData& data, TierRegistry* tiers, SourceRegistry* sources, BlockIndex* index,
                     SnapshotStats* stats = nullptr);

}  // namespace kvidx::snapshot
