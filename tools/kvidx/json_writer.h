// JsonWriter: a tiny JSON emitter for the CLI's --json output.
//
// No JSON library is part of the build, and the CLI only ever writes JSON, so
// this appends to a string with the same layout everywhere ("key": value,
// items separated by ", "), which keeps the output stable for scripts and
// tests. Conventions (see commands.h): values that can exceed 2^53 (block
// hashes, sequence numbers) are written as decimal strings with U64String()
// so no JSON reader rounds them; counters are plain numbers.
//
// The writer trusts its caller to nest correctly (Key() only inside objects,
// every Begin matched by an End); misuse yields invalid JSON, not a crash.
// Strings are escaped per RFC 8259 (control characters as \u00XX); bytes are
// passed through, so UTF-8 stays UTF-8. Non-finite doubles become null.
// Value type; thread-compatible; nothing throws (beyond std::bad_alloc).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvidx::cli {

class JsonWriter {
 public:
  JsonWriter& BeginObject();
  JsonWriter& EndObject();
  JsonWriter& BeginArray();
  JsonWriter& EndArray();
  // Inside an object: the next value's key.
  JsonWriter& Key(std::string_view key);

  JsonWriter& String(std::string_view v);
  JsonWriter& Int(int64_t v);
  JsonWriter& Uint(uint64_t v);
  JsonWriter& U64String(uint64_t v);  // "12345": exact for any uint64
  JsonWriter& Double(double v);
  JsonWriter& Bool(bool v);
  JsonWriter& Null();

  const std::string& str() const { return out_; }

  // `v` as a JSON string literal, quotes included.
  static std::string Quote(std::string_view v);

 private:
  void BeforeValue();

  std::string out_;
  // One entry per open container: true once it holds an item.
  std::vector<bool> has_items_;
  bool after_key_ = false;
};

}  // namespace kvidx::cli
