// SnapshotStore against damage to RocksDB's own files (write-ahead log,
// MANIFEST, CURRENT, SST) and to the store's kvidx-committed record, done by
// the test to a real store on disk. Whatever the damage, Open + LoadLatest
// either returns the intact snapshot or fails with Corruption naming the
// damaged file -- never an empty store. A refused directory is left exactly
// as it was; kStartEmpty moves it aside and counts it.
#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "persist/persist_test_util.h"
#include "server/snapshot_store.h"

namespace kvidx::snapshot {
namespace {

namespace fs = std::filesystem;
using testing::FileContents;
using testing::FilesEndingWith;
using testing::FlipBytes;
using testing::SyntheticSnapshot;
using testing::TempDir;

constexpr size_t kOwners = 20000;

bool Contains(const Status& st, std::string_view what) { return st.message().find(what) != std::string::npos; }

Status OpenAndLoad(const std::string& dir, std::optional<SnapshotData>* out, StoreOptions o = {}) {
  auto r = SnapshotStore::Open(dir, o);
  if (!r.ok()) return r.status();
  auto l = r.value()->LoadLatest();
  if (!l.ok()) return l.status();
  *out = std::move(l.value());
  return Status::Ok();
}

class DamagedFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    StoreOptions o;
    o.owners_per_chunk = 4096;
    auto r = SnapshotStore::Open(tmp_.db(), o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    for (uint64_t k : {1, 2}) ASSERT_TRUE(r.value()->Write(SyntheticSnapshot(k, kOwners)).ok());
  }
  std::string RocksDir() const { return tmp_.db() + "/rocksdb"; }
  std::vector<fs::path> Wals() const { return FilesEndingWith(RocksDir(), ".log"); }

