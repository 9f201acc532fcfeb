// CborWriter: canonical CBOR (RFC 8949 core deterministic encoding, as
// `cbor2.dumps(obj, canonical=True)` writes it) for the shapes of vLLM's
// block-hash keys: arrays (Python tuples), byte strings, text strings,
// integers and null.
//
// Canonical only changes map/set ordering and float width in cbor2; neither
// occurs in block keys, so for these shapes canonical output is simply the
// shortest head for every length and integer. Python ints outside the 64-bit
// range would be bignum tags 2/3; token ids and offsets never are, so this
// writer has no bignum support.
//
// Usage: Reset(), one top-level item, Finish(). The caller must write exactly
// n items after BeginArray(n). The buffer is reused across Reset() calls.
// Not thread-safe; one writer per thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace kvidx {

class CborWriter {
 public:
  CborWriter() = default;

  void Reset() { len_ = 0; }

  void WriteNull();
  void WriteInt(int64_t v);
  void WriteUInt(uint64_t v) { WriteHead(0, v); }
  void WriteBytes(const void* data, size_t len);
  void WriteBytes(std::span<const uint8_t> b) { WriteBytes(b.data(), b.size()); }
  void WriteStr(std::string_view utf8);
  void BeginArray(size_t n) { WriteHead(4, n); }

  // Hot path for token ids: BeginArray(n) + WriteInt() per value.
  void WriteIntArray(std::span<const int64_t> values);

  // The encoded item; valid until the next non-const call.
  std::span<const uint8_t> Finish() const { return {buf_.data(), len_}; }

 private:
  // Major type + argument in the shortest form (0..23 inline, then 1/2/4/8 bytes BE).
  void WriteHead(uint8_t major, uint64_t arg);
  static size_t EncodeHead(uint8_t* p, uint8_t major, uint64_t arg);
  uint8_t* Reserve(size_t n);

  std::vector<uint8_t> buf_;
  size_t len_ = 0;
};

}  // namespace kvidx
