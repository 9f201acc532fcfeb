// Property: for random batches, encode(era) -> decode gives back exactly what
// that era can carry, in every event form and array schema, with int, signed
// and bytes hashes and every msgpack width.
#include <deque>
#include <random>

#include "decode/decode_test_util.h"

namespace kvidx::ingest::testing {
namespace {

class RandomBatch {
 public:
  explicit RandomBatch(uint64_t seed) : rng_(seed) {}

  // A random batch; strings live in this object.
  EventBatch Make() {
    EventBatch b;
    b.ts = Coin() ? 1.7e9 + Below(1000000) / 1000.0 : Double();
    if (Coin()) b.data_parallel_rank = Int();
    const int n = static_cast<int>(Below(9));
    for (int i = 0; i < n; ++i) {
      KvEvent& e = b.events.emplace_back();
      const uint64_t r = Below(10);
      e.type = r < 6 ? EventType::kBlockStored : r < 9 ? EventType::kBlockRemoved : EventType::kAllBlocksCleared;
      if (e.type == EventType::kAllBlocksCleared) continue;
      const bool bytes_hashes = Below(4) == 0;
      e.block_hashes.offset = static_cast<uint32_t>(b.keys.size());
      e.block_hashes.count = static_cast<uint32_t>(Below(Coin() ? 3 : 70));
      for (uint32_t k = 0; k < e.block_hashes.count; ++k) b.keys.push_back(Key(bytes_hashes));
      e.medium = OptStr();
      if (Coin()) e.group_idx = Int();
      e.locality = OptStr();
      e.ownership = OptStr();
      if (e.type == EventType::kBlockRemoved) continue;
      if (Coin()) e.parent_block_hash = Key(bytes_hashes);
      e.token_ids.offset = static_cast<uint32_t>(b.tokens.size());
      e.token_ids.count = static_cast<uint32_t>(Below(Below(8) == 0 ? 20000 : 100));
      for (uint32_t k = 0; k < e.token_ids.count; ++k) b.tokens.push_back(Int());
      e.block_size = Int();
      if (Coin()) e.lora_id = Int();
      e.lora_name = OptStr();
      if (Coin()) e.extra_keys = ExtraKeys(e.block_hashes.count);
      e.kv_cache_spec_kind = OptStr();
      if (Coin()) e.kv_cache_spec_sliding_window = Int();
      e.session_id = OptStr();
      e.origin = OptStr();
    }
    return b;
  }

 private:
  uint64_t Below(uint64_t n) { return n == 0 ? 0 : rng_() % n; }
  bool Coin() { return rng_() & 1; }
  double Double() {
    uint64_t bits = rng_();
    double d;
    std::memcpy(&d, &bits, sizeof d);
    return d != d ? 0.5 : d;  // NaN != NaN would fail equality, not the codec
  }
  // Every msgpack width, both signs.
  int64_t Int() {
    static constexpr int kBits[] = {5, 7, 8, 15, 16, 31, 32, 63, 64};
    uint64_t v = rng_();
    int bits = kBits[Below(9)];
    if (bits < 64) v &= (uint64_t{1} << bits) - 1;
    int64_t s = static_cast<int64_t>(v);
    return Coin() && bits < 64 ? -s : s;
  }
  BlockKey Key(bool bytes) {
    if (!bytes) {
      static constexpr int kBits[] = {7, 8, 16, 32, 64, 64, 64};
      int bits = kBits[Below(7)];
      uint64_t v = rng_();
      if (bits < 64) v &= (uint64_t{1} << bits) - 1;
      return BlockKey::FromU64(v);
    }
    static constexpr size_t kLens[] = {32, 32, 16, 0, 1, 7, 8, 9, 31, 64, 96};
    std::string s(kLens[Below(11)], '\0');
    for (char& c : s) c = static_cast<char>(rng_());
    return BlockKey::FromBytes(s);
  }
  std::string_view Keep(std::string s) { return strings_.emplace_back(std::move(s)); }
  std::optional<std::string_view> OptStr() {
    if (Coin()) return std::nullopt;
    static constexpr size_t kLens[] = {0, 3, 31, 32, 255, 256, 65535, 65536, 5};
    size_t len = kLens[Below(Below(6) == 0 ? 9 : 3)];
    if (len > 1000 && Below(4) != 0) len = 12;  // keep big strings occasional
    std::string s(len, 'x');
    for (char& c : s) c = static_cast<char>('a' + Below(26));
    return Keep(std::move(s));
  }
  // Raw msgpack extra_keys: one entry per block, nil or a list of keys.
  std::string_view ExtraKeys(uint32_t blocks) {
    Pack p;
    p.Arr(blocks);
    for (uint32_t i = 0; i < blocks; ++i) {
      if (Coin()) {
        p.Nil();
        continue;
      }
      uint32_t n = static_cast<uint32_t>(Below(4));
      p.Arr(n);
      for (uint32_t k = 0; k < n; ++k) {
        switch (Below(4)) {
          case 0: p.S("lora-" + std::to_string(Below(100))); break;
          case 1: p.I(Int()); break;
          case 2: p.Bin(std::string(32, static_cast<char>(Below(256)))); break;
          default: p.Arr(2).S("mm-" + std::to_string(Below(100))).I(-static_cast<int64_t>(Below(40)));
        }
      }
    }
    return Keep(p);
  }

