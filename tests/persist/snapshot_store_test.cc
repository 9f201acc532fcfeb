// SnapshotStore against a real RocksDB in a temp dir: round trips, atomic
// replacement, and every kind of damaged directory.
#include "server/snapshot_store.h"

#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "persist/persist_test_util.h"

namespace kvidx::snapshot {
namespace {

namespace fs = std::filesystem;
using testing::FilesEndingWith;
using testing::FlipByte;
using testing::Largest;
using testing::SyntheticSnapshot;
using testing::TempDir;

constexpr KvGroup kG0{0, GroupKind::kAbsent};

std::vector<BlockKey> IntKeys(uint64_t from, uint64_t to) {
  std::vector<BlockKey> out;
  for (uint64_t v = from; v < to; ++v) out.push_back(BlockKey::FromU64(v * 0x9e3779b97f4a7c15ull));
  return out;
}

// Everything a restart needs, captured from live objects.
SnapshotData Capture(const BlockIndex& index, const TierRegistry& tiers, const SourceRegistry& sources) {
  SnapshotData d;
  index.Dump(&d.index);
  for (size_t i = 0; i < tiers.size(); ++i) d.tier_names.emplace_back(tiers.Name(static_cast<Tier>(i)));
  for (SourceId s = 0; s < sources.size(); ++s) {
    ingest::SourceWatermark w;
    w.source_id = s;
    w.replica = SourceRegistry::Reader(sources).Get(s)->replica;
    w.dp_rank = SourceRegistry::Reader(sources).Get(s)->dp_rank;
    w.model = "m1";
    w.has_seq = true;
    w.last_seq = 1000 + s;
    w.last_batch_fingerprint = testing::Mix(s);
    w.last_batch_ts = 1700000000.5 + s;
    w.state = static_cast<uint8_t>(index.GetSourceState(s));
    d.sources.push_back(w);
  }
  return d;
}

std::unique_ptr<SnapshotStore> MustOpen(const std::string& dir, StoreOptions o = {}) {
  auto r = SnapshotStore::Open(dir, o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(r.value()) : nullptr;
}

// Opens and loads; the first error, or OK with `out` set.
Status OpenAndLoad(const std::string& dir, std::optional<SnapshotData>* out = nullptr, StoreOptions o = {}) {
  auto r = SnapshotStore::Open(dir, o);
  if (!r.ok()) return r.status();
  auto l = r.value()->LoadLatest();
  if (!l.ok()) return l.status();
  if (out != nullptr) *out = std::move(l.value());
  return Status::Ok();
}

void WriteSnapshots(const std::string& dir, std::initializer_list<uint64_t> ks, size_t owners = 20000) {
  StoreOptions o;
  o.owners_per_chunk = 4096;
  auto store = MustOpen(dir, o);
  ASSERT_NE(store, nullptr);
  for (uint64_t k : ks) ASSERT_TRUE(store->Write(SyntheticSnapshot(k, owners)).ok());
}

std::unique_ptr<rocksdb::DB> RawOpen(const std::string& dir) {
  rocksdb::DB* db = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(rocksdb::Options(), dir + "/rocksdb", &db);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return std::unique_ptr<rocksdb::DB>(db);
}

bool Contains(const Status& st, std::string_view what) { return st.message().find(what) != std::string::npos; }

// ---- Round trips -------------------------------------------------------------

TEST(SnapshotStore, FreshDirectoryHasNoSnapshot) {
  TempDir tmp;
  auto store = MustOpen(tmp.db());
  ASSERT_NE(store, nullptr);
  auto l = store->LoadLatest();
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_FALSE(l.value().has_value());
  EXPECT_EQ(store->current_generation(), 0u);
  EXPECT_LT(store->stats().AgeSeconds(1), 0);
  store.reset();
  std::optional<SnapshotData> out;
  ASSERT_TRUE(OpenAndLoad(tmp.db(), &out).ok());
  EXPECT_FALSE(out.has_value());
}

TEST(SnapshotStore, RoundTripThroughTheIndexGivesEqualContents) {
  BlockIndex index;
  TierRegistry tiers;
  SourceRegistry sources;
  ModelId m1 = index.AddModel("m1").value();
  ModelId m2 = index.AddModel("m2", ModelOptions{1024, true}).value();
  Tier fs_tier = tiers.Intern("FS").value();
  Tier obj_tier = tiers.Intern("OBJ").value();
  SourceId s0 = sources.Register("r0", 0).value();
  SourceId s1 = sources.Register("r0", 1).value();
  SourceId s2 = sources.Register("r1", 0).value();
  sources.Register("r2-removed", 0).value();  // no blocks, still persisted with its id

  auto chain = IntKeys(1, 200);
  ASSERT_TRUE(index.Store(m1, s0, Tier::kGpu, kG0, chain, std::nullopt).ok());
  ASSERT_TRUE(index.Store(m1, s0, Tier::kGpu, kG0, std::span(chain).subspan(0, 50), std::nullopt,
                          StoreOrigin::kReused).ok());   // hits
  ASSERT_TRUE(index.Store(m1, s1, Tier::kGpu, kG0, std::span(chain).subspan(0, 100), std::nullopt,
                          StoreOrigin::kNew).ok());
  ASSERT_TRUE(index.Store(m1, s1, Tier::kGpu, kG0, std::span(chain).subspan(0, 10), std::nullopt,
                          StoreOrigin::kNew).ok());      // refcount 2
  ASSERT_TRUE(index.Store(m1, s2, Tier::kCpu, kG0, chain, std::nullopt).ok());
  ASSERT_TRUE(index.Store(m1, s2, fs_tier, kG0, std::span(chain).subspan(50), chain[49]).ok());
  ASSERT_TRUE(index.Remove(m1, s0, Tier::kGpu, kG0, std::span(chain).subspan(150)).ok());
  std::vector<BlockKey> bytes_keys;
  uint8_t digest[40];
  for (int i = 0; i < 40; ++i) digest[i] = static_cast<uint8_t>(i * 7 + 1);
  for (size_t len : {0, 1, 8, 9, 16, 32, 40}) {
    digest[0] = static_cast<uint8_t>(len);
    bytes_keys.push_back(BlockKey::FromBytes(digest, len));
  }
  ASSERT_TRUE(index.Store(m2, s2, obj_tier, KvGroup{3, GroupKind::kOther}, bytes_keys, std::nullopt).ok());
  ASSERT_TRUE(index.Store(m2, s0, Tier::kGpu, KvGroup{1, GroupKind::kFullAttention}, bytes_keys, std::nullopt).ok());
  index.TestOnlySetClock(s1, (uint64_t{1} << 24) - 5);   // the largest clocks a 24-bit stamp index holds
  index.SetSourceState(s1, SourceState::kDegraded);
  index.SetSourceState(s0, SourceState::kExact);

  SnapshotData data = Capture(index, tiers, sources);
  ASSERT_GT(data.index.owners.size(), 400u);
  data.created_unix_ms = 1700000000000;
  TempDir tmp;
  {
    StoreOptions o;
    o.owners_per_chunk = 100;  // several owner chunks
    auto store = MustOpen(tmp.db(), o);
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->Write(data).ok());
    EXPECT_EQ(store->stats().snapshots_ok.load(), 1u);
    EXPECT_GT(store->stats().last_bytes.load(), 0u);
    EXPECT_NEAR(store->stats().AgeSeconds(1700000002500), 2.5, 1e-9);
  }
  std::optional<SnapshotData> loaded;
  auto store = MustOpen(tmp.db());
  auto l = store->LoadLatest();
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  loaded = std::move(l.value());
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->format_version, kFormatVersion);
  EXPECT_TRUE(SameSnapshot(*loaded, data));
  EXPECT_EQ(store->stats().restored_blocks.load(), data.index.owners.size());

