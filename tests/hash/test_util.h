// Small helpers shared by the hash tests (test-only).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "index/block_hasher.h"

namespace kvidx::testing {

inline std::string Hex(std::span<const uint8_t> b) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  s.reserve(b.size() * 2);
  for (uint8_t c : b) {
    s.push_back(kHex[c >> 4]);
    s.push_back(kHex[c & 0xf]);
  }
  return s;
}

inline std::string Sha256Hex(std::span<const uint8_t> b) {
  return BlockHasher::Digest(HashAlgo::kSha256, b).ToHex();
}

inline std::string_view AsChars(std::span<const uint8_t> b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

inline BlockDigest DigestFromHex(std::string_view hex) {
  Result<BlockDigest> d = BlockDigest::FromHex(hex);
  return d.ok() ? d.value() : BlockDigest{};
}

}  // namespace kvidx::testing