  std::mt19937_64 rng_;
  std::deque<std::string> strings_;
};

// What `era` can carry of `e` (decoded nil == absent).
OwnedEvent Carried(const OwnedEvent& src, const WireEra& era) {
  OwnedEvent e;
  e.type = src.type;
  if (src.type == EventType::kAllBlocksCleared) return e;
  const bool map = era.form == EventForm::kMap;
  const int v = std::clamp(era.array_schema, 1, 6);
  e.block_hashes = src.block_hashes;
  if (map || v >= 2) e.medium = src.medium;
  if (map || v >= 5) e.group_idx = src.group_idx;
  if (map) {
    e.locality = src.locality;
    e.ownership = src.ownership;
  }
  if (src.type == EventType::kBlockRemoved) return e;
  e.parent_block_hash = src.parent_block_hash;
  e.token_ids = src.token_ids;
  e.block_size = src.block_size;
  e.lora_id = src.lora_id;
  if (map || v >= 3) e.lora_name = src.lora_name;
  if (map || v >= 4) e.extra_keys = src.extra_keys;
  if (map || v >= 6) {
    e.kv_cache_spec_kind = src.kv_cache_spec_kind;
    e.kv_cache_spec_sliding_window = src.kv_cache_spec_sliding_window;
  }
  if (map) e.session_id = src.session_id;
  if (map && era.origin_field) e.origin = src.origin;
  return e;
}

std::vector<WireEra> AllEras() {
  std::vector<WireEra> eras;
  for (bool rank : {true, false}) {
    for (bool sign : {false, true}) {
      WireEra m;
      m.with_rank = rank;
      m.signed_int_hashes = sign;
      eras.push_back(m);
      m.origin_field = true;
      eras.push_back(m);
      for (int v = 1; v <= 6; ++v) {
        WireEra a = WireEra::Array(v, rank);
        a.signed_int_hashes = sign;
        eras.push_back(a);
      }
    }
  }
  return eras;
}

TEST(RoundTrip, RandomBatchesInEveryEra) {
  const auto eras = AllEras();
  Decoder dec;
  EventBatch got;  // reused across iterations, as the ingest loop does
  std::string payload;
  DecodeError err;
  int checked = 0;
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    RandomBatch gen(seed);
    const EventBatch src = gen.Make();
    const auto src_events = OwnedEvents(src);
    for (const WireEra& era : eras) {
      SCOPED_TRACE("seed " + std::to_string(seed) + " era " + WireEraName(era));
      EncodePayload(src, era, &payload);
      ASSERT_TRUE(dec.DecodePayload(payload, &got, &err)) << err.detail;
      EXPECT_EQ(got.ts, src.ts);
      EXPECT_EQ(got.data_parallel_rank, era.with_rank ? src.data_parallel_rank : std::nullopt);
      EXPECT_EQ(got.unknown_events, 0u);
      ASSERT_EQ(got.events.size(), src_events.size());
      for (size_t i = 0; i < src_events.size(); ++i) {
        ASSERT_EQ(Owned(got, got.events[i]), Carried(src_events[i], era)) << "event " << i;
      }
      // And the decoded batch re-encodes to the same bytes.
      EXPECT_EQ(EncodePayload(got, era), payload);
      ++checked;
    }
  }
  EXPECT_EQ(checked, 300 * static_cast<int>(eras.size()));
}

TEST(RoundTrip, ExtraKeysSurviveAndDecode) {
  Pack p;
  p.Arr(3).Nil().Arr(4).S("my-lora").I(-7).Bin(std::string(32, '\x01')).Arr(2).S("mmhash").I(-3).Arr(0);
  std::vector<BlockExtraKeys> out;
  DecodeError err;
  ASSERT_TRUE(DecodeExtraKeys(p.str(), &out, &err)) << err.detail;
  ASSERT_EQ(out.size(), 3u);
  EXPECT_FALSE(out[0].present);
  ASSERT_TRUE(out[1].present);
  ASSERT_EQ(out[1].keys.size(), 4u);
  const std::string digest(32, '\x01');
  EXPECT_EQ(out[1].keys[0], ExtraKey::Str("my-lora"));
  EXPECT_EQ(out[1].keys[1], ExtraKey::Int(-7));
  EXPECT_EQ(out[1].keys[2], ExtraKey::Bytes(digest));
  EXPECT_EQ(out[1].keys[3], ExtraKey::MmItem("mmhash", -3));
  EXPECT_TRUE(out[2].present);
  EXPECT_TRUE(out[2].keys.empty());
}

}  // namespace
}  // namespace kvidx::ingest::testing
