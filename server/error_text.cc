#include "server/error_text.h"

namespace kvidx::server {

namespace {

// The longest prefix of `text` of at most `max` bytes that ends on a UTF-8
// character boundary.
std::string_view Cut(std::string_view text, size_t max) {
  if (text.size() <= max) return text;
  size_t n = max;
  while (n > 0 && (static_cast<unsigned char>(text[n]) & 0xC0) == 0x80) --n;
  return text.substr(0, n);
}

}  // namespace

std::string Quote(std::string_view value) {
  std::string out = "\"";
  out += Cut(value, kMaxQuoted);
  out += '"';
  if (value.size() > kMaxQuoted) out += "...(" + std::to_string(value.size()) + " bytes)";
  return out;
}

std::string Clamp(std::string_view text, size_t max) {
  std::string out(Cut(text, max));
  if (text.size() > max) out += "...(" + std::to_string(text.size()) + " bytes)";
  return out;
}

grpc::Status BoundedStatus(const grpc::Status& s) {
  if (s.error_message().size() <= kMaxStatusMessage) return s;
  return {s.error_code(), Clamp(s.error_message())};
}

}  // namespace kvidx::server