  BlockIndex index2;
  TierRegistry tiers2;
  SourceRegistry sources2;
  ASSERT_TRUE(ApplySnapshot(*loaded, &tiers2, &sources2, &index2, &store->stats()).ok());
  IndexSnapshot again;
  index2.Dump(&again);
  EXPECT_TRUE(SameContents(again, data.index));
  EXPECT_EQ(tiers2.Name(obj_tier), "OBJ");
  EXPECT_EQ(*sources2.Find("r1", 0), s2);
  EXPECT_EQ(index2.GetSourceState(s1), SourceState::kDegraded);
  EXPECT_EQ(index2.GetSourceState(s0), SourceState::kExact);
  // Queries answer the same.
  PrefixMatch a, b;
  ASSERT_TRUE(index.FindPrefix(m1, chain, PrefixFilter{}, &a).ok());
  ASSERT_TRUE(index2.FindPrefix(m1, chain, PrefixFilter{}, &b).ok());
  EXPECT_EQ(a.BestGpuBlocks(), b.BestGpuBlocks());
  EXPECT_EQ(a.sources.size(), b.sources.size());

  // ApplySnapshot into registries that are not fresh is refused.
  BlockIndex index3;
  TierRegistry tiers3;
  SourceRegistry sources3;
  sources3.Register("someone-else", 0).value();
  EXPECT_EQ(ApplySnapshot(*loaded, &tiers3, &sources3, &index3).code(), StatusCode::kFailedPrecondition);
}

TEST(SnapshotStore, EmptyIndexRoundTrips) {
  TempDir tmp;
  SnapshotData d = SyntheticSnapshot(3, 0, 0);
  d.index.source_clocks.clear();
  {
    auto store = MustOpen(tmp.db());
    ASSERT_TRUE(store->Write(d).ok());
  }
  std::optional<SnapshotData> out;
  ASSERT_TRUE(OpenAndLoad(tmp.db(), &out).ok());
  ASSERT_TRUE(out.has_value());
  EXPECT_TRUE(SameSnapshot(*out, d));
}

TEST(SnapshotStore, LatestWinsAndOlderGenerationsAreDeleted) {
  TempDir tmp;
  WriteSnapshots(tmp.db(), {1, 2, 3}, 30000);
  std::optional<SnapshotData> out;
  ASSERT_TRUE(OpenAndLoad(tmp.db(), &out).ok());
  ASSERT_TRUE(out.has_value());
  EXPECT_TRUE(SameSnapshot(*out, SyntheticSnapshot(3, 30000)));
  auto db = RawOpen(tmp.db());
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
  std::set<uint64_t> gens;
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    ParsedChunkKey k;
    if (ParseChunkKey(it->key().ToStringView(), &k)) gens.insert(k.gen);
  }
  EXPECT_EQ(gens, (std::set<uint64_t>{3}));
}

