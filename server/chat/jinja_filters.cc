// Jinja2's built-in filters (jinja2/filters.py) that chat templates use,
// with transformers' tojson (json.dumps with ensure_ascii=False, indent,
// separators and sort_keys; chat_template_utils.py _compile_jinja_template).
#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "server/chat/jinja_interpreter.h"
#include "server/chat/py_text.h"

namespace kvidx::chat::jinja {
namespace {

using Filter = Value (*)(Interpreter&, const Value&, CallArgs&);

[[noreturn]] void Fail(const std::string& msg) { throw RenderError{msg}; }

// jinja2's soft_str: str(value), '' for Undefined.
std::string S(Interpreter& in, const Value& v) { return in.ToStr(v); }

std::optional<std::string> OptStr(Interpreter& in, const Value* v) {
  if (!v || v->is_none()) return std::nullopt;
  return S(in, *v);
}

size_t Len(const Value& v) {
  if (v.is_undefined()) return 0;
  if (!v.is_json()) Fail("object of type '" + PyTypeName(v) + "' has no len()");
  const Json& j = v.json();
  if (j.is_string()) return py::Length(j.get_ref<const std::string&>());
  if (j.is_array() || j.is_object()) return j.size();
  Fail("object of type '" + PyTypeName(v) + "' has no len()");
}

Value Trim(Interpreter& in, const Value& v, CallArgs& a) {
  return Value::Of(py::Strip(S(in, v), OptStr(in, Arg(a, 0, "chars")), true, true));
}
Value Length(Interpreter&, const Value& v, CallArgs&) { return Value::Of(static_cast<int64_t>(Len(v))); }
Value Default(Interpreter&, const Value& v, CallArgs& a) {
  const Value* d = Arg(a, 0, "default_value");
  const Value* boolean = Arg(a, 1, "boolean");
  bool use = v.is_undefined() || (boolean && boolean->Truthy() && !v.Truthy());
  if (!use) return v;
  return d ? *d : Value::Of("");
}

Value ToJson(Interpreter& in, const Value& v, CallArgs& a) {
  py::DumpOptions o;
  if (const Value* ea = Arg(a, 0, "ensure_ascii")) o.ensure_ascii = ea->Truthy();
  const Value* indent = Arg(a, 1, "indent");
  if (indent && !indent->is_none()) {
    if (indent->is_string()) o.indent = indent->str();
    else o.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, ToInt(*indent, "indent must be int"))), ' ');
    o.item_separator = ",";
  }
  const Value* seps = Arg(a, 2, "separators");
  if (seps && !seps->is_none()) {
    std::vector<Value> parts = in.Iterate(*seps);
    if (parts.size() != 2 || !parts[0].is_string() || !parts[1].is_string()) Fail("separators must be a pair of strings");
    o.item_separator = parts[0].str();
    o.key_separator = parts[1].str();
  }
  if (const Value* sk = Arg(a, 3, "sort_keys")) o.sort_keys = sk->Truthy();
  return Value::Of(py::JsonDumps(v.ToJson(), o));
}

Value String(Interpreter& in, const Value& v, CallArgs&) { return v.is_string() ? v : Value::Of(S(in, v)); }
Value Lower(Interpreter& in, const Value& v, CallArgs&) { return Value::Of(py::Lower(S(in, v))); }
Value Upper(Interpreter& in, const Value& v, CallArgs&) { return Value::Of(py::Upper(S(in, v))); }
Value Capitalize(Interpreter& in, const Value& v, CallArgs&) { return Value::Of(py::Capitalize(S(in, v))); }

