// Snapshot record encoding: envelopes, payload codecs, ClassifyResume.
#include "server/snapshot_format.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ingest/batch_fingerprint.h"
#include "persist/persist_test_util.h"
#include "server/testing/resume_decision.h"

namespace kvidx::snapshot {
namespace {

using testing::SyntheticSnapshot;

ingest::SourceWatermark Wm(uint64_t last_seq, uint64_t fingerprint) {
  ingest::SourceWatermark w;
  w.has_seq = true;
  w.last_seq = last_seq;
  w.last_batch_fingerprint = fingerprint;
  return w;
}

TEST(ClassifyResume, SameEngineContinues) {
  EXPECT_EQ(ClassifyResume(Wm(41, 0xabc), 41, 0xabc), ResumeDecision::kContinue);
  EXPECT_EQ(ClassifyResume(Wm(0, 7), 0, 7), ResumeDecision::kContinue);
}

TEST(ClassifyResume, SameSeqOtherFingerprintIsARestartedEngine) {
  // The restarted engine's new stream happens to be at our seq already.
  EXPECT_EQ(ClassifyResume(Wm(41, 0xabc), 41, 0xabd), ResumeDecision::kEngineRestarted);
}

TEST(ClassifyResume, NothingReplayedOrSeqBelowOursIsARestartedEngine) {
  EXPECT_EQ(ClassifyResume(Wm(41, 0xabc), std::nullopt, 0), ResumeDecision::kEngineRestarted);
  EXPECT_EQ(ClassifyResume(Wm(41, 0xabc), 3, 0xabc), ResumeDecision::kEngineRestarted);
}

TEST(ClassifyResume, FirstReplayedAboveOursIsAnOverrun) {
  EXPECT_EQ(ClassifyResume(Wm(41, 0xabc), 42, 0xabc), ResumeDecision::kOverrun);
  EXPECT_EQ(ClassifyResume(Wm(41, 0xabc), 1000, 1), ResumeDecision::kOverrun);
}

TEST(ClassifyResume, NoWatermarkIsAColdStart) {
  ingest::SourceWatermark w;  // has_seq false
  EXPECT_EQ(ClassifyResume(w, 0, 0), ResumeDecision::kEngineRestarted);
  EXPECT_EQ(ClassifyResume(w, std::nullopt, 0), ResumeDecision::kEngineRestarted);
  EXPECT_EQ(ResumeDecisionName(ResumeDecision::kOverrun), "overrun");
}

// Snapshots written before store this value: it must stay XXH3-64.
TEST(BatchFingerprint, IsXxh3OfThePayload) {
  EXPECT_EQ(ingest::BatchFingerprint({}), 0x2D06800538D394C2ull);  // XXH3_64bits("")
  EXPECT_EQ(ingest::BatchFingerprint("abc"), 0x78AF5F94892F3950ull);  // XXH3_64bits("abc")
  EXPECT_NE(ingest::BatchFingerprint("\x01\x02\x03"), ingest::BatchFingerprint("\x01\x02\x04"));
}

TEST(ChunkKeys, OrderAndParse) {
  EXPECT_LT(ChunkKey(1, ChunkType::kTiers, 0), ChunkKey(2, ChunkType::kClocks, 0));
  EXPECT_LT(ChunkKey(1, ChunkType::kOwners, 255), ChunkKey(1, ChunkType::kOwners, 256));
  EXPECT_LT(ChunkKey(1, ChunkType::kOwners, 9), ChunkKey(1, ChunkType::kSources, 0));
  EXPECT_LT(GenKey(3), ChunkKey(3, ChunkType::kClocks, 0));
  EXPECT_LT(ChunkKey(3, ChunkType::kTiers, 0), GenKey(4));
  EXPECT_LT(ChunkKey(~0ull, ChunkType::kTiers, ~0u), std::string(kFormatKey));
  ParsedChunkKey k;
  ASSERT_TRUE(ParseChunkKey(ChunkKey(77, ChunkType::kOwners, 65537), &k));
  EXPECT_EQ(k.gen, 77u);
  EXPECT_EQ(k.type, ChunkType::kOwners);
  EXPECT_EQ(k.index, 65537u);
  EXPECT_FALSE(ParseChunkKey("kvidx/current", &k));
  std::string bad = ChunkKey(1, ChunkType::kOwners, 0);
  bad[9] = 'z';
  EXPECT_FALSE(ParseChunkKey(bad, &k));
  EXPECT_EQ(ChunkName(5, ChunkType::kOwners, 17), "generation 5 owners#17");
}

TEST(ChunkEnvelope, EverySingleBitFlipIsDetected) {
  uint64_t sum = 0;
  std::string value = EncodeChunk(9, ChunkType::kModels, 0, "payload bytes", &sum);
  std::string_view payload;
  uint64_t got = 0;
  ASSERT_TRUE(DecodeChunk(value, 9, ChunkType::kModels, 0, &payload, &got).ok());
  EXPECT_EQ(payload, "payload bytes");
  EXPECT_EQ(got, sum);
  for (size_t bit = 0; bit < value.size() * 8; ++bit) {
    std::string v = value;
    v[bit / 8] = static_cast<char>(v[bit / 8] ^ (1 << (bit % 8)));
    Status st = DecodeChunk(v, 9, ChunkType::kModels, 0, &payload, &got);
    EXPECT_FALSE(st.ok()) << "bit " << bit;
    // A flip in the version field reads as an unknown version; every other is corruption.
    if (bit / 8 >= 4 && bit / 8 < 8) {
      EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << "bit " << bit;
    } else {
      EXPECT_EQ(st.code(), StatusCode::kCorruption) << "bit " << bit;
    }
  }
  for (size_t len = 0; len < value.size(); ++len) {
    EXPECT_EQ(DecodeChunk(value.substr(0, len), 9, ChunkType::kModels, 0, &payload, &got).code(),
              StatusCode::kCorruption);
  }
}

TEST(ChunkEnvelope, ValueUnderAnotherKeyIsRejected) {
  uint64_t sum = 0;
  std::string value = EncodeChunk(9, ChunkType::kOwners, 3, "x", &sum);
  std::string_view payload;
  Status st = DecodeChunk(value, 9, ChunkType::kOwners, 4, &payload, &sum);
  EXPECT_EQ(st.code(), StatusCode::kCorruption);
  EXPECT_NE(st.message().find("belongs to generation 9 owners#3"), std::string::npos) << st.message();
  EXPECT_FALSE(DecodeChunk(value, 10, ChunkType::kOwners, 3, &payload, &sum).ok());
  EXPECT_FALSE(DecodeChunk(value, 9, ChunkType::kSources, 3, &payload, &sum).ok());
}

TEST(Manifest, RoundTripAndVersion) {
  Manifest m;
  m.gen = 12;
  m.created_unix_ms = 1700000000123;
  m.num_owner_chunks = 3;
  m.num_chunks = 7;
  m.num_owners = 150000;
  m.chunks_digest = 0x1234;
  std::string v = EncodeManifest(m);
  Manifest got;
  ASSERT_TRUE(DecodeManifest(v, &got).ok());
  EXPECT_EQ(got.gen, 12u);
  EXPECT_EQ(got.num_owners, 150000u);
  EXPECT_EQ(got.chunks_digest, 0x1234u);
  m.format_version = kFormatVersion + 1;
  Status st = DecodeManifest(EncodeManifest(m), &got);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("version " + std::to_string(kFormatVersion + 1)), std::string::npos) << st.message();
  m.format_version = kOldestFormatVersion;   // older snapshots stay readable
  ASSERT_TRUE(DecodeManifest(EncodeManifest(m), &got).ok());
  EXPECT_EQ(got.format_version, kOldestFormatVersion);
  m.format_version = 0;
  EXPECT_EQ(DecodeManifest(EncodeManifest(m), &got).code(), StatusCode::kFailedPrecondition);
  for (size_t len = 0; len < v.size(); ++len) EXPECT_FALSE(DecodeManifest(v.substr(0, len), &got).ok());
  v[20] ^= 1;
  EXPECT_EQ(DecodeManifest(v, &got).code(), StatusCode::kCorruption);

