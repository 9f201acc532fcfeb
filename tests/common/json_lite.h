// json_lite: a minimal, strict JSON reader for tests (test-only).
//
// No JSON library is part of the build; the test vectors, the CLI's output
// and the server's JSON log lines are small, so a recursive-descent parser of
// RFC 8259 syntax is enough. It is strict: raw control characters inside
// strings, bad numbers (01, 1., +1), trailing commas and unpaired surrogates
// are errors. \uXXXX escapes are decoded to UTF-8 (a surrogate pair to one
// code point). Numbers keep their source text (token ids and u64 strings must
// not go through double). Objects keep key order. Parse errors return nullopt
// with a message saying what was wrong and where.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvidx::testing {

struct JsonValue {
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  Type type = Type::kNull;
  bool boolean = false;
  std::string text;  // string value, or the number's source text
  std::vector<JsonValue> items;
  std::vector<std::pair<std::string, JsonValue>> members;

  bool is_null() const { return type == Type::kNull; }
  bool is_string() const { return type == Type::kString; }
  bool is_array() const { return type == Type::kArray; }
  bool is_object() const { return type == Type::kObject; }
  bool is_number() const { return type == Type::kNumber; }

  // Member lookup; a static null value when absent or not an object.
  const JsonValue& operator[](std::string_view key) const {
    static const JsonValue kNullValue;
    for (const auto& [k, v] : members) {
      if (k == key) return v;
    }
    return kNullValue;
  }
  bool has(std::string_view key) const {
    for (const auto& m : members) {
      if (m.first == key) return true;
    }
    return false;
  }
  int64_t as_int() const { return std::strtoll(text.c_str(), nullptr, 10); }
  uint64_t as_u64() const { return std::strtoull(text.c_str(), nullptr, 10); }
};

class JsonParser {
 public:
  // Exactly one JSON value (white space around it allowed).
  static std::optional<JsonValue> Parse(std::string_view s, std::string* error) {
    JsonParser p(s);
    JsonValue v;
    bool ok = p.Value(&v, 0);
    if (ok) {
      p.SkipWs();
      if (p.pos_ != s.size()) ok = p.Fail("trailing text");
    }
    if (!ok) {
      if (error) *error = "JSON parse error: " + p.error_ + " at offset " + std::to_string(p.error_pos_);
      return std::nullopt;
    }
    return v;
  }

