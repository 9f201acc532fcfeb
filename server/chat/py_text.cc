#include "server/chat/py_text.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace kvidx::chat::py {

bool IsSpace(uint32_t cp) {
  // CPython Objects/unicodetype_db.h, _PyUnicode_IsWhitespace.
  switch (cp) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D:
    case 0x1C: case 0x1D: case 0x1E: case 0x1F: case 0x20:
    case 0x85: case 0xA0: case 0x1680:
    case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

std::vector<uint32_t> Decode(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    uint32_t cp;
    size_t n;
    if (c < 0x80) { cp = c; n = 1; }
    else if ((c & 0xE0) == 0xC0) { cp = c & 0x1F; n = 2; }
    else if ((c & 0xF0) == 0xE0) { cp = c & 0x0F; n = 3; }
    else if ((c & 0xF8) == 0xF0) { cp = c & 0x07; n = 4; }
    else { out.push_back(0xFFFD); ++i; continue; }
    if (i + n > s.size()) { out.push_back(0xFFFD); ++i; continue; }
    bool ok = true;
    for (size_t k = 1; k < n; ++k) {
      unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) { ok = false; break; }
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (!ok) { out.push_back(0xFFFD); ++i; continue; }
    out.push_back(cp);
    i += n;
  }
  return out;
}

void AppendUtf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string Encode(const std::vector<uint32_t>& cps, size_t begin, size_t end) {
  std::string out;
  for (size_t i = begin; i < end && i < cps.size(); ++i) AppendUtf8(out, cps[i]);
  return out;
}

size_t Length(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

std::string Strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  std::vector<uint32_t> cps = Decode(s);
  std::vector<uint32_t> set;
  if (chars) set = Decode(*chars);
  auto strip_it = [&](uint32_t cp) {
    return chars ? std::find(set.begin(), set.end(), cp) != set.end() : IsSpace(cp);
  };
  size_t b = 0, e = cps.size();
  if (left) while (b < e && strip_it(cps[b])) ++b;
  if (right) while (e > b && strip_it(cps[e - 1])) --e;
  return Encode(cps, b, e);
}

namespace {

std::vector<std::string> SplitWhitespace(std::string_view s, int64_t maxsplit, bool from_right) {
  std::vector<uint32_t> cps = Decode(s);
  std::vector<std::string> parts;
  if (!from_right) {
    size_t i = 0, n = cps.size();
    while (true) {
      while (i < n && IsSpace(cps[i])) ++i;
      if (i >= n) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) {
        size_t e = n;
        while (e > i && IsSpace(cps[e - 1])) --e;
        parts.push_back(Encode(cps, i, e));
        break;
      }
      size_t j = i;
      while (j < n && !IsSpace(cps[j])) ++j;
      parts.push_back(Encode(cps, i, j));
      i = j;
    }
    return parts;
  }
  size_t i = cps.size();
  while (true) {
    while (i > 0 && IsSpace(cps[i - 1])) --i;
    if (i == 0) break;
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) {
      size_t b = 0;
      while (b < i && IsSpace(cps[b])) ++b;
      parts.push_back(Encode(cps, b, i));
      break;
    }
    size_t j = i;
    while (j > 0 && !IsSpace(cps[j - 1])) --j;
    parts.push_back(Encode(cps, j, i));
    i = j;
  }
  std::reverse(parts.begin(), parts.end());
  return parts;
}

}  // namespace

std::vector<std::string> Split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit,
                               bool from_right) {
  if (!sep) return SplitWhitespace(s, maxsplit, from_right);
  std::vector<std::string> parts;
  const std::string& d = *sep;
  if (!from_right) {
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      size_t f = s.find(d, pos);
      if (f == std::string_view::npos) break;
      parts.emplace_back(s.substr(pos, f - pos));
      pos = f + d.size();
    }
    parts.emplace_back(s.substr(pos));
    return parts;
  }
  size_t end = s.size();
  while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
    if (end < d.size()) break;
    size_t f = s.rfind(d, end - d.size());
    if (f == std::string_view::npos) break;
    parts.emplace_back(s.substr(f + d.size(), end - f - d.size()));
    end = f;
  }
  parts.emplace_back(s.substr(0, end));
  std::reverse(parts.begin(), parts.end());
  return parts;
}

std::string Replace(std::string_view s, std::string_view old_sub, std::string_view new_sub, int64_t count) {
  std::string out;
  if (old_sub.empty()) {
    // Python inserts `new` before every code point and at the end.
    std::vector<uint32_t> cps = Decode(s);
    int64_t done = 0;
    for (uint32_t cp : cps) {
      if (count < 0 || done < count) { out += new_sub; ++done; }
      AppendUtf8(out, cp);
    }
    if (count < 0 || done < count) out += new_sub;
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t f = s.find(old_sub, pos);
    if (f == std::string_view::npos) break;
    out.append(s.substr(pos, f - pos));
    out.append(new_sub);
    pos = f + old_sub.size();
    ++done;
  }
  out.append(s.substr(pos));
  return out;
}

int64_t Count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return static_cast<int64_t>(Length(s)) + 1;
  int64_t n = 0;
  for (size_t pos = s.find(sub); pos != std::string_view::npos; pos = s.find(sub, pos + sub.size())) ++n;
  return n;
}

int64_t Find(std::string_view s, std::string_view sub, bool from_right) {
  size_t f = from_right ? s.rfind(sub) : s.find(sub);
  if (f == std::string_view::npos) return -1;
  return static_cast<int64_t>(Length(s.substr(0, f)));
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

std::string Upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  return out;
}

namespace {
bool IsAsciiAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
char ToUpper(char c) { return (c >= 'a' && c <= 'z') ? static_cast<char>(c - 'a' + 'A') : c; }
char ToLower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }
}  // namespace