TEST(SnapshotStore, InvalidSnapshotIsRejectedAndThePreviousStays) {
  TempDir tmp;
  auto store = MustOpen(tmp.db());
  ASSERT_TRUE(store->Write(SyntheticSnapshot(1, 100)).ok());
  SnapshotData bad = SyntheticSnapshot(2, 100);
  bad.sources.pop_back();  // owners name a source without a watermark
  Status st = store->Write(bad);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_EQ(store->stats().snapshots_failed.load(), 1u);
  auto l = store->LoadLatest();
  ASSERT_TRUE(l.ok());
  ASSERT_TRUE(l.value().has_value());
  EXPECT_EQ(l.value()->created_unix_ms, 1u);
}

TEST(SnapshotStore, InterruptedWriteLeavesAnOrphanThatOpenDeletes) {
  TempDir tmp;
  WriteSnapshots(tmp.db(), {1, 2});
  {
    // What a crash between ingestion and the manifest write leaves behind.
    auto db = RawOpen(tmp.db());
    uint64_t g = 3;
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), "kvidx/pending", std::string(reinterpret_cast<char*>(&g), 8)).ok());
    uint64_t sum;
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), ChunkKey(3, ChunkType::kClocks, 0),
                        EncodeChunk(3, ChunkType::kClocks, 0, "", &sum)).ok());
    std::ofstream(tmp.db() + "/rocksdb/gen-3.sst.kvidx-tmp") << "partial";
  }
  std::optional<SnapshotData> out;
  ASSERT_TRUE(OpenAndLoad(tmp.db(), &out).ok());
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(out->created_unix_ms, 2u);
  EXPECT_TRUE(FilesEndingWith(tmp.db() + "/rocksdb", ".kvidx-tmp").empty());
  auto db = RawOpen(tmp.db());
  std::string v;
  EXPECT_TRUE(db->Get(rocksdb::ReadOptions(), ChunkKey(3, ChunkType::kClocks, 0), &v).IsNotFound());
  db.reset();
  // The next write does not reuse generation 3.
  auto store = MustOpen(tmp.db());
  ASSERT_TRUE(store->Write(SyntheticSnapshot(4, 10)).ok());
  EXPECT_EQ(store->current_generation(), 4u);
}

