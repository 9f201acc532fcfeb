#include "server/chat/jinja_lexer.h"

#include <cstring>

#include "server/chat/py_text.h"

namespace kvidx::chat::jinja {
namespace {

// Python's \s in a str pattern: Unicode whitespace (the same set as isspace).
size_t SpaceLen(std::string_view s, size_t pos) {
  if (pos >= s.size()) return 0;
  unsigned char c = static_cast<unsigned char>(s[pos]);
  if (c < 0x80) return py::IsSpace(c) ? 1 : 0;
  size_t n = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
  if (pos + n > s.size()) return 0;
  std::vector<uint32_t> cp = py::Decode(s.substr(pos, n));
  return (cp.size() == 1 && py::IsSpace(cp[0])) ? n : 0;
}

size_t SkipSpaces(std::string_view s, size_t pos) {
  while (size_t n = SpaceLen(s, pos)) pos += n;
  return pos;
}

std::string RStripPy(std::string_view s) { return py::Strip(s, std::nullopt, false, true); }

int CountLines(std::string_view s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

std::string Normalize(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string src) : src_(std::move(src)) {}

  Result<std::vector<Token>> Run() {
    while (pos_ < src_.size()) {
      Status s = Root();
      if (!s.ok()) return s;
    }
    tokens_.push_back({TokenKind::kEof, "", line_});
    return std::move(tokens_);
  }

 private:
  struct Opener {
    size_t at = std::string::npos;
    char kind = 0;     // '{' variable, '%' block, '#' comment, 'r' raw
    char sign = 0;     // '-', '+' or 0
    size_t end = 0;    // after the opener (and sign)
  };

  Status Fail(const std::string& msg, int line) {
    return Status::InvalidArgument("template syntax error at line " + std::to_string(line) + ": " + msg);
  }

  // `{%[-+]?\s*raw\s*(-%}\s*|%})` at `at`; returns the end or npos.
  size_t MatchRawBegin(size_t at, char* sign) {
    size_t p = at + 2;
    *sign = 0;
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) *sign = src_[p++];
    p = SkipSpaces(src_, p);
    if (src_.compare(p, 3, "raw") != 0) return std::string::npos;
    p = SkipSpaces(src_, p + 3);
    if (src_.compare(p, 3, "-%}") == 0) return SkipSpaces(src_, p + 3);
    if (src_.compare(p, 2, "%}") == 0) return p + 2;
    return std::string::npos;
  }

