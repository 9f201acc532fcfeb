#include "index/internal/probe_key.h"

#include <cstring>

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

}  // namespace kvidx::internal
