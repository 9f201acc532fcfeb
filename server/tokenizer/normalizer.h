// Normalizer: the "normalizer" of tokenizer.json, rewriting text before it
// is split into pre-tokens, as Hugging Face tokenizers' normalizers do.
//
// Supported types: NFC, NFD, NFKC, NFKD (ICU), Replace (string or regex
// pattern), Prepend, Strip, Lowercase (ICU full case mapping), Sequence.
// ParseNormalizer refuses any other type with InvalidArgument naming it.
//
// Threading: immutable after parsing; Normalize is const and thread-safe.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"

namespace kvidx::tokenizer {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // Rewrites *text (valid UTF-8) in place; the result is valid UTF-8.
  virtual Status Normalize(std::string* text) const = 0;
};

// `spec` is the JSON value of "normalizer" (not null); `path` names it in
// error messages.
Result<std::unique_ptr<Normalizer>> ParseNormalizer(const nlohmann::json& spec, const std::string& path);

}  // namespace kvidx::tokenizer