  Opener FindOpener(size_t from) {
    Opener o;
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 >= src_.size()) break;
      char k = src_[i + 1];
      if (k != '{' && k != '%' && k != '#') continue;
      o.at = i;
      if (k == '%') {
        char sign;
        size_t e = MatchRawBegin(i, &sign);
        if (e != std::string::npos) {
          o.kind = 'r';
          o.sign = sign;
          o.end = e;
          return o;
        }
      }
      o.kind = k;
      o.end = i + 2;
      if (o.end < src_.size() && (src_[o.end] == '-' || src_[o.end] == '+')) o.sign = src_[o.end++];
      return o;
    }
    return o;
  }

  // The text before a tag, with jinja's OptionalLStrip rules applied.
  std::string StripText(std::string text, char sign, bool is_variable) {
    if (sign == '-') return RStripPy(text);
    if (sign != '+' && !is_variable) {
      size_t l_pos = text.rfind('\n');
      l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
      if (l_pos > 0 || line_starting_) {
        if (text.find_first_not_of(" \t", l_pos) == std::string::npos) text.resize(l_pos);
      }
    }
    return text;
  }

  void EmitData(std::string text, int line) {
    if (!text.empty()) tokens_.push_back({TokenKind::kData, std::move(text), line});
  }

  Status Root() {
    Opener o = FindOpener(pos_);
    if (o.at == std::string::npos) {
      std::string rest = src_.substr(pos_);
      EmitData(rest, line_);
      line_ += CountLines(rest);
      pos_ = src_.size();
      return Status::Ok();
    }
    std::string text = src_.substr(pos_, o.at - pos_);
    int text_line = line_;
    line_ += CountLines(text);
    EmitData(StripText(text, o.sign, o.kind == '{'), text_line);
    line_ += CountLines(std::string_view(src_).substr(o.at, o.end - o.at));
    pos_ = o.end;
    line_starting_ = src_[o.end - 1] == '\n';
    switch (o.kind) {
      case '#': return Comment();
      case 'r': return Raw();
      case '{': return Tag(false);
      default: return Tag(true);
    }
  }

  Status Comment() {
    int start = line_;
    for (size_t i = src_.find("#}", pos_); i != std::string::npos; i = src_.find("#}", i + 1)) {
      // The lazy `(.*?)(\+#}|\-#}\s*|#}\n?)` stops at the first `#}`; a sign
      // right before it belongs to the end marker.
      size_t end;
      if (i > pos_ && src_[i - 1] == '-') end = SkipSpaces(src_, i + 2);
      else if (i > pos_ && src_[i - 1] == '+') end = i + 2;
      else end = (i + 2 < src_.size() && src_[i + 2] == '\n') ? i + 3 : i + 2;
      line_ += CountLines(std::string_view(src_).substr(pos_, end - pos_));
      line_starting_ = src_[end - 1] == '\n';
      pos_ = end;
      return Status::Ok();
    }
    return Fail("Missing end of comment tag", start);
  }

  // `(.*?)({%[-+]?\s*endraw\s*(\+%}|-%}\s*|%}\n?))`
  Status Raw() {
    int start = line_;
    for (size_t i = src_.find("{%", pos_); i != std::string::npos; i = src_.find("{%", i + 1)) {
      size_t p = i + 2;
      char sign = 0;
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) sign = src_[p++];
      p = SkipSpaces(src_, p);
      if (src_.compare(p, 6, "endraw") != 0) continue;
      p = SkipSpaces(src_, p + 6);
      size_t end;
      if (src_.compare(p, 3, "+%}") == 0) end = p + 3;
      else if (src_.compare(p, 3, "-%}") == 0) end = SkipSpaces(src_, p + 3);
      else if (src_.compare(p, 2, "%}") == 0) end = (p + 2 < src_.size() && src_[p + 2] == '\n') ? p + 3 : p + 2;
      else continue;
      std::string text = src_.substr(pos_, i - pos_);
      EmitData(StripText(text, sign, false), line_);
      line_ += CountLines(std::string_view(src_).substr(pos_, end - pos_));
      line_starting_ = src_[end - 1] == '\n';
      pos_ = end;
      return Status::Ok();
    }
    return Fail("Missing end of raw directive", start);
  }

  // The end of a tag at pos_, or npos.
  size_t MatchTagEnd(bool block) {
    if (block) {
      if (src_.compare(pos_, 3, "+%}") == 0) return pos_ + 3;
      if (src_.compare(pos_, 3, "-%}") == 0) return SkipSpaces(src_, pos_ + 3);
      if (src_.compare(pos_, 2, "%}") == 0) {
        return (pos_ + 2 < src_.size() && src_[pos_ + 2] == '\n') ? pos_ + 3 : pos_ + 2;
      }
      return std::string::npos;
    }
    if (src_.compare(pos_, 3, "-}}") == 0) return SkipSpaces(src_, pos_ + 3);
    if (src_.compare(pos_, 2, "}}") == 0) return pos_ + 2;
    return std::string::npos;
  }

  Status Tag(bool block) {
    int start = line_;
    tokens_.push_back({block ? TokenKind::kBlockBegin : TokenKind::kVarBegin, "", line_});
    int depth = 0;
    while (true) {
      if (pos_ >= src_.size()) return Fail(block ? "unexpected end of template, expected '%}'" : "unexpected end of template, expected '}}'", start);
      if (depth == 0) {
        size_t end = MatchTagEnd(block);
        if (end != std::string::npos) {
          tokens_.push_back({block ? TokenKind::kBlockEnd : TokenKind::kVarEnd, "", line_});
          line_ += CountLines(std::string_view(src_).substr(pos_, end - pos_));
          line_starting_ = src_[end - 1] == '\n';
          pos_ = end;
          return Status::Ok();
        }
      }
      if (size_t n = SpaceLen(src_, pos_)) {
        line_ += src_[pos_] == '\n';
        pos_ += n;
        continue;
      }
      Status s = TagToken(&depth);
      if (!s.ok()) return s;
    }
  }

  static bool IsNameStart(char c) { return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
  static bool IsDigit(char c) { return c >= '0' && c <= '9'; }

  Status TagToken(int* depth) {
    char c = src_[pos_];
    if (IsDigit(c)) return Number();
    if (IsNameStart(c)) {
      size_t b = pos_;
      while (pos_ < src_.size() && (IsNameStart(src_[pos_]) || IsDigit(src_[pos_]))) ++pos_;
      tokens_.push_back({TokenKind::kName, src_.substr(b, pos_ - b), line_});
      return Status::Ok();
    }
    if (c == '\'' || c == '"') return String();
    static const char* kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<", ">",
                                 "=", "(", ")", "[", "]", "{", "}", ".", ",", ":", "|", ";"};
    for (const char* op : kOps) {
      size_t n = std::strlen(op);
      if (src_.compare(pos_, n, op) != 0) continue;
      if (n == 1 && (c == '(' || c == '[' || c == '{')) ++*depth;
      if (n == 1 && (c == ')' || c == ']' || c == '}')) {
        if (*depth == 0) return Fail(std::string("unexpected '") + c + "'", line_);
        --*depth;
      }
      tokens_.push_back({TokenKind::kOperator, op, line_});
      pos_ += n;
      return Status::Ok();
    }
    return Fail(std::string("unexpected char '") + c + "'", line_);
  }

  Status Number() {
    size_t b = pos_;
    auto digits = [&] {
      while (pos_ < src_.size() && (IsDigit(src_[pos_]) || (src_[pos_] == '_' && pos_ + 1 < src_.size() && IsDigit(src_[pos_ + 1])))) ++pos_;
    };
    digits();
    bool is_float = false;
    if (pos_ + 1 < src_.size() && src_[pos_] == '.' && IsDigit(src_[pos_ + 1])) {
      ++pos_;
      digits();
      is_float = true;
    }
    if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
      size_t p = pos_ + 1;
      if (p < src_.size() && (src_[p] == '+' || src_[p] == '-')) ++p;
      if (p < src_.size() && IsDigit(src_[p])) {
        pos_ = p;
        digits();
        is_float = true;
      }
    }
    std::string text;
    for (size_t i = b; i < pos_; ++i) if (src_[i] != '_') text += src_[i];
    tokens_.push_back({is_float ? TokenKind::kFloat : TokenKind::kInteger, text, line_});
    return Status::Ok();
  }

  static int HexVal(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  // A string literal, decoded as Python's unicode-escape codec does.
  Status String() {
    char q = src_[pos_];
    int start = line_;
    size_t p = pos_ + 1;
    std::string out;
    while (true) {
      if (p >= src_.size()) return Fail("unexpected end of string", start);
      char c = src_[p];
      if (c == q) break;
      if (c == '\n') ++line_;
      if (c != '\\') { out += c; ++p; continue; }
      if (p + 1 >= src_.size()) return Fail("unexpected end of string", start);
      char e = src_[p + 1];
      p += 2;
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case 'a': out += '\a'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case '\n': ++line_; break;
        case 'x': case 'u': case 'U': {
          int n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          uint32_t v = 0;
          for (int k = 0; k < n; ++k) {
            int h = p < src_.size() ? HexVal(src_[p]) : -1;
            if (h < 0) return Fail("truncated \\" + std::string(1, e) + " escape in string", line_);
            v = v * 16 + static_cast<uint32_t>(h);
            ++p;
          }
          py::AppendUtf8(out, v);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            uint32_t v = static_cast<uint32_t>(e - '0');
            for (int k = 0; k < 2 && p < src_.size() && src_[p] >= '0' && src_[p] <= '7'; ++k) v = v * 8 + static_cast<uint32_t>(src_[p++] - '0');
            py::AppendUtf8(out, v);
          } else {
            // Python keeps an unknown escape as written (\ and the char).
            out += '\\';
            out += e;
          }
      }
    }
    tokens_.push_back({TokenKind::kString, out, start});
    pos_ = p + 1;
    return Status::Ok();
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
};

}  // namespace

Result<std::vector<Token>> Lex(std::string_view source) {
  Lexer lexer(Normalize(source));
  return lexer.Run();
}

}  // namespace kvidx::chat::jinja