  // kFail: snapshot 2 intact, or Corruption naming a file of the store and
  // nothing on disk changed. kStartEmpty: the same snapshot uncounted, or
  // the directory moved aside and counted once.
  void ExpectIntactOrRejected() {
    const auto before = FileContents(tmp_.db());
    std::optional<SnapshotData> out;
    Status st = OpenAndLoad(tmp_.db(), &out);
    if (st.ok()) {
      ASSERT_TRUE(out.has_value()) << "damaged store opened empty, without an error";
      EXPECT_TRUE(SameSnapshot(*out, SyntheticSnapshot(2, kOwners)));
      ExpectStartEmptyKeeps(/*rejected=*/false);
      return;
    }
    EXPECT_EQ(st.code(), StatusCode::kCorruption) << st.ToString();
    EXPECT_TRUE(Contains(st, RocksDir() + "/")) << st.ToString() << " names no file of the store";
    EXPECT_TRUE(FileContents(tmp_.db()) == before) << "a refused open changed the store's files";
    ExpectStartEmptyKeeps(/*rejected=*/true);
  }
  // Rejected in kFail with Corruption mentioning `what`; moved aside by kStartEmpty.
  void ExpectRejected(std::string_view what) {
    const auto before = FileContents(tmp_.db());
    std::optional<SnapshotData> out;
    Status st = OpenAndLoad(tmp_.db(), &out);
    ASSERT_FALSE(st.ok()) << "damaged store opened " << (out ? "with a snapshot" : "empty") << ", without an error";
    EXPECT_EQ(st.code(), StatusCode::kCorruption) << st.ToString();
    EXPECT_TRUE(Contains(st, what)) << st.ToString() << " does not mention " << what;
    EXPECT_TRUE(FileContents(tmp_.db()) == before) << "a refused open changed the store's files";
    ExpectStartEmptyKeeps(/*rejected=*/true);
  }
  void ExpectStartEmptyKeeps(bool rejected) {
    StoreOptions o;
    o.on_corrupt = OnCorrupt::kStartEmpty;
    auto r = SnapshotStore::Open(tmp_.db(), o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    SnapshotStore& store = *r.value();
    auto l = store.LoadLatest();
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    EXPECT_EQ(store.stats().corrupt_start_empty_total.load(), rejected ? 1u : 0u);
    if (!rejected) {
      ASSERT_TRUE(l.value().has_value());
      EXPECT_TRUE(SameSnapshot(*l.value(), SyntheticSnapshot(2, kOwners)));
      return;
    }
    EXPECT_FALSE(l.value().has_value());
    EXPECT_EQ(store.corruption().code(), StatusCode::kCorruption) << store.corruption().ToString();
    EXPECT_TRUE(store.moved_aside_to().starts_with(tmp_.db() + ".corrupt-")) << store.moved_aside_to();
    EXPECT_TRUE(fs::exists(store.moved_aside_to() + "/rocksdb")) << "the bad store was not kept for a post-mortem";
    ASSERT_TRUE(store.Write(SyntheticSnapshot(9, 100)).ok());
  }

  TempDir tmp_;
};

// Nothing the store needs may live only in the write-ahead log once Write
// returned: RocksDB replays a WAL leniently, so what is there can be lost.
TEST_F(DamagedFiles, AtRestTheWalHoldsNothing) {
  for (const fs::path& wal : Wals()) EXPECT_EQ(fs::file_size(wal), 0u) << wal;
}

TEST_F(DamagedFiles, EveryWalTruncatedToHalf) {
  for (const fs::path& wal : Wals()) fs::resize_file(wal, fs::file_size(wal) / 2);
  ExpectIntactOrRejected();
}

TEST_F(DamagedFiles, SixteenBytesFlippedInTheMiddleOfEveryWal) {
  for (const fs::path& wal : Wals()) {
    if (fs::file_size(wal) >= 16) FlipBytes(wal, fs::file_size(wal) / 2 - 8, 16);
  }
  ExpectIntactOrRejected();
}

TEST_F(DamagedFiles, ManifestDeleted) {
  for (const fs::path& m : FilesEndingWith(RocksDir(), "", "MANIFEST-")) fs::remove(m);
  ExpectRejected("MANIFEST-");
}

TEST_F(DamagedFiles, CurrentNamesAMissingManifest) {
  std::ofstream(RocksDir() + "/CURRENT", std::ios::trunc) << "MANIFEST-999999\n";
  ExpectRejected("MANIFEST-999999");
}

TEST_F(DamagedFiles, SstDeleted) {
  const fs::path sst = testing::Largest(FilesEndingWith(RocksDir(), ".sst"));
  fs::remove(sst);
  ExpectRejected(RocksDir() + "/" + sst.stem().string());  // RocksDB names it .ldb, its other suffix
}

TEST_F(DamagedFiles, CommittedRecordDamaged) {
  testing::FlipByte(RocksDir() + "/kvidx-committed", 11);
  ExpectRejected(RocksDir() + "/kvidx-committed: damaged");
}

// What a store written before the record existed looks like.
TEST_F(DamagedFiles, CommittedRecordMissingIsNotChecked) {
  ASSERT_TRUE(fs::remove(RocksDir() + "/kvidx-committed"));
  ExpectIntactOrRejected();
  std::optional<SnapshotData> out;
  EXPECT_TRUE(OpenAndLoad(tmp_.db(), &out).ok());
}

// A store with one snapshot, its commit the last edit in the MANIFEST.
// RocksDB silently drops a truncated tail of the MANIFEST (as a crash
// during a MANIFEST write may leave one), and with it the commit.
class ManifestTailCut : public DamagedFiles, public ::testing::WithParamInterface<uintmax_t> {
 protected:
  void SetUp() override {
    auto r = SnapshotStore::Open(tmp_.db());
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_TRUE(r.value()->Write(SyntheticSnapshot(2, kOwners)).ok());
  }
};

TEST_P(ManifestTailCut, IsIntactOrRejected) {
  const std::vector<fs::path> manifests = FilesEndingWith(RocksDir(), "", "MANIFEST-");
  ASSERT_EQ(manifests.size(), 1u);
  const uintmax_t size = fs::file_size(manifests[0]);
  ASSERT_GT(size, GetParam() + 64);
  fs::resize_file(manifests[0], size - GetParam());
  ExpectIntactOrRejected();
}

INSTANTIATE_TEST_SUITE_P(Bytes, ManifestTailCut, ::testing::Values(16, 48, 128, 256));

// A store whose commit of generation 2 is a record in the middle of a WAL
// (what an earlier kvidx left after a crash, or at rest): the SSTs say
// "generation 2 ingested, not committed", the WAL commits it.
class CommitInTheWal : public DamagedFiles {
 protected:
  void SetUp() override {
    DamagedFiles::SetUp();
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), RocksDir(), &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    std::string manifest;
    ASSERT_TRUE(db->Get(rocksdb::ReadOptions(), std::string(kCurrentKey), &manifest).ok());
    uint64_t g = 2;
    rocksdb::WriteBatch uncommitted;
    ASSERT_TRUE(uncommitted.Delete(std::string(kCurrentKey)).ok());
    ASSERT_TRUE(uncommitted.Put("kvidx/pending", std::string(reinterpret_cast<const char*>(&g), 8)).ok());
    ASSERT_TRUE(db->Write(rocksdb::WriteOptions(), &uncommitted).ok());
    ASSERT_TRUE(db->Flush(rocksdb::FlushOptions()).ok());

