// Helpers shared by the decode tests: a minimal JSON reader for the vector
// file (no JSON library is installed), hex, a msgpack builder for hand-made
// inputs, and an owned, comparable copy of a decoded event.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "ingest/decoder.h"
#include "ingest/testing/encoder.h"
#include "ingest/testing/extra_keys.h"

namespace kvidx::ingest::testing {

// ---- JSON (enough for tests/vectors/*.json) --------------------------------

struct Json {
  enum class T { kNull, kBool, kInt, kUint, kDouble, kStr, kArr, kObj } t = T::kNull;
  bool b = false;
  int64_t i = 0;
  uint64_t u = 0;
  double d = 0;
  std::string s;
  std::vector<Json> arr;
  // Object members, in file order. Two vectors rather than pairs: std::pair
  // may not hold the still-incomplete Json.
  std::vector<std::string> keys;
  std::vector<Json> vals;

  bool is_null() const { return t == T::kNull; }
  const Json* Find(std::string_view key) const {
    for (size_t i = 0; i < keys.size(); ++i) {
      if (keys[i] == key) return &vals[i];
    }
    return nullptr;
  }
  const Json& operator[](std::string_view key) const {
    static const Json kNull;
    const Json* j = Find(key);
    return j ? *j : kNull;
  }
  int64_t AsI64() const { return t == T::kUint ? static_cast<int64_t>(u) : i; }
  uint64_t AsU64() const { return t == T::kUint ? u : static_cast<uint64_t>(i); }
};

class JsonParser {
 public:
  explicit JsonParser(std::string_view s) : s_(s) {}
  bool Parse(Json* out) {
    if (!Value(out)) return false;
    Ws();
    return pos_ == s_.size();
  }