// A generation written before the owners' `follows` column (format
// version 1: chunks, owner columns and manifest as that build wrote them)
// still loads after an upgrade, with no record following another.
TEST(SnapshotStore, AFormatVersionOneGenerationLoads) {
  TempDir tmp;
  SnapshotData data = SyntheticSnapshot(1, 20000);
  for (size_t i = 0; i < data.index.owners.size(); i += 3) data.index.owners[i].follows = true;
  {
    StoreOptions o;
    o.owners_per_chunk = 4096;
    ASSERT_TRUE(MustOpen(tmp.db(), o)->Write(data).ok());
  }
  {
    auto db = RawOpen(tmp.db());
    std::string v;
    ASSERT_TRUE(db->Get(rocksdb::ReadOptions(), std::string(kCurrentKey), &v).ok());
    Manifest m;
    ASSERT_TRUE(DecodeManifest(v, &m).ok());
    ASSERT_EQ(m.format_version, kFormatVersion);
    std::string sums;
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
    const std::string end = GenKey(m.gen + 1);
    for (it->Seek(GenKey(m.gen)); it->Valid() && it->key().ToString() < end; it->Next()) {
      ParsedChunkKey k;
      ASSERT_TRUE(ParseChunkKey(it->key().ToString(), &k));
      std::string_view payload;
      uint64_t sum = 0;
      const std::string value = it->value().ToString();
      ASSERT_TRUE(DecodeChunk(value, k.gen, k.type, k.index, &payload, &sum).ok());
      std::string old_payload(payload);
      if (k.type == ChunkType::kOwners) {
        std::vector<OwnerRecord> owners;
        ASSERT_TRUE(DecodeOwners(payload, &owners).ok());
        EncodeOwners(owners, &old_payload, kOldestFormatVersion);
      }
      const std::string old_value = EncodeChunk(k.gen, k.type, k.index, old_payload, &sum, kOldestFormatVersion);
      ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), it->key(), old_value).ok());
      sums.append(reinterpret_cast<const char*>(&sum), sizeof(sum));
    }
    m.format_version = kOldestFormatVersion;
    m.chunks_digest = XXH3_64bits(sums.data(), sums.size());
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), std::string(kCurrentKey), EncodeManifest(m)).ok());
  }
  std::optional<SnapshotData> out;
  ASSERT_TRUE(OpenAndLoad(tmp.db(), &out).ok());
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(out->format_version, kOldestFormatVersion);
  for (OwnerRecord& o : data.index.owners) o.follows = false;
  EXPECT_TRUE(SameSnapshot(*out, data));
}

TEST(SnapshotStore, SecondOpenOfALockedDirectoryIsUnavailableNotCorrupt) {
  TempDir tmp;
  WriteSnapshots(tmp.db(), {1});
  auto first = MustOpen(tmp.db());
  StoreOptions o;
  o.on_corrupt = OnCorrupt::kStartEmpty;
  auto second = SnapshotStore::Open(tmp.db(), o);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable) << second.status().ToString();
  EXPECT_TRUE(FilesEndingWith(tmp.path(), "", "db.corrupt-").empty());
}

// ---- Damaged directories -----------------------------------------------------

class Damaged : public ::testing::Test {
 protected:
  void SetUp() override { WriteSnapshots(tmp_.db(), {1, 2}, 20000); }
  // Fails with `code`, naming `what`; and with kStartEmpty, starts empty.
  void ExpectRejected(StatusCode code, std::string_view what) {
    Status st = OpenAndLoad(tmp_.db());
    ASSERT_FALSE(st.ok()) << "damaged directory loaded silently";
    EXPECT_EQ(st.code(), code) << st.ToString();
    EXPECT_TRUE(Contains(st, what)) << st.ToString() << " does not mention " << what;
    EXPECT_TRUE(Contains(st, tmp_.db())) << st.ToString();
    // Still refused on a second try (nothing was "repaired" into emptiness).
    EXPECT_FALSE(OpenAndLoad(tmp_.db()).ok());

    StoreOptions o;
    o.on_corrupt = OnCorrupt::kStartEmpty;
    auto r = SnapshotStore::Open(tmp_.db(), o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    auto& store = *r.value();
    auto l = store.LoadLatest();
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    EXPECT_FALSE(l.value().has_value());
    EXPECT_EQ(store.stats().corrupt_start_empty_total.load(), 1u);
    EXPECT_EQ(store.corruption().code(), code);
    ASSERT_FALSE(store.moved_aside_to().empty());
    EXPECT_TRUE(fs::exists(store.moved_aside_to()));
    EXPECT_TRUE(store.moved_aside_to().starts_with(tmp_.db() + ".corrupt-")) << store.moved_aside_to();
    ASSERT_TRUE(store.Write(SyntheticSnapshot(9, 100)).ok());
    r.value().reset();
    std::optional<SnapshotData> out;
    ASSERT_TRUE(OpenAndLoad(tmp_.db(), &out).ok());
    ASSERT_TRUE(out.has_value());
    EXPECT_EQ(out->created_unix_ms, 9u);
  }
  void RawPut(const std::string& key, const std::string& value) {
    auto db = RawOpen(tmp_.db());
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), key, value).ok());
  }
  void RawDelete(const std::string& key) {
    auto db = RawOpen(tmp_.db());
    ASSERT_TRUE(db->Delete(rocksdb::WriteOptions(), key).ok());
  }
  std::string RawGet(const std::string& key) {
    auto db = RawOpen(tmp_.db());
    std::string v;
    EXPECT_TRUE(db->Get(rocksdb::ReadOptions(), key, &v).ok());
    return v;
  }
  TempDir tmp_;
};

