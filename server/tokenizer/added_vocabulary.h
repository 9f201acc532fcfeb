// AddedVocabulary: the "added_tokens" of tokenizer.json (special and
// ordinary), found in text before the model sees it, as tokenizers'
// AddedVocabulary::extract_and_normalize does: tokens with normalized=false
// are matched in the raw text first; the rest of the text is normalized
// piece by piece and tokens with normalized=true are matched in it (their
// content normalized the same way). Matching is leftmost-longest;
// single_word, lstrip and rstrip follow tokenizers' find_matches.
//
// Threading: immutable after construction; Extract is const and
// thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "server/tokenizer/normalizer.h"
#include "server/tokenizer/pre_tokenizer.h"

namespace kvidx::tokenizer {

struct AddedToken {
  std::string content;
  uint32_t id = 0;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
};

// A segment of the text: an added token's id, or normalized text (id < 0).
struct Segment {
  Piece piece;
  int64_t id = -1;
};

class AddedVocabulary {
 public:
  // `normalizer` may be null; it must outlive this object.
  static Result<AddedVocabulary> Build(std::vector<AddedToken> tokens, const Normalizer* normalizer);

  // A run of the raw text: an added token (id >= 0) or text (id < 0).
  struct Match {
    int64_t id;
    size_t begin, end;
  };

  // Splits `text` (valid UTF-8) into segments, in order; the text between
  // added tokens is normalized. Empty text segments are dropped.
  // The same as SplitRaw, then SplitRun on each text run.
  Status Extract(std::string_view text, std::vector<Segment>* segments) const;

  // The runs of `text` between the added tokens matched in raw text
  // (normalized == false), and those tokens, in order.
  void SplitRaw(std::string_view text, std::vector<Match>* runs) const;
  // One text run of SplitRaw (`at_origin`: it starts the text), normalized
  // and split at the normalized added tokens; appended to *segments.
  Status SplitRun(std::string_view run, bool at_origin, std::vector<Segment>* segments) const;

  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  // A byte trie of token contents for leftmost-longest matching.
  struct Trie {
    struct Node {
      std::vector<std::pair<uint8_t, uint32_t>> children;  // sorted by byte
      int32_t token = -1;                                  // index into tokens_
    };
    std::vector<Node> nodes{Node{}};
    bool first_byte[256] = {};
    void Insert(std::string_view key, int32_t token);
    // The longest token starting at text[at], or -1; *end is its end.
    int32_t LongestAt(std::string_view text, size_t at, size_t* end) const;
  };
  void FindMatches(std::string_view text, const Trie& trie, std::vector<Match>* out) const;

  std::vector<AddedToken> tokens_;
  Trie raw_;         // normalized == false
  Trie normalized_;  // normalized == true, contents normalized
  const Normalizer* normalizer_ = nullptr;
};

}  // namespace kvidx::tokenizer
