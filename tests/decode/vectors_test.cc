// The spec's vectors (tests/vectors/event_payloads.json): every payload
// decodes to its `decoded` tree field by field, and the encoder reproduces
// every real payload byte for byte in its era.
#include <algorithm>
#include <array>
#include <deque>
#include <functional>

#include "decode/decode_test_util.h"

namespace kvidx::ingest::testing {
namespace {

const std::vector<std::string> kStoredOrder = {"block_hashes", "parent_block_hash", "token_ids", "block_size",
                                               "lora_id", "medium", "lora_name", "extra_keys", "group_idx",
                                               "kv_cache_spec_kind", "kv_cache_spec_sliding_window"};
const std::vector<std::string> kRemovedOrder = {"block_hashes", "medium", "group_idx"};
const std::vector<std::string> kAllStored = {
    "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name",
    "extra_keys", "group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window", "locality", "ownership",
    "session_id"};
const std::vector<std::string> kAllRemoved = {"block_hashes", "medium", "group_idx", "locality", "ownership"};

// A JSON event (array or map form) as name -> value, plus its type.
std::pair<std::string, std::map<std::string, Json>> Fields(const Json& ev) {
  std::map<std::string, Json> m;
  std::string type;
  if (ev.t == Json::T::kObj) {
    for (size_t i = 0; i < ev.keys.size(); ++i) {
      if (ev.keys[i] == "type") {
        type = ev.vals[i].s;
      } else {
        m[ev.keys[i]] = ev.vals[i];
      }
    }
  } else {
    type = ev.arr.at(0).s;
    const auto& order = type == "BlockStored" ? kStoredOrder : kRemovedOrder;
    for (size_t i = 1; i < ev.arr.size(); ++i) m[order.at(i - 1)] = ev.arr[i];
  }
  return {type, m};
}

BlockKey KeyFromJson(const Json& j) {
  if (j.t == Json::T::kStr) {
    EXPECT_EQ(j.s.substr(0, 4), "bin:");
    return BlockKey::FromBytes(FromHex(j.s.substr(4)));
  }
  return BlockKey::FromU64(j.AsU64());
}

void ExpectOptStr(const std::map<std::string, Json>& m, const std::string& name,
                  const std::optional<std::string_view>& got) {
  auto it = m.find(name);
  if (it == m.end() || it->second.is_null()) {
    EXPECT_FALSE(got.has_value()) << name;
  } else {
    ASSERT_TRUE(got.has_value()) << name;
    EXPECT_EQ(*got, it->second.s) << name;
  }
}
void ExpectOptInt(const std::map<std::string, Json>& m, const std::string& name,
                  const std::optional<int64_t>& got) {
  auto it = m.find(name);
  if (it == m.end() || it->second.is_null()) {
    EXPECT_FALSE(got.has_value()) << name;
  } else {
    ASSERT_TRUE(got.has_value()) << name;
    EXPECT_EQ(*got, it->second.AsI64()) << name;
  }
}

void ExpectEventMatches(const EventBatch& b, const KvEvent& e, const Json& jev) {
  auto [type, m] = Fields(jev);
  ASSERT_EQ(EventTypeName(e.type), type);
  const auto& known = e.type == EventType::kBlockStored ? kAllStored : kAllRemoved;
  for (const auto& [k, v] : m) {
    EXPECT_NE(std::find(known.begin(), known.end(), k), known.end()) << "vector has unchecked field " << k;
  }
  if (e.type == EventType::kAllBlocksCleared) {
    EXPECT_TRUE(m.empty());
    EXPECT_EQ(e.block_hashes.count, 0u);
    return;
  }
  const auto& jh = m.at("block_hashes");
  auto hs = b.HashesOf(e);
  ASSERT_EQ(hs.size(), jh.arr.size());
  for (size_t i = 0; i < hs.size(); ++i) EXPECT_EQ(hs[i], KeyFromJson(jh.arr[i])) << "hash " << i;
  ExpectOptStr(m, "medium", e.medium);
  ExpectOptInt(m, "group_idx", e.group_idx);
  ExpectOptStr(m, "locality", e.locality);
  ExpectOptStr(m, "ownership", e.ownership);
  if (e.type == EventType::kBlockRemoved) return;

  const Json& parent = m.count("parent_block_hash") ? m.at("parent_block_hash") : Json{};
  if (parent.is_null()) {
    EXPECT_FALSE(e.parent_block_hash.has_value());
  } else {
    ASSERT_TRUE(e.parent_block_hash.has_value());
    EXPECT_EQ(*e.parent_block_hash, KeyFromJson(parent));
  }
  const auto& jt = m.at("token_ids");
  auto ts = b.TokensOf(e);
  ASSERT_EQ(ts.size(), jt.arr.size());
  for (size_t i = 0; i < ts.size(); ++i) EXPECT_EQ(ts[i], jt.arr[i].AsI64());
  EXPECT_EQ(e.block_size, m.at("block_size").AsI64());
  ExpectOptInt(m, "lora_id", e.lora_id);
  ExpectOptStr(m, "lora_name", e.lora_name);
  ExpectOptStr(m, "kv_cache_spec_kind", e.kv_cache_spec_kind);
  ExpectOptInt(m, "kv_cache_spec_sliding_window", e.kv_cache_spec_sliding_window);
  ExpectOptStr(m, "session_id", e.session_id);
  EXPECT_FALSE(e.origin.has_value());

  auto it = m.find("extra_keys");
  if (it == m.end() || it->second.is_null()) {
    EXPECT_FALSE(e.extra_keys.has_value());
  } else {
    ASSERT_TRUE(e.extra_keys.has_value());
    std::vector<BlockExtraKeys> ek;
    DecodeError err;
    ASSERT_TRUE(DecodeExtraKeys(*e.extra_keys, &ek, &err)) << err.detail;
    ASSERT_EQ(ek.size(), it->second.arr.size());
    for (size_t i = 0; i < ek.size(); ++i) {
      const Json& entry = it->second.arr[i];
      ASSERT_EQ(ek[i].present, !entry.is_null());
      if (entry.is_null()) continue;
      ASSERT_EQ(ek[i].keys.size(), entry.arr.size());
      for (size_t j = 0; j < entry.arr.size(); ++j) EXPECT_EQ(ek[i].keys[j].text, entry.arr[j].s);
    }
  }
}

class VectorTest : public ::testing::TestWithParam<std::string> {};

TEST_P(VectorTest, DecodesEveryFieldOfTheDecodedTree) {
  const Json& v = Vectors()["payloads"][GetParam()];
  const std::string payload = FromHex(v["payload_hex"].s);
  ASSERT_EQ(payload.size(), v["payload_len"].AsU64());
  EventBatch b;
  DecodeError err;
  ASSERT_TRUE(Decoder().DecodePayload(payload, &b, &err)) << err.detail;
  const Json& tree = v["decoded"];
  EXPECT_EQ(b.ts, tree.arr.at(0).d);
  if (tree.arr.size() >= 3) {
    ASSERT_TRUE(b.data_parallel_rank.has_value());
    EXPECT_EQ(*b.data_parallel_rank, tree.arr[2].AsI64());
  } else {
    EXPECT_FALSE(b.data_parallel_rank.has_value());
  }
  const Json& events = tree.arr.at(1);
  ASSERT_EQ(b.events.size(), events.arr.size());
  EXPECT_EQ(b.unknown_events, 0u);
  for (size_t i = 0; i < events.arr.size(); ++i) {
    SCOPED_TRACE("event " + std::to_string(i));
    ExpectEventMatches(b, b.events[i], events.arr[i]);
  }
}

// Builds the EventBatch for a `decoded` tree without going through the
// decoder, so the encoder check below is independent of it.
struct BuiltBatch {
  EventBatch batch;
  std::deque<std::string> strings;
};

std::string MsgpackOfJson(const Json& j) {
  Pack p;
  std::function<void(const Json&)> rec = [&](const Json& x) {
    switch (x.t) {
      case Json::T::kNull: p.Nil(); break;
      case Json::T::kStr: p.S(x.s); break;
      case Json::T::kUint: p.U(x.u); break;
      case Json::T::kInt: p.I(x.i); break;
      case Json::T::kArr:
        p.Arr(static_cast<uint32_t>(x.arr.size()));
        for (const auto& e : x.arr) rec(e);
        break;
      default: ADD_FAILURE() << "unexpected json in extra_keys";
    }
  };
  rec(j);
  return p;
}

void Build(const Json& tree, BuiltBatch* out) {
  EventBatch& b = out->batch;
  b.ts = tree.arr.at(0).d;
  if (tree.arr.size() >= 3) b.data_parallel_rank = tree.arr[2].AsI64();
  auto str = [&](const std::map<std::string, Json>& m, const std::string& k) -> std::optional<std::string_view> {
    auto it = m.find(k);
    if (it == m.end() || it->second.is_null()) return std::nullopt;
    return std::string_view(out->strings.emplace_back(it->second.s));
  };
  auto num = [&](const std::map<std::string, Json>& m, const std::string& k) -> std::optional<int64_t> {
    auto it = m.find(k);
    if (it == m.end() || it->second.is_null()) return std::nullopt;
    return it->second.AsI64();
  };
  for (const Json& jev : tree.arr.at(1).arr) {
    auto [type, m] = Fields(jev);
    KvEvent& e = b.events.emplace_back();
    e.type = type == "BlockStored"    ? EventType::kBlockStored
             : type == "BlockRemoved" ? EventType::kBlockRemoved
                                      : EventType::kAllBlocksCleared;
    if (m.count("block_hashes")) {
      e.block_hashes.offset = static_cast<uint32_t>(b.keys.size());
      for (const auto& h : m.at("block_hashes").arr) b.keys.push_back(KeyFromJson(h));
      e.block_hashes.count = static_cast<uint32_t>(b.keys.size()) - e.block_hashes.offset;
    }
    if (m.count("token_ids")) {
      e.token_ids.offset = static_cast<uint32_t>(b.tokens.size());
      for (const auto& t : m.at("token_ids").arr) b.tokens.push_back(t.AsI64());
      e.token_ids.count = static_cast<uint32_t>(b.tokens.size()) - e.token_ids.offset;
    }
    if (m.count("parent_block_hash") && !m.at("parent_block_hash").is_null()) {
      e.parent_block_hash = KeyFromJson(m.at("parent_block_hash"));
    }
    e.block_size = num(m, "block_size").value_or(0);
    e.lora_id = num(m, "lora_id");
    e.medium = str(m, "medium");
    e.lora_name = str(m, "lora_name");
    if (m.count("extra_keys") && !m.at("extra_keys").is_null()) {
      e.extra_keys = std::string_view(out->strings.emplace_back(MsgpackOfJson(m.at("extra_keys"))));
    }
    e.group_idx = num(m, "group_idx");
    e.kv_cache_spec_kind = str(m, "kv_cache_spec_kind");
    e.kv_cache_spec_sliding_window = num(m, "kv_cache_spec_sliding_window");
    e.locality = str(m, "locality");
    e.ownership = str(m, "ownership");
    e.session_id = str(m, "session_id");
  }
}

WireEra EraOf(const std::string& name) {
  if (name == "array_form_v6_2026-05") return WireEra::Array(6);
  if (name == "array_form_v2_2025-09") return WireEra::Array(2);
  if (name == "array_form_v1_2025-04_no_rank") return WireEra::Array(1, /*with_rank=*/false);
  return WireEra::Newest();
}

TEST_P(VectorTest, EncoderIsByteIdenticalFromTheDecodedTree) {
  const Json& v = Vectors()["payloads"][GetParam()];
  BuiltBatch bb;
  Build(v["decoded"], &bb);
  EXPECT_EQ(ToHex(EncodePayload(bb.batch, EraOf(GetParam()))), v["payload_hex"].s);
}

TEST_P(VectorTest, DecodeThenEncodeIsByteIdentical) {
  const std::string payload = VectorPayload(GetParam());
  EventBatch b;
  DecodeError err;
  ASSERT_TRUE(Decoder().DecodePayload(payload, &b, &err)) << err.detail;
  EXPECT_EQ(ToHex(EncodePayload(b, EraOf(GetParam()))), ToHex(payload));
}

INSTANTIATE_TEST_SUITE_P(EventPayloads, VectorTest, ::testing::ValuesIn(AllVectorNames()),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) {
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return n;
                         });

TEST(VectorQuirk, Map16HeaderWithFewerPairsDecodes) {
  EventBatch b;
  DecodeError err;
  const std::string payload = QuirkBatchPayload();  // the batch borrows from it
  ASSERT_TRUE(Decoder().DecodePayload(payload, &b, &err)) << err.detail;
  ASSERT_EQ(b.events.size(), 1u);
  const KvEvent& e = b.events[0];
  EXPECT_EQ(e.type, EventType::kBlockStored);
  ASSERT_EQ(e.block_hashes.count, 1u);
  EXPECT_EQ(b.HashesOf(e)[0], BlockKey::FromU64(0x2d45fcb51d434798ull));
  EXPECT_FALSE(e.parent_block_hash.has_value());
  ASSERT_EQ(e.token_ids.count, 16u);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(b.TokensOf(e)[i], i);
  EXPECT_EQ(e.block_size, 16);
  EXPECT_FALSE(e.lora_id.has_value());
  EXPECT_EQ(e.medium, "GPU");
  EXPECT_FALSE(e.lora_name.has_value());
  EXPECT_EQ(e.extra_keys, std::string_view("\x91\xc0", 2));
  EXPECT_EQ(e.group_idx, 0);
  EXPECT_EQ(e.kv_cache_spec_kind, "full_attention");
  EXPECT_EQ(b.data_parallel_rank, 0);
}

// The quirk is what msgspec would emit once BlockStored declares a 15th field:
// the encoder's origin-field era must reproduce it exactly.
TEST(VectorQuirk, EncoderWithOriginFieldReproducesIt) {
  EventBatch b;
  DecodeError err;
  const std::string payload = QuirkBatchPayload();  // the batch borrows from it
  ASSERT_TRUE(Decoder().DecodePayload(payload, &b, &err)) << err.detail;
  WireEra era;
  era.origin_field = true;
  EXPECT_EQ(ToHex(EncodePayload(b, era)), ToHex(payload));
}

TEST(VectorInputs, HashesMatchTheInputsSection) {
  const Json& in = Vectors()["inputs"];
  EventBatch b;
  DecodeError err;
  const std::string ints = VectorPayload("map_form_newest");
  const std::string bytes = VectorPayload("map_form_bytes_hashes");
  ASSERT_TRUE(Decoder().DecodePayload(ints, &b, &err));
  auto hs = b.HashesOf(b.events[0]);
  ASSERT_EQ(hs.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(hs[i].ToString(), in["block_hashes_int_u64"].arr[i].s);
  }
  ASSERT_TRUE(Decoder().DecodePayload(bytes, &b, &err));
  hs = b.HashesOf(b.events[0]);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(hs[i].is_bytes());
    EXPECT_EQ(hs[i].ToString(), in["block_hashes_bytes"].arr[i].s);
    // Same digest, int form on the wire = its last 8 bytes.
    EXPECT_EQ(hs[i].wire(), BlockKey::FromU64(std::stoull(in["block_hashes_int_u64"].arr[i].s, nullptr, 16)).wire());
    EXPECT_NE(hs[i], BlockKey::FromU64(hs[i].wire()));
  }
}