 private:
  void Ws() {
    while (pos_ < s_.size() && std::strchr(" \t\r\n", s_[pos_]) != nullptr) ++pos_;
  }
  bool Lit(std::string_view w) {
    if (s_.substr(pos_, w.size()) != w) return false;
    pos_ += w.size();
    return true;
  }
  bool Str(std::string* out) {
    if (!Lit("\"")) return false;
    while (pos_ < s_.size() && s_[pos_] != '"') {
      char c = s_[pos_++];
      if (c == '\\') {
        if (pos_ >= s_.size()) return false;
        char e = s_[pos_++];
        switch (e) {
          case 'n': c = '\n'; break;
          case 't': c = '\t'; break;
          case 'u': {
            if (pos_ + 4 > s_.size()) return false;
            unsigned cp = std::stoul(std::string(s_.substr(pos_, 4)), nullptr, 16);
            pos_ += 4;
            if (cp >= 0x80) return false;  // not needed by the vectors
            c = static_cast<char>(cp);
            break;
          }
          default: c = e;
        }
      }
      out->push_back(c);
    }
    return Lit("\"");
  }
  bool Value(Json* v) {
    Ws();
    if (pos_ >= s_.size()) return false;
    char c = s_[pos_];
    if (c == 'n') return Lit("null");
    if (c == 't') {
      v->t = Json::T::kBool;
      v->b = true;
      return Lit("true");
    }
    if (c == 'f') {
      v->t = Json::T::kBool;
      return Lit("false");
    }
    if (c == '"') {
      v->t = Json::T::kStr;
      return Str(&v->s);
    }
    if (c == '[') {
      ++pos_;
      v->t = Json::T::kArr;
      Ws();
      if (Lit("]")) return true;
      do {
        if (!Value(&v->arr.emplace_back())) return false;
        Ws();
      } while (Lit(","));
      return Lit("]");
    }
    if (c == '{') {
      ++pos_;
      v->t = Json::T::kObj;
      Ws();
      if (Lit("}")) return true;
      do {
        Ws();
        if (!Str(&v->keys.emplace_back())) return false;
        Ws();
        if (!Lit(":")) return false;
        if (!Value(&v->vals.emplace_back())) return false;
        Ws();
      } while (Lit(","));
      return Lit("}");
    }
    size_t start = pos_;
    while (pos_ < s_.size() && std::strchr("+-0123456789.eE", s_[pos_]) != nullptr) ++pos_;
    std::string num(s_.substr(start, pos_ - start));
    if (num.empty()) return false;
    if (num.find_first_of(".eE") != std::string::npos) {
      v->t = Json::T::kDouble;
      v->d = std::stod(num);
    } else if (num[0] == '-') {
      v->t = Json::T::kInt;
      v->i = std::stoll(num);
    } else {
      v->t = Json::T::kUint;
      v->u = std::stoull(num);
    }
    return true;
  }
  std::string_view s_;
  size_t pos_ = 0;
};

inline const Json& Vectors() {
  static const Json* j = [] {
    std::ifstream f(std::string(KVIDX_TEST_DATA_DIR) + "/event_payloads.json");
    std::stringstream ss;
    ss << f.rdbuf();
    auto* out = new Json;
    std::string text = ss.str();
    if (text.empty() || !JsonParser(text).Parse(out)) {
      ADD_FAILURE() << "cannot read/parse event_payloads.json";
    }
    return out;
  }();
  return *j;
}

// ---- hex --------------------------------------------------------------------

// Whitespace between bytes is ignored, for readable literals.
inline std::string FromHex(std::string_view hex) {
  std::string digits;
  for (char c : hex) {
    if (c != ' ' && c != '\n') digits.push_back(c);
  }
  std::string out;
  for (size_t i = 0; i + 1 < digits.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(digits.substr(i, 2), nullptr, 16)));
  }
  return out;
}
inline std::string ToHex(std::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

inline std::string VectorPayload(std::string_view name) {
  return FromHex(Vectors()["payloads"][name]["payload_hex"].s);
}

inline const std::vector<std::string>& AllVectorNames() {
  static const std::vector<std::string> kNames = {
      "map_form_newest",       "map_form_bytes_hashes", "map_form_with_session_and_locality",
      "array_form_v6_2026-05", "array_form_v2_2025-09", "array_form_v1_2025-04_no_rank"};
  return kNames;
}

// The quirk vector is a single event; wrap it as [1700000000.25, [ev], 0].
inline std::string QuirkBatchPayload() {
  return FromHex("93cb41d954fc4010000091") + VectorPayload("quirk_map16_header_hypothetical") + std::string(1, '\0');
}

// Every real vector plus the wrapped quirk.
inline std::vector<std::pair<std::string, std::string>> AllVectorPayloads() {
  std::vector<std::pair<std::string, std::string>> v;
  for (const auto& n : AllVectorNames()) v.emplace_back(n, VectorPayload(n));
  v.emplace_back("quirk_map16_wrapped", QuirkBatchPayload());
  return v;
}

// ---- msgpack builder for hand-made inputs (independent of encoder.cc) -----

class Pack {
 public:
  Pack& Raw(std::string_view b) {
    s_.append(b);
    return *this;
  }
  Pack& Hex(std::string_view h) { return Raw(FromHex(h)); }
  Pack& Byte(uint8_t b) {
    s_.push_back(static_cast<char>(b));
    return *this;
  }
  Pack& BE(uint64_t v, int n) {
    for (int i = n - 1; i >= 0; --i) Byte(static_cast<uint8_t>(v >> (8 * i)));
    return *this;
  }
  Pack& Nil() { return Byte(0xc0); }
  Pack& Arr(uint32_t n) { return n < 16 ? Byte(0x90 | n) : Byte(0xdc).BE(n, 2); }
  Pack& Map(uint32_t n) { return n < 16 ? Byte(0x80 | n) : Byte(0xde).BE(n, 2); }
  Pack& U(uint64_t v) { return v < 128 ? Byte(static_cast<uint8_t>(v)) : Byte(0xcf).BE(v, 8); }
  Pack& I(int64_t v) {
    if (v >= 0) return U(static_cast<uint64_t>(v));
    return Byte(0xd3).BE(static_cast<uint64_t>(v), 8);
  }
  Pack& F64(double d) {
    uint64_t b;
    std::memcpy(&b, &d, 8);
    return Byte(0xcb).BE(b, 8);
  }
  Pack& S(std::string_view s) {
    if (s.size() < 32) {
      Byte(0xa0 | static_cast<uint8_t>(s.size()));
    } else {
      Byte(0xda).BE(s.size(), 2);
    }
    return Raw(s);
  }
  Pack& Bin(std::string_view b) { return Byte(0xc4).BE(b.size(), 1).Raw(b); }
  const std::string& str() const { return s_; }
  // Implicit on purpose, so builders read like literals. A view of a
  // temporary Pack is only valid until the end of the full expression.
  operator std::string() const { return s_; }            // NOLINT
  operator std::string_view() const { return s_; }       // NOLINT

 private:
  std::string s_;
};

// ---- owned copy of a decoded event, for equality checks --------------------

struct OwnedEvent {
  EventType type = EventType::kAllBlocksCleared;
  std::vector<BlockKey> block_hashes;
  std::optional<std::string> medium;
  std::optional<int64_t> group_idx;
  std::optional<std::string> locality;
  std::optional<std::string> ownership;
  std::optional<BlockKey> parent_block_hash;
  std::vector<int64_t> token_ids;
  int64_t block_size = 0;
  std::optional<int64_t> lora_id;
  std::optional<std::string> lora_name;
  std::optional<std::string> extra_keys;
  std::optional<std::string> kv_cache_spec_kind;
  std::optional<int64_t> kv_cache_spec_sliding_window;
  std::optional<std::string> session_id;
  std::optional<std::string> origin;
  friend bool operator==(const OwnedEvent&, const OwnedEvent&) = default;
};

inline std::optional<std::string> Own(const std::optional<std::string_view>& v) {
  if (!v) return std::nullopt;
  return std::string(*v);
}

inline OwnedEvent Owned(const EventBatch& b, const KvEvent& e) {
  OwnedEvent o;
  o.type = e.type;
  auto hs = b.HashesOf(e);
  o.block_hashes.assign(hs.begin(), hs.end());
  auto ts = b.TokensOf(e);
  o.token_ids.assign(ts.begin(), ts.end());
  o.medium = Own(e.medium);
  o.group_idx = e.group_idx;
  o.locality = Own(e.locality);
  o.ownership = Own(e.ownership);
  o.parent_block_hash = e.parent_block_hash;
  o.block_size = e.block_size;
  o.lora_id = e.lora_id;
  o.lora_name = Own(e.lora_name);
  o.extra_keys = Own(e.extra_keys);
  o.kv_cache_spec_kind = Own(e.kv_cache_spec_kind);
  o.kv_cache_spec_sliding_window = e.kv_cache_spec_sliding_window;
  o.session_id = Own(e.session_id);
  o.origin = Own(e.origin);
  return o;
}

inline std::vector<OwnedEvent> OwnedEvents(const EventBatch& b) {
  std::vector<OwnedEvent> v;
  for (const auto& e : b.events) v.push_back(Owned(b, e));
  return v;
}

inline std::ostream& operator<<(std::ostream& os, const OwnedEvent& e) {
  os << EventTypeName(e.type) << "{hashes=" << e.block_hashes.size() << " tokens=" << e.token_ids.size()
     << " bs=" << e.block_size << " medium=" << e.medium.value_or("<nil>") << "}";
  return os;
}

}  // namespace kvidx::ingest::testing
