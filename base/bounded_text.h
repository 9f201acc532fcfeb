// Error texts that quote request fields stay short.
//
// Why: a status message travels to the caller in a size-limited place (the
// grpc-message trailer, which clients refuse over 8 KiB by default: an error
// that echoed an 8 KiB model name reached the caller as RESOURCE_EXHAUSTED
// instead of NOT_FOUND). Every quoted value goes through Quote(), and every
// message leaving a service through Clamp().
//
// Cuts never split a UTF-8 sequence (messages also go into proto3 string
// fields, which must stay valid UTF-8). Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kvidx {

inline constexpr size_t kMaxQuoted = 64;          // bytes of a quoted value kept
inline constexpr size_t kMaxStatusMessage = 1024;  // bytes of a whole message kept

// The longest prefix of `text` of at most `max` bytes that ends on a UTF-8
// character boundary.
inline std::string_view CutUtf8(std::string_view text, size_t max) {
  if (text.size() <= max) return text;
  size_t n = max;
  while (n > 0 && (static_cast<unsigned char>(text[n]) & 0xC0) == 0x80) --n;
  return text.substr(0, n);
}

// "\"value\"", or "\"<first 64 bytes>\"...(N bytes)" for a longer value.
inline std::string Quote(std::string_view value) {
  std::string out = "\"";
  out += CutUtf8(value, kMaxQuoted);
  out += '"';
  if (value.size() > kMaxQuoted) out += "...(" + std::to_string(value.size()) + " bytes)";
  return out;
}

// `text` cut to `max` bytes plus "...(N bytes)" when longer.
inline std::string Clamp(std::string_view text, size_t max = kMaxStatusMessage) {
  std::string out(CutUtf8(text, max));
  if (text.size() > max) out += "...(" + std::to_string(text.size()) + " bytes)";
  return out;
}

}  // namespace kvidx