  static std::optional<JsonValue> ParseFile(const std::string& path, std::string* error) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      if (error) *error = "cannot open " + path;
      return std::nullopt;
    }
    std::stringstream ss;
    ss << in.rdbuf();
    return Parse(ss.str(), error);
  }

 private:
  static constexpr int kMaxDepth = 64;

  explicit JsonParser(std::string_view s) : s_(s) {}

  // Records the first error (where it happened) and returns false.
  bool Fail(const std::string& what) {
    if (error_.empty()) {
      error_ = what;
      error_pos_ = pos_;
    }
    return false;
  }
  void SkipWs() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\r' || s_[pos_] == '\t')) ++pos_;
  }
  // Consumes `c` if it is next.
  bool Consume(char c) {
    if (pos_ >= s_.size() || s_[pos_] != c) return false;
    ++pos_;
    return true;
  }
  bool Word(std::string_view w) {
    if (s_.substr(pos_, w.size()) != w) return Fail("bad literal");
    pos_ += w.size();
    return true;
  }
  // One or more decimal digits.
  bool Digits() {
    const size_t start = pos_;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
    return pos_ > start;
  }

  bool Value(JsonValue* v, int depth) {
    if (depth > kMaxDepth) return Fail("nested too deep");
    SkipWs();
    if (pos_ >= s_.size()) return Fail("unexpected end of input");
    const char c = s_[pos_];
    if (c == '{') return Object(v, depth);
    if (c == '[') return Array(v, depth);
    if (c == '"') {
      v->type = JsonValue::Type::kString;
      return String(&v->text);
    }
    if (c == 't' || c == 'f') {
      v->type = JsonValue::Type::kBool;
      v->boolean = c == 't';
      return Word(c == 't' ? "true" : "false");
    }
    if (c == 'n') {
      v->type = JsonValue::Type::kNull;
      return Word("null");
    }
    return Number(v);
  }

  // -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
  bool Number(JsonValue* v) {
    const size_t start = pos_;
    Consume('-');
    if (!Consume('0') && !Digits()) return Fail("bad number");
    if (Consume('.') && !Digits()) return Fail("bad fraction");
    if (Consume('e') || Consume('E')) {
      if (!Consume('+')) Consume('-');
      if (!Digits()) return Fail("bad exponent");
    }
    v->type = JsonValue::Type::kNumber;
    v->text = std::string(s_.substr(start, pos_ - start));
    return true;
  }

  static void AppendUtf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
      out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out->push_back(static_cast<char>(0xc0 | (cp >> 6)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    } else if (cp < 0x10000) {
      out->push_back(static_cast<char>(0xe0 | (cp >> 12)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    } else {
      out->push_back(static_cast<char>(0xf0 | (cp >> 18)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    }
  }

  bool Hex4(uint32_t* out) {
    if (pos_ + 4 > s_.size()) return Fail("short \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = s_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= static_cast<uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f') v |= static_cast<uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= static_cast<uint32_t>(c - 'A' + 10);
      else return Fail("bad \\u escape");
    }
    *out = v;
    return true;
  }

  // The code point of a \u escape (the "\u" already read); a high surrogate
  // must be followed by a \u low surrogate.
  bool UnicodeEscape(uint32_t* cp) {
    if (!Hex4(cp)) return false;
    if (*cp >= 0xdc00 && *cp < 0xe000) return Fail("unpaired low surrogate");
    if (*cp < 0xd800 || *cp >= 0xdc00) return true;
    uint32_t lo = 0;
    if (s_.substr(pos_, 2) != "\\u") return Fail("unpaired high surrogate");
    pos_ += 2;
    if (!Hex4(&lo)) return false;
    if (lo < 0xdc00 || lo >= 0xe000) return Fail("unpaired high surrogate");
    *cp = 0x10000 + ((*cp - 0xd800) << 10) + (lo - 0xdc00);
    return true;
  }

  bool String(std::string* out) {
    if (!Consume('"')) return Fail("expected a string");
    out->clear();
    for (;;) {
      if (pos_ >= s_.size()) return Fail("unterminated string");
      const unsigned char c = static_cast<unsigned char>(s_[pos_]);
      if (c < 0x20) return Fail("raw control character in a string");
      ++pos_;
      if (c == '"') return true;
      if (c != '\\') {
        out->push_back(static_cast<char>(c));
        continue;
      }
      if (pos_ >= s_.size()) return Fail("unterminated escape");
      const char e = s_[pos_++];
      switch (e) {
        case '"': out->push_back('"'); break;
        case '\\': out->push_back('\\'); break;
        case '/': out->push_back('/'); break;
        case 'b': out->push_back('\b'); break;
        case 'f': out->push_back('\f'); break;
        case 'n': out->push_back('\n'); break;
        case 'r': out->push_back('\r'); break;
        case 't': out->push_back('\t'); break;
        case 'u': {
          uint32_t cp = 0;
          if (!UnicodeEscape(&cp)) return false;
          AppendUtf8(cp, out);
          break;
        }
        default: return Fail(std::string("bad escape \\") + e);
      }
    }
  }

  bool Array(JsonValue* v, int depth) {
    v->type = JsonValue::Type::kArray;
    ++pos_;  // [
    SkipWs();
    if (Consume(']')) return true;
    for (;;) {
      JsonValue item;
      if (!Value(&item, depth + 1)) return false;
      v->items.push_back(std::move(item));
      SkipWs();
      if (Consume(',')) continue;
      if (Consume(']')) return true;
      return Fail("expected ',' or ']'");
    }
  }

  bool Object(JsonValue* v, int depth) {
    v->type = JsonValue::Type::kObject;
    ++pos_;  // {
    SkipWs();
    if (Consume('}')) return true;
    for (;;) {
      SkipWs();
      std::string key;
      if (!String(&key)) return false;
      SkipWs();
      if (!Consume(':')) return Fail("expected ':'");
      JsonValue member;
      if (!Value(&member, depth + 1)) return false;
      v->members.emplace_back(std::move(key), std::move(member));
      SkipWs();
      if (Consume(',')) continue;
      if (Consume('}')) return true;
      return Fail("expected ',' or '}'");
    }
  }

  std::string_view s_;
  size_t pos_ = 0;
  std::string error_;
  size_t error_pos_ = 0;
};

}  // namespace kvidx::testing
