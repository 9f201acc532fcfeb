// Fixed-width integer coding: the one place kvidx turns numbers into bytes
// and back. Big-endian is the wire order of vLLM's sequence frames, msgpack,
// CBOR and kvidx's snapshot keys (byte order = numeric order); little-endian
// is pickle's. Widths are 0..8 bytes; callers check bounds before calling.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvidx {

// The `n` bytes at `p` as a big-endian unsigned number.
inline uint64_t LoadBigEndian(const uint8_t* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v = (v << 8) | p[i];
  return v;
}
inline uint64_t LoadBigEndian(std::string_view s) {
  return LoadBigEndian(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

// The low `n` bytes of `v`, most significant first, at `p`.
inline void StoreBigEndian(uint8_t* p, uint64_t v, size_t n) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(v >> (8 * (n - 1 - i)));
}
inline void AppendBigEndian(std::string* out, uint64_t v, size_t n) {
  uint8_t buf[8];
  StoreBigEndian(buf, v, n);
  out->append(reinterpret_cast<const char*>(buf), n);
}

// The low `n` bytes of `v`, least significant first, at `p`.
inline void StoreLittleEndian(uint8_t* p, uint64_t v, size_t n) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

}  // namespace kvidx