std::vector<std::string> FramesOf(const Json& j, std::string_view payload) {
  std::vector<std::string> out;
  for (const auto& f : j["frames_hex"].arr) out.push_back(f.s == "<payload>" ? std::string(payload) : FromHex(f.s));
  return out;
}

TEST(VectorFrames, LiveMessages) {
  const Json& z = Vectors()["zmq_frames"];
  const std::string payload = VectorPayload("map_form_newest");
  auto live0 = FramesOf(z["live_pub_default_topic"], payload);
  EXPECT_EQ(LiveMessageFrames("", 0, payload), live0);
  auto live41 = FramesOf(z["live_pub_topic_kv-events_seq_41"], payload);
  EXPECT_EQ(LiveMessageFrames("kv-events", 41, payload), live41);

  ASSERT_EQ(live41.size(), 3u);
  const std::array<std::string_view, 3> views = {live41[0], live41[1], live41[2]};
  RawMessage msg;
  DecodeError err;
  ASSERT_TRUE(Decoder::SplitFrames(views, &msg, &err)) << err.detail;
  EXPECT_EQ(msg.topic, "kv-events");
  EXPECT_EQ(msg.seq, 41u);
  EXPECT_EQ(msg.payload, payload);
  EventBatch b;
  ASSERT_TRUE(Decoder().DecodePayload(msg.payload, &b, &err)) << err.detail;
  EXPECT_EQ(b.events.size(), 3u);
}

