// CborWriter against cbor2 5.4.6 `cbor2.dumps(obj, canonical=True)`.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "index/cbor_writer.h"
#include "tests/hash/test_util.h"

namespace kvidx {
namespace {

using testing::Hex;
using testing::Sha256Hex;

TEST(CborWriter, IntsAtEveryHeadBoundary) {
  const struct {
    int64_t v;
    const char* hex;
  } cases[] = {
      {0, "00"},
      {1, "01"},
      {23, "17"},
      {24, "1818"},
      {255, "18ff"},
      {256, "190100"},
      {65535, "19ffff"},
      {65536, "1a00010000"},
      {4294967295LL, "1affffffff"},
      {4294967296LL, "1b0000000100000000"},
      {9223372036854775807LL, "1b7fffffffffffffff"},
      {-1, "20"},
      {-24, "37"},
      {-25, "3818"},
      {-256, "38ff"},
      {-257, "390100"},
      {-65536, "39ffff"},
      {-65537, "3a00010000"},
      {-4294967296LL, "3affffffff"},
      {-4294967297LL, "3b0000000100000000"},
      {std::numeric_limits<int64_t>::min(), "3b7fffffffffffffff"},
  };
  CborWriter w;
  for (const auto& c : cases) {
    w.Reset();
    w.WriteInt(c.v);
    EXPECT_EQ(Hex(w.Finish()), c.hex) << c.v;
  }
  w.Reset();
  w.WriteUInt(std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(Hex(w.Finish()), "1bffffffffffffffff");
}

TEST(CborWriter, ArraysStringsNull) {
  CborWriter w;
  w.Reset();
  w.BeginArray(0);
  EXPECT_EQ(Hex(w.Finish()), "80");

  const std::vector<int64_t> four = {1, 2, 3, 4};
  w.Reset();
  w.WriteIntArray(four);
  EXPECT_EQ(Hex(w.Finish()), "8401020304");

  std::vector<int64_t> many(24, 0);
  w.Reset();
  w.WriteIntArray(many);
  EXPECT_EQ(Hex(w.Finish()).substr(0, 6), "981800");  // array head with 1-byte length

  // ((1, 'a'), b'b')
  w.Reset();
  w.BeginArray(2);
  w.BeginArray(2);
  w.WriteInt(1);
  w.WriteStr("a");
  w.WriteBytes("b", 1);
  EXPECT_EQ(Hex(w.Finish()), "82820161614162");

  // (None,)  and  ('é', '日本')
  w.Reset();
  w.BeginArray(1);
  w.WriteNull();
  EXPECT_EQ(Hex(w.Finish()), "81f6");
  w.Reset();
  w.BeginArray(2);
  w.WriteStr("\xc3\xa9");
  w.WriteStr("\xe6\x97\xa5\xe6\x9c\xac");
  EXPECT_EQ(Hex(w.Finish()), "8262c3a966e697a5e69cac");
}

TEST(CborWriter, StrAndBytesLengths) {
  const struct {
    size_t n;
    size_t str_len;
    const char* str_sha;
    const char* bytes_sha;
  } cases[] = {
      {0, 1, "8d33f520a3c4cef80d2453aef81b612bfe1cb44c8b2025630ad38662763f13d3",
       "c3641f8544d7c02f3580b07c0f9887f0c6a27ff5ab1d4a3e29caf197cfc299ae"},
      {23, 24, "c5b1fe69d403b97a51d6062623a69c55ffe8b0d4cc5ad7156ee2239f1060b189",
       "dc31d4f16a80b4b8c140aa802048d6a5efc60509105bc53158a35a66b67708e4"},
      {24, 26, "f0794f31dbdd00e6d3671a0489f264c4d8c7e6c4282a42075af2e34f56a0d11f",
       "bccf3b8228fba1b6b6ca2586ab2cef9340daaaaf0c22837d3640c20d51cf90e8"},
      {255, 257, "387ed65171029fc9a0ebf680927572aef94a35b4d854b79a205cd77f674be36d",
       "d23bed904e31ededa9eb13ef0805ea6892710ccb605564c0b70d3d5f9734d32b"},
      {256, 259, "ff52b61d7119986ee47df10f52d9dd52c3ed0aba3f98364301c17593dd9d5feb",
       "310b43dfb745d69ef566d55846d9eb2ff9b49ee22b676901a45e831d157969b4"},
      {65535, 65538, "8ea3089675e4436ef1e2f32b5081064540c61d746c91af2840340ee1db6a719d",
       "3df578101fd4a3eff82068db0bc0658fa374f1c54eff6465f6a76a98531b9260"},
      {65536, 65541, "8836d76bfab15ca6dc8b9626b2ce023c8e30461ba4933a4e4f50d2244a52c350",
       "e7a8b6576a911b98e1412280c7edcb5298ddfc4a52e28da97b64c0a0cff74f26"},
      {70000, 70005, "277c8fd0c9a60179bf8b27e7af6a36ae20f08acffe6458cba04bb260fbc9bbdc",
       "1b2868a01a2121b5171ac422289ab42c2ba1f91e30feac4e4661ccb416f10346"},
  };
  CborWriter w;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.n);
    w.Reset();
    w.WriteStr(std::string(c.n, 'a'));
    EXPECT_EQ(w.Finish().size(), c.str_len);
    EXPECT_EQ(Sha256Hex(w.Finish()), c.str_sha);
    w.Reset();
    w.WriteBytes(std::string(c.n, '\x07').data(), c.n);
    EXPECT_EQ(w.Finish().size(), c.str_len);
    EXPECT_EQ(Sha256Hex(w.Finish()), c.bytes_sha);
  }
}

}  // namespace
}  // namespace kvidx