TEST_F(Damaged, TruncatedSst) {
  fs::path sst = Largest(FilesEndingWith(tmp_.db() + "/rocksdb", ".sst"));
  fs::resize_file(sst, fs::file_size(sst) / 2);
  ExpectRejected(StatusCode::kCorruption, "");
}

TEST_F(Damaged, BitFlipInSstData) {
  fs::path sst = Largest(FilesEndingWith(tmp_.db() + "/rocksdb", ".sst"));
  FlipByte(sst, fs::file_size(sst) / 3);
  ExpectRejected(StatusCode::kCorruption, "");
}

TEST_F(Damaged, TruncatedManifestFile) {
  fs::path m = Largest(FilesEndingWith(tmp_.db() + "/rocksdb", "", "MANIFEST-"));
  ASSERT_FALSE(m.empty());
  fs::resize_file(m, fs::file_size(m) / 2);
  Status st = OpenAndLoad(tmp_.db());
  ASSERT_FALSE(st.ok()) << "truncated MANIFEST loaded silently";
  EXPECT_TRUE(st.code() == StatusCode::kCorruption) << st.ToString();
}

TEST_F(Damaged, StartEmptyOnAMountPointMovesTheContentsAsideInPlace) {
  fs::resize_file(tmp_.db() + "/rocksdb/CURRENT", 0);
  fs::create_directory(tmp_.db() + "/lost+found");
  StoreOptions o;
  o.on_corrupt = OnCorrupt::kStartEmpty;
  o.move_aside_in_place = true;   // what happens when <dir> cannot be renamed
  {
    auto r = SnapshotStore::Open(tmp_.db(), o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r.value()->stats().corrupt_start_empty_total.load(), 1u);
    const std::string moved = r.value()->moved_aside_to();
    EXPECT_TRUE(moved.starts_with(tmp_.db() + "/corrupt-")) << moved;
    EXPECT_TRUE(fs::exists(moved + "/rocksdb/CURRENT"));      // the bad store, kept for a post-mortem
    EXPECT_TRUE(fs::exists(tmp_.db() + "/lost+found"));       // not ours: left alone
    ASSERT_TRUE(r.value()->Write(SyntheticSnapshot(9, 100)).ok());
  }
  // The moved-aside directory and lost+found do not make the store foreign.
  std::optional<SnapshotData> out;
  ASSERT_TRUE(OpenAndLoad(tmp_.db(), &out).ok());
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(out->created_unix_ms, 9u);
}

TEST(SnapshotStoreDir, AFreshVolumeWithLostAndFoundIsAcceptedAsEmpty) {
  TempDir tmp;
  fs::create_directories(tmp.db() + "/lost+found");
  auto r = SnapshotStore::Open(tmp.db());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto l = r.value()->LoadLatest();
  ASSERT_TRUE(l.ok());
  EXPECT_FALSE(l.value().has_value());
}

TEST_F(Damaged, TruncatedCurrentFile) {
  fs::resize_file(tmp_.db() + "/rocksdb/CURRENT", 0);
  ExpectRejected(StatusCode::kCorruption, "CURRENT");
}

TEST_F(Damaged, MissingCurrentFile) {
  fs::remove(tmp_.db() + "/rocksdb/CURRENT");
  ExpectRejected(StatusCode::kCorruption, "has no RocksDB CURRENT file");
}

TEST_F(Damaged, NotASnapshotDirectory) {
  fs::remove_all(tmp_.db());
  fs::create_directories(tmp_.db());
  std::ofstream(tmp_.db() + "/notes.txt") << "hello";
  ExpectRejected(StatusCode::kCorruption, "not a kvidx snapshot directory");
}