std::string TitleMethod(std::string_view s) {
  std::string out(s);
  bool prev_cased = false;
  for (char& c : out) {
    if (IsAsciiAlpha(c)) {
      c = prev_cased ? ToLower(c) : ToUpper(c);
      prev_cased = true;
    } else {
      prev_cased = false;
    }
  }
  return out;
}

std::string Capitalize(std::string_view s) {
  std::string out(s);
  for (size_t i = 0; i < out.size(); ++i) out[i] = i == 0 ? ToUpper(out[i]) : ToLower(out[i]);
  return out;
}

std::string FloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  // Shortest round-trip digits, then CPython's float_repr_style 'r' layout:
  // scientific when the decimal exponent is < -4 or >= 16.
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  size_t e = sci.find('e');
  int exp = std::stoi(sci.substr(e + 1));
  std::string digits;
  for (size_t i = 0; i < e; ++i) if (sci[i] != '.') digits += sci[i];
  std::string out = neg ? "-" : "";
  if (exp < -4 || exp >= 16) {
    out += digits[0];
    if (digits.size() > 1) { out += '.'; out += digits.substr(1); }
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    return out + eb;
  }
  if (exp < 0) return out + "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
  size_t int_len = static_cast<size_t>(exp) + 1;
  if (digits.size() <= int_len) return out + digits + std::string(int_len - digits.size(), '0') + ".0";
  return out + digits.substr(0, int_len) + "." + digits.substr(int_len);
}

std::string StrRepr(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char q = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, q);
  for (char c : s) {
    unsigned char u = static_cast<unsigned char>(c);
    if (c == q || c == '\\') { out += '\\'; out += c; }
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (u < 0x20 || u == 0x7F) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", u);
      out += b;
    } else {
      out += c;
    }
  }
  out += q;
  return out;
}

namespace {

std::string IntStr(const Json& j) {
  if (j.is_number_unsigned()) return std::to_string(j.get<uint64_t>());
  return std::to_string(j.get<int64_t>());
}

}  // namespace

std::string Repr(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null: return "None";
    case Json::value_t::boolean: return j.get<bool>() ? "True" : "False";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return IntStr(j);
    case Json::value_t::number_float: return FloatRepr(j.get<double>());
    case Json::value_t::string: return StrRepr(j.get_ref<const std::string&>());
    case Json::value_t::array: {
      std::string out = "[";
      bool first = true;
      for (const Json& e : j) {
        if (!first) out += ", ";
        first = false;
        out += Repr(e);
      }
      return out + "]";
    }
    case Json::value_t::object: {
      std::string out = "{";
      bool first = true;
      for (auto it = j.begin(); it != j.end(); ++it) {
        if (!first) out += ", ";
        first = false;
        out += StrRepr(it.key()) + ": " + Repr(it.value());
      }
      return out + "}";
    }
    default: return "None";
  }
}

std::string ToStr(const Json& j) {
  if (j.is_string()) return j.get<std::string>();
  return Repr(j);
}

namespace {

void DumpString(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  auto hex4 = [&](uint32_t v) {
    char b[16];
    std::snprintf(b, sizeof b, "\\u%04x", v & 0xFFFFu);
    out += b;
  };
  if (!ensure_ascii) {
    for (char c : s) {
      unsigned char u = static_cast<unsigned char>(c);
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default:
          if (u < 0x20) hex4(u); else out += c;
      }
    }
  } else {
    for (uint32_t cp : Decode(s)) {
      switch (cp) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default:
          if (cp < 0x20 || cp > 0x7E) {
            if (cp >= 0x10000) {
              uint32_t v = cp - 0x10000;
              hex4(0xD800 | (v >> 10));
              hex4(0xDC00 | (v & 0x3FF));
            } else {
              hex4(cp);
            }
          } else {
            out += static_cast<char>(cp);
          }
      }
    }
  }
  out += '"';
}

std::string JsonFloat(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  return FloatRepr(d);
}

void Dump(std::string& out, const Json& j, const DumpOptions& o, int depth) {
  switch (j.type()) {
    case Json::value_t::null: out += "null"; return;
    case Json::value_t::boolean: out += j.get<bool>() ? "true" : "false"; return;
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: out += IntStr(j); return;
    case Json::value_t::number_float: out += JsonFloat(j.get<double>()); return;
    case Json::value_t::string: DumpString(out, j.get_ref<const std::string&>(), o.ensure_ascii); return;
    default: break;
  }
  bool is_array = j.is_array();
  if (j.empty()) { out += is_array ? "[]" : "{}"; return; }
  out += is_array ? '[' : '{';
  auto newline = [&](int d) {
    if (!o.indent) return;
    out += '\n';
    for (int i = 0; i < d; ++i) out += *o.indent;
  };
  std::vector<std::pair<const std::string*, const Json*>> items;
  if (!is_array) {
    for (auto it = j.begin(); it != j.end(); ++it) items.emplace_back(&it.key(), &it.value());
    if (o.sort_keys) {
      std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return *a.first < *b.first; });
    }
  }
  size_t n = j.size();
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) out += o.item_separator;
    newline(depth + 1);
    if (is_array) {
      Dump(out, j[i], o, depth + 1);
    } else {
      DumpString(out, *items[i].first, o.ensure_ascii);
      out += o.key_separator;
      Dump(out, *items[i].second, o, depth + 1);
    }
  }
  newline(depth);
  out += is_array ? ']' : '}';
}

}  // namespace

std::string JsonDumps(const Json& j, const DumpOptions& options) {
  std::string out;
  Dump(out, j, options, 0);
  return out;
}

}  // namespace kvidx::chat::py
