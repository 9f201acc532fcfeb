// json_lite: a minimal JSON reader for loading test vectors (test-only).
//
// No JSON library is part of the build; the vector files are small and
// trusted, so a strict recursive-descent parser is enough. Numbers keep their
// source text (token ids and u64 strings must not go through double).
// Objects keep key order. Parse errors return nullopt with a message.
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
  static std::optional<JsonValue> Parse(std::string_view s, std::string* error) {
    JsonParser p(s);
    JsonValue v;
    if (!p.Value(&v) || (p.SkipWs(), p.pos_ != s.size())) {
      if (error) *error = "JSON parse error at offset " + std::to_string(p.pos_);
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
  explicit JsonParser(std::string_view s) : s_(s) {}

  void SkipWs() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\r' || s_[pos_] == '\t')) ++pos_;
  }
  bool Literal(std::string_view lit) {
    if (s_.substr(pos_, lit.size()) != lit) return false;
    pos_ += lit.size();
    return true;
  }

  bool Value(JsonValue* v) {
    SkipWs();
    if (pos_ >= s_.size()) return false;
    const char c = s_[pos_];
    if (c == '{') return Object(v);
    if (c == '[') return Array(v);
    if (c == '"') {
      v->type = JsonValue::Type::kString;
      return String(&v->text);
    }
    if (c == 't' || c == 'f') {
      v->type = JsonValue::Type::kBool;
      v->boolean = c == 't';
      return Literal(c == 't' ? "true" : "false");
    }
    if (c == 'n') {
      v->type = JsonValue::Type::kNull;
      return Literal("null");
    }
    return Number(v);
  }

  bool Number(JsonValue* v) {
    const size_t start = pos_;
    while (pos_ < s_.size() && std::string_view("+-0123456789.eE").find(s_[pos_]) != std::string_view::npos) ++pos_;
    if (pos_ == start) return false;
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
    if (pos_ + 4 > s_.size()) return false;
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = s_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= static_cast<uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f') v |= static_cast<uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= static_cast<uint32_t>(c - 'A' + 10);
      else return false;
    }
    *out = v;
    return true;
  }

  bool String(std::string* out) {
    if (!Literal("\"")) return false;
    out->clear();
    while (pos_ < s_.size()) {
      const char c = s_[pos_++];
      if (c == '"') return true;
      if (c != '\\') {
        out->push_back(c);
        continue;
      }
      if (pos_ >= s_.size()) return false;
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
          if (!Hex4(&cp)) return false;
          if (cp >= 0xd800 && cp < 0xdc00 && s_.substr(pos_, 2) == "\\u") {
            pos_ += 2;
            uint32_t lo = 0;
            if (!Hex4(&lo)) return false;
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
          }
          AppendUtf8(cp, out);
          break;
        }
        default: return false;
      }
    }
    return false;
  }

  bool Array(JsonValue* v) {
    v->type = JsonValue::Type::kArray;
    ++pos_;  // [
    SkipWs();
    if (Literal("]")) return true;
    while (true) {
      JsonValue item;
      if (!Value(&item)) return false;
      v->items.push_back(std::move(item));
      SkipWs();
      if (Literal(",")) continue;
      return Literal("]");
    }
  }

  bool Object(JsonValue* v) {
    v->type = JsonValue::Type::kObject;
    ++pos_;  // {
    SkipWs();
    if (Literal("}")) return true;
    while (true) {
      SkipWs();
      std::string key;
      if (!String(&key)) return false;
      SkipWs();
      if (!Literal(":")) return false;
      JsonValue member;
      if (!Value(&member)) return false;
      v->members.emplace_back(std::move(key), std::move(member));
      SkipWs();
      if (Literal(",")) continue;
      return Literal("}");
    }
  }

  std::string_view s_;
  size_t pos_ = 0;
};

}  // namespace kvidx::testing