// do_title: words begin after runs of [-\s({\[<].
Value Title(Interpreter& in, const Value& v, CallArgs&) {
  std::vector<uint32_t> cps = py::Decode(S(in, v));
  std::string out;
  bool word_start = true;
  for (uint32_t cp : cps) {
    bool sep = cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || py::IsSpace(cp);
    if (sep) {
      word_start = true;
    } else if (cp < 0x80) {
      char c = static_cast<char>(cp);
      if (word_start) { if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 32); }
      else if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
      cp = static_cast<uint32_t>(c);
      word_start = false;
    } else {
      word_start = false;
    }
    py::AppendUtf8(out, cp);
  }
  return Value::Of(out);
}

Value Replace(Interpreter& in, const Value& v, CallArgs& a) {
  const Value* old_v = Arg(a, 0, "old");
  const Value* new_v = Arg(a, 1, "new");
  const Value* count = Arg(a, 2, "count");
  if (!old_v || !new_v) Fail("replace() missing required arguments");
  int64_t n = (count && !count->is_none()) ? ToInt(*count, "count must be int") : -1;
  return Value::Of(py::Replace(S(in, v), S(in, *old_v), S(in, *new_v), n));
}

Value AttrOf(Interpreter& in, const Value& item, const std::string& attr) {
  Value cur = item;
  size_t pos = 0;
  while (true) {
    size_t dot = attr.find('.', pos);
    std::string part = attr.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    cur = in.GetItem(cur, digits ? Value::Of(std::stoll(part)) : Value::Of(part));
    if (dot == std::string::npos) return cur;
    pos = dot + 1;
  }
}

Value Join(Interpreter& in, const Value& v, CallArgs& a) {
  const Value* d = Arg(a, 0, "d");
  const Value* attr = Arg(a, 1, "attribute");
  std::string sep = d ? S(in, *d) : "";
  std::string out;
  bool first = true;
  for (const Value& item : in.Iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += S(in, attr ? AttrOf(in, item, S(in, *attr)) : item);
  }
  return Value::Of(out);
}

Value First(Interpreter& in, const Value& v, CallArgs&) {
  std::vector<Value> items = in.Iterate(v);
  if (items.empty()) return Value::Undefined("No first item, sequence was empty.");
  return items.front();
}
Value Last(Interpreter& in, const Value& v, CallArgs&) {
  std::vector<Value> items = in.Iterate(v);
  if (items.empty()) return Value::Undefined("No last item, sequence was empty.");
  return items.back();
}

Value ListOf(const std::vector<Value>& items) {
  Json arr = Json::array();
  for (const Value& i : items) arr.push_back(i.ToJson());
  return Value::Of(std::move(arr));
}

Value List(Interpreter& in, const Value& v, CallArgs&) { return ListOf(in.Iterate(v)); }

Value Items(Interpreter& in, const Value& v, CallArgs&) {
  if (v.is_undefined()) return Value::Of(Json::array());
  if (!v.is_json() || !v.json().is_object()) Fail("Can only get item pairs from a mapping.");
  (void)in;
  Json arr = Json::array();
  for (auto it = v.json().begin(); it != v.json().end(); ++it) arr.push_back(Json::array({it.key(), it.value()}));
  return Value::Of(std::move(arr));
}

// select/reject/selectattr/rejectattr: args are (attr?, test?, test args...).
Value SelectImpl(Interpreter& in, const Value& v, CallArgs& a, bool by_attr, bool keep) {
  size_t i = 0;
  std::string attr;
  if (by_attr) {
    if (a.positional.empty()) Fail("Missing parameter for attribute name");
    attr = S(in, a.positional[i++]);
  }
  std::optional<std::string> test;
  if (i < a.positional.size()) test = S(in, a.positional[i++]);
  CallArgs targs;
  targs.positional.assign(a.positional.begin() + static_cast<long>(i), a.positional.end());
  targs.keyword = a.keyword;
  std::vector<Value> out;
  for (const Value& item : in.Iterate(v)) {
    in.Step();
    Value probe = by_attr ? AttrOf(in, item, attr) : item;
    bool r = test ? in.ApplyTest(*test, probe, targs) : probe.Truthy();
    if (r == keep) out.push_back(item);
  }
  return ListOf(out);
}
Value Select(Interpreter& in, const Value& v, CallArgs& a) { return SelectImpl(in, v, a, false, true); }
Value Reject(Interpreter& in, const Value& v, CallArgs& a) { return SelectImpl(in, v, a, false, false); }
Value SelectAttr(Interpreter& in, const Value& v, CallArgs& a) { return SelectImpl(in, v, a, true, true); }
Value RejectAttr(Interpreter& in, const Value& v, CallArgs& a) { return SelectImpl(in, v, a, true, false); }