  uint32_t version = 0;
  EXPECT_TRUE(DecodeFormatRecord(EncodeFormatRecord(kFormatVersion), &version).ok());
  st = DecodeFormatRecord(EncodeFormatRecord(99), &version);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("version 99"), std::string::npos);
  EXPECT_EQ(DecodeFormatRecord("garbage", &version).code(), StatusCode::kCorruption);
}

TEST(Owners, EveryKeyFormRoundTrips) {
  std::vector<OwnerRecord> owners;
  uint8_t digest[64];
  for (int i = 0; i < 64; ++i) digest[i] = static_cast<uint8_t>(0xa0 + i);
  std::vector<BlockKey> keys = {BlockKey::FromU64(0), BlockKey::FromU64(~0ull), BlockKey::FromI64(-5),
                                BlockKey::FromBytes(digest, 0)};
  for (size_t len : {1, 7, 8, 9, 16, 31, 32, 64}) keys.push_back(BlockKey::FromBytes(digest, len));
  uint32_t n = 0;
  for (const BlockKey& k : keys) {
    OwnerRecord o;
    o.model = n % 3;
    o.key = k;
    o.source = 65533 - n;
    o.tier = static_cast<Tier>(n % kMaxTiers);
    o.group = n * 1000;
    o.refcount = n + 1;
    o.hits = 0xffffffffu - n;
    o.stamp = n * 77;
    o.follows = n % 2 == 1;
    owners.push_back(o);
    ++n;
  }
  std::string buf;
  EncodeOwners(owners, &buf);
  std::vector<OwnerRecord> got;
  ASSERT_TRUE(DecodeOwners(buf, &got).ok());
  EXPECT_EQ(got, owners);
  // Version 1 has no follows column: read back, no record follows.
  std::string v1;
  EncodeOwners(owners, &v1, kOldestFormatVersion);
  EXPECT_EQ(v1.size() + owners.size(), buf.size());
  got.clear();
  ASSERT_TRUE(DecodeOwners(v1, &got, kOldestFormatVersion).ok());
  std::vector<OwnerRecord> unflagged = owners;
  for (OwnerRecord& o : unflagged) o.follows = false;
  EXPECT_EQ(got, unflagged);
  got.clear();
  // Truncation anywhere is a Corruption, never a crash or a partial result.
  for (size_t len = 0; len < buf.size(); ++len) {
    std::vector<OwnerRecord> part;
    EXPECT_EQ(DecodeOwners(std::string_view(buf).substr(0, len), &part).code(), StatusCode::kCorruption) << len;
    EXPECT_TRUE(part.empty());
  }
  // A zero refcount or an out-of-range tier is rejected.
  std::string bad = buf;
  bad[4 + keys.size() * 2 * 2] = static_cast<char>(kMaxTiers);  // first tier byte
  EXPECT_EQ(DecodeOwners(bad, &got).code(), StatusCode::kCorruption);
  // A follows byte other than 0 or 1 is too.
  bad = buf;
  bad[4 + keys.size() * (2 + 2 + 1 + 1)] = 2;   // first follows byte
  Status st = DecodeOwners(bad, &got);
  EXPECT_EQ(st.code(), StatusCode::kCorruption);
  EXPECT_NE(st.message().find("follows flag 2"), std::string::npos) << st.message();
}

