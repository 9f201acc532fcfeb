// Reproduces every vector of tests/vectors/hash_vectors.json byte for byte:
// NONE_HASH per algorithm and seed (serialized seed + digest), every chain
// (digest, wire u64, parent, and block 0's serialized input), and the coarse
// group view. New entries in the JSON fail the test until they are mapped.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "common/json_lite.h"
#include "index/block_hasher.h"
#include "tests/hash/test_util.h"

namespace kvidx {
namespace {

using testing::DigestFromHex;
using testing::Hex;
using testing::JsonParser;
using testing::JsonValue;

const JsonValue& Vectors() {
  static const JsonValue* doc = [] {
    std::string err;
    std::optional<JsonValue> v = JsonParser::ParseFile(std::string(KVIDX_TEST_DATA_DIR) + "/hash_vectors.json", &err);
    if (!v) {
      ADD_FAILURE() << err;
      return new JsonValue();
    }
    return new JsonValue(std::move(*v));
  }();
  return *doc;
}

std::vector<std::string> Split(const std::string& s, const std::string& sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t pos; (pos = s.find(sep, start)) != std::string::npos; start = pos + sep.size()) {
    parts.push_back(s.substr(start, pos - start));
  }
  parts.push_back(s.substr(start));
  return parts;
}

// "default(no PYTHONHASHSEED)" -> unset; "PYTHONHASHSEED=0" -> "0".
std::optional<std::string> SeedOf(const std::string& variant) {
  const std::string prefix = "PYTHONHASHSEED=";
  if (variant.rfind(prefix, 0) == 0) return variant.substr(prefix.size());
  EXPECT_EQ(variant, "default(no PYTHONHASHSEED)");
  return std::nullopt;
}

BlockHasher MakeHasher(const std::string& algo_name, const std::optional<std::string>& seed, size_t block_size) {
  Result<HashAlgo> algo = ParseHashAlgo(algo_name);
  EXPECT_TRUE(algo.ok()) << algo_name;
  Result<BlockHasher> h = BlockHasher::Create({algo.ok() ? *algo : HashAlgo::kSha256, seed, block_size});
  EXPECT_TRUE(h.ok()) << h.status().ToString();
  return std::move(h).value();
}

std::vector<int64_t> VectorTokens() {
  std::vector<int64_t> tokens;
  for (const JsonValue& t : Vectors()["token_ids"].items) tokens.push_back(t.as_int());
  return tokens;
}

TEST(HashVectors, Loaded) {
  const JsonValue& v = Vectors();
  ASSERT_TRUE(v.is_object());
  EXPECT_EQ(v["pickle_HIGHEST_PROTOCOL"].as_int(), 5);
  EXPECT_EQ(v["block_size"].as_int(), 16);
  EXPECT_EQ(VectorTokens().size(), 48u);
  EXPECT_EQ(v["none_hash"].members.size(), 8u);
  EXPECT_EQ(v["chains"].members.size(), 30u);
}

TEST(HashVectors, NoneHashAllAlgosAndSeeds) {
  int checked = 0;
  for (const auto& [key, entry] : Vectors()["none_hash"].members) {
    SCOPED_TRACE(key);
    const std::vector<std::string> parts = Split(key, " | ");
    ASSERT_EQ(parts.size(), 2u);
    Result<HashAlgo> algo = ParseHashAlgo(parts[0]);
    ASSERT_TRUE(algo.ok());
    const std::optional<std::string> seed = SeedOf(parts[1]);

    if (!entry.has("none_hash_hex")) {
      // xxhash* without PYTHONHASHSEED: random in vLLM, so we must refuse.
      EXPECT_FALSE(seed.has_value());
      Result<BlockHasher> h = BlockHasher::Create({*algo, std::nullopt, 16});
      ASSERT_FALSE(h.ok());
      EXPECT_EQ(h.status().code(), StatusCode::kInvalidArgument);
      EXPECT_NE(h.status().message().find("PYTHONHASHSEED"), std::string::npos);
      ++checked;
      continue;
    }
    const std::string& seed_text = entry["seed"].text;
    EXPECT_EQ(Hex(BlockHasher::SerializeSeed(*algo, seed_text)), entry["serialized_seed_hex"].text);
    const BlockDigest none = BlockHasher::ComputeNoneHash(*algo, seed_text);
    EXPECT_EQ(none.ToHex(), entry["none_hash_hex"].text);
    EXPECT_EQ(none.size, HashAlgoDigestSize(*algo));
    EXPECT_EQ(none.wire_u64(), entry["none_hash_u64_trunc"]["u64"].as_u64());
    EXPECT_EQ(static_cast<int64_t>(none.wire_u64()), entry["none_hash_u64_trunc"]["i64"].as_int());

    // The configured hasher derives the same NONE_HASH, with the default
    // seed when PYTHONHASHSEED is unset.
    BlockHasher h = MakeHasher(parts[0], seed, 16);
    EXPECT_EQ(h.none_hash(), none);
    EXPECT_EQ(h.seed(), seed_text);
    ++checked;
  }
  EXPECT_EQ(checked, 8);
}

// The request-level inputs behind each chain case (hash_vectors.py).
RequestExtras ExtrasFor(const std::string& case_name) {
  static const MultiModalItem kMm[] = {{"mmhash-abc", 4, 20}};  // one item at [4, 24)
  RequestExtras e;
  if (case_name == "plain") return e;
  if (case_name == "lora_my-lora") {
    e.lora_name = "my-lora";
  } else if (case_name == "cache_salt_salt1") {
    e.cache_salt = "salt1";
  } else if (case_name == "lora_and_salt") {
    e.lora_name = "my-lora";
    e.cache_salt = "salt1";
  } else if (case_name == "mm_one_item") {
    e.mm_items = kMm;
  } else {
    ADD_FAILURE() << "unmapped chain case '" << case_name << "': add it to ExtrasFor()";
  }
  return e;
}

// extra_keys as JSON: null, or a list of str / [str, int] / int.
std::vector<ExtraKey> ExtraKeysFromJson(const JsonValue& v) {
  std::vector<ExtraKey> keys;
  if (v.is_null()) return keys;
  for (const JsonValue& k : v.items) {
    if (k.is_string()) {
      keys.push_back(ExtraKey::Str(k.text));
    } else if (k.is_array() && k.items.size() == 2 && k.items[0].is_string()) {
      keys.push_back(ExtraKey::MmItem(k.items[0].text, k.items[1].as_int()));
    } else if (k.is_number()) {
      keys.push_back(ExtraKey::Int(k.as_int()));
    } else {
      ADD_FAILURE() << "unsupported extra key shape";
    }
  }
  return keys;
}

TEST(HashVectors, AllChains) {
  const std::vector<int64_t> tokens = VectorTokens();
  int chains = 0, serialized = 0;
  for (const auto& [key, blocks] : Vectors()["chains"].members) {
    SCOPED_TRACE(key);
    const std::vector<std::string> parts = Split(key, " | ");
    ASSERT_EQ(parts.size(), 3u);
    BlockHasher h = MakeHasher(parts[0], SeedOf(parts[1]), 16);

    // Request level: extras -> extra keys -> chain.
    std::vector<BlockDigest> got;
    ASSERT_TRUE(h.HashRequest(tokens, ExtrasFor(parts[2]), &got).ok());
    ASSERT_EQ(got.size(), blocks.items.size());

    // Block level, from the JSON's own extra_keys and parent.
    BlockDigest parent;  // empty = None -> NONE_HASH
    for (size_t i = 0; i < blocks.items.size(); ++i) {
      SCOPED_TRACE("block " + std::to_string(i));
      const JsonValue& b = blocks.items[i];
      ASSERT_EQ(b["block"].as_int(), static_cast<int64_t>(i));
      const int64_t start = b["token_range"].items[0].as_int();
      const int64_t end = b["token_range"].items[1].as_int();
      const std::span<const int64_t> block_tokens(tokens.data() + start, static_cast<size_t>(end - start));
      const std::vector<ExtraKey> extra = ExtraKeysFromJson(b["extra_keys"]);

      if (b.has("serialized_input_hex")) {
        EXPECT_EQ(Hex(h.SerializeBlock(parent, block_tokens, extra)), b["serialized_input_hex"].text);
        ++serialized;
      }
      const BlockDigest d = h.HashBlock(parent, block_tokens, extra);
      EXPECT_EQ(d.ToHex(), b["hash_hex"].text);
      EXPECT_EQ(got[i].ToHex(), b["hash_hex"].text);
      EXPECT_EQ(d.wire_u64(), b["event_int_u64"]["u64"].as_u64());
      EXPECT_EQ(d.ToKey(), BlockKey::FromU64(b["event_int_u64"]["u64"].as_u64()));
      EXPECT_EQ(d.ToKey(), BlockKey::FromI64(b["event_int_u64"]["i64"].as_int()));
      EXPECT_EQ(d.ToBytesKey().ToString(), b["hash_hex"].text);
      if (i == 0) {
        EXPECT_TRUE(b["event_parent_block_hash"].is_null());
      } else {
        EXPECT_EQ(b["event_parent_block_hash"]["u64"].as_u64(), got[i - 1].wire_u64());
      }
      parent = d;
    }
    ++chains;
  }
  EXPECT_EQ(chains, 30);
  EXPECT_EQ(serialized, 30);
}

TEST(HashVectors, CoarseGroupView) {
  const JsonValue& v = Vectors()["coarse_group_view"];
  ASSERT_TRUE(v.is_object());
  BlockHasher h = MakeHasher("sha256", std::nullopt, 16);
  std::vector<int64_t> tokens(64);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int64_t>(i);
  std::vector<BlockDigest> fine;
  ASSERT_TRUE(h.HashRequest(tokens, &fine).ok());
  ASSERT_EQ(fine.size(), v["hash16"].items.size());
  for (size_t i = 0; i < fine.size(); ++i) EXPECT_EQ(fine[i].ToHex(), v["hash16"].items[i].text);

  std::vector<std::string> last, concat;
  ASSERT_TRUE(CoarseBlockHashBytes(fine, 2, CoarseHashEra::kLastSubHash, &last).ok());
  ASSERT_TRUE(CoarseBlockHashBytes(fine, 2, CoarseHashEra::kConcatenation, &concat).ok());
  const JsonValue& want_last = v["since_2026-06-22_PR45939_last_subhash"];
  const JsonValue& want_concat = v["before_PR45939_concatenation"];
  const JsonValue& want_wire = v["event_int_u64_both_eras"];
  ASSERT_EQ(last.size(), want_last.items.size());
  ASSERT_EQ(concat.size(), want_concat.items.size());
  for (size_t i = 0; i < last.size(); ++i) {
    const auto as_span = [](const std::string& s) {
      return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size());
    };
    EXPECT_EQ(Hex(as_span(last[i])), want_last.items[i].text);
    EXPECT_EQ(Hex(as_span(concat[i])), want_concat.items[i].text);
    // Same int on the wire in both eras, and (for 32-byte digests) the same
    // bytes-form BlockKey, since BlockKey keeps the last 32 bytes.
    const BlockKey k_last = BlockKey::FromBytes(last[i]);
    const BlockKey k_concat = BlockKey::FromBytes(concat[i]);
    EXPECT_EQ(k_last.wire(), want_wire.items[i]["u64"].as_u64());
    EXPECT_EQ(k_concat.wire(), want_wire.items[i]["u64"].as_u64());
    EXPECT_EQ(k_last, k_concat);
    EXPECT_EQ(k_last, fine[2 * i + 1].ToBytesKey());
  }
}

}  // namespace
}  // namespace kvidx
