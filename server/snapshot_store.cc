#include "server/snapshot_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include <rocksdb/convenience.h>
#include <rocksdb/db.h>
#include <rocksdb/iterator.h>
#include <rocksdb/options.h>
#include <rocksdb/sst_file_writer.h>
#include <rocksdb/write_batch.h>
#include <xxhash.h>

#include "base/clock.h"

namespace kvidx::snapshot {

namespace fs = std::filesystem;

namespace {

// Written (synced) before generation G's SST is ingested and removed in the
// commit batch: it tells Open() that generation data above the current one
// is the orphan of an interrupted Write, not a lost manifest. Left in place
// when an orphan is deleted, so that generation numbers are never reused.
constexpr std::string_view kPendingKey = "kvidx/pending";
constexpr std::string_view kTmpSuffix = ".kvidx-tmp";
// Beside RocksDB's files (which it leaves alone): the last generation whose
// commit was durable, written after each commit. RocksDB drops a truncated
// tail of its MANIFEST (or WAL) without an error, and with it possibly the
// commit; a store whose manifest key is older than this record lost writes.
constexpr std::string_view kCommittedFile = "kvidx-committed";

using Clock = std::chrono::steady_clock;

uint64_t ElapsedUs(Clock::time_point t0) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count());
}

rocksdb::Slice S(std::string_view v) { return rocksdb::Slice(v.data(), v.size()); }
std::string_view V(const rocksdb::Slice& s) { return std::string_view(s.data(), s.size()); }

// RocksDB statuses about the stored bytes become Corruption (or
// FailedPrecondition for "not what this build can read"); the rest are
// about the environment and are never treated as a corrupt directory.
Status FromRocks(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return Status::Ok();
  std::string msg = what + ": " + s.ToString();
  if (s.IsCorruption()) return Status::Corruption(std::move(msg));
  if (s.IsNotSupported() || s.IsInvalidArgument()) return Status::FailedPrecondition(std::move(msg));
  if (s.IsIOError() || s.IsBusy() || s.IsTimedOut() || s.IsTryAgain()) return Status::Unavailable(std::move(msg));
  return Status::Internal(std::move(msg));
}

bool IsCorruptKind(const Status& s) {
  return s.code() == StatusCode::kCorruption || s.code() == StatusCode::kFailedPrecondition;
}

Status DecodeGen(std::string_view v, std::string_view key, uint64_t* gen) {
  if (v.size() != 8) {
    return Status::Corruption("key '" + std::string(key) + "': " + std::to_string(v.size()) + " bytes, expected 8");
  }
  std::memcpy(gen, v.data(), 8);
  return Status::Ok();
}
std::string EncodeGen(uint64_t gen) { return std::string(reinterpret_cast<const char*>(&gen), 8); }

// Expected chunk sequence of a generation, in key order.
struct ChunkCursor {
  uint32_t owner_chunks;
  uint32_t pos = 0;  // 0 clocks, 1 models, 2..2+n-1 owners, then sources, tiers
  uint32_t total() const { return owner_chunks + 4; }
  std::pair<ChunkType, uint32_t> at(uint32_t p) const {
    if (p == 0) return {ChunkType::kClocks, 0};
    if (p == 1) return {ChunkType::kModels, 0};
    if (p < 2 + owner_chunks) return {ChunkType::kOwners, p - 2};
    if (p == 2 + owner_chunks) return {ChunkType::kSources, 0};
    return {ChunkType::kTiers, 0};
  }
};

void SyncDir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    (void)::fsync(fd);
    ::close(fd);
  }
}

std::string CommittedRecord(uint64_t gen) {
  const std::string body = "generation " + std::to_string(gen);
  char check[17];
  std::snprintf(check, sizeof(check), "%016llx",
                static_cast<unsigned long long>(XXH3_64bits(body.data(), body.size())));
  return body + " check " + check + "\n";
}

// Replaces `db`/kvidx-committed (temp file + rename: never half-written).
Status WriteCommitted(const fs::path& db, uint64_t gen, bool sync) {
  const fs::path file = db / kCommittedFile;
  const std::string tmp = file.string() + std::string(kTmpSuffix);
  const std::string text = CommittedRecord(gen);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::Unavailable(tmp + ": " + std::strerror(errno));
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  if (ok && sync) ok = ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), file.c_str()) != 0) {
    return Status::Unavailable(file.string() + ": " + std::strerror(ok ? errno : err));
  }
  if (sync) SyncDir(db.string());
  return Status::Ok();
}