Value Map(Interpreter& in, const Value& v, CallArgs& a) {
  std::vector<Value> out;
  if (const Value* attr = Arg(a, 99, "attribute")) {
    const Value* def = Arg(a, 99, "default");
    for (const Value& item : in.Iterate(v)) {
      Value r = AttrOf(in, item, S(in, *attr));
      out.push_back(r.is_undefined() && def ? *def : r);
    }
    return ListOf(out);
  }
  if (a.positional.empty()) Fail("map requires a filter argument");
  std::string filter = S(in, a.positional[0]);
  CallArgs fargs;
  fargs.positional.assign(a.positional.begin() + 1, a.positional.end());
  fargs.keyword = a.keyword;
  for (const Value& item : in.Iterate(v)) {
    CallArgs copy = fargs;
    out.push_back(in.ApplyFilter(filter, item, copy));
  }
  return ListOf(out);
}

Value SortKey(Interpreter& in, const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::Of(py::Lower(v.str()));
  (void)in;
  return v;
}

void SortValues(Interpreter& in, std::vector<std::pair<Value, Value>>& keyed, bool reverse) {
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    in.Step();
    return reverse ? in.Order(y.first, x.first, "<") < 0 : in.Order(x.first, y.first, "<") < 0;
  });
}

Value Sort(Interpreter& in, const Value& v, CallArgs& a) {
  const Value* rev = Arg(a, 0, "reverse");
  const Value* cs = Arg(a, 1, "case_sensitive");
  const Value* attr = Arg(a, 2, "attribute");
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& item : in.Iterate(v)) {
    Value k = attr ? AttrOf(in, item, S(in, *attr)) : item;
    keyed.emplace_back(SortKey(in, k, cs && cs->Truthy()), item);
  }
  SortValues(in, keyed, rev && rev->Truthy());
  std::vector<Value> out;
  for (auto& p : keyed) out.push_back(p.second);
  return ListOf(out);
}

Value DictSort(Interpreter& in, const Value& v, CallArgs& a) {
  if (!v.is_json() || !v.json().is_object()) Fail("You can only sort by either \"key\" or \"value\"");
  const Value* cs = Arg(a, 0, "case_sensitive");
  const Value* by = Arg(a, 1, "by");
  const Value* rev = Arg(a, 2, "reverse");
  bool by_value = by && S(in, *by) == "value";
  std::vector<std::pair<Value, Value>> keyed;
  for (auto it = v.json().begin(); it != v.json().end(); ++it) {
    Value pair = Value::Of(Json::array({it.key(), it.value()}));
    Value k = by_value ? Value::Ref(v.json_ptr(), &it.value()) : Value::Of(it.key());
    keyed.emplace_back(SortKey(in, k, cs && cs->Truthy()), pair);
  }
  SortValues(in, keyed, rev && rev->Truthy());
  std::vector<Value> out;
  for (auto& p : keyed) out.push_back(p.second);
  return ListOf(out);
}

Value Unique(Interpreter& in, const Value& v, CallArgs& a) {
  const Value* cs = Arg(a, 0, "case_sensitive");
  const Value* attr = Arg(a, 1, "attribute");
  std::vector<Value> seen, out;
  for (const Value& item : in.Iterate(v)) {
    Value k = SortKey(in, attr ? AttrOf(in, item, S(in, *attr)) : item, cs && cs->Truthy());
    bool dup = false;
    for (const Value& s : seen) if (in.Equals(s, k)) { dup = true; break; }
    if (dup) continue;
    seen.push_back(k);
    out.push_back(item);
  }
  return ListOf(out);
}

