#include "server/tokenizer/added_vocabulary.h"

#include <unicode/uchar.h>

#include <algorithm>

#include "server/tokenizer/utf8.h"

namespace kvidx::tokenizer {
namespace {

// Rust's char::is_alphanumeric: Alphabetic or a numeric category.
bool IsWordChar(char32_t c) {
  const auto u = static_cast<UChar32>(c);
  if (u_isUAlphabetic(u)) return true;
  const int8_t t = u_charType(u);
  return t == U_DECIMAL_DIGIT_NUMBER || t == U_LETTER_NUMBER || t == U_OTHER_NUMBER;
}

bool IsSpace(char32_t c) { return u_isUWhiteSpace(static_cast<UChar32>(c)) != 0; }

}  // namespace

void AddedVocabulary::Trie::Insert(std::string_view key, int32_t token) {
  if (key.empty()) return;
  first_byte[static_cast<uint8_t>(key[0])] = true;
  uint32_t node = 0;
  for (char ch : key) {
    const auto b = static_cast<uint8_t>(ch);
    auto& kids = nodes[node].children;
    auto it = std::lower_bound(kids.begin(), kids.end(), b, [](const auto& kid, uint8_t v) { return kid.first < v; });
    if (it != kids.end() && it->first == b) {
      node = it->second;
      continue;
    }
    const auto fresh = static_cast<uint32_t>(nodes.size());
    kids.insert(it, {b, fresh});
    nodes.emplace_back();
    node = fresh;
  }
  // The first token with a given content wins, as tokenizers' map does.
  if (nodes[node].token < 0) nodes[node].token = token;
}

int32_t AddedVocabulary::Trie::LongestAt(std::string_view text, size_t at, size_t* end) const {
  int32_t best = -1;
  uint32_t node = 0;
  for (size_t i = at; i < text.size(); ++i) {
    const auto b = static_cast<uint8_t>(text[i]);
    const auto& kids = nodes[node].children;
    auto it = std::lower_bound(kids.begin(), kids.end(), b, [](const auto& kid, uint8_t v) { return kid.first < v; });
    if (it == kids.end() || it->first != b) break;
    node = it->second;
    if (nodes[node].token >= 0) {
      best = nodes[node].token;
      *end = i + 1;
    }
  }
  return best;
}

Result<AddedVocabulary> AddedVocabulary::Build(std::vector<AddedToken> tokens, const Normalizer* normalizer) {
  AddedVocabulary v;
  v.tokens_ = std::move(tokens);
  v.normalizer_ = normalizer;
  for (size_t i = 0; i < v.tokens_.size(); ++i) {
    const AddedToken& t = v.tokens_[i];
    if (t.content.empty()) continue;
    if (!t.normalized || normalizer == nullptr) {
      (t.normalized ? v.normalized_ : v.raw_).Insert(t.content, static_cast<int32_t>(i));
      continue;
    }
    std::string content = t.content;
    Status s = normalizer->Normalize(&content);
    if (!s.ok()) return s.WithPrefix("added token " + t.content + ": ");
    v.normalized_.Insert(content, static_cast<int32_t>(i));
  }
  return v;
}

// AddedVocabulary::find_matches of tokenizers over one piece of text.
void AddedVocabulary::FindMatches(std::string_view text, const Trie& trie, std::vector<Match>* out) const {
  size_t start_offset = 0;
  size_t at = 0;
  while (at < text.size()) {
    if (!trie.first_byte[static_cast<uint8_t>(text[at])]) {
      ++at;
      continue;
    }
    size_t stop = 0;
    const int32_t index = trie.LongestAt(text, at, &stop);
    if (index < 0) {
      ++at;
      continue;
    }
    size_t start = at;
    at = stop;  // the matcher resumes after the match whatever is kept
    const AddedToken& t = tokens_[static_cast<size_t>(index)];
    if (t.single_word) {
      size_t unused;
      const bool start_space = start == 0 || !IsWordChar(PrevCodePoint(text, start, &unused));
      size_t next = stop;
      const bool stop_space = stop == text.size() || !IsWordChar(NextCodePoint(text, &next));
      if (!start_space || !stop_space) continue;
    }
    if (t.lstrip) {
      size_t s = start;
      while (s > 0) {
        size_t prev;
        if (!IsSpace(PrevCodePoint(text, s, &prev))) break;
        s = prev;
      }
      start = std::max(s, start_offset);
    }
    if (t.rstrip) {
      while (stop < text.size()) {
        size_t next = stop;
        if (!IsSpace(NextCodePoint(text, &next))) break;
        stop = next;
      }
    }
    if (start_offset < start) out->push_back(Match{-1, start_offset, start});
    out->push_back(Match{t.id, start, stop});
    start_offset = stop;
  }
  if (start_offset != text.size()) out->push_back(Match{-1, start_offset, text.size()});
}

void AddedVocabulary::SplitRaw(std::string_view text, std::vector<Match>* runs) const {
  FindMatches(text, raw_, runs);
}

Status AddedVocabulary::SplitRun(std::string_view run, bool at_origin, std::vector<Segment>* segments) const {
  std::string piece(run);
  if (normalizer_ != nullptr) {
    Status s = normalizer_->Normalize(&piece);
    if (!s.ok()) return s;
  }
  thread_local std::vector<Match> matches;
  matches.clear();
  FindMatches(piece, normalized_, &matches);
  for (const Match& n : matches) {
    if (n.begin == n.end) continue;
    segments->push_back(Segment{Piece{piece.substr(n.begin, n.end - n.begin), at_origin && n.begin == 0}, n.id});
  }
  return Status::Ok();
}

Status AddedVocabulary::Extract(std::string_view text, std::vector<Segment>* segments) const {
  std::vector<Match> runs;
  SplitRaw(text, &runs);
  for (const Match& m : runs) {
    if (m.id >= 0) {
      segments->push_back(Segment{Piece{std::string(text.substr(m.begin, m.end - m.begin)), m.begin == 0}, m.id});
      continue;
    }
    Status s = SplitRun(text.substr(m.begin, m.end - m.begin), m.begin == 0, segments);
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

}  // namespace kvidx::tokenizer