// The generation in `db`/kvidx-committed; 0 if there is no such file (a
// store that never committed, or one written before the file existed).
Status ReadCommitted(const fs::path& db, uint64_t* gen) {
  *gen = 0;
  const fs::path file = db / kCommittedFile;
  int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) return Status::Ok();
  if (fd < 0) return Status::Unavailable(file.string() + ": " + std::strerror(errno));
  std::string text(128, '\0');
  const ssize_t n = ::read(fd, text.data(), text.size());
  const int err = errno;
  ::close(fd);
  if (n < 0) return Status::Unavailable(file.string() + ": " + std::strerror(err));
  text.resize(static_cast<size_t>(n));
  uint64_t g = 0;
  const size_t digits = text.find_first_not_of("0123456789", 11);
  if (text.starts_with("generation ") && digits != std::string::npos && digits > 11 && digits - 11 <= 19) {
    g = std::stoull(text.substr(11, digits - 11));
  }
  if (g == 0 || text != CommittedRecord(g)) {
    return Status::Corruption(file.string() + ": damaged (" + std::to_string(n) + " bytes, not a generation record)");
  }
  *gen = g;
  return Status::Ok();
}

}  // namespace

SnapshotStore::SnapshotStore(std::string dir, const StoreOptions& options)
    : dir_(std::move(dir)), opts_(options), stats_(std::make_unique<SnapshotStats>()) {}

SnapshotStore::~SnapshotStore() { CloseDb(); }

void SnapshotStore::CloseDb() {
  if (db_) {
    (void)db_->Close();
    db_.reset();
  }
}

