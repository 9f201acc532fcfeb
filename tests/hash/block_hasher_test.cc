// BlockHasher beyond the shipped vectors: configuration errors, large
// blocks, every extra-key source together, vLLM's MM walk, pickle framing at
// the 64 KiB frame target. Expected digests come from CPython 3.11
// pickle.dumps(.., 5) / cbor2 5.4.6 canonical / python3-xxhash 3.2.0 running
// a transcription of vLLM's hash_block_tokens + generate_block_hash_extra_keys.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "index/block_hasher.h"
#include "tests/hash/test_util.h"

namespace kvidx {
namespace {

using testing::DigestFromHex;
using testing::Sha256Hex;

BlockHasher Make(HashAlgo algo, std::optional<std::string> seed, size_t block_size) {
  Result<BlockHasher> h = BlockHasher::Create({algo, std::move(seed), block_size});
  EXPECT_TRUE(h.ok()) << h.status().ToString();
  return std::move(h).value();
}

std::vector<std::string> HexAll(const std::vector<BlockDigest>& ds) {
  std::vector<std::string> out;
  for (const BlockDigest& d : ds) out.push_back(d.ToHex());
  return out;
}

TEST(ParseHashAlgo, AcceptsExactlyTheVllmNames) {
  for (auto [name, algo] : {std::pair{"sha256", HashAlgo::kSha256}, std::pair{"sha256_cbor", HashAlgo::kSha256Cbor},
                            std::pair{"xxhash", HashAlgo::kXxhash}, std::pair{"xxhash_cbor", HashAlgo::kXxhashCbor}}) {
    Result<HashAlgo> a = ParseHashAlgo(name);
    ASSERT_TRUE(a.ok()) << name;
    EXPECT_EQ(*a, algo);
    EXPECT_EQ(HashAlgoName(algo), name);
  }
  for (const char* bad : {"", "SHA256", "sha-256", "sha256 ", "xxh3", "builtin", "sha256_msgpack"}) {
    Result<HashAlgo> a = ParseHashAlgo(bad);
    ASSERT_FALSE(a.ok()) << bad;
    EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument);
  }
}

TEST(BlockHasherConfig, RejectsBadBlockSizes) {
  for (size_t bs : {size_t{0}, BlockHasher::kMaxBlockSize + 1}) {
    Result<BlockHasher> h = BlockHasher::Create({HashAlgo::kSha256, std::nullopt, bs});
    ASSERT_FALSE(h.ok()) << bs;
    EXPECT_EQ(h.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(h.status().message().find("block size"), std::string::npos);
  }
  EXPECT_TRUE(BlockHasher::Create({HashAlgo::kSha256, std::nullopt, 1}).ok());
  EXPECT_TRUE(BlockHasher::Create({HashAlgo::kSha256, std::nullopt, BlockHasher::kMaxBlockSize}).ok());
}

TEST(BlockHasherConfig, XxhashNeedsASeed) {
  for (HashAlgo algo : {HashAlgo::kXxhash, HashAlgo::kXxhashCbor}) {
    Result<BlockHasher> h = BlockHasher::Create({algo, std::nullopt, 16});
    ASSERT_FALSE(h.ok());
    EXPECT_EQ(h.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(h.status().message().find("os.urandom"), std::string::npos);
    EXPECT_TRUE(BlockHasher::Create({algo, std::string("0"), 16}).ok());
  }
}

TEST(BlockHasherConfig, SeedIsUsedVerbatim) {
  // PYTHONHASHSEED="random" is just a string to vLLM's init_none_hash.
  BlockHasher h = Make(HashAlgo::kSha256, "random", 16);
  EXPECT_EQ(h.none_hash(), BlockHasher::ComputeNoneHash(HashAlgo::kSha256, "random"));
  EXPECT_NE(h.none_hash(), Make(HashAlgo::kSha256, std::nullopt, 16).none_hash());
  EXPECT_EQ(Make(HashAlgo::kSha256, std::nullopt, 16).seed(), "vllm-none-hash");
}

TEST(BlockDigest, WireIsLastEightBytesBigEndian) {
  const BlockDigest d = DigestFromHex("fe8fa5dda3210d0ca2031e37cbe3b001186773cd1c710beb2d45fcb51d434798");
  EXPECT_EQ(d.size, 32);
  EXPECT_EQ(d.wire_u64(), 0x2d45fcb51d434798ull);
  EXPECT_EQ(d.ToKey(), BlockKey::FromU64(0x2d45fcb51d434798ull));
  EXPECT_TRUE(d.ToBytesKey().is_bytes());
  EXPECT_EQ(d.ToBytesKey().wire(), 0x2d45fcb51d434798ull);
  EXPECT_NE(d.ToKey(), d.ToBytesKey());

  const BlockDigest x = DigestFromHex("607646e52a8901b0051c6535db147d34");  // XXH3-128: low64 = last 8
  EXPECT_EQ(x.wire_u64(), 0x051c6535db147d34ull);
  EXPECT_EQ(x.ToBytesKey().byte_len(), 16u);

  EXPECT_FALSE(BlockDigest::FromHex("").ok());
  EXPECT_FALSE(BlockDigest::FromHex("abc").ok());
  EXPECT_FALSE(BlockDigest::FromHex("zz").ok());
  EXPECT_FALSE(BlockDigest::FromHex(std::string(66, 'a')).ok());
}

TEST(BlockHasher, OnlyFullBlocksAndOutputIsReused) {
  BlockHasher h = Make(HashAlgo::kSha256, std::nullopt, 16);
  std::vector<int64_t> tokens(47);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int64_t>(i);
  std::vector<BlockDigest> out(10);  // stale content must be cleared
  ASSERT_TRUE(h.HashRequest(tokens, &out).ok());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].wire_u64(), 0x631df88815cc4629ull);  // = vector chain block 1
  ASSERT_TRUE(h.HashRequest(std::span(tokens).first(15), &out).ok());
  EXPECT_TRUE(out.empty());
}

TEST(BlockHasher, EmptyParentMeansNoneHash) {
  BlockHasher h = Make(HashAlgo::kSha256, std::nullopt, 16);
  const std::vector<int64_t> t = {1, 2, 3};
  EXPECT_EQ(h.HashBlock(BlockDigest{}, t, {}), h.HashBlock(h.none_hash(), t, {}));
}

TEST(BlockHasher, BlockSize1024) {
  BlockHasher h = Make(HashAlgo::kSha256, std::nullopt, 1024);
  std::vector<int64_t> tokens(2048 + 5);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int64_t>((i * 2654435761ull) % 300000);
  std::vector<BlockDigest> out;
  ASSERT_TRUE(h.HashRequest(tokens, &out).ok());
  EXPECT_EQ(HexAll(out), (std::vector<std::string>{
                             "69b5d409bbdebcf752d56a969dd20739c2c10ffe6fc7aa4e7be6f035ab47384e",
                             "5393c9d2af7a9ef4149679e388bdd0b1b1a4f4b42db14d37d74ce335343d3eee",
                         }));
}

// Tokens 0..69 plus big ids (J and LONG1 encodings); LoRA, salt, four MM
// items (one ending inside block 0, one spanning blocks 0-2, one ending
// exactly at block 2's end, one filling block 4) and prompt-embeds digests.
struct FullExtrasCase {
  std::vector<int64_t> tokens;
  std::vector<MultiModalItem> mm = {{"img-a", 2, 10}, {"img-b", 12, 30}, {"img-c", 42, 6}, {"img-d", 64, 16}};
  std::vector<BlockDigest> embeds;
  FullExtrasCase() {
    for (int64_t i = 0; i < 70; ++i) tokens.push_back(i);
    for (int64_t v : {int64_t{70000}, int64_t{1} << 31, int64_t{1} << 40, int64_t{5}, int64_t{6}, int64_t{7},
                      int64_t{8}, int64_t{9}, int64_t{10}, int64_t{11}}) {
      tokens.push_back(v);
    }
    for (int b = 0; b < 5; ++b) {
      const std::string s = "embeds-" + std::to_string(b);
      embeds.push_back(
          BlockHasher::Digest(HashAlgo::kSha256, {reinterpret_cast<const uint8_t*>(s.data()), s.size()}));
    }
  }
  RequestExtras Extras() const {
    RequestExtras e;
    e.lora_name = "lora-x";
    e.cache_salt = "s";
    e.mm_items = mm;
    e.prompt_embeds_digests = embeds;
    return e;
  }
};

TEST(BlockHasher, AllExtraKeySourcesEveryAlgo) {
  const FullExtrasCase c;
  const struct {
    HashAlgo algo;
    const char* seed;
    std::vector<std::string> want;
  } cases[] = {
      {HashAlgo::kSha256, nullptr,
       {"e1e3cffa23c8af696024d1030d2062f57f27fa19a2160daa9d2bf7ad57694a69",
        "160c238897be96150f6e600802494361d5d057fd898b958d856ec35384354064",
        "8770fed1d8189b2b3b0ad151fd982450c6b5915d3e28b5851f3a40f3eda3eaa1",
        "4048cc06fd2b4e2e9e3059212349d293ce92133901e2b7d26932430a65c896ad",
        "5cb3dc687b8f0a5e9f6060e008cb9c63a4e8c9f43ababcea013913827edcad30"}},
      {HashAlgo::kSha256Cbor, nullptr,
       {"544440fb10a81d751a09ea09fd954200eaf044a04f4e7a26990c38c8a6af6046",
        "382d5bc033baf043c42ca3b78dfef3d6ff7c9e29013052fd186adba42c499c3e",
        "888ac4267f7206b7c3d96d96a63cc20326f0f32f33b6e50f6f2e082523498bd9",
        "b32ea4d0d91efeb35087f3a448b8c9b6b1c0943adaf20ee3dacf32a8211d94f7",
        "323896af6303ab5f49f589c5ee4e1444d08b04748561e539b6db45297c1d8f2a"}},
      {HashAlgo::kXxhash, "0",
       {"b90ef8834e103582f17a10facc2f9de1", "0c05056fad37ba71b2a145c13f8b132c", "f83e216447f7511bc4bf1ba2999e65ea",
        "4679c7258ca265dec32dcd63cea8ef38", "983bdc8a10de934a9d6cac1c0cfb5c26"}},
      {HashAlgo::kXxhashCbor, "0",
       {"b34a10c7aa221a77576a6d7f7c9b1efd", "e4b62214a998300c5cb8cb8cbf022aba", "b1ee3b506797a022a3d67e9393845661",
        "2ffb061187ac82b5fbf01bfd44160adf", "db3edade4d08a44c121c7b19d271fa3e"}},
  };
  for (const auto& tc : cases) {
    SCOPED_TRACE(HashAlgoName(tc.algo));
    BlockHasher h = Make(tc.algo, tc.seed ? std::optional<std::string>(tc.seed) : std::nullopt, 16);
    std::vector<BlockDigest> out;
    ASSERT_TRUE(h.HashRequest(c.tokens, c.Extras(), &out).ok());
    EXPECT_EQ(HexAll(out), tc.want);
  }
}

TEST(BlockHasher, MultimodalWalkMatchesVllm) {
  // Extra keys per block (vLLM): ((img-a,2),(img-b,12)) / ((img-b,-4),) /
  // ((img-b,-20),(img-c,10)) / None / ((img-d,0),).
  const FullExtrasCase c;
  RequestExtras e;
  e.mm_items = c.mm;
  BlockHasher h = Make(HashAlgo::kSha256, std::nullopt, 16);
  std::vector<BlockDigest> out;
  ASSERT_TRUE(h.HashRequest(c.tokens, e, &out).ok());
  EXPECT_EQ(HexAll(out), (std::vector<std::string>{
                             "ce9ac61b8080ddd797ba762bfd1cb9763a5129eec80d05f251b6fffc5238db24",
                             "ab60778d26fb8d45a9f26ab40c4d8c308611b2404658c663fde4de4d0d47d0f5",
                             "53927d8e7cfc47c2dc6e0e5c47125d11adbfe101084c0c670f6b6b5d2325cc23",
                             "8b39a45e6dc368232a159eba8bd832d33daed93f71ea82f830d3c1951d4b8083",
                             "bad98ac3fc1854e7521babb1522c31ad0da4a2436cc43b7ce1a4a4016cf595ce",
                         }));
  // Block-level cross-check of block 2's key.
  const ExtraKey keys[] = {ExtraKey::MmItem("img-b", -20), ExtraKey::MmItem("img-c", 10)};
  EXPECT_EQ(h.HashBlock(out[1], std::span(c.tokens).subspan(32, 16), keys), out[2]);
}

TEST(BlockHasher, SaltOnlyOnBlockZeroAndOnlyIfNonEmpty) {
  std::vector<int64_t> tokens(32, 7);
  BlockHasher h = Make(HashAlgo::kSha256, std::nullopt, 16);
  std::vector<BlockDigest> plain, empty_salt, salted;
  ASSERT_TRUE(h.HashRequest(tokens, &plain).ok());
  RequestExtras e;
  e.cache_salt = "";
  ASSERT_TRUE(h.HashRequest(tokens, e, &empty_salt).ok());
  EXPECT_EQ(plain, empty_salt);
  e.cache_salt = "x";
  ASSERT_TRUE(h.HashRequest(tokens, e, &salted).ok());
  const ExtraKey salt[] = {ExtraKey::Str("x")};
  EXPECT_EQ(salted[0], h.HashBlock({}, std::span(tokens).first(16), salt));
  EXPECT_EQ(salted[1], h.HashBlock(salted[0], std::span(tokens).subspan(16, 16), {}));
}

TEST(BlockHasher, PromptEmbedsMustCoverEveryBlock) {
  std::vector<int64_t> tokens(48, 0);
  std::vector<BlockDigest> embeds(2);
  RequestExtras e;
  e.prompt_embeds_digests = embeds;
  BlockHasher h = Make(HashAlgo::kSha256, std::nullopt, 16);
  std::vector<BlockDigest> out;
  const Status s = h.HashRequest(tokens, e, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("prompt_embeds_digests"), std::string::npos);
}

TEST(BlockHasher, LegacyIntLoraIdKey) {
  // vLLM before #27211 put lora_int_id (an int) in extra_keys.
  BlockHasher h = Make(HashAlgo::kSha256, std::nullopt, 4);
  const std::vector<int64_t> t = {1, 2, 3, 4};
  const ExtraKey k[] = {ExtraKey::Int(3)};
  // pickle: ... 4b03 85 94 (BININT1 3, TUPLE1, MEMOIZE) before the outer TUPLE3.
  const std::string hex = testing::Hex(h.SerializeBlock({}, t, k));
  EXPECT_EQ(hex.substr(hex.size() - 14), "4b03859487942e");
}

// Pickle framing around the 64 KiB target, checked against CPython 3.11's C
// pickler (sizes and SHA-256 of pickle.dumps((NONE_HASH, tokens, extra), 5)).
TEST(BlockHasherFraming, TokenTuplesAcrossTheFrameTarget) {
  BlockHasher h = Make(HashAlgo::kSha256, std::nullopt, 16);
  const struct {
    size_t n;
    size_t len;
    const char* sha;
  } cases[] = {
      // the token tuple ends exactly at 64 KiB: frame committed before None
      {13100, 65562, "61dd77dedeef95033bbe9338b58be2c14c01f2e70425f989748905eedd4b527c"},
      // the frame is committed inside the tuple
      {13104, 65582, "1ef676f29d2dbe5b6e449217cb9a111a310b95f5b4ba62256ea4e3e0e5a1e690"},
      {20000, 100062, "bb879a8960d60f56def85a8848bf80f8b82baa3827e82d7c0067876dc2902e4b"},
      {40000, 200080, "ebdadc921645ce06e11e870fa64a62918585483d8c078419696db8c1e0b0a7de"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.n);
    const std::vector<int64_t> tokens(c.n, 70000);
    const std::span<const uint8_t> bytes = h.SerializeBlock({}, tokens, {});
    EXPECT_EQ(bytes.size(), c.len);
    EXPECT_EQ(Sha256Hex(bytes), c.sha);
  }
}

TEST(BlockHasherFraming, LargeStringsAndBytesBypassFrames) {
  const std::string lora(70000, 'L'), salt(300, 's'), b300(300, '\x01'), b64k(65536, '\x02');
  const ExtraKey keys[] = {ExtraKey::Str(lora), ExtraKey::Str(salt), ExtraKey::Bytes(b300), ExtraKey::Bytes(b64k)};
  std::vector<int64_t> tokens(10);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int64_t>(i);

  BlockHasher p = Make(HashAlgo::kSha256, std::nullopt, 16);
  std::span<const uint8_t> bytes = p.SerializeBlock({}, tokens, keys);
  EXPECT_EQ(bytes.size(), 136253u);
  EXPECT_EQ(Sha256Hex(bytes), "670c8661978fd0a1fb173626aaa6f64a2d8527de781c9f319f5e476827384c2b");

  BlockHasher c = Make(HashAlgo::kSha256Cbor, std::nullopt, 16);
  bytes = c.SerializeBlock(BlockHasher::ComputeNoneHash(HashAlgo::kSha256, "vllm-none-hash"), tokens, keys);
  EXPECT_EQ(bytes.size(), 136199u);
  EXPECT_EQ(Sha256Hex(bytes), "177f5722440c949888aadfe5a3e3f3ef8765590972ca682465f0f5a08703339d");

  // A full frame right before a large str.
  const std::string big(70000, 'x');
  const ExtraKey one[] = {ExtraKey::Str(big)};
  const std::vector<int64_t> many(13100, 70000);
  bytes = p.SerializeBlock({}, many, one);
  EXPECT_EQ(bytes.size(), 135569u);
  EXPECT_EQ(Sha256Hex(bytes), "f4efac7882dc463cdb228a0c4aa1270ade144248117727f482fdf81548222ff2");
}

TEST(CoarseBlockHashBytes, XxhashConcatenationKeepsBothSubHashes) {
  BlockHasher h = Make(HashAlgo::kXxhash, "0", 16);
  std::vector<int64_t> tokens(80, 1);
  std::vector<BlockDigest> fine;
  ASSERT_TRUE(h.HashRequest(tokens, &fine).ok());
  std::vector<std::string> last, concat;
  ASSERT_TRUE(CoarseBlockHashBytes(fine, 2, CoarseHashEra::kLastSubHash, &last).ok());
  ASSERT_TRUE(CoarseBlockHashBytes(fine, 2, CoarseHashEra::kConcatenation, &concat).ok());
  ASSERT_EQ(last.size(), 2u);  // 5 fine blocks -> 2 complete coarse blocks
  ASSERT_EQ(concat.size(), 2u);
  EXPECT_EQ(concat[1].size(), 32u);
  // Same wire int, but 16-byte digests concatenated are a different bytes key.
  EXPECT_EQ(BlockKey::FromBytes(last[1]).wire(), BlockKey::FromBytes(concat[1]).wire());
  EXPECT_NE(BlockKey::FromBytes(last[1]), BlockKey::FromBytes(concat[1]));
  EXPECT_EQ(CoarseBlockHashBytes(fine, 0, CoarseHashEra::kLastSubHash, &last).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvidx
