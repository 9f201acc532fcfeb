// Jinja2's built-in tests (jinja2/tests.py) that chat templates use.
#include <cmath>
#include <unordered_map>

#include "server/chat/jinja_interpreter.h"

namespace kvidx::chat::jinja {
namespace {

using Test = bool (*)(Interpreter&, const Value&, CallArgs&);

const Value& Need(const CallArgs& a, size_t i, const char* key, const char* test) {
  const Value* v = Arg(a, i, key);
  if (!v) throw RenderError{std::string(test) + "() missing 1 required positional argument: '" + key + "'"};
  return *v;
}

bool IsType(const Value& v, nlohmann::detail::value_t t) { return v.is_json() && v.json().type() == t; }

bool Defined(Interpreter&, const Value& v, CallArgs&) { return !v.is_undefined(); }
bool Undefined(Interpreter&, const Value& v, CallArgs&) { return v.is_undefined(); }
bool None(Interpreter&, const Value& v, CallArgs&) { return v.is_none(); }
bool String(Interpreter&, const Value& v, CallArgs&) { return v.is_string(); }
bool Mapping(Interpreter&, const Value& v, CallArgs&) { return IsType(v, Json::value_t::object); }
bool Iterable(Interpreter&, const Value& v, CallArgs&) {
  return v.is_undefined() || (v.is_json() && (v.json().is_string() || v.json().is_array() || v.json().is_object()));
}
bool Sequence(Interpreter&, const Value& v, CallArgs&) {
  return v.is_json() && (v.json().is_string() || v.json().is_array() || v.json().is_object());
}
bool Number(Interpreter&, const Value& v, CallArgs&) { return IsNumber(v); }
bool Integer(Interpreter&, const Value& v, CallArgs&) { return IsInteger(v); }
bool FloatTest(Interpreter&, const Value& v, CallArgs&) { return IsType(v, Json::value_t::number_float); }
bool Boolean(Interpreter&, const Value& v, CallArgs&) { return IsType(v, Json::value_t::boolean); }
bool True(Interpreter&, const Value& v, CallArgs&) { return IsType(v, Json::value_t::boolean) && v.json().get<bool>(); }
bool False(Interpreter&, const Value& v, CallArgs&) { return IsType(v, Json::value_t::boolean) && !v.json().get<bool>(); }
bool Callable(Interpreter&, const Value& v, CallArgs&) { return v.kind() == Value::Kind::kCallable; }
bool Eq(Interpreter& in, const Value& v, CallArgs& a) { return in.Equals(v, Need(a, 0, "other", "eq")); }
bool Ne(Interpreter& in, const Value& v, CallArgs& a) { return !in.Equals(v, Need(a, 0, "other", "ne")); }
bool Lt(Interpreter& in, const Value& v, CallArgs& a) { return in.Order(v, Need(a, 0, "other", "lt"), "<") < 0; }
bool Le(Interpreter& in, const Value& v, CallArgs& a) { return in.Order(v, Need(a, 0, "other", "le"), "<=") <= 0; }
bool Gt(Interpreter& in, const Value& v, CallArgs& a) { return in.Order(v, Need(a, 0, "other", "gt"), ">") > 0; }
bool Ge(Interpreter& in, const Value& v, CallArgs& a) { return in.Order(v, Need(a, 0, "other", "ge"), ">=") >= 0; }
bool In(Interpreter& in, const Value& v, CallArgs& a) {
  const Value& seq = Need(a, 0, "seq", "in");
  if (seq.is_string()) {
    if (!v.is_string()) throw RenderError{"'in <string>' requires string as left operand, not " + PyTypeName(v)};
    return seq.str().find(v.str()) != std::string::npos;
  }
  if (seq.is_json() && seq.json().is_object()) return v.is_string() && seq.json().contains(v.str());
  for (const Value& x : in.Iterate(seq)) if (in.Equals(x, v)) return true;
  return false;
}
// `is` identity: None, True and False are singletons; other values compare
// by identity, which JSON values copied into the context never share.
bool SameAs(Interpreter&, const Value& v, CallArgs& a) {
  const Value& o = Need(a, 0, "other", "sameas");
  if (v.is_json() && o.is_json()) {
    const Json& x = v.json();
    const Json& y = o.json();
    if (x.is_null() || x.is_boolean()) return x == y && x.type() == y.type();
    return &x == &y;
  }
  if (v.kind() == Value::Kind::kNamespace && o.kind() == Value::Kind::kNamespace) return &v.ns() == &o.ns();
  return false;
}
bool Odd(Interpreter&, const Value& v, CallArgs&) { return ToInt(v, "odd needs an integer") % 2 != 0; }
bool Even(Interpreter&, const Value& v, CallArgs&) { return ToInt(v, "even needs an integer") % 2 == 0; }
bool DivisibleBy(Interpreter&, const Value& v, CallArgs& a) {
  int64_t n = ToInt(Need(a, 0, "num", "divisibleby"), "divisibleby needs an integer");
  if (n == 0) throw RenderError{"integer division or modulo by zero"};
  return ToInt(v, "divisibleby needs an integer") % n == 0;
}
bool Lower(Interpreter& in, const Value& v, CallArgs&) {
  std::string s = in.ToStr(v);
  for (char c : s) if (c >= 'A' && c <= 'Z') return false;
  return true;
}
bool Upper(Interpreter& in, const Value& v, CallArgs&) {
  std::string s = in.ToStr(v);
  for (char c : s) if (c >= 'a' && c <= 'z') return false;
  return true;
}

const std::unordered_map<std::string, Test>& Tests() {
  static const std::unordered_map<std::string, Test> kTests = {
      {"defined", Defined}, {"undefined", Undefined}, {"none", None},         {"string", String},
      {"mapping", Mapping}, {"iterable", Iterable},   {"sequence", Sequence}, {"number", Number},
      {"integer", Integer}, {"float", FloatTest},     {"boolean", Boolean},   {"true", True},
      {"false", False},     {"callable", Callable},   {"equalto", Eq},        {"eq", Eq},
      {"==", Eq},           {"sameas", SameAs},       {"ne", Ne},             {"!=", Ne},
      {"lt", Lt},           {"lessthan", Lt},         {"<", Lt},              {"le", Le},
      {"<=", Le},           {"gt", Gt},               {"greaterthan", Gt},    {">", Gt},
      {"ge", Ge},           {">=", Ge},               {"in", In},             {"odd", Odd},
      {"even", Even},       {"divisibleby", DivisibleBy}, {"lower", Lower},   {"upper", Upper},
  };
  return kTests;
}

}  // namespace

bool CallTest(Interpreter& in, const std::string& name, const Value& v, CallArgs& args) {
  auto it = Tests().find(name);
  if (it == Tests().end()) throw RenderError{"No test named '" + name + "'."};
  return it->second(in, v, args);
}

}  // namespace kvidx::chat::jinja
