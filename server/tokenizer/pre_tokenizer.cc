#include "server/tokenizer/pre_tokenizer.h"

#include <unicode/uchar.h>

#include <algorithm>
#include <functional>
#include <nlohmann/json.hpp>
#include <utility>

#include "server/tokenizer/json_fields.h"
#include "server/tokenizer/regex.h"
#include "server/tokenizer/utf8.h"

namespace kvidx::tokenizer {
namespace {

using nlohmann::json;

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

using Cover = std::vector<std::pair<Range, bool>>;

// The (range, is_match) cover of a text from its matches, as the Pattern
// trait of tokenizers yields it.
void BuildCover(size_t size, const std::vector<Range>& matches, Cover* out) {
  out->clear();
  if (size == 0) {
    out->push_back({{0, 0}, false});
    return;
  }
  size_t prev = 0;
  for (const Range& m : matches) {
    if (prev != m.first) out->push_back({{prev, m.first}, false});
    out->push_back({m, true});
    prev = m.second;
  }
  if (prev != size) out->push_back({{prev, size}, false});
}

// NormalizedString::split of tokenizers over the piece [base, base + size)
// of a text: folds the cover of its `matches` (relative to base) by
// `behavior` into (range, removed) and appends the kept, non-empty ranges
// (absolute) to *out.
void SplitRanges(size_t base, size_t size, const std::vector<Range>& matches, Behavior behavior, bool invert,
                 std::vector<Range>* out) {
  thread_local Cover cover;
  thread_local Cover splits;  // (range, remove)
  BuildCover(size, matches, &cover);
  if (invert) {
    for (auto& c : cover) c.second = !c.second;
  }
  splits.clear();
  switch (behavior) {
    case Behavior::kIsolated:
      for (auto& c : cover) splits.push_back({c.first, false});
      break;
    case Behavior::kRemoved:
      splits.swap(cover);
      break;
    case Behavior::kContiguous: {
      bool previous = false;
      for (auto& [r, m] : cover) {
        if (m == previous && !splits.empty()) {
          splits.back().first.second = r.second;
        } else {
          splits.push_back({r, false});
        }
        previous = m;
      }
      break;
    }
    case Behavior::kMergedWithPrevious: {
      bool previous = false;
      for (auto& [r, m] : cover) {
        if (m && !previous && !splits.empty()) {
          splits.back().first.second = r.second;
        } else {
          splits.push_back({r, false});
        }
        previous = m;
      }
      break;
    }
    case Behavior::kMergedWithNext: {
      bool previous = false;
      for (auto it = cover.rbegin(); it != cover.rend(); ++it) {
        if (it->second && !previous && !splits.empty()) {
          splits.back().first.first = it->first.first;
        } else {
          splits.push_back({it->first, false});
        }
        previous = it->second;
      }
      std::reverse(splits.begin(), splits.end());
      break;
    }
  }
  for (const auto& [r, remove] : splits) {
    if (remove || r.first == r.second) continue;
    out->emplace_back(base + r.first, base + r.second);
  }
}

// SplitRanges over a whole piece, as pieces.
void SplitCover(const Piece& piece, const std::vector<Range>& matches, Behavior behavior, bool invert,
                std::vector<Piece>* out) {
  thread_local std::vector<Range> kept;
  kept.clear();
  SplitRanges(0, piece.text.size(), matches, behavior, invert, &kept);
  for (const Range& r : kept) {
    out->push_back(Piece{piece.text.substr(r.first, r.second - r.first), piece.at_origin && r.first == 0});
  }
}

// Matches of a predicate on code points: each matching character alone.
void CharMatches(std::string_view text, bool (*pred)(char32_t), std::vector<Range>* out) {
  out->clear();
  size_t pos = 0;
  while (pos < text.size()) {
    size_t start = pos;
    char32_t c = NextCodePoint(text, &pos);
    if (pred(c)) out->emplace_back(start, pos);
  }
}

// The successive non-overlapping occurrences of a non-empty literal.
void LiteralMatches(std::string_view text, std::string_view lit, std::vector<Range>* out) {
  out->clear();
  for (size_t at = text.find(lit); at != std::string_view::npos; at = text.find(lit, at + lit.size())) {
    out->emplace_back(at, at + lit.size());
  }
}

// Splits every piece by a per-piece function.
template <typename Fn>
Status ForEachPiece(std::vector<Piece>* pieces, Fn&& fn) {
  std::vector<Piece> out;
  out.reserve(pieces->size() * 2);
  for (Piece& p : *pieces) {
    Status s = fn(p, &out);
    if (!s.ok()) return s;
  }
  *pieces = std::move(out);
  return Status::Ok();
}

// Cuts every range of `text` by a per-range function (text, base, out).
template <typename Fn>
Status ForEachRange(std::string_view text, std::vector<Range>* ranges, Fn&& fn) {
  thread_local std::vector<Range> out;
  out.clear();
  for (const Range& r : *ranges) {
    Status s = fn(text.substr(r.first, r.second - r.first), r.first, &out);
    if (!s.ok()) return s;
  }
  ranges->swap(out);
  return Status::Ok();
}

class SplitPre final : public PreTokenizer {
 public:
  SplitPre(Pattern pattern, Behavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  Status PreTokenize(std::vector<Piece>* pieces) const override {
    return ForEachPiece(pieces, [this](const Piece& p, std::vector<Piece>* out) {
      std::vector<Range> matches;
      Status s = Matches(p.text, &matches);
      if (!s.ok()) return s;
      SplitCover(p, matches, behavior_, invert_, out);
      return Status::Ok();
    });
  }
  bool CutsOnly() const override { return true; }
  Status Cut(std::string_view text, std::vector<Range>* ranges) const override {
    return ForEachRange(text, ranges, [this](std::string_view piece, size_t base, std::vector<Range>* out) {
      thread_local std::vector<Range> matches;
      Status s = Matches(piece, &matches);
      if (!s.ok()) return s;
      SplitRanges(base, piece.size(), matches, behavior_, invert_, out);
      return Status::Ok();
    });
  }

 private:
  Status Matches(std::string_view text, std::vector<Range>* matches) const {
    matches->clear();
    if (pattern_.regex) return pattern_.regex->FindAll(text, matches);
    if (!pattern_.literal.empty()) LiteralMatches(text, pattern_.literal, matches);
    return Status::Ok();
  }

  Pattern pattern_;
  Behavior behavior_;
  bool invert_;
};

class CharSplitPre final : public PreTokenizer {
 public:
  CharSplitPre(bool (*pred)(char32_t), Behavior behavior) : pred_(pred), behavior_(behavior) {}
  Status PreTokenize(std::vector<Piece>* pieces) const override {
    return ForEachPiece(pieces, [this](const Piece& p, std::vector<Piece>* out) {
      std::vector<Range> matches;
      CharMatches(p.text, pred_, &matches);
      SplitCover(p, matches, behavior_, false, out);
      return Status::Ok();
    });
  }
  bool CutsOnly() const override { return true; }
  Status Cut(std::string_view text, std::vector<Range>* ranges) const override {
    return ForEachRange(text, ranges, [this](std::string_view piece, size_t base, std::vector<Range>* out) {
      thread_local std::vector<Range> matches;
      CharMatches(piece, pred_, &matches);
      SplitRanges(base, piece.size(), matches, behavior_, false, out);
      return Status::Ok();
    });
  }