Value Indent(Interpreter& in, const Value& v, CallArgs& a) {
  const Value* width = Arg(a, 0, "width");
  const Value* first = Arg(a, 1, "first");
  const Value* blank = Arg(a, 2, "blank");
  std::string ind = "    ";
  if (width) ind = width->is_string() ? width->str() : std::string(static_cast<size_t>(std::max<int64_t>(0, ToInt(*width, "width must be int"))), ' ');
  std::string s = S(in, v);
  std::string nl = "\n";
  s += nl;  // jinja appends a newline, indents, then drops it again
  std::vector<std::string> lines = py::Split(s, std::string("\n"), -1, false);
  // lines from splitlines(): drop the artificial last empty piece.
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  std::string rv;
  bool do_blank = blank && blank->Truthy();
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i == 0) continue;
    rv += nl;
    if (do_blank || !py::Strip(lines[i], std::nullopt, true, true).empty()) rv += ind;
    rv += lines[i];
  }
  std::string head = lines.empty() ? "" : lines[0];
  if (first && first->Truthy()) head = ind + head;
  return Value::Of(head + rv);
}

Value Int(Interpreter& in, const Value& v, CallArgs& a) {
  const Value* def = Arg(a, 0, "default");
  Value d = def ? *def : Value::Of(0);
  if (v.is_json() && v.json().is_boolean()) return Value::Of(v.json().get<bool>() ? 1 : 0);
  if (IsInteger(v)) return v;
  if (v.is_json() && v.json().is_number_float()) return Value::Of(static_cast<int64_t>(std::trunc(v.json().get<double>())));
  if (v.is_string()) {
    std::string s = py::Strip(v.str(), std::nullopt, true, true);
    try {
      size_t used = 0;
      long long n = std::stoll(s, &used, 10);
      if (used == s.size()) return Value::Of(static_cast<int64_t>(n));
      double f = std::stod(s, &used);
      if (used == s.size()) return Value::Of(static_cast<int64_t>(std::trunc(f)));
    } catch (...) {
    }
  }
  (void)in;
  return d;
}

Value Float(Interpreter&, const Value& v, CallArgs& a) {
  const Value* def = Arg(a, 0, "default");
  Value d = def ? *def : Value::Of(0.0);
  if (IsNumber(v)) return Value::Of(ToDouble(v));
  if (v.is_string()) {
    try {
      size_t used = 0;
      std::string s = py::Strip(v.str(), std::nullopt, true, true);
      double f = std::stod(s, &used);
      if (used == s.size()) return Value::Of(f);
    } catch (...) {
    }
  }
  return d;
}

Value Abs(Interpreter&, const Value& v, CallArgs&) {
  if (IsInteger(v)) return Value::Of(std::llabs(v.json().get<int64_t>()));
  return Value::Of(std::fabs(ToDouble(v)));
}

Value Round(Interpreter& in, const Value& v, CallArgs& a) {
  const Value* p = Arg(a, 0, "precision");
  const Value* m = Arg(a, 1, "method");
  int64_t prec = p ? ToInt(*p, "precision must be int") : 0;
  std::string method = m ? S(in, *m) : "common";
  double x = ToDouble(v);
  double scale = std::pow(10.0, static_cast<double>(prec));
  double r;
  // Python's round(): half to even (the current FP rounding mode).
  if (method == "common") r = std::nearbyint(x * scale) / scale;
  else if (method == "ceil") r = std::ceil(x * scale) / scale;
  else if (method == "floor") r = std::floor(x * scale) / scale;
  else Fail("method must be common, ceil or floor");
  return Value::Of(r);
}

