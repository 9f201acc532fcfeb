// The Jinja2 lexer with Hugging Face's settings: trim_blocks (the first
// newline after a block or comment tag is dropped), lstrip_blocks (spaces
// and tabs before a block or comment tag at the start of a line are
// dropped), whitespace control signs ({%- -%} {{- -}} {#- -#}, + to
// disable lstrip), raw blocks, comments, newlines normalized to \n and one
// trailing newline removed (keep_trailing_newline=False). Follows
// jinja2/lexer.py (3.1) rule by rule.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace kvidx::chat::jinja {

enum class TokenKind : uint8_t {
  kData,         // literal template text (raw blocks included)
  kVarBegin,     // {{
  kVarEnd,       // }}
  kBlockBegin,   // {%
  kBlockEnd,     // %}
  kName,
  kString,       // value: the decoded literal
  kInteger,
  kFloat,
  kOperator,     // value: the operator's spelling
  kEof,
};

struct Token {
  TokenKind kind;
  std::string value;
  int line;
};

// Tokens of `source`, ending with kEof; InvalidArgument naming the line for
// an unterminated tag, comment, raw block or string.
Result<std::vector<Token>> Lex(std::string_view source);

}  // namespace kvidx::chat::jinja