 private:
  bool (*pred_)(char32_t);
  Behavior behavior_;
};

// Rust's char::is_numeric: general categories Nd, Nl, No.
bool IsNumeric(char32_t c) {
  const int8_t t = u_charType(static_cast<UChar32>(c));
  return t == U_DECIMAL_DIGIT_NUMBER || t == U_LETTER_NUMBER || t == U_OTHER_NUMBER;
}
// tokenizers' is_punc: ASCII punctuation or a Unicode P* category.
bool IsPunctuation(char32_t c) {
  if (c < 0x80 && u_ispunct(static_cast<UChar32>(c)) != 0) return true;
  if (c < 0x80) {
    return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
           (c >= 0x7B && c <= 0x7E);
  }
  return (U_GET_GC_MASK(static_cast<UChar32>(c)) & U_GC_P_MASK) != 0;
}
bool IsWhitespace(char32_t c) { return u_isUWhiteSpace(static_cast<UChar32>(c)) != 0; }

// ByteLevel's own splitting: an optional prefix space, then GPT-2's regex.
class ByteLevelPre final : public PreTokenizer {
 public:
  ByteLevelPre(bool add_prefix_space, std::unique_ptr<Regex> regex)
      : add_prefix_space_(add_prefix_space), regex_(std::move(regex)) {}
  Status PreTokenize(std::vector<Piece>* pieces) const override {
    if (add_prefix_space_) {
      for (Piece& p : *pieces) {
        if (p.text.empty() || p.text[0] != ' ') p.text = " " + p.text;
      }
    }
    if (!regex_) return Status::Ok();
    return ForEachPiece(pieces, [this](const Piece& p, std::vector<Piece>* out) {
      std::vector<Range> matches;
      Status s = regex_->FindAll(p.text, &matches);
      if (!s.ok()) return s;
      SplitCover(p, matches, Behavior::kIsolated, false, out);
      return Status::Ok();
    });
  }
  // The prefix space rewrites the text.
  bool CutsOnly() const override { return !add_prefix_space_; }
  Status Cut(std::string_view text, std::vector<Range>* ranges) const override {
    if (add_prefix_space_) return PreTokenizer::Cut(text, ranges);
    if (!regex_) return Status::Ok();
    return ForEachRange(text, ranges, [this](std::string_view piece, size_t base, std::vector<Range>* out) {
      thread_local std::vector<Range> matches;
      matches.clear();
      Status s = regex_->FindAll(piece, &matches);
      if (!s.ok()) return s;
      SplitRanges(base, piece.size(), matches, Behavior::kIsolated, false, out);
      return Status::Ok();
    });
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;
};

enum class PrependScheme { kFirst, kAlways, kNever };

class MetaspacePre final : public PreTokenizer {
 public:
  MetaspacePre(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split) {}
  Status PreTokenize(std::vector<Piece>* pieces) const override {
    return ForEachPiece(pieces, [this](Piece& p, std::vector<Piece>* out) {
      std::string text;
      text.reserve(p.text.size() + replacement_.size());
      for (char c : p.text) {
        if (c == ' ') {
          text += replacement_;
        } else {
          text.push_back(c);
        }
      }
      const bool starts = text.compare(0, replacement_.size(), replacement_) == 0;
      if (!starts && (scheme_ == PrependScheme::kAlways || (scheme_ == PrependScheme::kFirst && p.at_origin))) {
        text = replacement_ + text;
      }
      Piece replaced{std::move(text), p.at_origin};
      if (!split_) {
        if (!replaced.text.empty()) out->push_back(std::move(replaced));
        return Status::Ok();
      }
      std::vector<Range> matches;
      LiteralMatches(replaced.text, replacement_, &matches);
      SplitCover(replaced, matches, Behavior::kMergedWithNext, false, out);
      return Status::Ok();
    });
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
};

class SequencePre final : public PreTokenizer {
 public:
  explicit SequencePre(std::vector<std::unique_ptr<PreTokenizer>> steps) : steps_(std::move(steps)) {
    cuts_only_ = true;
    for (const auto& step : steps_) cuts_only_ = cuts_only_ && step->CutsOnly();
  }
  Status PreTokenize(std::vector<Piece>* pieces) const override {
    for (const auto& step : steps_) {
      Status s = step->PreTokenize(pieces);
      if (!s.ok()) return s;
    }
    return Status::Ok();
  }
  bool CutsOnly() const override { return cuts_only_; }
  Status Cut(std::string_view text, std::vector<Range>* ranges) const override {
    if (!cuts_only_) return PreTokenizer::Cut(text, ranges);
    for (const auto& step : steps_) {
      Status s = step->Cut(text, ranges);
      if (!s.ok()) return s;
    }
    return Status::Ok();
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
  bool cuts_only_ = false;
};

Result<Behavior> ParseBehavior(const json& spec, const std::string& path) {
  Result<std::string> b = StringField(spec, "behavior", path);
  if (!b.ok()) return b.status();
  if (*b == "Removed") return Behavior::kRemoved;
  if (*b == "Isolated") return Behavior::kIsolated;
  if (*b == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (*b == "MergedWithNext") return Behavior::kMergedWithNext;
  if (*b == "Contiguous") return Behavior::kContiguous;
  return Status::InvalidArgument(path + ".behavior: unsupported split behavior " + *b);
}

constexpr const char* kWhitespacePattern =
    R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}]+|[^\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}\p{White_Space}]+)";

// GPT-2's pre-tokenization regex, ByteLevel's use_regex.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

Result<std::unique_ptr<PreTokenizer>> ParseStep(const json& spec, const std::string& path, bool last,
                                                bool* byte_level);

Result<std::unique_ptr<PreTokenizer>> ParseByteLevel(const json& spec, const std::string& path, bool last,
                                                     bool* byte_level) {
  if (!last) return Status::InvalidArgument(path + ": ByteLevel pre-tokenizer before another step is unsupported");
  Result<bool> prefix = BoolField(spec, "add_prefix_space", path, true);
  Result<bool> use_regex = BoolField(spec, "use_regex", path, true);
  if (!prefix.ok()) return prefix.status();
  if (!use_regex.ok()) return use_regex.status();
  std::unique_ptr<Regex> re;
  if (*use_regex) {
    auto compiled = Regex::Compile(kGpt2Pattern);
    if (!compiled.ok()) return compiled.status();
    re = std::move(compiled).value();
  }
  *byte_level = true;
  return std::unique_ptr<PreTokenizer>(new ByteLevelPre(*prefix, std::move(re)));
}

Result<std::unique_ptr<PreTokenizer>> ParseMetaspace(const json& spec, const std::string& path) {
  Result<std::string> replacement = StringField(spec, "replacement", path, "\xE2\x96\x81");
  if (!replacement.ok()) return replacement.status();
  size_t pos = 0;
  if (FirstInvalidUtf8(*replacement) != std::string::npos || replacement->empty() ||
      (NextCodePoint(*replacement, &pos), pos != replacement->size())) {
    return Status::InvalidArgument(path + ".replacement: expected one character");
  }
  PrependScheme scheme = PrependScheme::kAlways;
  if (spec.contains("prepend_scheme")) {
    Result<std::string> s = StringField(spec, "prepend_scheme", path, "always");
    if (!s.ok()) return s.status();
    if (*s == "first") {
      scheme = PrependScheme::kFirst;
    } else if (*s == "always") {
      scheme = PrependScheme::kAlways;
    } else if (*s == "never") {
      scheme = PrependScheme::kNever;
    } else {
      return Status::InvalidArgument(path + ".prepend_scheme: unsupported value " + *s);
    }
  } else {
    Result<bool> add = BoolField(spec, "add_prefix_space", path, true);
    if (!add.ok()) return add.status();
    scheme = *add ? PrependScheme::kAlways : PrependScheme::kNever;
  }
  Result<bool> split = BoolField(spec, "split", path, true);
  if (!split.ok()) return split.status();
  return std::unique_ptr<PreTokenizer>(new MetaspacePre(*replacement, scheme, *split));
}

Result<std::unique_ptr<PreTokenizer>> ParseStep(const json& spec, const std::string& path, bool last,
                                                bool* byte_level) {
  Result<std::string> type = TypeOf(spec, path);
  if (!type.ok()) return type.status();
  const std::string& t = *type;
  if (t == "Split") {
    Result<Pattern> pattern = ParsePattern(spec, path);
    if (!pattern.ok()) return pattern.status();
    Result<Behavior> behavior = ParseBehavior(spec, path);
    if (!behavior.ok()) return behavior.status();
    Result<bool> invert = BoolField(spec, "invert", path, false);
    if (!invert.ok()) return invert.status();
    return std::unique_ptr<PreTokenizer>(new SplitPre(std::move(pattern).value(), *behavior, *invert));
  }
  if (t == "ByteLevel") return ParseByteLevel(spec, path, last, byte_level);
  if (t == "Metaspace") return ParseMetaspace(spec, path);
  if (t == "Digits") {
    Result<bool> individual = BoolField(spec, "individual_digits", path, false);
    if (!individual.ok()) return individual.status();
    return std::unique_ptr<PreTokenizer>(
        new CharSplitPre(&IsNumeric, *individual ? Behavior::kIsolated : Behavior::kContiguous));
  }
  if (t == "Punctuation") {
    Result<Behavior> behavior = spec.contains("behavior") ? ParseBehavior(spec, path) : Result<Behavior>(Behavior::kIsolated);
    if (!behavior.ok()) return behavior.status();
    return std::unique_ptr<PreTokenizer>(new CharSplitPre(&IsPunctuation, *behavior));
  }
  if (t == "WhitespaceSplit") return std::unique_ptr<PreTokenizer>(new CharSplitPre(&IsWhitespace, Behavior::kRemoved));
  if (t == "Whitespace") {
    // tokenizers' Whitespace: the regex crate's \w+|[^\w\s]+ kept, the rest
    // removed; in Unicode mode its \w is Alphabetic, M, Nd, Pc and
    // Join_Control and its \s White_Space, spelled out because PCRE2's \w
    // and \s mean other sets.
    auto re = Regex::Compile(kWhitespacePattern);
    if (!re.ok()) return re.status();
    Pattern pattern;
    pattern.regex = std::move(re).value();
    return std::unique_ptr<PreTokenizer>(new SplitPre(std::move(pattern), Behavior::kRemoved, /*invert=*/true));
  }
  if (t == "BertPreTokenizer") {
    // Whitespace removed, then every punctuation character alone
    // (tokenizers' bert.rs: char::is_whitespace, then is_bert_punc).
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    steps.emplace_back(new CharSplitPre(&IsWhitespace, Behavior::kRemoved));
    steps.emplace_back(new CharSplitPre(&IsPunctuation, Behavior::kIsolated));
    return std::unique_ptr<PreTokenizer>(new SequencePre(std::move(steps)));
  }
  if (t == "Sequence") {
    auto it = spec.find("pretokenizers");
    if (it == spec.end() || !it->is_array()) return Status::InvalidArgument(path + ".pretokenizers: expected an array");
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (size_t i = 0; i < it->size(); ++i) {
      auto step = ParseStep((*it)[i], path + ".pretokenizers[" + std::to_string(i) + "]", last && i + 1 == it->size(),
                            byte_level);
      if (!step.ok()) return step.status();
      steps.push_back(std::move(step).value());
    }
    return std::unique_ptr<PreTokenizer>(new SequencePre(std::move(steps)));
  }
  return Status::InvalidArgument(path + ": unsupported pre-tokenizer type " + t);
}

}  // namespace

Status PreTokenizer::Cut(std::string_view, std::vector<Range>*) const {
  return Status::Internal("pre-tokenizer: Cut on a pre-tokenizer that rewrites text");
}

Result<ParsedPreTokenizer> ParsePreTokenizer(const json& spec, const std::string& path) {
  ParsedPreTokenizer parsed;
  auto step = ParseStep(spec, path, true, &parsed.byte_level);
  if (!step.ok()) return step.status();
  parsed.pre_tokenizer = std::move(step).value();
  return parsed;
}

}  // namespace kvidx::tokenizer
