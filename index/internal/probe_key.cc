#include "index/internal/probe_key.h"

#include <cstring>

#include "base/byte_coding.h"

namespace kvidx::internal {

void ProbeKey::SetBytes(const BlockKey& k) {
  size_t len = k.byte_len();
  code = len == 0 ? 0xFF : static_cast<uint32_t>(len);
  uint8_t buf[BlockKey::kMaxBytes + 8] = {};
  k.CopyBytes(buf);
  size_t head = len > 8 ? len - 8 : 0;
  uint8_t h[24] = {};
  std::memcpy(h, buf, head);
  std::memcpy(this->head, h, sizeof(h));
}

BlockKey KeyFromParts(uint64_t wire, uint32_t code, const uint32_t (&head)[6]) {
  if (code == 0) return BlockKey::FromU64(wire);
  const size_t len = code == 0xFF ? 0 : code;
  uint8_t bytes[24];
  std::memcpy(bytes, head, sizeof(bytes));
  uint8_t buf[BlockKey::kMaxBytes];
  const size_t tail = len < 8 ? len : 8;
  std::memcpy(buf, bytes, len - tail);
  StoreBigEndian(buf + len - tail, wire, tail);
  return BlockKey::FromBytes(buf, len);
}

}  // namespace kvidx::internal