TEST(Payloads, ModelsClocksTiersSourcesRoundTrip) {
  SnapshotData d = SyntheticSnapshot(5, 0);
  std::vector<std::pair<std::string, ModelOptions>> models;
  ASSERT_TRUE(DecodeModels(EncodeModels(d.index.models), &models).ok());
  ASSERT_EQ(models.size(), 2u);
  EXPECT_EQ(models[1].first, "model-b");
  EXPECT_EQ(models[1].second.max_query_blocks, 4096u);
  EXPECT_TRUE(models[1].second.index_all_groups);
  std::vector<std::pair<SourceId, uint64_t>> clocks;
  ASSERT_TRUE(DecodeClocks(EncodeClocks(d.index.source_clocks), &clocks).ok());
  EXPECT_EQ(clocks, d.index.source_clocks);
  std::vector<std::string> tiers;
  ASSERT_TRUE(DecodeTiers(EncodeTiers(d.tier_names), &tiers).ok());
  EXPECT_EQ(tiers, d.tier_names);
  std::vector<ingest::SourceWatermark> sources;
  std::string enc = EncodeSources(d.sources);
  ASSERT_TRUE(DecodeSources(enc, &sources).ok());
  EXPECT_EQ(sources, d.sources);
  for (size_t len = 0; len < enc.size(); ++len) {
    std::vector<ingest::SourceWatermark> part;
    EXPECT_EQ(DecodeSources(std::string_view(enc).substr(0, len), &part).code(), StatusCode::kCorruption);
  }
  EXPECT_EQ(DecodeSources(enc + "x", &sources).code(), StatusCode::kCorruption);
}

TEST(Validate, CrossReferences) {
  SnapshotData d = SyntheticSnapshot(1, 100);
  EXPECT_TRUE(Validate(d).ok());
  SnapshotData gap = d;
  gap.sources[3].source_id = 4;
  EXPECT_EQ(Validate(gap).code(), StatusCode::kInvalidArgument);
  SnapshotData unknown_source = d;
  unknown_source.index.owners[0].source = 8;
  EXPECT_EQ(Validate(unknown_source).code(), StatusCode::kInvalidArgument);
  SnapshotData unknown_tier = d;
  unknown_tier.index.owners[0].tier = static_cast<Tier>(4);
  EXPECT_EQ(Validate(unknown_tier).code(), StatusCode::kInvalidArgument);
  SnapshotData unknown_model = d;
  unknown_model.index.owners[0].model = 2;
  EXPECT_EQ(Validate(unknown_model).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvidx::snapshot
