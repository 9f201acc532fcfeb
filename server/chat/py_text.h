// Python's text semantics that Jinja2 templates observe through CPython:
// str.isspace, strip/split/title, code-point indexing, repr() and str() of
// values, float repr, and json.dumps as transformers' tojson calls it.
//
// Strings are UTF-8 std::string; "length" and indexes count code points, as
// Python's str does. Casing is ASCII-only (the templates of the supported
// families never change the case of non-ASCII text). Thread-safe, no state.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvidx::chat::py {

using Json = nlohmann::ordered_json;

// CPython's _PyUnicode_IsWhitespace (Unicode White_Space plus the ASCII
// separators \x1c-\x1f), the set str.strip() and str.split() use.
bool IsSpace(uint32_t cp);

// Code points of valid UTF-8 `s` (invalid bytes decode as U+FFFD).
std::vector<uint32_t> Decode(std::string_view s);
void AppendUtf8(std::string& out, uint32_t cp);
std::string Encode(const std::vector<uint32_t>& cps, size_t begin, size_t end);
size_t Length(std::string_view s);

// str.strip / lstrip / rstrip; `chars` absent strips whitespace.
std::string Strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
// str.split / str.rsplit (sep absent: runs of whitespace).
std::vector<std::string> Split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit,
                               bool from_right);
std::string Replace(std::string_view s, std::string_view old_sub, std::string_view new_sub, int64_t count);
int64_t Count(std::string_view s, std::string_view sub);
// str.find in code points, -1 if absent.
int64_t Find(std::string_view s, std::string_view sub, bool from_right);
std::string Lower(std::string_view s);
std::string Upper(std::string_view s);
std::string TitleMethod(std::string_view s);   // str.title()
std::string Capitalize(std::string_view s);    // str.capitalize()

// repr(float) and str(float).
std::string FloatRepr(double d);
// repr(str).
std::string StrRepr(std::string_view s);
// str(x) of a JSON value as Python prints the dict/list/str/int/... it loads to.
std::string ToStr(const Json& j);
// repr(x).
std::string Repr(const Json& j);

struct DumpOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;   // json.dumps(indent=...) as a string
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};
// json.dumps(j, ...); every JSON value dumps.
std::string JsonDumps(const Json& j, const DumpOptions& options);

}  // namespace kvidx::chat::py
