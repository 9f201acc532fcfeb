// PickleWriter against CPython 3.11 `pickle.dumps(obj, 5)` (expected bytes
// pasted from python3; long payloads compared by length + SHA-256).
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "index/pickle_writer.h"
#include "tests/hash/test_util.h"

namespace kvidx {
namespace {

using testing::Hex;
using testing::Sha256Hex;

std::string PickleInt(int64_t v) {
  PickleWriter w;
  w.Reset();
  w.WriteInt(v);
  return Hex(w.Finish());
}

TEST(PickleWriter, IntsAtEveryOpcodeBoundary) {
  const struct {
    int64_t v;
    const char* hex;
  } cases[] = {
      {0, "80054b002e"},
      {1, "80054b012e"},
      {127, "80054b7f2e"},
      {128, "80054b802e"},
      {255, "80054bff2e"},
      {256, "80059504000000000000004d00012e"},
      {257, "80059504000000000000004d01012e"},
      {65535, "80059504000000000000004dffff2e"},
      {65536, "80059506000000000000004a000001002e"},
      {2147483647LL, "80059506000000000000004affffff7f2e"},
      {2147483648LL, "80059508000000000000008a0500000080002e"},
      {4294967295LL, "80059508000000000000008a05ffffffff002e"},
      {4294967296LL, "80059508000000000000008a0500000000012e"},
      {1099511627776LL, "80059509000000000000008a060000000000012e"},
      {9223372036854775807LL, "8005950b000000000000008a08ffffffffffffff7f2e"},
      {-1, "80059506000000000000004affffffff2e"},
      {-2, "80059506000000000000004afeffffff2e"},
      {-128, "80059506000000000000004a80ffffff2e"},
      {-129, "80059506000000000000004a7fffffff2e"},
      {-255, "80059506000000000000004a01ffffff2e"},
      {-256, "80059506000000000000004a00ffffff2e"},
      {-257, "80059506000000000000004afffeffff2e"},
      {-32768, "80059506000000000000004a0080ffff2e"},
      {-32769, "80059506000000000000004aff7fffff2e"},
      {-65536, "80059506000000000000004a0000ffff2e"},
      {-65537, "80059506000000000000004afffffeff2e"},
      {-2147483648LL, "80059506000000000000004a000000802e"},
      {-2147483649LL, "80059508000000000000008a05ffffff7fff2e"},
      {-4294967296LL, "80059508000000000000008a0500000000ff2e"},
      {-4294967297LL, "80059508000000000000008a05fffffffffe2e"},
      {std::numeric_limits<int64_t>::min(), "8005950b000000000000008a0800000000000000802e"},
      {-9223372036854775807LL, "8005950b000000000000008a0801000000000000802e"},
  };
  for (const auto& c : cases) EXPECT_EQ(PickleInt(c.v), c.hex) << c.v;
}

TEST(PickleWriter, UnsignedAbove63Bits) {
  PickleWriter w;
  w.Reset();
  w.WriteUInt(uint64_t{1} << 63);
  EXPECT_EQ(Hex(w.Finish()), "8005950c000000000000008a090000000000000080002e");
  w.Reset();
  w.WriteUInt(std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(Hex(w.Finish()), "8005950c000000000000008a09ffffffffffffffff002e");
  w.Reset();
  w.WriteUInt(300);
  EXPECT_EQ(Hex(w.Finish()), "80059504000000000000004d2c012e");
}

TEST(PickleWriter, NoneTuplesAndSmallFramesWithoutHeader) {
  PickleWriter w;
  w.Reset();
  w.WriteNone();
  EXPECT_EQ(Hex(w.Finish()), "80054e2e");  // frame of 2 bytes: no FRAME opcode

  w.Reset();
  w.BeginTuple(0);
  w.EndTuple(0);
  EXPECT_EQ(Hex(w.Finish()), "8005292e");  // EMPTY_TUPLE is not memoized

  const struct {
    std::vector<int64_t> v;
    const char* hex;
  } tuples[] = {
      {{1}, "80059505000000000000004b0185942e"},
      {{1, 2}, "80059507000000000000004b014b0286942e"},
      {{1, 2, 3}, "80059509000000000000004b014b024b0387942e"},
      {{1, 2, 3, 4}, "8005950c00000000000000284b014b024b034b0474942e"},
  };
  for (const auto& t : tuples) {
    w.Reset();
    w.BeginTuple(t.v.size());
    for (int64_t x : t.v) w.WriteInt(x);
    w.EndTuple(t.v.size());
    EXPECT_EQ(Hex(w.Finish()), t.hex);
    w.Reset();
    w.WriteIntTuple(t.v);  // fast path, same bytes
    EXPECT_EQ(Hex(w.Finish()), t.hex);
  }

  // ((),)  and  ((1, 'a'), b'b')  and  ('é', '日本')
  w.Reset();
  w.BeginTuple(1);
  w.BeginTuple(0);
  w.EndTuple(0);
  w.EndTuple(1);
  EXPECT_EQ(Hex(w.Finish()), "80059504000000000000002985942e");

  w.Reset();
  w.BeginTuple(2);
  w.BeginTuple(2);
  w.WriteInt(1);
  w.WriteStr("a");
  w.EndTuple(2);
  w.WriteBytes("b", 1);
  w.EndTuple(2);
  EXPECT_EQ(Hex(w.Finish()), "8005950f000000000000004b018c01619486944301629486942e");
  EXPECT_EQ(w.next_memo_index(), 4u);

  w.Reset();
  w.BeginTuple(2);
  w.WriteStr("\xc3\xa9");
  w.WriteStr("\xe6\x97\xa5\xe6\x9c\xac");
  w.EndTuple(2);
  EXPECT_EQ(Hex(w.Finish()), "80059511000000000000008c02c3a9948c06e697a5e69cac9486942e");
}

TEST(PickleWriter, StrAndBytesLengths) {
  // len -> (pickle size, sha256) for "a"*len and b"\x07"*len.
  const struct {
    size_t n;
    size_t str_len;
    const char* str_sha;
    size_t bytes_len;
    const char* bytes_sha;
  } cases[] = {
      {0, 15, "3279c4b947f331d055c47442171c9ea17712596bd7fe094c31d4a5d432b42d68", 15,
       "2213019ec9dc622db8a9d408db387f4ff32c857384008affc9c3929fbbcb2bd5"},
      {1, 16, "3426d324663d7bd68ec19b576cc8082329a9687f0bc77a6cc12104e34d1b6c49", 16,
       "f62421c7139e15deaf720fa6eca935f4ed478b08b5ede6a3f9598a787766ab8d"},
      {255, 270, "79c1f081bafd3b74bad912b2c6afa69495c0ea7c240d27c40d2aaabcc21b94ca", 270,
       "cc4c72f0967d489e006d0cec0dccfd4e34d592fab86449d5b2c54624e713f46c"},
      {256, 274, "3d99ab23c6d580f380235a132b985ea40af29ca50b40cae672302be27975840a", 274,
       "f6a763b6404136af99a534051ed13d3fee54efd0b994a7470ac57944f6fa25a4"},
      {65535, 65553, "47b4984a7560a0867b2c9f0cfc7cfe02a95ac4b63035aa90f4853c3fcc322f1f", 65553,
       "e7ce1854af5ccf23f9f58ab6dee81a265d357b0279bda15cdae71292f2279bde"},
      // >= 64 KiB: written outside any frame; MEMOIZE+STOP form a 2-byte frame without header.
      {65536, 65545, "127049ebc4b8f42b991f1f8af71415e1fbaf7e6243ba9e8cac98730ad8fabcb9", 65545,
       "b79bf50a3e315d5a723866e9868b754b74d0305d3ec33ac4bb310b06457fbf2f"},
      {70000, 70009, "3c0dd40ace462809f627e64857a865754d271fc1ca6e8f66f6fbc52869960275", 70009,
       "b628492edb649997cba6900775d095159ad6142e03ba43a7864b9b11cf32fe05"},
  };
  PickleWriter w;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.n);
    w.Reset();
    w.WriteStr(std::string(c.n, 'a'));
    std::span<const uint8_t> s = w.Finish();
    EXPECT_EQ(s.size(), c.str_len);
    EXPECT_EQ(Sha256Hex(s), c.str_sha);
    w.Reset();
    w.WriteBytes(std::string(c.n, '\x07').data(), c.n);
    s = w.Finish();
    EXPECT_EQ(s.size(), c.bytes_len);
    EXPECT_EQ(Sha256Hex(s), c.bytes_sha);
  }
  // Opcodes: SHORT_BINUNICODE below 256 bytes, BINUNICODE from 256; same for bytes.
  w.Reset();
  w.WriteStr(std::string(256, 'a'));
  EXPECT_EQ(Hex(w.Finish()).substr(0, 32), "80059507010000000000005800010000");
  w.Reset();
  w.WriteBytes(std::string(256, 'a').data(), 256);
  EXPECT_EQ(Hex(w.Finish()).substr(0, 32), "80059507010000000000004200010000");
}

TEST(PickleWriter, MemoGet) {
  // s = "xxx"; pickle.dumps((s, s, (s,)), 5)
  PickleWriter w;
  w.Reset();
  w.BeginTuple(3);
  w.WriteStr("xxx");
  w.WriteMemoGet(0);
  w.BeginTuple(1);
  w.WriteMemoGet(0);
  w.EndTuple(1);
  w.EndTuple(3);
  EXPECT_EQ(Hex(w.Finish()), "8005950f000000000000008c037878789468006800859487942e");

  // 300 distinct strs, then the first and the last again: BINGET 0, LONG_BINGET 299.
  std::vector<std::string> strs;
  for (int i = 0; i < 300; ++i) strs.push_back(std::to_string(i) + "_");
  w.Reset();
  w.BeginTuple(302);
  for (const std::string& s : strs) w.WriteStr(s);
  w.WriteMemoGet(0);
  w.WriteMemoGet(299);
  w.EndTuple(302);
  const std::span<const uint8_t> out = w.Finish();
  EXPECT_EQ(out.size(), 2012u);
  EXPECT_EQ(Sha256Hex(out), "02369a2f3f5ab3e8ff02e0537afdeae51b2903a2cda5d949162bd27a271061ef");
  EXPECT_EQ(Hex(out.last(20)), "385f948c043239395f9468006a2b01000074942e");
}

TEST(PickleWriter, ResetReusesTheBuffer) {
  PickleWriter w;
  w.Reset();
  w.WriteStr(std::string(100000, 'z'));
  (void)w.Finish();
  w.Reset();
  w.WriteInt(5);
  EXPECT_EQ(Hex(w.Finish()), "80054b052e");
}

}  // namespace
}  // namespace kvidx
