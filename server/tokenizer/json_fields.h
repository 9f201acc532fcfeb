// Typed reads of tokenizer.json fields that name the JSON path on error.
//
// Callers hold nlohmann::json values already parsed; these helpers never
// throw: a missing or mistyped field is an InvalidArgument Status.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "server/tokenizer/regex.h"

namespace kvidx::tokenizer {

// spec["type"] as a string.
Result<std::string> TypeOf(const nlohmann::json& spec, const std::string& path);
// spec[key] as a string; `fallback` when absent or null, unless it is null too.
Result<std::string> StringField(const nlohmann::json& spec, const char* key, const std::string& path,
                                const char* fallback = nullptr);
Result<bool> BoolField(const nlohmann::json& spec, const char* key, const std::string& path, bool fallback);

// A "pattern" field: {"String": s} (a literal, matched as is) or
// {"Regex": r} (compiled with PCRE2).
struct Pattern {
  std::string literal;
  std::unique_ptr<Regex> regex;  // null for a literal
};
Result<Pattern> ParsePattern(const nlohmann::json& spec, const std::string& path);

}  // namespace kvidx::tokenizer