TEST(SnapshotStore, InterruptedCreationStartsOver) {
  TempDir tmp;
  std::filesystem::create_directories(tmp.db() + "/rocksdb.init");
  std::ofstream(tmp.db() + "/rocksdb.init/MANIFEST-000001") << "half";
  std::optional<SnapshotData> out;
  ASSERT_TRUE(OpenAndLoad(tmp.db(), &out).ok());
  EXPECT_FALSE(out.has_value());
  EXPECT_FALSE(fs::exists(tmp.db() + "/rocksdb.init"));
}

TEST_F(Damaged, BitFlippedChunkValueThatRocksDbAccepts) {
  std::string key = ChunkKey(2, ChunkType::kOwners, 1);
  std::string v = RawGet(key);
  ASSERT_GT(v.size(), 100u);
  v[v.size() / 2] ^= 0x04;
  RawPut(key, v);
  ExpectRejected(StatusCode::kCorruption, "generation 2 owners#1: checksum mismatch");
}

TEST_F(Damaged, ChunkValueCopiedUnderAnotherKey) {
  RawPut(ChunkKey(2, ChunkType::kOwners, 1), RawGet(ChunkKey(2, ChunkType::kOwners, 2)));
  ExpectRejected(StatusCode::kCorruption, "belongs to generation 2 owners#2");
}

TEST_F(Damaged, ChunkInAnotherVersionThanItsManifest) {
  std::string key = ChunkKey(2, ChunkType::kOwners, 1);
  std::string_view payload;
  uint64_t sum = 0;
  const std::string v = RawGet(key);
  ASSERT_TRUE(DecodeChunk(v, 2, ChunkType::kOwners, 1, &payload, &sum).ok());
  RawPut(key, EncodeChunk(2, ChunkType::kOwners, 1, payload, &sum, kOldestFormatVersion));
  ExpectRejected(StatusCode::kCorruption, "owners#1 is in format version 1, its manifest in 2");
}

TEST_F(Damaged, MissingOwnerChunk) {
  RawDelete(ChunkKey(2, ChunkType::kOwners, 1));
  ExpectRejected(StatusCode::kCorruption, "missing chunk generation 2 owners#1");
}

TEST_F(Damaged, MissingLastChunk) {
  RawDelete(ChunkKey(2, ChunkType::kTiers, 0));
  ExpectRejected(StatusCode::kCorruption, "missing chunk generation 2 tiers#0");
}

TEST_F(Damaged, ExtraChunk) {
  uint64_t sum;
  RawPut(ChunkKey(2, ChunkType::kOwners, 999), EncodeChunk(2, ChunkType::kOwners, 999, "", &sum));
  ExpectRejected(StatusCode::kCorruption, "owners#999");
}

TEST_F(Damaged, ManifestLost) {
  RawDelete(std::string(kCurrentKey));
  ExpectRejected(StatusCode::kCorruption, "manifest lost");
}

TEST_F(Damaged, ManifestBitFlip) {
  std::string v = RawGet(std::string(kCurrentKey));
  v[12] ^= 0x01;
  RawPut(std::string(kCurrentKey), v);
  ExpectRejected(StatusCode::kCorruption, "manifest checksum mismatch");
}

TEST_F(Damaged, ManifestPointsAtMissingGeneration) {
  Manifest m;
  ASSERT_TRUE(DecodeManifest(RawGet(std::string(kCurrentKey)), &m).ok());
  auto db = RawOpen(tmp_.db());
  rocksdb::WriteBatch wb;
  ASSERT_TRUE(wb.DeleteRange(GenKey(0), GenKey(100)).ok());
  ASSERT_TRUE(db->Write(rocksdb::WriteOptions(), &wb).ok());
  db.reset();
  ExpectRejected(StatusCode::kCorruption, "none of its chunks exist");
}

TEST_F(Damaged, UnknownFormatVersion) {
  RawPut(std::string(kFormatKey), EncodeFormatRecord(99));
  ExpectRejected(StatusCode::kFailedPrecondition, "format version 99 is not supported");
}

TEST_F(Damaged, UnknownChunkVersion) {
  std::string key = ChunkKey(2, ChunkType::kModels, 0);
  std::string v = RawGet(key);
  v[4] = 7;  // envelope version field
  RawPut(key, v);
  ExpectRejected(StatusCode::kFailedPrecondition, "format version 7");
}

TEST_F(Damaged, FormatRecordMissing) {
  RawDelete(std::string(kFormatKey));
  ExpectRejected(StatusCode::kCorruption, "kvidx/format");
}

}  // namespace
}  // namespace kvidx::snapshot
