// PreTokenizer: the "pre_tokenizer" of tokenizer.json, cutting normalized
// text into pre-tokens that the model encodes one by one.
//
// Supported types: Split (string or regex pattern, behaviours Removed,
// Isolated, MergedWithPrevious, MergedWithNext, Contiguous, invert),
// ByteLevel (add_prefix_space, use_regex; only as the last step: it marks
// the pre-tokens as byte-level for the model), Metaspace, Digits,
// Punctuation, Whitespace, WhitespaceSplit, BertPreTokenizer, Sequence. Anything else fails
// ParsePreTokenizer with InvalidArgument naming it.
//
// Threading: immutable after parsing; PreTokenize is const and thread-safe.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"

namespace kvidx::tokenizer {

// A piece of text on its way to the model. `at_origin` says the piece
// starts at offset 0 of the original text (Metaspace's "first" scheme).
struct Piece {
  std::string text;
  bool at_origin = false;
};

// A [begin, end) byte range of a text.
using Range = std::pair<size_t, size_t>;

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces *pieces by their pre-tokens, in order; empty ones are dropped.
  virtual Status PreTokenize(std::vector<Piece>* pieces) const = 0;

  // True when PreTokenize only cuts pieces (dropping some parts), never
  // rewrites their text and never looks at Piece::at_origin: then Cut
  // yields the same pre-tokens as ranges of the text, without copies.
  virtual bool CutsOnly() const { return false; }
  // For CutsOnly pre-tokenizers: replaces *ranges (non-empty ranges of
  // `text`, in order) by the ranges of their pre-tokens, in order.
  virtual Status Cut(std::string_view text, std::vector<Range>* ranges) const;
};

struct ParsedPreTokenizer {
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  bool byte_level = false;  // the pre-tokens reach the model byte-level mapped
};

// `spec` is the JSON value of "pre_tokenizer" (not null).
Result<ParsedPreTokenizer> ParsePreTokenizer(const nlohmann::json& spec, const std::string& path);

}  // namespace kvidx::tokenizer
