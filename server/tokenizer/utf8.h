// UTF-8 helpers of the tokenizer: validation and code-point stepping.
//
// Everything here works on bytes already known to be valid UTF-8 except
// FirstInvalidUtf8, which is the gate Encode passes text through first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvidx::tokenizer {

// The byte offset of the first byte that does not start or continue a
// well-formed UTF-8 sequence (overlong forms, surrogates and code points
// above U+10FFFF are ill-formed), or npos if `text` is valid.
size_t FirstInvalidUtf8(std::string_view text);

// The length in bytes of the sequence whose lead byte is `lead`.
inline size_t Utf8Length(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

// Decodes the code point at text[*pos] and advances *pos past it.
char32_t NextCodePoint(std::string_view text, size_t* pos);
// Decodes the code point that ends at text[end) (end > 0).
char32_t PrevCodePoint(std::string_view text, size_t end, size_t* start);

void AppendUtf8(char32_t cp, std::string* out);

}  // namespace kvidx::tokenizer