TEST(VectorFrames, ReplayFrames) {
  const Json& z = Vectors()["zmq_frames"];
  const std::string payload = VectorPayload("map_form_newest");
  EXPECT_EQ(ReplayRequestFrames(40), FramesOf(z["replay_request_from_DEALER"], payload));

  auto drop_identity = [](Frames f) {
    EXPECT_EQ(f.at(0), "peer-1");
    f.erase(f.begin());
    return f;
  };
  EXPECT_EQ(drop_identity(ReplayReplyFrames(ReplayFormat::kWithTopic, "peer-1", "kv-events", 40, payload)),
            FramesOf(z["replay_reply_per_batch_as_seen_by_DEALER_since_PR45177"], payload));
  EXPECT_EQ(drop_identity(ReplayEndFrames(ReplayFormat::kWithTopic, "peer-1")),
            FramesOf(z["replay_end_marker_as_seen_by_DEALER_since_PR45177"], payload));
  EXPECT_EQ(drop_identity(ReplayReplyFrames(ReplayFormat::kLegacy, "peer-1", "kv-events", 40, payload)),
            FramesOf(z["replay_reply_per_batch_as_seen_by_DEALER_before_PR45177"], payload));
  EXPECT_EQ(drop_identity(ReplayEndFrames(ReplayFormat::kLegacy, "peer-1")),
            FramesOf(z["replay_end_marker_as_seen_by_DEALER_before_PR45177"], payload));
  EXPECT_EQ(EncodeSeq(kReplayEndSeq), std::string(8, '\xff'));
}

TEST(WireEraNames, RoundTrip) {
  for (std::string n : {"map", "map-origin", "array-v1", "array-v6", "array-v1-norank", "map-norank-signed",
                        "array-v3-signed"}) {
    WireEra e;
    ASSERT_TRUE(ParseWireEra(n, &e)) << n;
    EXPECT_EQ(WireEraName(e), n);
  }
  WireEra e;
  EXPECT_FALSE(ParseWireEra("array-v7", &e));
  EXPECT_FALSE(ParseWireEra("msgpack", &e));
  EXPECT_FALSE(ParseWireEra("", &e));
}

}  // namespace
}  // namespace kvidx::ingest::testing
