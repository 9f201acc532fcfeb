#include "ingest/exposition.h"

#include <charconv>
#include <cmath>
#include <limits>

namespace kvidx::ingest {

namespace {

bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':'; }
bool IsNameChar(char c) { return IsNameStart(c) || (c >= '0' && c <= '9'); }
bool IsLabelStart(char c) { return IsNameStart(c) && c != ':'; }
bool IsLabelChar(char c) { return IsNameChar(c) && c != ':'; }
bool IsBlank(char c) { return c == ' ' || c == '\t'; }

// A cursor over one line.
struct Cursor {
  std::string_view s;
  size_t i = 0;

  bool done() const { return i >= s.size(); }
  char peek() const { return done() ? '\0' : s[i]; }
  void SkipBlanks() {
    while (!done() && IsBlank(s[i])) ++i;
  }
  bool Eat(char c) {
    if (peek() != c) return false;
    ++i;
    return true;
  }
  // [first-class][rest-class]*; empty if the first character does not fit.
  template <class First, class Rest>
  std::string_view Name(First first, Rest rest) {
    if (done() || !first(s[i])) return {};
    const size_t b = i++;
    while (!done() && rest(s[i])) ++i;
    return s.substr(b, i - b);
  }
  // A token up to the next blank or the end.
  std::string_view Token() {
    const size_t b = i;
    while (!done() && !IsBlank(s[i])) ++i;
    return s.substr(b, i - b);
  }
};

// A quoted label value after its opening quote, unescaped into `out`.
bool QuotedValue(Cursor& c, std::string* out) {
  out->clear();
  while (!c.done()) {
    const char ch = c.s[c.i++];
    if (ch == '"') return true;
    if (ch != '\\') {
      out->push_back(ch);
      continue;
    }
    if (c.done()) return false;
    const char e = c.s[c.i++];
    if (e == 'n') {
      out->push_back('\n');
    } else if (e == '\\' || e == '"') {
      out->push_back(e);
    } else {
      return false;  // the format defines no other escape
    }
  }
  return false;  // unterminated
}

bool LabelSet(Cursor& c, size_t max_labels, ExpositionSample* out) {
  for (;;) {
    c.SkipBlanks();
    if (c.Eat('}')) return true;
    if (out->labels.size() >= max_labels) return false;
    const std::string_view key = c.Name(IsLabelStart, IsLabelChar);
    if (key.empty()) return false;
    c.SkipBlanks();
    if (!c.Eat('=')) return false;
    c.SkipBlanks();
    if (!c.Eat('"')) return false;
    std::string value;
    if (!QuotedValue(c, &value)) return false;
    out->labels.emplace_back(key, std::move(value));
    c.SkipBlanks();
    if (c.Eat(',')) continue;
    if (c.Eat('}')) return true;
    return false;
  }
}

// Go's ParseFloat forms the format uses: decimal, exponent, NaN, [+-]Inf.
bool ParseValue(std::string_view t, double* v) {
  if (t.empty()) return false;
  bool neg = false;
  std::string_view body = t;
  if (body.front() == '+' || body.front() == '-') {
    neg = body.front() == '-';
    body.remove_prefix(1);
  }
  auto iequals = [](std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if ((a[i] | 0x20) != b[i]) return false;
    }
    return true;
  };
  if (iequals(body, "inf") || iequals(body, "infinity")) {
    *v = neg ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
    return true;
  }
  if (iequals(body, "nan")) {
    *v = std::numeric_limits<double>::quiet_NaN();
    return true;
  }
  if (body.empty() || body.front() == '+' || body.front() == '-') return false;
  double x = 0;
  auto [end, ec] = std::from_chars(body.data(), body.data() + body.size(), x, std::chars_format::general);
  if (ec != std::errc() || end != body.data() + body.size()) return false;
  *v = neg ? -x : x;
  return true;
}

bool ParseTimestamp(std::string_view t) {
  int64_t ts = 0;
  if (!t.empty() && t.front() == '+') t.remove_prefix(1);
  auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), ts);
  return ec == std::errc() && end == t.data() + t.size();
}

}  // namespace

bool ParseSampleLine(std::string_view line, size_t max_labels, ExpositionSample* out) {
  out->labels.clear();
  Cursor c{line};
  out->name = c.Name(IsNameStart, IsNameChar);
  if (out->name.empty()) return false;
  c.SkipBlanks();
  if (c.Eat('{') && !LabelSet(c, max_labels, out)) return false;
  c.SkipBlanks();
  if (!ParseValue(c.Token(), &out->value)) return false;
  c.SkipBlanks();
  if (c.done()) return true;
  if (!ParseTimestamp(c.Token())) return false;
  c.SkipBlanks();
  return c.done();
}

}  // namespace kvidx::ingest
