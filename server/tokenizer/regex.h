// Regex: a tokenizer.json pattern (written for Oniguruma, the engine of
// Hugging Face's tokenizers) compiled by PCRE2 in UTF + UCP mode with JIT.
//
// The patterns of the supported families (\p{L}, \p{N}, (?i:...), possessive
// quantifiers, lookahead) mean the same in both engines. A pattern PCRE2
// cannot compile fails Compile with InvalidArgument naming the pattern.
//
// Threading: a Regex is immutable after Compile; FindAll is const and safe
// from any number of threads (match data and the JIT stack are per thread).
// Errors: FindAll returns OutOfRange when a match exceeds PCRE2's limits
// (never a partial or approximate answer).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace kvidx::tokenizer {

class Regex {
 public:
  static Result<std::unique_ptr<Regex>> Compile(std::string_view pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends the [begin, end) byte ranges of the successive non-overlapping
  // matches in `text` (valid UTF-8), as the onig crate's find_iter yields
  // them: an empty match right after the previous match is skipped.
  Status FindAll(std::string_view text, std::vector<std::pair<size_t, size_t>>* matches) const;

  const std::string& pattern() const { return pattern_; }

 private:
  Regex() = default;
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
};

}  // namespace kvidx::tokenizer
