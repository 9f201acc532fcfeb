// Malformed, hostile and merely unusual inputs: every failure is a
// DecodeError with the right reason and a detail naming the field; nothing
// crashes, throws, or allocates beyond the payload's size.
#include <array>
#include <memory>
#include <random>

#include "decode/decode_test_util.h"

namespace kvidx::ingest::testing {
namespace {

constexpr double kTs = 1700000000.25;

// The batch borrows from the payload, so the outcome owns a (heap, hence
// move-stable) copy of it.
struct Outcome {
  bool ok;
  std::unique_ptr<std::string> payload;
  EventBatch batch;
  DecodeError err;
};

Outcome Decode(std::string_view payload, DecodeLimits limits = {}) {
  Outcome o;
  o.payload = std::make_unique<std::string>(payload);
  o.ok = Decoder(limits).DecodePayload(*o.payload, &o.batch, &o.err);
  return o;
}

// [kTs, [events...], 0]
std::string Batch(std::initializer_list<std::string> events) {
  Pack p;
  p.Arr(3).F64(kTs).Arr(static_cast<uint32_t>(events.size()));
  for (const auto& e : events) p.Raw(e);
  p.U(0);
  return p;
}

// A minimal valid map-form BlockStored with one field replaced by `value`
// (or added, if it is not one of the always-present ones).
std::string StoredMapWith(std::string_view field, std::string_view value) {
  const std::vector<std::pair<std::string, std::string>> base = {
      {"block_hashes", Pack().Arr(1).U(7)},
      {"parent_block_hash", Pack().Nil()},
      {"token_ids", Pack().Arr(2).U(1).U(2)},
      {"block_size", Pack().U(16)},
      {"lora_id", Pack().Nil()},
      {"medium", Pack().S("GPU")},
      {"lora_name", Pack().Nil()},
  };
  std::vector<std::pair<std::string, std::string>> fields = base;
  bool replaced = false;
  for (auto& [k, v] : fields) {
    if (k == field) {
      v = std::string(value);
      replaced = true;
    }
  }
  if (!replaced) fields.emplace_back(std::string(field), std::string(value));
  Pack p;
  p.Map(static_cast<uint32_t>(fields.size() + 1)).S("type").S("BlockStored");
  for (const auto& [k, v] : fields) p.S(k).Raw(v);
  return p;
}

const std::string kGoodStored = StoredMapWith("medium", Pack().S("GPU"));

// The frame count is the receiver's check (IngestSocketTest.
// MalformedFramesAreCountedAndTheSourceKeepsGoing); SplitFrames takes
// exactly three frames by type.
TEST(Frames, SeqWidth) {
  RawMessage msg;
  DecodeError err;
  for (size_t w : {0, 1, 7, 9, 16}) {
    std::string seq(w, '\x01');
    std::array<std::string_view, 3> f = {"t", seq, "p"};
    EXPECT_FALSE(Decoder::SplitFrames(f, &msg, &err)) << w;
    EXPECT_EQ(err.reason, DecodeErrorReason::kSeqLength);
    EXPECT_NE(err.detail.find(std::to_string(w) + " bytes"), std::string::npos);
  }
  std::array<std::string_view, 3> f = {"topic", std::string_view("\x01\x02\x03\x04\x05\x06\x07\x08", 8), "x"};
  ASSERT_TRUE(Decoder::SplitFrames(f, &msg, &err));
  EXPECT_EQ(msg.seq, 0x0102030405060708ull);
  EXPECT_EQ(msg.topic, "topic");
  EXPECT_EQ(msg.payload, "x");
  const std::string end(8, '\xff');
  EXPECT_TRUE(Decoder::SplitFrames(std::array<std::string_view, 3>{"", end, ""}, &msg, &err));
  EXPECT_EQ(msg.seq, kReplayEndSeq);
}

TEST(Labels, StableMetricLabels) {
  EXPECT_EQ(DecodeErrorReasonLabel(DecodeErrorReason::kFrameCount), "frame_count");
  EXPECT_EQ(DecodeErrorReasonLabel(DecodeErrorReason::kSeqLength), "seq_length");
  EXPECT_EQ(DecodeErrorReasonLabel(DecodeErrorReason::kTruncated), "truncated");
  EXPECT_EQ(DecodeErrorReasonLabel(DecodeErrorReason::kBadEnvelope), "bad_envelope");
  EXPECT_EQ(DecodeErrorReasonLabel(DecodeErrorReason::kBadEvent), "bad_event");
  EXPECT_EQ(DecodeErrorReasonLabel(DecodeErrorReason::kWrongType), "wrong_type");
  EXPECT_EQ(DecodeErrorReasonLabel(DecodeErrorReason::kTooLarge), "too_large");
  EXPECT_EQ(DecodeErrorReasonLabel(DecodeErrorReason::kTrailingBytes), "trailing_bytes");
}

TEST(Truncation, EveryPrefixOfEveryVectorFails) {
  EventBatch b;
  DecodeError err;
  for (const auto& [name, payload] : AllVectorPayloads()) {
    for (size_t len = 0; len < payload.size(); ++len) {
      ASSERT_FALSE(Decoder().DecodePayload(std::string_view(payload).substr(0, len), &b, &err))
          << name << " len " << len;
      EXPECT_TRUE(err.reason == DecodeErrorReason::kTruncated || err.reason == DecodeErrorReason::kTooLarge)
          << name << " len " << len << ": " << err.detail;
    }
    ASSERT_TRUE(Decoder().DecodePayload(payload, &b, &err)) << name;
  }
}

// Whatever a corrupted payload decodes to must survive a newest-form round trip.
void ExpectRoundTrips(const EventBatch& b) {
  WireEra era;
  era.origin_field = true;
  const std::string again = EncodePayload(b, era);
  EventBatch b2;
  DecodeError err;
  ASSERT_TRUE(Decoder().DecodePayload(again, &b2, &err)) << err.detail;
  EXPECT_EQ(OwnedEvents(b2), OwnedEvents(b));
}

TEST(Corruption, EveryBitFlipOfEveryVector) {
  EventBatch b;
  DecodeError err;
  int ok = 0, failed = 0;
  for (const auto& [name, payload] : AllVectorPayloads()) {
    for (size_t i = 0; i < payload.size(); ++i) {
      for (int bit = 0; bit < 8; ++bit) {
        std::string p = payload;
        p[i] = static_cast<char>(p[i] ^ (1 << bit));
        if (Decoder().DecodePayload(p, &b, &err)) {
          ++ok;
          ExpectRoundTrips(b);
        } else {
          ++failed;
          EXPECT_FALSE(err.detail.empty());
        }
      }
    }
  }
  EXPECT_GT(ok, 0);
  EXPECT_GT(failed, 0);
}

TEST(Corruption, RandomBytesNeverCrash) {
  std::mt19937_64 rng(42);
  EventBatch b;
  DecodeError err;
  for (int i = 0; i < 20000; ++i) {
    std::string p(rng() % 64, '\0');
    for (char& c : p) c = static_cast<char>(rng());
    if (Decoder().DecodePayload(p, &b, &err)) ExpectRoundTrips(b);
  }
}

TEST(Envelope, Shapes) {
  auto o = Decode(Pack().S("hello"));
  EXPECT_EQ(o.err.reason, DecodeErrorReason::kBadEnvelope);
  EXPECT_NE(o.err.detail.find("got str"), std::string::npos) << o.err.detail;

  o = Decode(Pack().Arr(1).F64(kTs));
  EXPECT_EQ(o.err.reason, DecodeErrorReason::kBadEnvelope);
  o = Decode(Pack().Arr(0));
  EXPECT_EQ(o.err.reason, DecodeErrorReason::kBadEnvelope);

  o = Decode(Pack().Arr(3).F64(kTs).S("events").U(0));
  EXPECT_EQ(o.err.reason, DecodeErrorReason::kBadEnvelope);
  EXPECT_NE(o.err.detail.find("field events"), std::string::npos) << o.err.detail;

  o = Decode(Pack().Arr(3).S("yesterday").Arr(0).U(0));
  EXPECT_EQ(o.err.reason, DecodeErrorReason::kWrongType);
  EXPECT_EQ(o.err.detail.substr(0, 34), "batch: field ts: expected float or") << o.err.detail;

  o = Decode(Pack().Arr(3).F64(kTs).Arr(0).S("zero"));
  EXPECT_EQ(o.err.reason, DecodeErrorReason::kWrongType);
  EXPECT_NE(o.err.detail.find("field data_parallel_rank"), std::string::npos) << o.err.detail;

  // A future fourth envelope field is skipped.
  o = Decode(Pack().Arr(4).F64(kTs).Arr(1).Raw(kGoodStored).U(5).Map(1).S("x").Arr(2).U(1).U(2));
  ASSERT_TRUE(o.ok) << o.err.detail;
  EXPECT_EQ(o.batch.events.size(), 1u);
  EXPECT_EQ(o.batch.data_parallel_rank, 5);
}

TEST(Envelope, EmptyBatches) {
  auto o = Decode(Pack().Arr(3).F64(kTs).Arr(0).U(2));
  ASSERT_TRUE(o.ok) << o.err.detail;
  EXPECT_TRUE(o.batch.events.empty());
  EXPECT_EQ(o.batch.ts, kTs);
  EXPECT_EQ(o.batch.data_parallel_rank, 2);
  o = Decode(Pack().Arr(2).F64(kTs).Arr(0));
  ASSERT_TRUE(o.ok) << o.err.detail;
  EXPECT_FALSE(o.batch.data_parallel_rank.has_value());
  o = Decode(Pack().Arr(3).F64(kTs).Arr(0).Nil());
  ASSERT_TRUE(o.ok) << o.err.detail;
  EXPECT_FALSE(o.batch.data_parallel_rank.has_value());
  o = Decode("");
  EXPECT_EQ(o.err.reason, DecodeErrorReason::kTruncated);
}

TEST(Envelope, TsAndRankWidths) {
  // float32 ts, int ts, negative rank in int64 form.
  auto o = Decode(Pack().Arr(3).Hex("ca3fc00000").Arr(0).Hex("d3fffffffffffffffe"));
  ASSERT_TRUE(o.ok) << o.err.detail;
  EXPECT_EQ(o.batch.ts, 1.5);
  EXPECT_EQ(o.batch.data_parallel_rank, -2);
  o = Decode(Pack().Arr(3).Hex("ce6553f100").Arr(0).Hex("cd0007"));
  ASSERT_TRUE(o.ok) << o.err.detail;
  EXPECT_EQ(o.batch.ts, 1700000000.0);
  EXPECT_EQ(o.batch.data_parallel_rank, 7);
  o = Decode(Pack().Arr(3).Hex("e0").Arr(0).U(0));
  ASSERT_TRUE(o.ok);
  EXPECT_EQ(o.batch.ts, -32.0);
  o = Decode(Pack().Arr(3).F64(kTs).Arr(0).Hex("cfffffffffffffffff"));  // rank beyond int64
  EXPECT_EQ(o.err.reason, DecodeErrorReason::kWrongType);
}

TEST(Envelope, OuterMapIsTolerated) {
  auto o = Decode(Pack().Map(4).S("data_parallel_rank").U(3).S("future").Arr(1).U(1).S("events")
                      .Arr(2).Raw(kGoodStored).Hex("91b0416c6c426c6f636b73436c6561726564").S("ts").F64(kTs));
  ASSERT_TRUE(o.ok) << o.err.detail;
  EXPECT_EQ(o.batch.ts, kTs);
  EXPECT_EQ(o.batch.data_parallel_rank, 3);
  ASSERT_EQ(o.batch.events.size(), 2u);
  EXPECT_EQ(o.batch.events[1].type, EventType::kAllBlocksCleared);

  o = Decode(Pack().Map(1).S("ts").F64(kTs));
  EXPECT_EQ(o.err.reason, DecodeErrorReason::kBadEnvelope);
  o = Decode(Pack().Map(1).S("events").Arr(0));
  EXPECT_EQ(o.err.reason, DecodeErrorReason::kBadEnvelope);
  o = Decode(Pack().Map(3).S("ts").F64(kTs).S("events").Arr(0).S("events").Arr(0));
  EXPECT_EQ(o.err.reason, DecodeErrorReason::kBadEnvelope);
}

TEST(Envelope, TrailingBytes) {
  for (const auto& [name, payload] : AllVectorPayloads()) {
    auto o = Decode(payload + std::string(1, '\0'));
    EXPECT_EQ(o.err.reason, DecodeErrorReason::kTrailingBytes) << name;
    EXPECT_NE(o.err.detail.find("1 bytes after"), std::string::npos) << o.err.detail;
    o = Decode(payload + payload);
    EXPECT_EQ(o.err.reason, DecodeErrorReason::kTrailingBytes) << name;
  }
}

TEST(Events, NotAnEvent) {
  auto o = Decode(Batch({kGoodStored, Pack().U(5)}));
  EXPECT_EQ(o.err.reason, DecodeErrorReason::kBadEvent);
  EXPECT_EQ(o.err.detail.substr(0, 9), "event 1: ") << o.err.detail;
  EXPECT_EQ(Decode(Batch({Pack().Arr(0)})).err.reason, DecodeErrorReason::kBadEvent);
  EXPECT_EQ(Decode(Batch({Pack().Arr(2).U(1).U(2)})).err.reason, DecodeErrorReason::kBadEvent);
  EXPECT_EQ(Decode(Batch({Pack().Arr(1).Bin("BlockStored")})).err.reason, DecodeErrorReason::kBadEvent);
  EXPECT_EQ(Decode(Batch({Pack().Map(1).S("block_hashes").Arr(0)})).err.reason, DecodeErrorReason::kBadEvent);
  EXPECT_EQ(Decode(Batch({Pack().Map(1).S("type").U(1)})).err.reason, DecodeErrorReason::kBadEvent);
  EXPECT_EQ(Decode(Batch({Pack().Map(0)})).err.reason, DecodeErrorReason::kBadEvent);
}

TEST(Events, UnknownTagsAreSkippedAndCounted) {
  const std::string removed = Pack().Arr(3).S("BlockRemoved").Arr(2).U(8).U(9).S("CPU");
  const std::string inactive_arr = Pack().Arr(3).S("BlockInactive").Arr(2).U(1).U(2).Map(1).S("x").Nil();
  const std::string inactive_map = Pack().Map(2).S("type").S("BlockInactive").S("block_hashes").Arr(1).U(3);
  // "type" not first, so the pre-scan path finds it.
  const std::string inactive_map2 = Pack().Map(2).S("block_hashes").Arr(1).U(3).S("type").S("Whatever");
  auto o = Decode(Batch({inactive_arr, kGoodStored, inactive_map, removed, inactive_map2}));
  ASSERT_TRUE(o.ok) << o.err.detail;
  EXPECT_EQ(o.batch.unknown_events, 3u);
  ASSERT_EQ(o.batch.events.size(), 2u);
  const auto& b = o.batch;
  EXPECT_EQ(b.events[0].type, EventType::kBlockStored);
  ASSERT_EQ(b.HashesOf(b.events[0]).size(), 1u);
  EXPECT_EQ(b.HashesOf(b.events[0])[0], BlockKey::FromU64(7));
  EXPECT_EQ(b.events[1].type, EventType::kBlockRemoved);
  ASSERT_EQ(b.HashesOf(b.events[1]).size(), 2u);
  EXPECT_EQ(b.HashesOf(b.events[1])[1], BlockKey::FromU64(9));
  EXPECT_EQ(b.events[1].medium, "CPU");
  // A malformed unknown event still fails: we cannot find where it ends.
  EXPECT_EQ(Decode(Batch({Pack().Arr(2).S("BlockInactive").Hex("c1")})).err.reason, DecodeErrorReason::kWrongType);
}

struct WrongTypeCase {
  std::string field;
  std::string value;
};

TEST(Fields, WrongTypesInMapForm) {
  const std::vector<WrongTypeCase> cases = {
      {"block_hashes", Pack().Nil()},        {"block_hashes", Pack().S("x")},
      {"block_hashes", Pack().Arr(1).S("h")}, {"block_hashes", Pack().Arr(1).F64(1)},
      {"block_hashes", Pack().Arr(1).Nil()}, {"parent_block_hash", Pack().S("p")},
      {"parent_block_hash", Pack().Hex("c3")}, {"token_ids", Pack().S("abc")},
      {"token_ids", Pack().Nil()},           {"token_ids", Pack().Arr(2).U(1).F64(2)},
      {"token_ids", Pack().Arr(1).Bin("t")}, {"token_ids", Pack().Arr(1).Hex("cf8000000000000000")},
      {"block_size", Pack().Nil()},          {"block_size", Pack().S("16")},
      {"block_size", Pack().Hex("c2")},      {"lora_id", Pack().S("1")},
      {"medium", Pack().U(1)},               {"medium", Pack().Bin("GPU")},
      {"medium", Pack().Arr(1).S("GPU")},    {"lora_name", Pack().U(3)},
      {"extra_keys", Pack().S("k")},         {"extra_keys", Pack().U(0)},
      {"group_idx", Pack().S("0")},          {"group_idx", Pack().F64(0)},
      {"kv_cache_spec_kind", Pack().U(0)},   {"kv_cache_spec_sliding_window", Pack().S("w")},
      {"locality", Pack().Hex("c3")},        {"ownership", Pack().U(1)},
      {"session_id", Pack().Map(0)},         {"origin", Pack().U(1)},
  };
  for (const auto& c : cases) {
    auto o = Decode(Batch({Pack().Arr(1).S("AllBlocksCleared"), StoredMapWith(c.field, c.value)}));
    ASSERT_FALSE(o.ok) << c.field << " = " << ToHex(c.value);
    EXPECT_EQ(o.err.reason, DecodeErrorReason::kWrongType) << c.field << ": " << o.err.detail;
    EXPECT_EQ(o.err.detail.rfind("event 1 (BlockStored): field " + c.field + ": ", 0), 0u) << o.err.detail;
  }
  // The documented example detail.
  auto o = Decode(Batch({StoredMapWith("token_ids", Pack().S("abc"))}));
  EXPECT_EQ(o.err.detail.rfind("event 0 (BlockStored): field token_ids: expected array, got str", 0), 0u)
      << o.err.detail;
}

TEST(Fields, WrongTypesInArrayForm) {
  // [tag, hashes, parent, tokens, block_size, lora_id, medium, lora_name, extra, group, kind, window]
  const std::vector<std::string> good = {Pack().Arr(1).U(7), Pack().Nil(), Pack().Arr(1).U(1), Pack().U(16),
                                         Pack().Nil(),       Pack().S("GPU"), Pack().Nil(), Pack().Nil(),
                                         Pack().U(0),        Pack().S("full_attention"), Pack().Nil()};
  const std::vector<std::string> names = {"block_hashes", "parent_block_hash", "token_ids", "block_size",
                                          "lora_id", "medium", "lora_name", "extra_keys", "group_idx",
                                          "kv_cache_spec_kind", "kv_cache_spec_sliding_window"};
  for (size_t pos = 0; pos < good.size(); ++pos) {
    for (const std::string& bad : {std::string(Pack().Map(0)), std::string(Pack().F64(1.0))}) {
      Pack p;
      p.Arr(12).S("BlockStored");
      for (size_t i = 0; i < good.size(); ++i) p.Raw(i == pos ? bad : good[i]);
      auto o = Decode(Batch({p}));
      ASSERT_FALSE(o.ok) << names[pos];
      EXPECT_EQ(o.err.reason, DecodeErrorReason::kWrongType) << o.err.detail;
      EXPECT_EQ(o.err.detail.rfind("event 0 (BlockStored): field " + names[pos] + ": ", 0), 0u) << o.err.detail;
    }
  }
  auto o = Decode(Batch({Pack().Arr(3).S("BlockRemoved").Arr(0).U(5)}));
  EXPECT_EQ(o.err.reason, DecodeErrorReason::kWrongType);
  EXPECT_EQ(o.err.detail.rfind("event 0 (BlockRemoved): field medium: expected str or nil, got int", 0), 0u)
      << o.err.detail;
}

TEST(Fields, ArrayFormLengthsAndExtras) {
  // Shorter than any schema: missing fields are absent.
  auto o = Decode(Batch({Pack().Arr(2).S("BlockStored").Arr(1).U(1), Pack().Arr(1).S("BlockRemoved")}));
  ASSERT_TRUE(o.ok) << o.err.detail;
  EXPECT_EQ(o.batch.events[0].block_hashes.count, 1u);
  EXPECT_EQ(o.batch.events[0].token_ids.count, 0u);
  EXPECT_EQ(o.batch.events[0].block_size, 0);
  EXPECT_EQ(o.batch.events[1].block_hashes.count, 0u);
  // Longer than v6: positions 12+ (e.g. a would-be origin) are ignored.
  Pack p;
  p.Arr(15).S("BlockStored").Arr(1).U(1).Nil().Arr(0).U(16).Nil().S("GPU").Nil().Nil().U(0).S("k").Nil();
  p.S("LOCAL").Map(1).U(1).Arr(1).Nil().S("REUSED");
  o = Decode(Batch({p, Pack().Arr(6).S("BlockRemoved").Arr(0).S("CPU").U(1).S("REMOTE").Hex("d70100000000000000ff")}));
  ASSERT_TRUE(o.ok) << o.err.detail;
  EXPECT_FALSE(o.batch.events[0].locality.has_value());
  EXPECT_FALSE(o.batch.events[0].origin.has_value());
  EXPECT_EQ(o.batch.events[0].kv_cache_spec_kind, "k");
  EXPECT_EQ(o.batch.events[1].group_idx, 1);
  EXPECT_FALSE(o.batch.events[1].locality.has_value());
}

TEST(Fields, MapFormOrderDuplicatesAndUnknownKeys) {
  Pack q;
  q.Map(9)
      .S("future").Arr(2).Map(1).S("a").Hex("c70301616263").Bin("zz")
      .U(17).S("non-str key")
      .S("medium").S("CPU")
      .S("block_hashes").Arr(1).U(1)
      .S("type").S("BlockStored")
      .S("medium").S("GPU")
      .S("origin").S("REUSED")
      .S("token_ids").Arr(1).U(5)
      .S("block_hashes").Arr(2).U(2).U(3);
  auto o = Decode(Batch({q}));
  ASSERT_TRUE(o.ok) << o.err.detail;
  const auto& b = o.batch;
  ASSERT_EQ(b.events.size(), 1u);
  const auto& e = b.events[0];
  EXPECT_EQ(e.medium, "GPU");
  EXPECT_EQ(e.origin, "REUSED");
  ASSERT_EQ(b.HashesOf(e).size(), 2u);
  EXPECT_EQ(b.HashesOf(e)[0], BlockKey::FromU64(2));
  EXPECT_EQ(b.TokensOf(e)[0], 5);
  // Missing keys are absent, BlockRemoved ignores BlockStored-only keys.
  o = Decode(Batch({Pack().Map(3).S("type").S("BlockRemoved").S("token_ids").S("whatever").S("group_idx").U(2)}));
  ASSERT_TRUE(o.ok) << o.err.detail;
  EXPECT_EQ(o.batch.events[0].group_idx, 2);
  EXPECT_FALSE(o.batch.events[0].medium.has_value());
}

TEST(Fields, HashForms) {
  Pack p;
  p.Arr(2).S("BlockStored").Arr(9)
      .Hex("05")                    // fixint
      .Hex("cc80")                  // uint8
      .Hex("cd1234")                // uint16
      .Hex("ce12345678")            // uint32
      .Hex("cfffffffffffffffff")    // uint64
      .Hex("ff")                    // negative fixint (old signed hash())
      .Hex("d3ffffffffffffff00")    // int64 negative
      .Hex("d07f")                  // positive value in a signed form
      .Hex("c50003abcdef");         // bin16, 3 bytes
  auto o = Decode(Batch({p}));
  ASSERT_TRUE(o.ok) << o.err.detail;
  auto hs = o.batch.HashesOf(o.batch.events[0]);
  ASSERT_EQ(hs.size(), 9u);
  EXPECT_EQ(hs[0], BlockKey::FromU64(5));
  EXPECT_EQ(hs[1], BlockKey::FromU64(0x80));
  EXPECT_EQ(hs[2], BlockKey::FromU64(0x1234));
  EXPECT_EQ(hs[3], BlockKey::FromU64(0x12345678));
  EXPECT_EQ(hs[4], BlockKey::FromU64(~0ull));
  EXPECT_EQ(hs[5], BlockKey::FromI64(-1));
  EXPECT_EQ(hs[6], BlockKey::FromI64(-256));
  EXPECT_EQ(hs[7], BlockKey::FromU64(0x7f));
  EXPECT_EQ(hs[8], BlockKey::FromBytes(std::string("\xab\xcd\xef")));
  // bin32 of 64 bytes (pre-#45939 coarse group) and empty bin8.
  std::string digest(64, '\0');
  for (size_t i = 0; i < 64; ++i) digest[i] = static_cast<char>(i);
  Pack q;
  q.Arr(3).S("BlockStored").Arr(2).Byte(0xc6).BE(64, 4).Raw(digest).Hex("c400").Hex("c403010203");
  o = Decode(Batch({q}));
  ASSERT_TRUE(o.ok) << o.err.detail;
  hs = o.batch.HashesOf(o.batch.events[0]);
  EXPECT_EQ(hs[0], BlockKey::FromBytes(digest));
  EXPECT_EQ(hs[0].byte_len(), 32u);
  EXPECT_TRUE(hs[1].is_bytes());
  EXPECT_EQ(hs[1].byte_len(), 0u);
  EXPECT_EQ(o.batch.events[0].parent_block_hash, BlockKey::FromBytes(std::string("\x01\x02\x03")));
}

TEST(Fields, NonMinimalHeadersEverywhere) {
  // Every container and string in its widest form, tokens in every int form.
  Pack p;
  p.Hex("dd00000003").F64(kTs).Hex("dd00000002");
  p.Hex("df00000006")
      .Hex("db00000004").Raw("type").Hex("da000b").Raw("BlockStored")
      .Hex("d90c").Raw("block_hashes").Hex("dc0001").Hex("cf0000000000000007")
      .S("token_ids").Hex("dd00000007").Hex("00 cc01 cd0002 ce00000003 cf0000000000000004 d0fb d3fffffffffffffffa")
      .S("block_size").Hex("d30000000000000010")
      .S("medium").Hex("db00000003").Raw("GPU")
      .S("extra_keys").Hex("dd00000001c0");
  p.Hex("de0001").S("type").Hex("d910").Raw("AllBlocksCleared");
  p.Hex("cd0000");
  std::string s = p;
  auto o = Decode(s);
  ASSERT_TRUE(o.ok) << o.err.detail;
  ASSERT_EQ(o.batch.events.size(), 2u);
  const auto& e = o.batch.events[0];
  EXPECT_EQ(o.batch.HashesOf(e)[0], BlockKey::FromU64(7));
  auto ts = o.batch.TokensOf(e);
  EXPECT_EQ(std::vector<int64_t>(ts.begin(), ts.end()), (std::vector<int64_t>{0, 1, 2, 3, 4, -5, -6}));
  EXPECT_EQ(e.block_size, 16);
  EXPECT_EQ(e.medium, "GPU");
  EXPECT_EQ(e.extra_keys, std::string_view("\xdd\x00\x00\x00\x01\xc0", 6));
  EXPECT_EQ(o.batch.events[1].type, EventType::kAllBlocksCleared);
  EXPECT_EQ(o.batch.data_parallel_rank, 0);
}

TEST(Lengths, AbsurdDeclaredLengthsFailFastWithoutAllocating) {
  EventBatch b;
  DecodeError err;
  Decoder dec;
  auto run = [&](const std::string& p) {
    bool ok = dec.DecodePayload(p, &b, &err);
    EXPECT_LT(b.keys.capacity(), 1024u);
    EXPECT_LT(b.tokens.capacity(), 1024u);
    EXPECT_LT(b.events.capacity(), 1024u);
    return ok;
  };
  const std::string arr32 = FromHex("ddee6b2800");  // 4e9 elements
  const std::string map32 = FromHex("dfee6b2800");
  // Outer, events, hashes, tokens, extra_keys, unknown value.
  EXPECT_FALSE(run(arr32 + Pack().F64(kTs).str()));
  EXPECT_EQ(err.reason, DecodeErrorReason::kTooLarge);
  EXPECT_FALSE(run(Pack().Arr(3).F64(kTs).Raw(arr32).U(0)));
  EXPECT_EQ(err.reason, DecodeErrorReason::kTooLarge);
  EXPECT_NE(err.detail.find("4000000000"), std::string::npos) << err.detail;
  EXPECT_FALSE(run(Batch({Pack().Arr(2).S("BlockStored").Raw(arr32).U(1).U(2)})));
  EXPECT_EQ(err.reason, DecodeErrorReason::kTooLarge);
  EXPECT_FALSE(run(Batch({Pack().Arr(4).S("BlockStored").Arr(0).Nil().Raw(arr32)})));
  EXPECT_EQ(err.reason, DecodeErrorReason::kTooLarge);
  EXPECT_FALSE(run(Batch({StoredMapWith("extra_keys", arr32)})));
  EXPECT_EQ(err.reason, DecodeErrorReason::kTooLarge);
  EXPECT_FALSE(run(Batch({StoredMapWith("future", map32)})));
  EXPECT_EQ(err.reason, DecodeErrorReason::kTooLarge);
  EXPECT_FALSE(run(Batch({map32})));
  EXPECT_EQ(err.reason, DecodeErrorReason::kTooLarge);
  // Byte lengths past the end are truncation.
  EXPECT_FALSE(run(Batch({StoredMapWith("medium", Pack().Hex("dbee6b2800").Raw("GPU"))})));
  EXPECT_EQ(err.reason, DecodeErrorReason::kTruncated);
  EXPECT_FALSE(run(Batch({Pack().Arr(2).S("BlockStored").Arr(1).Raw("\xc6\xff\xff\xff\xff")})));
  EXPECT_EQ(err.reason, DecodeErrorReason::kTruncated);
  EXPECT_FALSE(run(Batch({StoredMapWith("future", "\xc9\xff\xff\xff\xff\x01")})));
  EXPECT_EQ(err.reason, DecodeErrorReason::kTruncated);
  // Exactly as many elements as bytes left, but the bytes are not elements.
  EXPECT_FALSE(run(Pack().Arr(3).F64(kTs).Hex("dc0005").Hex("c0c0c0c0c0")));
}

TEST(Lengths, ConfiguredLimits) {
  DecodeLimits lim;
  lim.max_events_per_batch = 2;
  auto o = Decode(Batch({kGoodStored, kGoodStored, kGoodStored}), lim);
  EXPECT_EQ(o.err.reason, DecodeErrorReason::kTooLarge);
  EXPECT_TRUE(Decode(Batch({kGoodStored, kGoodStored}), lim).ok);
  lim = {};
  lim.max_hashes_per_event = 1;
  o = Decode(Batch({StoredMapWith("block_hashes", Pack().Arr(2).U(1).U(2))}), lim);
  EXPECT_EQ(o.err.reason, DecodeErrorReason::kTooLarge);
  EXPECT_NE(o.err.detail.find("field block_hashes"), std::string::npos);
  lim = {};
  lim.max_tokens_per_event = 1;
  o = Decode(Batch({kGoodStored}), lim);
  EXPECT_EQ(o.err.reason, DecodeErrorReason::kTooLarge);
  EXPECT_NE(o.err.detail.find("field token_ids"), std::string::npos);
}

std::string Nested(int depth) {
  std::string s(static_cast<size_t>(depth), '\x91');
  return s + Pack().Nil().str();
}

TEST(Lengths, DeepNestingInUnknownValues) {
  EXPECT_TRUE(Decode(Batch({StoredMapWith("future", Nested(32))})).ok);
  auto o = Decode(Batch({StoredMapWith("future", Nested(33))}));
  EXPECT_EQ(o.err.reason, DecodeErrorReason::kTooLarge);
  EXPECT_NE(o.err.detail.find("nesting"), std::string::npos);
  // Deep maps, deep extra_keys, deep unknown events, deep outer extras.
  std::string maps;
  for (int i = 0; i < 100; ++i) maps += Pack().Map(1).S("k").str();
  maps += Pack().Nil().str();
  EXPECT_EQ(Decode(Batch({StoredMapWith("future", maps)})).err.reason, DecodeErrorReason::kTooLarge);
  EXPECT_EQ(Decode(Batch({StoredMapWith("extra_keys", Nested(100))})).err.reason, DecodeErrorReason::kTooLarge);
  EXPECT_EQ(Decode(Batch({Pack().Arr(2).S("Future").Raw(Nested(100))})).err.reason, DecodeErrorReason::kTooLarge);
  // A huge configured depth is still capped (no stack overflow).
  DecodeLimits lim;
  lim.max_depth = 1u << 30;
  EXPECT_EQ(Decode(Batch({StoredMapWith("future", Nested(200000))}), lim).err.reason, DecodeErrorReason::kTooLarge);
  lim.max_depth = 64;
  EXPECT_TRUE(Decode(Batch({StoredMapWith("future", Nested(60))}), lim).ok);
}

TEST(Reuse, BatchIsClearedBetweenDecodes) {
  Decoder dec;
  EventBatch b;
  DecodeError err;
  ASSERT_TRUE(dec.DecodePayload(VectorPayload("map_form_newest"), &b, &err));
  ASSERT_TRUE(dec.DecodePayload(Pack().Arr(2).F64(1.0).Arr(1).Arr(1).S("Nope"), &b, &err));
  EXPECT_TRUE(b.events.empty());
  EXPECT_TRUE(b.keys.empty());
  EXPECT_TRUE(b.tokens.empty());
  EXPECT_EQ(b.unknown_events, 1u);
  EXPECT_FALSE(b.data_parallel_rank.has_value());
  EXPECT_EQ(b.ts, 1.0);
  // A failed decode leaves a valid batch that the next decode can reuse.
  EXPECT_FALSE(dec.DecodePayload(VectorPayload("map_form_newest").substr(0, 200), &b, &err));
  ASSERT_TRUE(dec.DecodePayload(VectorPayload("array_form_v6_2026-05"), &b, &err));
  EXPECT_EQ(b.events.size(), 3u);
  EXPECT_EQ(b.keys.size(), 4u);
  // A null error pointer is allowed.
  EXPECT_FALSE(dec.DecodePayload("\xc1", &b, nullptr));
}

TEST(ExtraKeys, BadInputs) {
  std::vector<BlockExtraKeys> out;
  DecodeError err;
  EXPECT_TRUE(DecodeExtraKeys(Pack().Nil(), &out, &err));
  EXPECT_TRUE(out.empty());
  EXPECT_FALSE(DecodeExtraKeys(Pack().S("x"), &out, &err));
  EXPECT_EQ(err.reason, DecodeErrorReason::kWrongType);
  EXPECT_FALSE(DecodeExtraKeys(Pack().Arr(2).Nil().U(1), &out, &err));
  EXPECT_EQ(err.reason, DecodeErrorReason::kWrongType);
  EXPECT_NE(err.detail.find("block 1"), std::string::npos) << err.detail;
  EXPECT_EQ(err.detail.rfind("field extra_keys: ", 0), 0u) << err.detail;
  EXPECT_FALSE(DecodeExtraKeys(Pack().Arr(1).Arr(1).Arr(3).S("mm").U(1).U(2), &out, &err));
  EXPECT_EQ(err.reason, DecodeErrorReason::kWrongType);
  EXPECT_FALSE(DecodeExtraKeys(Pack().Arr(1).Arr(1).Arr(2).U(1).U(2), &out, &err));
  EXPECT_EQ(err.reason, DecodeErrorReason::kWrongType);
  EXPECT_FALSE(DecodeExtraKeys(Pack().Arr(1).Arr(1).Arr(2).S("mm").S("x"), &out, &err));
  EXPECT_EQ(err.reason, DecodeErrorReason::kWrongType);
  EXPECT_FALSE(DecodeExtraKeys(Pack().Arr(1).Arr(1).Map(0), &out, &err));
  EXPECT_EQ(err.reason, DecodeErrorReason::kWrongType);
  EXPECT_FALSE(DecodeExtraKeys(Pack().Arr(1).Nil().Nil(), &out, &err));
  EXPECT_EQ(err.reason, DecodeErrorReason::kTrailingBytes);
  const std::string good = Pack().Arr(2).Arr(2).S("lora").Arr(2).S("mm").I(-4).Nil();
  for (size_t len = 0; len < good.size(); ++len) {
    EXPECT_FALSE(DecodeExtraKeys(good.substr(0, len), &out, &err)) << len;
  }
  EXPECT_TRUE(DecodeExtraKeys(good, &out, &err)) << err.detail;
  EXPECT_FALSE(DecodeExtraKeys(Pack().Hex("ddffffffff"), &out, &err));
  EXPECT_EQ(err.reason, DecodeErrorReason::kTooLarge);
}

}  // namespace
}  // namespace kvidx::ingest::testing
