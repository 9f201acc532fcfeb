#include "server/tokenizer/normalizer.h"

#include <unicode/errorcode.h>
#include <unicode/normalizer2.h>
#include <unicode/bytestream.h>
#include <unicode/ucasemap.h>
#include <unicode/uchar.h>

#include <nlohmann/json.hpp>

#include "server/tokenizer/json_fields.h"
#include "server/tokenizer/regex.h"
#include "server/tokenizer/utf8.h"

namespace kvidx::tokenizer {
namespace {

using nlohmann::json;

// Unicode normalization forms through ICU's Normalizer2, with its quick
// check so that text already in the form is not copied.
class UnicodeForm final : public Normalizer {
 public:
  explicit UnicodeForm(const icu::Normalizer2* form) : form_(form) {}
  Status Normalize(std::string* text) const override {
    UErrorCode err = U_ZERO_ERROR;
    if (form_->isNormalizedUTF8(*text, err) && U_SUCCESS(err)) return Status::Ok();
    err = U_ZERO_ERROR;
    std::string out;
    out.reserve(text->size() + 8);
    icu::StringByteSink<std::string> sink(&out);
    form_->normalizeUTF8(0, *text, sink, nullptr, err);
    if (U_FAILURE(err)) return Status::Internal(std::string("ICU normalization: ") + u_errorName(err));
    *text = std::move(out);
    return Status::Ok();
  }

 private:
  const icu::Normalizer2* form_;
};

class Replace final : public Normalizer {
 public:
  Replace(std::string literal, std::unique_ptr<Regex> regex, std::string content)
      : literal_(std::move(literal)), regex_(std::move(regex)), content_(std::move(content)) {}
  Status Normalize(std::string* text) const override {
    std::vector<std::pair<size_t, size_t>> matches;
    if (regex_) {
      Status s = regex_->FindAll(*text, &matches);
      if (!s.ok()) return s;
    } else if (!literal_.empty()) {
      for (size_t at = text->find(literal_); at != std::string::npos; at = text->find(literal_, at + literal_.size())) {
        matches.emplace_back(at, at + literal_.size());
      }
    }
    if (matches.empty()) return Status::Ok();
    std::string out;
    out.reserve(text->size() + matches.size() * content_.size());
    size_t prev = 0;
    for (const auto& [b, e] : matches) {
      out.append(*text, prev, b - prev);
      out += content_;
      prev = e;
    }
    out.append(*text, prev, std::string::npos);
    *text = std::move(out);
    return Status::Ok();
  }

 private:
  std::string literal_;
  std::unique_ptr<Regex> regex_;
  std::string content_;
};

class Prepend final : public Normalizer {
 public:
  explicit Prepend(std::string prefix) : prefix_(std::move(prefix)) {}
  Status Normalize(std::string* text) const override {
    if (!text->empty()) *text = prefix_ + *text;
    return Status::Ok();
  }

 private:
  std::string prefix_;
};

// Strip trims characters with Unicode's White_Space property (Rust's
// char::is_whitespace).
class Strip final : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  Status Normalize(std::string* text) const override {
    size_t begin = 0, end = text->size();
    if (left_) {
      while (begin < end) {
        size_t next = begin;
        if (!u_isUWhiteSpace(NextCodePoint(*text, &next))) break;
        begin = next;
      }
    }
    if (right_) {
      while (end > begin) {
        size_t start;
        if (!u_isUWhiteSpace(PrevCodePoint(*text, end, &start))) break;
        end = start;
      }
    }
    *text = text->substr(begin, end - begin);
    return Status::Ok();
  }

 private:
  bool left_, right_;
};

// Rust's str::to_lowercase: full Unicode lowercase mapping, locale-free,
// with the final-sigma rule (ICU's root-locale mapping does the same).
class Lowercase final : public Normalizer {
 public:
  Status Normalize(std::string* text) const override {
    UErrorCode err = U_ZERO_ERROR;
    UCaseMap* map = ucasemap_open("", 0, &err);
    if (U_FAILURE(err)) return Status::Internal(std::string("ICU case map: ") + u_errorName(err));
    std::string out(text->size() * 3 + 4, '\0');
    int32_t n = ucasemap_utf8ToLower(map, out.data(), static_cast<int32_t>(out.size()), text->data(),
                                     static_cast<int32_t>(text->size()), &err);
    ucasemap_close(map);
    if (U_FAILURE(err)) return Status::Internal(std::string("ICU lowercase: ") + u_errorName(err));
    out.resize(static_cast<size_t>(n));
    *text = std::move(out);
    return Status::Ok();
  }
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps) : steps_(std::move(steps)) {}
  Status Normalize(std::string* text) const override {
    for (const auto& step : steps_) {
      Status s = step->Normalize(text);
      if (!s.ok()) return s;
    }
    return Status::Ok();
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

Result<std::unique_ptr<Normalizer>> Form(const icu::Normalizer2* (*get)(UErrorCode&), const std::string& path) {
  UErrorCode err = U_ZERO_ERROR;
  const icu::Normalizer2* form = get(err);
  if (U_FAILURE(err)) return Status::Internal(path + ": ICU normalizer: " + u_errorName(err));
  return std::unique_ptr<Normalizer>(new UnicodeForm(form));
}

}  // namespace

Result<std::unique_ptr<Normalizer>> ParseNormalizer(const json& spec, const std::string& path) {
  Result<std::string> type = TypeOf(spec, path);
  if (!type.ok()) return type.status();
  const std::string& t = *type;
  if (t == "NFC") return Form(&icu::Normalizer2::getNFCInstance, path);
  if (t == "NFD") return Form(&icu::Normalizer2::getNFDInstance, path);
  if (t == "NFKC") return Form(&icu::Normalizer2::getNFKCInstance, path);
  if (t == "NFKD") return Form(&icu::Normalizer2::getNFKDInstance, path);
  if (t == "Lowercase") return std::unique_ptr<Normalizer>(new Lowercase());
  if (t == "Prepend") {
    Result<std::string> prefix = StringField(spec, "prepend", path);
    if (!prefix.ok()) return prefix.status();
    return std::unique_ptr<Normalizer>(new Prepend(*prefix));
  }
  if (t == "Strip") {
    Result<bool> left = BoolField(spec, "strip_left", path, true);
    Result<bool> right = BoolField(spec, "strip_right", path, true);
    if (!left.ok()) return left.status();
    if (!right.ok()) return right.status();
    return std::unique_ptr<Normalizer>(new Strip(*left, *right));
  }
  if (t == "Replace") {
    Result<Pattern> pattern = ParsePattern(spec, path);
    if (!pattern.ok()) return pattern.status();
    Result<std::string> content = StringField(spec, "content", path);
    if (!content.ok()) return content.status();
    return std::unique_ptr<Normalizer>(
        new Replace(std::move(pattern->literal), std::move(pattern->regex), *content));
  }
  if (t == "Sequence") {
    auto it = spec.find("normalizers");
    if (it == spec.end() || !it->is_array()) return Status::InvalidArgument(path + ".normalizers: expected an array");
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (size_t i = 0; i < it->size(); ++i) {
      auto step = ParseNormalizer((*it)[i], path + ".normalizers[" + std::to_string(i) + "]");
      if (!step.ok()) return step.status();
      steps.push_back(std::move(step).value());
    }
    return std::unique_ptr<Normalizer>(new SequenceNormalizer(std::move(steps)));
  }
  return Status::InvalidArgument(path + ": unsupported normalizer type " + t);
}

}  // namespace kvidx::tokenizer
