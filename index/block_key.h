// BlockKey: one vLLM block hash, exactly as precise as the engine sent it.
//
// vLLM publishes a block hash either as an integer (default,
// VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1: the last 8 bytes of the digest,
// big-endian, unsigned; very old engines sent signed 64-bit ints) or as the
// raw digest bytes (16 for xxhash, 32 for sha256, 32*k for pre-#45939 coarse
// groups). BlockKey keeps whichever it got without adding collision risk:
//   - integer form: the 64-bit value (signed ints keep their bit pattern);
//   - bytes form: the last 8 bytes as `wire` plus up to 24 leading bytes.
// Digests longer than 32 bytes only occur as concatenations of chained
// 32-byte hashes; the last 32 bytes are the hash of the *last* sub-block,
// which already chains every earlier one, so keeping them loses nothing that
// SHA-256 itself does not.
//
// Integer and bytes forms never compare equal, even for the same digest:
// an engine is configured one way, and mixing them would be a config error
// the index must not paper over.
//
// Plain value type; trivially copyable; thread-compatible.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>

#include "base/byte_coding.h"

namespace kvidx {

class BlockKey {
 public:
  static constexpr size_t kMaxBytes = 32;

  constexpr BlockKey() = default;

  // Integer form, as msgpack int/uint on the wire.
  static constexpr BlockKey FromU64(uint64_t v) {
    BlockKey k;
    k.wire_ = v;
    return k;
  }
  static constexpr BlockKey FromI64(int64_t v) { return FromU64(static_cast<uint64_t>(v)); }

  // Bytes form, as msgpack bin on the wire (any length; see header comment).
  static BlockKey FromBytes(const uint8_t* data, size_t len) {
    BlockKey k;
    if (len > kMaxBytes) {
      data += len - kMaxBytes;
      len = kMaxBytes;
    }
    k.len_ = static_cast<uint8_t>(len);
    if (len == 0) {
      k.len_ = 0xff;  // an empty bin is still bytes form, distinct from int 0
      return k;
    }
    size_t tail = len < 8 ? len : 8;
    uint64_t w = 0;
    for (size_t i = len - tail; i < len; ++i) w = (w << 8) | data[i];
    k.wire_ = w;
    std::memcpy(k.head_.data(), data, len - tail);
    return k;
  }
  static BlockKey FromBytes(std::string_view s) {
    return FromBytes(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  }

  // The 64-bit value vLLM puts on the wire by default (last 8 digest bytes, BE).
  constexpr uint64_t wire() const { return wire_; }
  constexpr bool is_bytes() const { return len_ != 0; }
  // Number of digest bytes kept (0 for integer form).
  constexpr size_t byte_len() const { return len_ == 0xff ? 0 : len_; }
  // Writes the kept digest bytes (byte_len() of them) to `out`.
  void CopyBytes(uint8_t* out) const {
    size_t len = byte_len();
    size_t tail = len < 8 ? len : 8;
    std::memcpy(out, head_.data(), len - tail);
    StoreBigEndian(out + len - tail, wire_, tail);
  }

  // "0x2d45fcb51d434798" for integer form, lowercase hex digest for bytes form.
  std::string ToString() const {
    static constexpr char kHex[] = "0123456789abcdef";
    std::string s;
    if (!is_bytes()) {
      s = "0x";
      for (int i = 15; i >= 0; --i) s.push_back(kHex[(wire_ >> (4 * i)) & 0xf]);
      return s;
    }
    uint8_t buf[kMaxBytes];
    CopyBytes(buf);
    for (size_t i = 0; i < byte_len(); ++i) {
      s.push_back(kHex[buf[i] >> 4]);
      s.push_back(kHex[buf[i] & 0xf]);
    }
    return s;
  }

  friend bool operator==(const BlockKey& a, const BlockKey& b) {
    return a.wire_ == b.wire_ && a.len_ == b.len_ && a.head_ == b.head_;
  }

 private:
  uint64_t wire_ = 0;
  uint8_t len_ = 0;                  // 0: integer form; 0xff: empty bytes; else byte count
  std::array<uint8_t, 24> head_{};   // leading bytes of a bytes-form digest
};

struct BlockKeyHash {
  // The wire value is already a uniformly distributed digest slice.
  size_t operator()(const BlockKey& k) const { return static_cast<size_t>(k.wire()); }
};

}  // namespace kvidx