namespace {

rocksdb::Options DbOptions(bool create, bool sync) {
  rocksdb::Options o;
  o.create_if_missing = create;
  o.error_if_exists = false;
  o.paranoid_checks = true;
  // Any damage to a write-ahead log is an error: kPointInTimeRecovery (the
  // default) silently stops replaying at a bad record and
  // kTolerateCorruptedTailRecords silently drops a truncated tail, and
  // either can drop a commit. Strictness costs no crash recovery: with
  // sync on the store writes nothing through the WAL (see Persist), so a
  // crash cannot leave a torn record in it; only a WAL of an earlier kvidx
  // or a foreign writer holds records at all. With sync off the store's
  // keys are unsynced WAL records, whose tail a crash may tear.
  o.wal_recovery_mode = sync ? rocksdb::WALRecoveryMode::kAbsoluteConsistency
                             : rocksdb::WALRecoveryMode::kTolerateCorruptedTailRecords;
  // What Open recovers from such a WAL goes into an SST file at once.
  o.avoid_flush_during_recovery = false;
  o.max_background_jobs = 1;  // two cores; snapshots are rare and bulk-ingested
  // RocksDB's info LOG gains ~10 KB per Write (flushes, compactions): a
  // size cap makes it rotate, so it is bounded (~4 x 4 MiB) however long
  // the process runs.
  o.max_log_file_size = 4 << 20;
  o.keep_log_file_num = 3;
  o.max_manifest_file_size = 16 << 20;
  o.compression = rocksdb::kNoCompression;
  for (rocksdb::CompressionType c : rocksdb::GetSupportedCompressions()) {
    if (c == rocksdb::kLZ4Compression) o.compression = rocksdb::kLZ4Compression;
  }
  return o;
}

// Makes `wb` durable outside the write-ahead log: applied to the memtable
// only, then flushed (SST file + synced MANIFEST edit) before returning. A
// damaged or truncated WAL loses whatever lives only in it, and RocksDB's
// Close() does not flush while the WAL is on, so with sync on nothing the
// store relies on is ever written there. With sync off (tests without crash
// safety) it is an unsynced WAL write, not flushed. `*applied` (if given)
// tells whether the batch reached the memtable, i.e. is visible to this
// process and becomes durable with the next successful flush.
Status Persist(rocksdb::DB* db, bool sync, rocksdb::WriteBatch* wb, const std::string& what,
               bool* applied = nullptr) {
  rocksdb::WriteOptions wo;
  wo.disableWAL = sync;
  Status st = FromRocks(db->Write(wo, wb), what);
  if (applied != nullptr) *applied = st.ok();
  if (!st.ok() || !sync) return st;
  rocksdb::FlushOptions fo;
  fo.wait = true;
  fo.allow_write_stall = true;  // the store is the only writer; never wait for compactions
  return FromRocks(db->Flush(fo), what + " (flushing)");
}

// Before RocksDB opens `db`: CURRENT must name a MANIFEST that is there.
// RocksDB reports a missing one as an I/O error, which would read as "the
// disk is unavailable" rather than "the store is damaged".
Status CheckCurrentFile(const fs::path& db) {
  const fs::path current = db / "CURRENT";
  int fd = ::open(current.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Unavailable(current.string() + ": " + std::strerror(errno));
  std::string text(256, '\0');
  ssize_t n = ::read(fd, text.data(), text.size());
  const int read_errno = errno;
  ::close(fd);
  if (n < 0) return Status::Unavailable(current.string() + ": " + std::strerror(read_errno));
  text.resize(static_cast<size_t>(n));
  if (text.empty() || text.back() != '\n' || !text.starts_with("MANIFEST-") ||
      text.find('/') != std::string::npos) {
    return Status::Corruption(current.string() + ": does not name a MANIFEST file (" + std::to_string(text.size()) +
                              " bytes)");
  }
  text.pop_back();
  const fs::path manifest = db / text;
  std::error_code ec;
  const uintmax_t size = fs::file_size(manifest, ec);
  if (ec == std::errc::no_such_file_or_directory) {
    return Status::Corruption(current.string() + " names " + manifest.string() + ", which does not exist");
  }
  if (ec) return Status::Unavailable(manifest.string() + ": " + ec.message());
  if (size == 0) return Status::Corruption(manifest.string() + ": empty (named by " + current.string() + ")");
  return Status::Ok();
}

// The write-ahead logs of `db` that hold records, for error messages:
// RocksDB's WAL corruption statuses do not say which file.
std::string NonEmptyWals(const fs::path& db) {
  std::string out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(db, ec)) {
    if (e.path().extension() != ".log" || e.file_size(ec) == 0) continue;
    out += (out.empty() ? "" : ", ") + e.path().string() + " (" + std::to_string(e.file_size(ec)) + " bytes)";
  }
  return out;
}

// FromRocks for DB::Open: a file of the store that is missing (I/O error
// "path not found" inside `db`) is damage, not an unavailable disk, and a
// corruption that names no file is about a write-ahead log.
Status FromRocksOpen(const rocksdb::Status& s, const fs::path& db) {
  const std::string what = "opening RocksDB in " + db.string();
  const std::string inside = db.string() + "/";
  if (s.IsPathNotFound() && s.ToString().find(inside) != std::string::npos) {
    return Status::Corruption(what + ": a file of the store is missing: " + s.ToString());
  }
  if (s.IsCorruption() && s.ToString().find(inside) == std::string::npos) {
    const std::string wals = NonEmptyWals(db);
    if (!wals.empty()) return Status::Corruption(what + ": write-ahead log " + wals + ": " + s.ToString());
  }
  return FromRocks(s, what);
}

// RocksDB's own check, made early: the checks before the read-write open
// must not report a directory another process is writing as damaged.
Status CheckNotLocked(const fs::path& db) {
  const fs::path lock = db / "LOCK";
  int fd = ::open(lock.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Ok();  // no LOCK yet: RocksDB creates it
  struct flock fl = {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  const bool held = ::fcntl(fd, F_GETLK, &fl) == 0 && fl.l_type != F_UNLCK;
  ::close(fd);
  if (held) return Status::Unavailable(lock.string() + ": held by process " + std::to_string(fl.l_pid));
  return Status::Ok();
}

// Before the read-write open, which deletes SST files that a damaged
// MANIFEST no longer lists: a store whose manifest key is older than
// kvidx-committed lost writes. Read-only, so a refused directory is left
// as it was.
Status CheckCommitted(const fs::path& db, const rocksdb::Options& options) {
  uint64_t committed = 0;
  Status st = ReadCommitted(db, &committed);
  if (!st.ok() || committed == 0) return st;
  rocksdb::DB* raw = nullptr;
  st = FromRocksOpen(rocksdb::DB::OpenForReadOnly(options, db.string(), &raw), db);
  if (!st.ok()) return st;
  std::unique_ptr<rocksdb::DB> ro(raw);
  std::string v;
  rocksdb::ReadOptions r;
  r.verify_checksums = true;
  rocksdb::Status rs = ro->Get(r, S(kCurrentKey), &v);
  Manifest m;
  if (!rs.ok() && !rs.IsNotFound()) return FromRocks(rs, db.string() + ": reading '" + std::string(kCurrentKey) + "'");
  if (rs.ok() && !DecodeManifest(v, &m).ok()) return Status::Ok();  // the read-write checks name this
  if (rs.ok() && m.gen >= committed) return Status::Ok();
  const std::string found = rs.ok() ? "the manifest key names generation " + std::to_string(m.gen)
                                     : "the manifest key '" + std::string(kCurrentKey) + "' is missing (manifest lost)";
  return Status::Corruption((db / kCommittedFile).string() + ": generation " + std::to_string(committed) +
                            " was committed, but " + found +
                            ": RocksDB lost durable writes (damaged MANIFEST or write-ahead log)");
}

}  // namespace

Status SnapshotStore::OpenDb() {
  std::error_code ec;
  const fs::path db_path = DbPath();
  const fs::path init_path = fs::path(dir_) / "rocksdb.init";
  bool exists = fs::exists(dir_, ec);
  if (ec) return Status::Unavailable(dir_ + ": " + ec.message());
  if (exists && !fs::is_directory(dir_, ec)) return Status::FailedPrecondition(dir_ + ": exists and is not a directory");
  if (exists && fs::exists(db_path, ec)) {
    if (!fs::exists(db_path / "CURRENT", ec)) {
      return Status::Corruption(dir_ + ": " + db_path.string() + " has no RocksDB CURRENT file (lost or truncated "
                                "away); refusing to create a new snapshot store over it");
    }
    fs::remove_all(init_path, ec);
    // Leftover SST files of a Write that died before ingesting them.
    for (const auto& e : fs::directory_iterator(db_path, ec)) {
      if (e.path().filename().string().ends_with(kTmpSuffix)) fs::remove(e.path(), ec);
    }
  } else {
    // New store: created under rocksdb.init (with its format record) and
    // renamed into place, so that a crash during creation leaves either
    // nothing or a complete empty store, never a half-created RocksDB that
    // would be indistinguishable from one whose CURRENT was lost.
    if (exists) {
      for (const auto& e : fs::directory_iterator(dir_, ec)) {
        const std::string name = e.path().filename().string();
        if (name != "rocksdb.init" && name != "lost+found" && !name.starts_with("corrupt-")) {
          return Status::Corruption(dir_ + ": directory is not empty but has no rocksdb/ store (found '" +
                                    e.path().filename().string() + "'); not a kvidx snapshot directory");
        }
      }
    }
    fs::remove_all(init_path, ec);
    fs::create_directories(init_path, ec);
    if (ec) return Status::Unavailable(init_path.string() + ": cannot create: " + ec.message());
    rocksdb::DB* raw = nullptr;
    Status st = FromRocks(rocksdb::DB::Open(DbOptions(true, true), init_path.string(), &raw),
                          "creating RocksDB in " + init_path.string());
    if (!st.ok()) return st;
    std::unique_ptr<rocksdb::DB> db(raw);
    rocksdb::WriteBatch format;
    (void)format.Put(S(kFormatKey), EncodeFormatRecord(kFormatVersion));
    st = Persist(db.get(), true, &format, dir_ + ": writing format record");
    if (st.ok()) st = FromRocks(db->Close(), dir_ + ": closing new store");
    db.reset();
    if (!st.ok()) return st;
    fs::rename(init_path, db_path, ec);
    if (ec) return Status::Unavailable(db_path.string() + ": cannot rename new store into place: " + ec.message());
    SyncDir(dir_);
  }

  Status st = CheckNotLocked(db_path);
  if (st.ok()) st = CheckCurrentFile(db_path);
  if (st.ok()) st = CheckCommitted(db_path, DbOptions(false, opts_.sync));
  if (!st.ok()) return st;
  rocksdb::DB* raw = nullptr;
  st = FromRocksOpen(rocksdb::DB::Open(DbOptions(false, opts_.sync), db_path.string(), &raw), db_path);
  if (!st.ok()) return st;
  db_.reset(raw);
  if (opts_.sync) {
    // Whatever was recovered from a WAL is in SST files before it is used.
    st = FromRocks(db_->Flush(rocksdb::FlushOptions()), dir_ + ": flushing recovered writes");
    if (!st.ok()) return st;
  }

  rocksdb::ReadOptions ro;
  ro.verify_checksums = true;

  // Format record.
  std::string v;
  rocksdb::Status rs = db_->Get(ro, S(kFormatKey), &v);
  if (rs.IsNotFound()) {
    return Status::Corruption(dir_ + ": key '" + std::string(kFormatKey) +
                              "' is missing (every store gets it when created)");
  } else {
    st = FromRocks(rs, dir_ + ": reading '" + std::string(kFormatKey) + "'");
    if (!st.ok()) return st;
    uint32_t version = 0;
    st = DecodeFormatRecord(v, &version);
    if (!st.ok()) return Status(st.code() == StatusCode::kCorruption ? Status::Corruption(dir_ + ": " + st.message())
                                                                      : Status::FailedPrecondition(dir_ + ": " + st.message()));
  }

  // Manifest and pending marker.
  current_gen_ = 0;
  rs = db_->Get(ro, S(kCurrentKey), &v);
  if (!rs.IsNotFound()) {
    st = FromRocks(rs, dir_ + ": reading '" + std::string(kCurrentKey) + "'");
    if (!st.ok()) return st;
    Manifest m;
    st = DecodeManifest(v, &m);
    if (!st.ok()) {
      return st.code() == StatusCode::kCorruption ? Status::Corruption(dir_ + ": " + st.message())
                                                  : Status::FailedPrecondition(dir_ + ": " + st.message());
    }
    if (m.gen == 0) return Status::Corruption(dir_ + ": manifest names generation 0");
    current_gen_ = m.gen;
  }
  std::optional<uint64_t> pending;
  rs = db_->Get(ro, S(kPendingKey), &v);
  if (!rs.IsNotFound()) {
    st = FromRocks(rs, dir_ + ": reading '" + std::string(kPendingKey) + "'");
    if (!st.ok()) return st;
    uint64_t g = 0;
    st = DecodeGen(v, kPendingKey, &g);
    if (!st.ok()) return Status::Corruption(dir_ + ": " + st.message());
    pending = g;
  }

  // Generations present: lowest and highest.
  std::optional<uint64_t> lo, hi;
  {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
    it->Seek(S(GenKey(0)));
    if (it->Valid() && it->key().size() >= 9 && it->key()[0] == kGenPrefix) {
      ParsedChunkKey k;
      if (!ParseChunkKey(V(it->key()), &k)) {
        return Status::Corruption(dir_ + ": malformed key '" + it->key().ToString(true) + "'");
      }
      lo = k.gen;
      it->SeekForPrev(S(std::string(1, static_cast<char>(kGenPrefix + 1))));
      if (it->Valid() && ParseChunkKey(V(it->key()), &k)) hi = k.gen;
    }
    st = FromRocks(it->status(), dir_ + ": scanning generations");
    if (!st.ok()) return st;
  }
  if (hi && *hi > current_gen_ && (!pending || *pending != *hi)) {
    if (current_gen_ == 0) {
      return Status::Corruption(dir_ + ": snapshot data of generation " + std::to_string(*hi) + " but no manifest key '" +
                                std::string(kCurrentKey) + "' (manifest lost)");
    }
    return Status::Corruption(dir_ + ": generation " + std::to_string(*hi) + " is newer than the current generation " +
                              std::to_string(current_gen_) + " and was never started by a Write");
  }
  if (current_gen_ != 0 && (!lo || !hi || *lo > current_gen_ || *hi < current_gen_)) {
    return Status::Corruption(dir_ + ": manifest names generation " + std::to_string(current_gen_) +
                              " but none of its chunks exist");
  }
  next_gen_ = std::max<uint64_t>({current_gen_, hi.value_or(0), pending.value_or(0)}) + 1;

  // Delete what is not the current generation: older ones (their deletion
  // was interrupted) and the orphan of an interrupted Write.
  rocksdb::WriteBatch wb;
  bool dirty = false;
  if (lo && *lo < current_gen_) {
    (void)wb.DeleteRange(S(GenKey(0)), S(GenKey(current_gen_)));
    dirty = true;
  }
  if (hi && *hi > current_gen_) {
    (void)wb.DeleteRange(S(GenKey(current_gen_ + 1)), S(GenKey(*hi + 1)));
    dirty = true;
  }
  if (current_gen_ == 0 && lo) {
    (void)wb.DeleteRange(S(GenKey(0)), S(GenKey(*hi + 1)));
    dirty = true;
  }
  // The pending marker stays: it keeps the orphan's generation number from
  // being reused (next_gen_ above accounts for it).
  if (dirty) {
    st = Persist(db_.get(), opts_.sync, &wb, dir_ + ": deleting stale generations");
    if (!st.ok()) return st;
  }
  return Status::Ok();
}

Result<std::unique_ptr<SnapshotStore>> SnapshotStore::Open(const std::string& dir, const StoreOptions& options) {
  if (dir.empty()) return Status::InvalidArgument("snapshot directory is empty");
  if (options.owners_per_chunk == 0 || options.owners_per_chunk > (1u << 24)) {
    return Status::InvalidArgument("owners_per_chunk must be in 1..2^24");
  }
  std::unique_ptr<SnapshotStore> s(new SnapshotStore(dir, options));
  std::lock_guard<std::mutex> lock(s->mu_);
  Status st = s->OpenDb();
  if (!st.ok()) {
    if (options.on_corrupt != OnCorrupt::kStartEmpty || !IsCorruptKind(st)) return st;
    st = s->StartEmpty(st);
    if (!st.ok()) return st;
  }
  return s;
}

Status SnapshotStore::StartEmpty(const Status& why) {
  CloseDb();
  current_gen_ = 0;
  next_gen_ = 1;
  std::string base = dir_;
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  std::string target = base + ".corrupt-" + std::to_string(WallMillis() / 1000);
  std::error_code ec;
  for (int i = 1; fs::exists(target, ec); ++i) {
    target = base + ".corrupt-" + std::to_string(WallMillis() / 1000) + "-" + std::to_string(i);
  }
  if (!opts_.move_aside_in_place) fs::rename(base, target, ec);
  if (opts_.move_aside_in_place || ec) {
    // A mount point cannot be renamed: move its entries into a subdirectory.
    const std::string rename_error = ec ? ec.message() : "";
    ec.clear();
    target = base + "/corrupt-" + std::to_string(WallMillis() / 1000);
    for (int i = 1; fs::exists(target, ec); ++i) {
      target = base + "/corrupt-" + std::to_string(WallMillis() / 1000) + "-" + std::to_string(i);
    }
    fs::create_directory(target, ec);
    std::vector<fs::path> entries;
    for (const auto& e : fs::directory_iterator(base, ec)) {
      const std::string name = e.path().filename().string();
      if (name != "lost+found" && !name.starts_with("corrupt-")) entries.push_back(e.path());
    }
    for (const fs::path& p : entries) {
      if (ec) break;
      fs::rename(p, fs::path(target) / p.filename(), ec);
    }
    if (ec) {
      return Status::Unavailable(why.ToString() + "; --on-corrupt=start-empty could not move " + base + " aside" +
                                 (rename_error.empty() ? "" : " (rename: " + rename_error + ")") + " nor its contents to " +
                                 target + ": " + ec.message());
    }
  }
  Status st = OpenDb();
  if (!st.ok()) return Status(Status::Unavailable(why.ToString() + "; starting empty failed: " + st.ToString()));
  corruption_ = why;
  moved_to_ = target;
  stats_->corrupt_start_empty_total.fetch_add(1, std::memory_order_relaxed);
  stats_->last_snapshot_unix_ms.store(0, std::memory_order_relaxed);
  return Status::Ok();
}

Status SnapshotStore::Write(const SnapshotData& data) {
  std::lock_guard<std::mutex> lock(mu_);
  auto t0 = Clock::now();
  auto fail = [this](Status st) {
    stats_->snapshots_failed.fetch_add(1, std::memory_order_relaxed);
    return st;
  };
  if (!db_) return fail(Status::FailedPrecondition(dir_ + ": store is not open"));
  Status st = Validate(data);
  if (!st.ok()) return fail(st);

  const uint64_t gen = next_gen_++;
  const uint64_t created = data.created_unix_ms != 0 ? data.created_unix_ms : WallMillis();
  rocksdb::WriteBatch pending;
  (void)pending.Put(S(kPendingKey), EncodeGen(gen));
  st = Persist(db_.get(), opts_.sync, &pending, dir_ + ": writing pending marker");
  if (!st.ok()) return fail(st);

  const std::string tmp = (DbPath() / ("gen-" + std::to_string(gen) + ".sst")).string() + std::string(kTmpSuffix);
  auto abandon = [&](Status why) {
    std::error_code ec;
    fs::remove(tmp, ec);
    // Best effort; Open() deletes the orphan if this fails too.
    rocksdb::WriteBatch wb;
    (void)wb.DeleteRange(S(GenKey(gen)), S(GenKey(gen + 1)));
    (void)Persist(db_.get(), opts_.sync, &wb, dir_ + ": deleting generation " + std::to_string(gen));
    return fail(std::move(why));
  };

  const rocksdb::Options dbo = DbOptions(false, opts_.sync);
  rocksdb::SstFileWriter writer(rocksdb::EnvOptions(dbo), dbo);
  st = FromRocks(writer.Open(tmp), "creating " + tmp);
  if (!st.ok()) return abandon(st);

  Manifest m;
  m.gen = gen;
  m.created_unix_ms = created;
  m.num_owners = data.index.owners.size();
  m.num_owner_chunks = static_cast<uint32_t>((data.index.owners.size() + opts_.owners_per_chunk - 1) /
                                             opts_.owners_per_chunk);
  m.num_chunks = m.num_owner_chunks + 4;
  XXH3_state_t* digest = XXH3_createState();
  XXH3_64bits_reset(digest);
  auto put = [&](ChunkType type, uint32_t index, std::string_view payload) {
    uint64_t sum = 0;
    std::string value = EncodeChunk(gen, type, index, payload, &sum);
    XXH3_64bits_update(digest, &sum, sizeof(sum));
    return FromRocks(writer.Put(S(ChunkKey(gen, type, index)), S(value)), "writing " + ChunkName(gen, type, index));
  };
  st = put(ChunkType::kClocks, 0, EncodeClocks(data.index.source_clocks));
  if (st.ok()) st = put(ChunkType::kModels, 0, EncodeModels(data.index.models));
  std::string buf;
  for (uint32_t c = 0; st.ok() && c < m.num_owner_chunks; ++c) {
    size_t from = static_cast<size_t>(c) * opts_.owners_per_chunk;
    size_t n = std::min<size_t>(opts_.owners_per_chunk, data.index.owners.size() - from);
    EncodeOwners(std::span<const OwnerRecord>(data.index.owners).subspan(from, n), &buf);
    st = put(ChunkType::kOwners, c, buf);
  }
  if (st.ok()) st = put(ChunkType::kSources, 0, EncodeSources(data.sources));
  if (st.ok()) st = put(ChunkType::kTiers, 0, EncodeTiers(data.tier_names));
  m.chunks_digest = XXH3_64bits_digest(digest);
  XXH3_freeState(digest);
  if (!st.ok()) return abandon(st);
  rocksdb::ExternalSstFileInfo info;
  st = FromRocks(writer.Finish(&info), "finishing " + tmp);
  if (!st.ok()) return abandon(st);

  rocksdb::IngestExternalFileOptions io;
  io.move_files = true;
  io.write_global_seqno = false;
  io.verify_checksums_before_ingest = false;
  st = FromRocks(db_->IngestExternalFile({tmp}, io), dir_ + ": ingesting " + ChunkName(gen, ChunkType::kClocks, 0) + "..");
  if (!st.ok()) return abandon(st);
  std::error_code ec;
  fs::remove(tmp, ec);  // the hard link's other name, if RocksDB left it

  // Commit point.
  rocksdb::WriteBatch commit;
  (void)commit.Put(S(kCurrentKey), EncodeManifest(m));
  (void)commit.Delete(S(kPendingKey));
  bool applied = false;
  st = Persist(db_.get(), opts_.sync, &commit, dir_ + ": writing manifest of generation " + std::to_string(gen),
               &applied);
  if (!applied) return abandon(st);
  const uint64_t old = current_gen_;
  current_gen_ = gen;
  if (!st.ok()) {
    // The commit is visible here but not durable: keep generation `old`
    // for a restart that does not see it.
    return fail(Status::Unavailable(st.message() + "; generation " + std::to_string(gen) +
                                    " is current in this process, a restart keeps it only if a later flush succeeds"));
  }
  // Best effort: a stale record only weakens Open's check, never fails it.
  (void)WriteCommitted(DbPath(), gen, opts_.sync);

  // Drop older generations; best effort (Open() finishes the job).
  if (old != 0) {
    std::string b = GenKey(0), e = GenKey(gen);
    rocksdb::Slice bs(b), es(e);
    (void)rocksdb::DeleteFilesInRange(db_.get(), db_->DefaultColumnFamily(), &bs, &es, false);
    rocksdb::ReadOptions ro;
    ro.iterate_upper_bound = &es;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
    it->Seek(bs);
    if (it->Valid()) {
      rocksdb::WriteBatch wb;
      (void)wb.DeleteRange(bs, es);
      (void)Persist(db_.get(), opts_.sync, &wb, dir_ + ": deleting old generations");
    }
  }

  stats_->last_bytes.store(info.file_size, std::memory_order_relaxed);
  stats_->last_duration_us.store(ElapsedUs(t0), std::memory_order_relaxed);
  stats_->last_snapshot_unix_ms.store(created, std::memory_order_relaxed);
  stats_->snapshots_ok.fetch_add(1, std::memory_order_relaxed);
  return Status::Ok();
}

Status SnapshotStore::LoadLocked(std::optional<SnapshotData>* out) {
  out->reset();
  if (!db_) return Status::FailedPrecondition(dir_ + ": store is not open");
  if (current_gen_ == 0) return Status::Ok();
  const uint64_t gen = current_gen_;
  rocksdb::ReadOptions ro;
  ro.verify_checksums = true;
  std::string v;
  Status st = FromRocks(db_->Get(ro, S(kCurrentKey), &v), dir_ + ": reading '" + std::string(kCurrentKey) + "'");
  if (!st.ok()) return st;
  Manifest m;
  st = DecodeManifest(v, &m);
  if (!st.ok()) return Status(st.code() == StatusCode::kCorruption ? Status::Corruption(dir_ + ": " + st.message())
                                                                    : Status::FailedPrecondition(dir_ + ": " + st.message()));
  if (m.gen != gen) return Status::Corruption(dir_ + ": manifest changed under the store");

  SnapshotData d;
  d.format_version = m.format_version;
  d.created_unix_ms = m.created_unix_ms;
  d.index.owners.reserve(std::min<uint64_t>(m.num_owners, uint64_t{1} << 31));

  std::string lo = GenKey(gen), hi = GenKey(gen + 1);
  rocksdb::Slice his(hi);
  ro.iterate_upper_bound = &his;
  ro.fill_cache = false;
  ro.readahead_size = 4 << 20;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
  ChunkCursor cur{m.num_owner_chunks};
  XXH3_state_t* digest = XXH3_createState();
  XXH3_64bits_reset(digest);
  auto where = [&](const Status& s) {
    return s.code() == StatusCode::kCorruption ? Status::Corruption(dir_ + ": " + s.message())
                                               : Status::FailedPrecondition(dir_ + ": " + s.message());
  };
  for (it->Seek(S(lo)); st.ok() && it->Valid(); it->Next()) {
    ParsedChunkKey k;
    if (!ParseChunkKey(V(it->key()), &k) || k.gen != gen) {
      st = Status::Corruption(dir_ + ": unexpected key '" + it->key().ToString(true) + "' in generation " +
                              std::to_string(gen));
      break;
    }
    if (cur.pos >= cur.total()) {
      st = Status::Corruption(dir_ + ": extra chunk " + ChunkName(gen, k.type, k.index) + " (manifest lists " +
                              std::to_string(cur.total()) + ")");
      break;
    }
    auto [type, index] = cur.at(cur.pos);
    if (k.type != type || k.index != index) {
      bool missing = ChunkKey(gen, k.type, k.index) > ChunkKey(gen, type, index);
      st = Status::Corruption(dir_ + ": " + (missing ? "missing chunk " + ChunkName(gen, type, index)
                                                     : "unexpected chunk " + ChunkName(gen, k.type, k.index)));
      break;
    }
    std::string_view payload;
    uint64_t sum = 0;
    uint32_t version = 0;
    st = DecodeChunk(V(it->value()), gen, type, index, &payload, &sum, &version);
    if (st.ok() && version != m.format_version) {
      st = Status::Corruption(ChunkName(gen, type, index) + " is in format version " + std::to_string(version) +
                              ", its manifest in " + std::to_string(m.format_version));
    }
    if (!st.ok()) {
      st = where(st);
      break;
    }
    XXH3_64bits_update(digest, &sum, sizeof(sum));
    switch (type) {
      case ChunkType::kClocks: st = DecodeClocks(payload, &d.index.source_clocks); break;
      case ChunkType::kModels: st = DecodeModels(payload, &d.index.models); break;
      case ChunkType::kOwners: st = DecodeOwners(payload, &d.index.owners, version); break;
      case ChunkType::kSources: st = DecodeSources(payload, &d.sources); break;
      case ChunkType::kTiers: st = DecodeTiers(payload, &d.tier_names); break;
    }
    if (!st.ok()) st = Status::Corruption(dir_ + ": " + ChunkName(gen, type, index) + ": " + st.message());
    ++cur.pos;
  }
  uint64_t got_digest = XXH3_64bits_digest(digest);
  XXH3_freeState(digest);
  if (!st.ok()) return st;
  st = FromRocks(it->status(), dir_ + ": reading generation " + std::to_string(gen));
  if (!st.ok()) return st;
  if (cur.pos < cur.total()) {
    auto [type, index] = cur.at(cur.pos);
    return Status::Corruption(dir_ + ": missing chunk " + ChunkName(gen, type, index));
  }
  if (got_digest != m.chunks_digest) {
    return Status::Corruption(dir_ + ": generation " + std::to_string(gen) +
                              ": chunk checksums do not match the manifest digest");
  }
  if (d.index.owners.size() != m.num_owners) {
    return Status::Corruption(dir_ + ": generation " + std::to_string(gen) + " holds " +
                              std::to_string(d.index.owners.size()) + " owner records, manifest says " +
                              std::to_string(m.num_owners));
  }
  st = Validate(d);
  if (!st.ok()) return Status::Corruption(dir_ + ": generation " + std::to_string(gen) + ": " + st.message());
  *out = std::move(d);
  return Status::Ok();
}

Result<std::optional<SnapshotData>> SnapshotStore::LoadLatest() {
  std::lock_guard<std::mutex> lock(mu_);
  auto t0 = Clock::now();
  std::optional<SnapshotData> out;
  Status st = LoadLocked(&out);
  if (!st.ok()) {
    if (opts_.on_corrupt != OnCorrupt::kStartEmpty || !IsCorruptKind(st)) return st;
    out.reset();
    st = StartEmpty(st);
    if (!st.ok()) return st;
    return std::optional<SnapshotData>();
  }
  stats_->restore_duration_us.store(ElapsedUs(t0), std::memory_order_relaxed);
  stats_->restored_blocks.store(out ? out->index.owners.size() : 0, std::memory_order_relaxed);
  if (out) stats_->last_snapshot_unix_ms.store(out->created_unix_ms, std::memory_order_relaxed);
  return out;
}

uint64_t SnapshotStore::current_generation() const {
  std::lock_guard<std::mutex> lock(mu_);
  return current_gen_;
}

Status SnapshotStore::corruption() const {
  std::lock_guard<std::mutex> lock(mu_);
  return corruption_;
}

std::string SnapshotStore::moved_aside_to() const {
  std::lock_guard<std::mutex> lock(mu_);
  return moved_to_;
}

Status ApplySnapshot(const SnapshotData& data, TierRegistry* tiers, SourceRegistry* sources, BlockIndex* index,
                     SnapshotStats* stats) {
  auto t0 = Clock::now();
  Status st = Validate(data);
  if (!st.ok()) return st;
  for (size_t i = 0; i < data.tier_names.size(); ++i) {
    Result<Tier> t = tiers->Intern(data.tier_names[i]);
    if (!t.ok()) return t.status();
    if (static_cast<size_t>(*t) != i) {
      return Status::FailedPrecondition("tier '" + data.tier_names[i] + "' got id " +
                                        std::to_string(static_cast<int>(*t)) + ", snapshot has " + std::to_string(i) +
                                        " (TierRegistry not fresh?)");
    }
  }
  for (const ingest::SourceWatermark& w : data.sources) {
    if (w.state >= kNumSourceStates) {
      return Status::Corruption("source " + w.replica + "/dp" + std::to_string(w.dp_rank) + ": state " +
                                std::to_string(w.state));
    }
    Result<SourceId> id = sources->Register(w.replica, w.dp_rank);
    if (!id.ok()) return id.status();
    if (*id != w.source_id) {
      return Status::FailedPrecondition("source " + w.replica + "/dp" + std::to_string(w.dp_rank) + " got id " +
                                        std::to_string(*id) + ", snapshot has " + std::to_string(w.source_id) +
                                        " (SourceRegistry not fresh, or a duplicate source)");
    }
  }
  st = index->Restore(data.index);
  if (!st.ok()) return st;
  for (const ingest::SourceWatermark& w : data.sources) {
    index->SetSourceState(w.source_id, static_cast<SourceState>(w.state));
    if (w.gpu_capacity_blocks != 0) index->SetSourceCapacity(w.source_id, w.gpu_capacity_blocks);
  }
  if (stats != nullptr) {
    stats->restore_duration_us.fetch_add(ElapsedUs(t0), std::memory_order_relaxed);
    stats->restored_blocks.store(data.index.owners.size(), std::memory_order_relaxed);
  }
  return Status::Ok();
}

}  // namespace kvidx::snapshot