    rocksdb::WriteOptions wo;
    wo.sync = true;
    const std::string filler(4000, 'f');
    ASSERT_TRUE(db->Put(wo, "kvidx/test-before", filler).ok());
    rocksdb::WriteBatch commit;
    ASSERT_TRUE(commit.Put(std::string(kCurrentKey), manifest).ok());
    ASSERT_TRUE(commit.Delete("kvidx/pending").ok());
    ASSERT_TRUE(db->Write(wo, &commit).ok());
    ASSERT_TRUE(db->Put(wo, "kvidx/test-after", filler).ok());
    ASSERT_TRUE(db->Close().ok());  // with the WAL on, Close does not flush
    db.reset();

    // The WAL holding the commit, and where in it the manifest value is.
    for (const fs::path& wal : Wals()) {
      std::ifstream in(wal, std::ios::binary);
      std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      size_t at = bytes.find(manifest);
      if (at != std::string::npos) {
        wal_ = wal;
        commit_at_ = at;
      }
    }
    ASSERT_FALSE(wal_.empty()) << "no WAL holds the commit";
    ASSERT_GT(fs::file_size(wal_), commit_at_ + manifest.size() + 4000);
  }
  fs::path wal_;
  uintmax_t commit_at_ = 0;
};

TEST_F(CommitInTheWal, UndamagedLoadsTheCommittedGenerationAndEmptiesTheWal) {
  std::optional<SnapshotData> out;
  Status st = OpenAndLoad(tmp_.db(), &out);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_TRUE(out.has_value());
  EXPECT_TRUE(SameSnapshot(*out, SyntheticSnapshot(2, kOwners)));
  // Open moved what it recovered into SST files: WAL damage now costs nothing.
  for (const fs::path& wal : Wals()) EXPECT_EQ(fs::file_size(wal), 0u) << wal;
}

TEST_F(CommitInTheWal, SixteenBytesFlippedInTheCommitRecord) {
  FlipBytes(wal_, commit_at_, 16);
  ExpectRejected(wal_.string());
}

TEST_F(CommitInTheWal, TruncatedInTheCommitRecord) {
  fs::resize_file(wal_, commit_at_ + 8);
  ExpectRejected(wal_.string());
}

TEST_F(CommitInTheWal, TruncatedToHalf) {
  fs::resize_file(wal_, fs::file_size(wal_) / 2);
  ExpectIntactOrRejected();
}

}  // namespace
}  // namespace kvidx::snapshot