Value Safe(Interpreter& in, const Value& v, CallArgs&) { return v.is_string() ? v : Value::Of(S(in, v)); }

Value Escape(Interpreter& in, const Value& v, CallArgs&) {
  std::string out;
  for (char c : S(in, v)) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return Value::Of(out);
}

Value Reverse(Interpreter& in, const Value& v, CallArgs&) {
  if (v.is_string()) {
    std::vector<uint32_t> cps = py::Decode(v.str());
    std::reverse(cps.begin(), cps.end());
    return Value::Of(py::Encode(cps, 0, cps.size()));
  }
  std::vector<Value> items = in.Iterate(v);
  std::reverse(items.begin(), items.end());
  return ListOf(items);
}

Value WordCount(Interpreter& in, const Value& v, CallArgs&) {
  // re.findall(r"\w+"): runs of letters, digits and underscore (non-ASCII
  // code points count as word characters).
  int64_t n = 0;
  bool in_word = false;
  for (uint32_t cp : py::Decode(S(in, v))) {
    bool w = cp >= 0x80 ? !py::IsSpace(cp) : ((cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || cp == '_');
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value::Of(n);
}

Value Sum(Interpreter& in, const Value& v, CallArgs& a) {
  const Value* attr = Arg(a, 0, "attribute");
  const Value* start = Arg(a, 1, "start");
  Value acc = start ? *start : Value::Of(0);
  bool is_int = IsInteger(acc);
  int64_t ia = is_int ? acc.json().get<int64_t>() : 0;
  double fa = ToDouble(acc);
  for (const Value& item : in.Iterate(v)) {
    Value x = attr ? AttrOf(in, item, S(in, *attr)) : item;
    if (IsInteger(x) && is_int) { ia += x.json().get<int64_t>(); fa = static_cast<double>(ia); }
    else { is_int = false; fa += ToDouble(x); }
  }
  return is_int ? Value::Of(ia) : Value::Of(fa);
}

Value MinMax(Interpreter& in, const Value& v, bool want_max) {
  std::vector<Value> items = in.Iterate(v);
  if (items.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
  Value best = items[0];
  for (const Value& x : items) {
    int c = in.Order(x, best, "<");
    if (want_max ? c > 0 : c < 0) best = x;
  }
  return best;
}
Value Min(Interpreter& in, const Value& v, CallArgs&) { return MinMax(in, v, false); }
Value Max(Interpreter& in, const Value& v, CallArgs&) { return MinMax(in, v, true); }

const std::unordered_map<std::string, Filter>& Filters() {
  static const std::unordered_map<std::string, Filter> kFilters = {
      {"trim", Trim},         {"length", Length},       {"count", Length},         {"default", Default},
      {"d", Default},         {"tojson", ToJson},       {"string", String},        {"lower", Lower},
      {"upper", Upper},       {"title", Title},         {"capitalize", Capitalize}, {"replace", Replace},
      {"join", Join},         {"first", First},         {"last", Last},            {"list", List},
      {"items", Items},       {"selectattr", SelectAttr}, {"rejectattr", RejectAttr}, {"map", Map},
      {"select", Select},     {"reject", Reject},       {"dictsort", DictSort},    {"unique", Unique},
      {"indent", Indent},     {"int", Int},             {"float", Float},          {"abs", Abs},
      {"round", Round},       {"safe", Safe},           {"escape", Escape},        {"e", Escape},
      {"reverse", Reverse},   {"sort", Sort},           {"wordcount", WordCount},  {"sum", Sum},
      {"min", Min},           {"max", Max},
  };
  return kFilters;
}

}  // namespace

Value CallFilter(Interpreter& in, const std::string& name, const Value& v, CallArgs& args) {
  auto it = Filters().find(name);
  if (it == Filters().end()) throw RenderError{"No filter named '" + name + "'."};
  return it->second(in, v, args);
}

}  // namespace kvidx::chat::jinja
