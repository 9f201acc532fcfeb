#include "server/tokenizer/hf_tokenizer.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "server/tokenizer/config_rules.h"
#include "server/tokenizer/json_fields.h"
#include "server/tokenizer/utf8.h"

namespace kvidx::tokenizer {
namespace {

using nlohmann::json;

Result<std::vector<AddedToken>> ParseAddedTokens(const json& spec) {
  std::vector<AddedToken> out;
  if (spec.is_null()) return out;
  if (!spec.is_array()) return Status::InvalidArgument("added_tokens: expected an array");
  for (size_t i = 0; i < spec.size(); ++i) {
    const json& t = spec[i];
    const std::string path = "added_tokens[" + std::to_string(i) + "]";
    if (!t.is_object() || !t.contains("id") || !t["id"].is_number_unsigned()) {
      return Status::InvalidArgument(path + ".id: expected an id");
    }
    AddedToken token;
    token.id = t["id"].get<uint32_t>();
    Result<std::string> content = StringField(t, "content", path);
    if (!content.ok()) return content.status();
    if (FirstInvalidUtf8(*content) != std::string::npos) return Status::InvalidArgument(path + ".content: not UTF-8");
    token.content = *content;
    struct Flag {
      const char* key;
      bool* into;
      bool fallback;
    };
    for (const Flag& f : {Flag{"special", &token.special, false}, Flag{"single_word", &token.single_word, false},
                          Flag{"lstrip", &token.lstrip, false}, Flag{"rstrip", &token.rstrip, false},
                          Flag{"normalized", &token.normalized, true}}) {
      Result<bool> v = BoolField(t, f.key, path, f.fallback);
      if (!v.ok()) return v.status();
      *f.into = *v;
    }
    out.push_back(std::move(token));
  }
  return out;
}

Status RequireNull(const json& doc, const char* key) {
  auto it = doc.find(key);
  if (it != doc.end() && !it->is_null()) return Status::InvalidArgument(std::string(key) + ": unsupported (must be null)");
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> HfTokenizer::Build(const json& doc, const json& config) {
  if (!doc.is_object()) return Status::InvalidArgument("tokenizer.json: expected an object");
  for (const char* key : {"truncation", "padding"}) {
    Status s = RequireNull(doc, key);
    if (!s.ok()) return s;
  }
  std::unique_ptr<HfTokenizer> t(new HfTokenizer());
  const json null_value;
  auto field = [&](const char* key) -> const json& {
    auto it = doc.find(key);
    return it == doc.end() ? null_value : *it;
  };
  if (!field("normalizer").is_null()) {
    auto n = ParseNormalizer(field("normalizer"), "normalizer");
    if (!n.ok()) return n.status();
    t->normalizer_ = std::move(n).value();
  }
  bool byte_level = false;
  if (!field("pre_tokenizer").is_null()) {
    auto p = ParsePreTokenizer(field("pre_tokenizer"), "pre_tokenizer");
    if (!p.ok()) return p.status();
    t->pre_tokenizer_ = std::move(p->pre_tokenizer);
    byte_level = p->byte_level;
  }
  if (field("model").is_null()) return Status::InvalidArgument("model: missing");
  auto model = BpeModel::Parse(field("model"), byte_level);
  if (!model.ok()) return model.status();
  t->model_ = std::move(model).value();
  auto tokens = ParseAddedTokens(field("added_tokens"));
  if (!tokens.ok()) return tokens.status();
  // tokenizers keeps the model's id for an added token the model knows.
  for (AddedToken& a : *tokens) {
    if (auto it = t->model_->vocab().find(a.content); it != t->model_->vocab().end()) a.id = it->second;
    t->added_ids_.try_emplace(a.content, a.id);
  }
  auto added = AddedVocabulary::Build(std::move(tokens).value(), t->normalizer_.get());
  if (!added.ok()) return added.status();
  t->added_ = std::make_unique<AddedVocabulary>(std::move(added).value());
  auto frame = ParsePostProcessor(field("post_processor"), "post_processor");
  if (!frame.ok()) return frame.status();
  t->frame_ = std::move(frame).value();
  uint32_t max_id = 0;
  for (const auto& [_, id] : t->model_->vocab()) max_id = std::max(max_id, id);
  for (const auto& [_, id] : t->added_ids_) max_id = std::max(max_id, id);
  t->vocab_size_ = t->model_->vocab().empty() && t->added_ids_.empty() ? 0 : size_t{max_id} + 1;
  if (!config.is_null()) {
    const HfTokenizer* self = t.get();
    auto rule = ApplyConfigRules(config, [self](std::string_view s) { return self->TokenToId(s); });
    if (!rule.ok()) return rule.status();
    if (rule->has_value()) t->frame_ = std::move(**rule);
  }
  return std::unique_ptr<Tokenizer>(std::move(t));
}

int64_t HfTokenizer::TokenToId(std::string_view token) const {
  if (auto it = added_ids_.find(token); it != added_ids_.end()) return it->second;
  if (auto it = model_->vocab().find(token); it != model_->vocab().end()) return it->second;
  return -1;
}

Status HfTokenizer::EncodeWord(std::string_view word, std::vector<uint32_t>* ids) const {
  if (cache_.Lookup(word, ids)) return Status::Ok();
  const size_t mark = ids->size();
  Status s = model_->Tokenize(word, ids);
  if (!s.ok()) return s;
  cache_.Insert(word, ids->data() + mark, ids->size() - mark);
  return Status::Ok();
}

Status HfTokenizer::EncodeText(Piece piece, std::vector<uint32_t>* ids) const {
  if (!pre_tokenizer_) return EncodeWord(piece.text, ids);
  if (pre_tokenizer_->CutsOnly()) {
    thread_local std::vector<Range> ranges;
    ranges.assign(1, Range{0, piece.text.size()});
    Status s = pre_tokenizer_->Cut(piece.text, &ranges);
    if (!s.ok()) return s;
    const std::string_view text = piece.text;
    for (const Range& r : ranges) {
      s = EncodeWord(text.substr(r.first, r.second - r.first), ids);
      if (!s.ok()) return s;
    }
    return Status::Ok();
  }
  std::vector<Piece> pieces;
  pieces.push_back(std::move(piece));
  Status s = pre_tokenizer_->PreTokenize(&pieces);
  if (!s.ok()) return s;
  for (const Piece& p : pieces) {
    s = EncodeWord(p.text, ids);
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

Status HfTokenizer::EncodeRun(std::string_view run, bool at_origin, std::vector<uint32_t>* ids) const {
  const bool cacheable = segments_.Admits(run.size());
  if (cacheable && segments_.Lookup(run, at_origin, ids)) return Status::Ok();
  const size_t mark = ids->size();
  std::vector<Segment> segments;
  Status s = added_->SplitRun(run, at_origin, &segments);
  if (!s.ok()) return s;
  for (Segment& seg : segments) {
    if (seg.id >= 0) {
      ids->push_back(static_cast<uint32_t>(seg.id));
      continue;
    }
    s = EncodeText(std::move(seg.piece), ids);
    if (!s.ok()) return s;
  }
  if (cacheable) segments_.Insert(run, at_origin, std::span<const uint32_t>(ids->data() + mark, ids->size() - mark));
  return Status::Ok();
}

Status HfTokenizer::Encode(std::string_view text, bool add_special_tokens, std::vector<uint32_t>* ids) const {
  if (size_t bad = FirstInvalidUtf8(text); bad != std::string_view::npos) {
    return Status::InvalidArgument("text is not valid UTF-8 at byte offset " + std::to_string(bad));
  }
  std::vector<uint32_t> out;
  out.reserve(text.size() / 3 + 8);
  if (add_special_tokens) out.insert(out.end(), frame_.prefix.begin(), frame_.prefix.end());
  std::vector<AddedVocabulary::Match> runs;
  added_->SplitRaw(text, &runs);
  for (const AddedVocabulary::Match& m : runs) {
    if (m.id >= 0) {
      out.push_back(static_cast<uint32_t>(m.id));
      continue;
    }
    Status s = EncodeRun(text.substr(m.begin, m.end - m.begin), m.begin == 0, &out);
    if (!s.ok()) return s;
  }
  if (add_special_tokens) out.insert(out.end(), frame_.suffix.begin(), frame_.suffix.end());
  ids->insert(ids->end(), out.begin(), out.end());
  return Status::Ok();
}

}  // namespace kvidx::tokenizer
