#include "base/byte_coding.h"
#include "index/cbor_writer.h"

#include <algorithm>
#include <bit>
#include <cstring>

namespace kvidx {

namespace {

constexpr size_t kMaxHeadBytes = 9;

// CBOR negative integers carry -1 - v in major type 1.
inline void IntHead(int64_t v, uint8_t* major, uint64_t* arg) {
  if (v >= 0) {
    *major = 0;
    *arg = static_cast<uint64_t>(v);
  } else {
    *major = 1;
    *arg = ~static_cast<uint64_t>(v);  // == -1 - v, without overflow at INT64_MIN
  }
}

}  // namespace

uint8_t* CborWriter::Reserve(size_t n) {
  if (len_ + n > buf_.size()) buf_.resize(std::max({len_ + n, buf_.size() * 2, size_t{256}}));
  return buf_.data() + len_;
}

size_t CborWriter::EncodeHead(uint8_t* p, uint8_t major, uint64_t arg) {
  const uint8_t mt = static_cast<uint8_t>(major << 5);
  if (arg < 24) {
    p[0] = static_cast<uint8_t>(mt | arg);
    return 1;
  }
  // Additional info 24/25/26/27 = 1/2/4/8 argument bytes.
  size_t n = 8;
  uint8_t ai = 27;
  if (arg <= 0xff) {
    n = 1;
    ai = 24;
  } else if (arg <= 0xffff) {
    n = 2;
    ai = 25;
  } else if (arg <= 0xffffffffu) {
    n = 4;
    ai = 26;
  }
  p[0] = static_cast<uint8_t>(mt | ai);
  StoreBigEndian(p + 1, arg, n);
  return 1 + n;
}

void CborWriter::WriteHead(uint8_t major, uint64_t arg) {
  uint8_t* p = Reserve(kMaxHeadBytes);
  len_ += EncodeHead(p, major, arg);
}

void CborWriter::WriteNull() {
  uint8_t* p = Reserve(1);
  *p = 0xf6;
  len_ += 1;
}

void CborWriter::WriteInt(int64_t v) {
  uint8_t major;
  uint64_t arg;
  IntHead(v, &major, &arg);
  WriteHead(major, arg);
}

void CborWriter::WriteBytes(const void* data, size_t len) {
  WriteHead(2, len);
  uint8_t* p = Reserve(len);
  if (len != 0) std::memcpy(p, data, len);
  len_ += len;
}

void CborWriter::WriteStr(std::string_view utf8) {
  WriteHead(3, utf8.size());
  uint8_t* p = Reserve(utf8.size());
  if (!utf8.empty()) std::memcpy(p, utf8.data(), utf8.size());
  len_ += utf8.size();
}

void CborWriter::WriteIntArray(std::span<const int64_t> values) {
  uint8_t* p = Reserve(kMaxHeadBytes * (values.size() + 1));
  uint8_t* const start = p;
  p += EncodeHead(p, 4, values.size());
  for (int64_t v : values) {
    const uint64_t u = static_cast<uint64_t>(v);
    if (u <= 0xffffffffu) [[likely]] {
      // Token ids: head size chosen without branches (ids below and above
      // 256 / 65536 mix unpredictably). The argument is stored big-endian,
      // left-aligned in 4 bytes; only the head's length is kept.
      static constexpr uint8_t kLen[4] = {1, 2, 3, 5};
      static constexpr uint8_t kShift[4] = {0, 24, 16, 0};
      const size_t cls = static_cast<size_t>(u >= 24) + static_cast<size_t>(u >= 256) +
                         static_cast<size_t>(u >= 65536);
      p[0] = cls == 0 ? static_cast<uint8_t>(u) : static_cast<uint8_t>(23 + cls);
      const uint32_t a = static_cast<uint32_t>(u) << kShift[cls];
      const uint32_t be = std::endian::native == std::endian::little ? __builtin_bswap32(a) : a;
      std::memcpy(p + 1, &be, 4);
      p += kLen[cls];
    } else {
      uint8_t major;
      uint64_t arg;
      IntHead(v, &major, &arg);
      p += EncodeHead(p, major, arg);
    }
  }
  len_ += static_cast<size_t>(p - start);
}

}  // namespace kvidx
