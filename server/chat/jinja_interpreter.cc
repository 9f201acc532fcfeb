#include "server/chat/jinja_interpreter.h"

#include <cmath>
#include <limits>

#include "server/chat/py_text.h"

namespace kvidx::chat::jinja {
namespace {

[[noreturn]] void TypeError(const std::string& msg) { throw RenderError{msg}; }

std::shared_ptr<const Json> Unowned(const Json* j) { return std::shared_ptr<const Json>(std::shared_ptr<const Json>(), j); }

bool IsInt(const Json& j) { return j.is_number_integer() || j.is_boolean(); }

int64_t AsInt(const Json& j) {
  if (j.is_boolean()) return j.get<bool>() ? 1 : 0;
  if (j.is_number_unsigned()) {
    uint64_t u = j.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) TypeError("integer out of range");
    return static_cast<int64_t>(u);
  }
  return j.get<int64_t>();
}

double AsDouble(const Json& j) { return j.is_number_float() ? j.get<double>() : static_cast<double>(AsInt(j)); }

int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t PyMod(int64_t a, int64_t b) {
  int64_t m = a % b;
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

double PyFMod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

// Python slice indices (slice.indices) for a sequence of length n.
void SliceIndices(int64_t n, const std::optional<int64_t>& start, const std::optional<int64_t>& stop, int64_t step,
                  int64_t* b, int64_t* e) {
  auto clamp = [&](std::optional<int64_t> v, int64_t def_pos, int64_t def_neg) {
    if (!v) return step > 0 ? def_pos : def_neg;
    int64_t x = *v;
    if (x < 0) {
      x += n;
      if (x < 0) x = step > 0 ? 0 : -1;
    } else if (x >= n) {
      x = step > 0 ? n : n - 1;
    }
    return x;
  };
  *b = clamp(start, 0, n - 1);
  *e = clamp(stop, n, -1);
}

}  // namespace

std::string Interpreter::Render(std::map<std::string, Value> context) {
  scopes_.clear();
  scopes_.push_back(std::move(context));
  outputs_.assign(1, std::string());
  ExecBody(root_.body);
  return std::move(outputs_[0]);
}

void Interpreter::Step() {
  if (++steps_ > limits_.max_steps) {
    throw RenderError{"template exceeded max_steps (" + std::to_string(limits_.max_steps) + ")", false, true};
  }
}

void Interpreter::Write(std::string_view text) {
  std::string& out = outputs_.back();
  if (out.size() + text.size() > limits_.max_output_bytes) {
    throw RenderError{"template output exceeded max_output_bytes (" + std::to_string(limits_.max_output_bytes) + ")",
                      false, true};
  }
  out.append(text);
}

std::string Interpreter::Capture(const std::vector<StmtPtr>& body) {
  outputs_.emplace_back();
  Flow f = ExecBody(body);
  (void)f;
  std::string text = std::move(outputs_.back());
  outputs_.pop_back();
  return text;
}

Interpreter::Flow Interpreter::ExecBody(const std::vector<StmtPtr>& body) {
  for (const StmtPtr& s : body) {
    Step();
    Flow f = Exec(*s);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

namespace {

// Applies a filter chain whose innermost value is null (filter blocks,
// set blocks) to `v`.
Value ApplyChain(Interpreter& in, const Expr& f, Value v, const std::function<CallArgs(const Expr&)>& args_of) {
  if (f.args[0]) v = ApplyChain(in, *f.args[0], std::move(v), args_of);
  CallArgs a = args_of(f);
  return in.ApplyFilter(f.name, v, a);
}

}  // namespace

Interpreter::Flow Interpreter::Exec(const Stmt& s) {
  switch (s.kind) {
    case StmtKind::kData:
      Write(s.text);
      return Flow::kNormal;
    case StmtKind::kOutput:
      Write(ToStr(Eval(*s.expr)));
      return Flow::kNormal;
    case StmtKind::kIf:
      return Eval(*s.expr).Truthy() ? ExecBody(s.body) : ExecBody(s.else_body);
    case StmtKind::kFor:
      return ExecFor(s);
    case StmtKind::kSet:
      ExecSet(s);
      return Flow::kNormal;
    case StmtKind::kSetBlock: {
      Value v = Value::Of(Capture(s.body));
      if (s.filter) v = ApplyChain(*this, *s.filter, v, [this](const Expr& f) { return EvalArgs(f, 1); });
      Assign(s.targets, v);
      return Flow::kNormal;
    }
    case StmtKind::kMacro:
      scopes_.back()[s.text] = DefineMacro(s, nullptr);
      return Flow::kNormal;
    case StmtKind::kCallBlock: {
      Value caller = DefineMacro(s, &s);
      const Expr& call = *s.expr;
      Value fn = Eval(*call.args[0]);
      CallArgs args = EvalArgs(call, 1);
      args.keyword.emplace_back("caller", caller);
      Write(ToStr(Call(fn, args)));
      return Flow::kNormal;
    }
    case StmtKind::kFilterBlock: {
      Value v = Value::Of(Capture(s.body));
      Write(ToStr(ApplyChain(*this, *s.filter, v, [this](const Expr& f) { return EvalArgs(f, 1); })));
      return Flow::kNormal;
    }
    case StmtKind::kBreak:
      return Flow::kBreak;
    case StmtKind::kContinue:
      return Flow::kContinue;
    case StmtKind::kScope:
      return ExecBody(s.body);
  }
  return Flow::kNormal;
}

void Interpreter::Assign(const std::vector<std::string>& targets, const Value& v) {
  auto& scope = scopes_.back();
  if (targets.size() == 1) {
    scope[targets[0]] = v;
    return;
  }
  // targets[0] == "": unpack a tuple.
  std::vector<Value> items = Iterate(v);
  size_t want = targets.size() - 1;
  if (items.size() != want) {
    TypeError(items.size() > want ? "too many values to unpack (expected " + std::to_string(want) + ")"
                                  : "not enough values to unpack (expected " + std::to_string(want) + ", got " +
                                        std::to_string(items.size()) + ")");
  }
  for (size_t i = 0; i < want; ++i) scope[targets[i + 1]] = items[i];
}

void Interpreter::ExecSet(const Stmt& s) {
  Value v = Eval(*s.expr);
  if (s.attr.empty()) {
    Assign(s.targets, v);
    return;
  }
  Value ns = Lookup(s.targets[0]);
  if (ns.kind() != Value::Kind::kNamespace) TypeError("cannot assign attribute on non-namespace object");
  ns.ns()[s.attr] = v;
}

Interpreter::Flow Interpreter::ExecFor(const Stmt& s) {
  std::vector<Value> all = Iterate(Eval(*s.expr));
  auto items = std::make_shared<std::vector<Value>>();
  if (s.filter) {
    for (Value& item : all) {
      scopes_.emplace_back();
      Assign(s.targets, item);
      bool keep = Eval(*s.filter).Truthy();
      scopes_.pop_back();
      if (keep) items->push_back(std::move(item));
    }
  } else {
    *items = std::move(all);
  }
  if (items->empty()) return ExecBody(s.else_body);
  auto state = std::make_shared<LoopState>();
  state->items = items;
  Value loop = Value::Loop(state);
  for (size_t i = 0; i < items->size(); ++i) {
    Step();
    state->index0 = static_cast<int64_t>(i);
    scopes_.emplace_back();
    scopes_.back()["loop"] = loop;
    Flow f;
    try {
      Assign(s.targets, (*items)[i]);
      f = ExecBody(s.body);
    } catch (...) {
      scopes_.pop_back();
      throw;
    }
    scopes_.pop_back();
    if (f == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

Value Interpreter::DefineMacro(const Stmt& s, const Stmt* caller_body) {
  const Stmt* macro = &s;
  std::string name = caller_body ? "caller" : s.text;
  return Value::Callable(name, [macro, caller_body](Interpreter& in, CallArgs& args) -> Value {
    std::map<std::string, Value> scope;
    size_t i = 0;
    for (const auto& [pname, def] : macro->params) {
      const Value* given = nullptr;
      if (i < args.positional.size()) given = &args.positional[i];
      for (const auto& [k, v] : args.keyword) if (k == pname) given = &v;
      if (given) scope[pname] = *given;
      else if (def) scope[pname] = in.Eval(*def);
      else scope[pname] = Value::Undefined(pname);
      ++i;
    }
    for (const auto& [k, v] : args.keyword) if (k == "caller") scope["caller"] = v;
    // Python would stop runaway recursion with RecursionError.
    if (in.call_depth_ >= 100) TypeError("maximum macro recursion depth (100) exceeded");
    ++in.call_depth_;
    // A macro sees the template's top level, not its caller's locals.
    std::vector<std::map<std::string, Value>> saved;
    saved.swap(in.scopes_);
    in.scopes_.push_back(saved.front());
    in.scopes_.push_back(std::move(scope));
    std::string text;
    try {
      text = in.Capture(caller_body ? caller_body->body : macro->body);
    } catch (...) {
      in.scopes_.swap(saved);
      --in.call_depth_;
      throw;
    }
    in.scopes_.swap(saved);
    --in.call_depth_;
    return Value::Of(std::move(text));
  });
}

Value Interpreter::Lookup(const std::string& name) {
  for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
    auto f = it->find(name);
    if (f != it->end()) return f->second;
  }
  if (auto g = Global(name)) return *g;
  return Value::Undefined(name);
}

CallArgs Interpreter::EvalArgs(const Expr& e, size_t first) {
  CallArgs a;
  for (size_t i = first; i < e.args.size(); ++i) a.positional.push_back(Eval(*e.args[i]));
  for (const auto& [k, v] : e.kwargs) a.keyword.emplace_back(k, Eval(*v));
  return a;
}

Value Interpreter::Eval(const Expr& e) {
  Step();
  switch (e.kind) {
    case ExprKind::kConst:
      return Value::Ref(Unowned(&e.literal), &e.literal);
    case ExprKind::kName:
      return Lookup(e.name);
    case ExprKind::kList: {
      Json arr = Json::array();
      for (const ExprPtr& a : e.args) arr.push_back(Eval(*a).ToJson());
      return Value::Of(std::move(arr));
    }
    case ExprKind::kDict: {
      Json obj = Json::object();
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        Value k = Eval(*e.args[i]);
        obj[k.is_string() ? k.str() : ToStr(k)] = Eval(*e.args[i + 1]).ToJson();
      }
      return Value::Of(std::move(obj));
    }
    case ExprKind::kGetAttr:
      return GetAttr(Eval(*e.args[0]), e.name);
    case ExprKind::kGetItem: {
      Value obj = Eval(*e.args[0]);
      return GetItem(obj, Eval(*e.args[1]));
    }
    case ExprKind::kSlice:
      return EvalSlice(e);
    case ExprKind::kCall:
      return EvalCall(e);
    case ExprKind::kFilter: {
      Value v = Eval(*e.args[0]);
      CallArgs a = EvalArgs(e, 1);
      return ApplyFilter(e.name, v, a);
    }
    case ExprKind::kTest: {
      Value v = Eval(*e.args[0]);
      CallArgs a = EvalArgs(e, 1);
      return Value::Of(ApplyTest(e.name, v, a));
    }
    case ExprKind::kNot:
      return Value::Of(!Eval(*e.args[0]).Truthy());
    case ExprKind::kNeg:
    case ExprKind::kPos: {
      Value v = Eval(*e.args[0]);
      if (v.is_undefined()) TypeError(v.UndefinedMessage());
      if (!IsNumber(v)) TypeError("bad operand type for unary " + std::string(e.kind == ExprKind::kNeg ? "-" : "+") + ": '" + PyTypeName(v) + "'");
      if (e.kind == ExprKind::kPos) return v.json().is_boolean() ? Value::Of(AsInt(v.json())) : v;
      if (v.json().is_number_float()) return Value::Of(-v.json().get<double>());
      return Value::Of(-AsInt(v.json()));
    }
    case ExprKind::kAnd: {
      Value l = Eval(*e.args[0]);
      return l.Truthy() ? Eval(*e.args[1]) : l;
    }
    case ExprKind::kOr: {
      Value l = Eval(*e.args[0]);
      return l.Truthy() ? l : Eval(*e.args[1]);
    }
    case ExprKind::kBinary:
      return EvalBinary(e);
    case ExprKind::kCompare:
      return EvalCompare(e);
    case ExprKind::kCondExpr: {
      if (Eval(*e.args[0]).Truthy()) return Eval(*e.args[1]);
      if (e.args[2]) return Eval(*e.args[2]);
      return Value::Undefined("the inline if-expression on line " + std::to_string(e.line) +
                              " evaluated to false and no else section was defined.");
    }
  }
  return Value::Undefined("?");
}

Value Interpreter::EvalBinary(const Expr& e) {
  Value a = Eval(*e.args[0]);
  Value b = Eval(*e.args[1]);
  const std::string& op = e.name;
  if (op == "~") return Value::Of(ToStr(a) + ToStr(b));
  if (a.is_undefined()) TypeError(a.UndefinedMessage());
  if (b.is_undefined()) TypeError(b.UndefinedMessage());
  auto unsupported = [&]() {
    if (op == "+" && a.is_string()) TypeError("can only concatenate str (not \"" + PyTypeName(b) + "\") to str");
    if (op == "+" && a.is_json() && a.json().is_array()) {
      TypeError("can only concatenate list (not \"" + PyTypeName(b) + "\") to list");
    }
    TypeError("unsupported operand type(s) for " + op + ": '" + PyTypeName(a) + "' and '" + PyTypeName(b) + "'");
  };
  if (!a.is_json() || !b.is_json()) unsupported();
  const Json& x = a.json();
  const Json& y = b.json();
  if (IsNumber(a) && IsNumber(b)) {
    bool ints = IsInt(x) && IsInt(y);
    if (ints) {
      int64_t p = AsInt(x), q = AsInt(y), r = 0;
      if (op == "+") { if (__builtin_add_overflow(p, q, &r)) TypeError("integer overflow"); return Value::Of(r); }
      if (op == "-") { if (__builtin_sub_overflow(p, q, &r)) TypeError("integer overflow"); return Value::Of(r); }
      if (op == "*") { if (__builtin_mul_overflow(p, q, &r)) TypeError("integer overflow"); return Value::Of(r); }
      if (op == "/") { if (q == 0) TypeError("division by zero"); return Value::Of(static_cast<double>(p) / static_cast<double>(q)); }
      if (op == "//") { if (q == 0) TypeError("integer division or modulo by zero"); return Value::Of(FloorDiv(p, q)); }
      if (op == "%") { if (q == 0) TypeError("integer division or modulo by zero"); return Value::Of(PyMod(p, q)); }
      if (op == "**") {
        if (q < 0) return Value::Of(std::pow(static_cast<double>(p), static_cast<double>(q)));
        int64_t acc = 1;
        for (int64_t i = 0; i < q; ++i) {
          Step();
          if (__builtin_mul_overflow(acc, p, &acc)) TypeError("integer overflow");
        }
        return Value::Of(acc);
      }
    }
    double p = AsDouble(x), q = AsDouble(y);
    if (op == "+") return Value::Of(p + q);
    if (op == "-") return Value::Of(p - q);
    if (op == "*") return Value::Of(p * q);
    if (op == "/") { if (q == 0) TypeError("float division by zero"); return Value::Of(p / q); }
    if (op == "//") { if (q == 0) TypeError("float divmod()"); return Value::Of(std::floor(p / q)); }
    if (op == "%") { if (q == 0) TypeError("float modulo"); return Value::Of(PyFMod(p, q)); }
    if (op == "**") return Value::Of(std::pow(p, q));
  }
  if (op == "+" && x.is_string() && y.is_string()) {
    std::string r = x.get<std::string>();
    r += y.get_ref<const std::string&>();
    return Value::Of(std::move(r));
  }
  if (op == "+" && x.is_array() && y.is_array()) {
    Json r = x;
    for (const Json& v : y) r.push_back(v);
    return Value::Of(std::move(r));
  }
  if (op == "*" && ((x.is_string() || x.is_array()) && IsInt(y))) {
    int64_t n = AsInt(y);
    Json r = x.is_string() ? Json(std::string()) : Json::array();
    for (int64_t i = 0; i < n; ++i) {
      Step();
      if (x.is_string()) {
        if (r.get_ref<const std::string&>().size() + x.get_ref<const std::string&>().size() > limits_.max_output_bytes) {
          throw RenderError{"string repetition exceeded max_output_bytes", false, true};
        }
        r.get_ref<std::string&>() += x.get_ref<const std::string&>();
      } else {
        for (const Json& v : x) r.push_back(v);
      }
    }
    return Value::Of(std::move(r));
  }
  unsupported();
  return Value();
}

bool Interpreter::Equals(const Value& a, const Value& b) {
  if (a.is_undefined() || b.is_undefined()) return a.is_undefined() && b.is_undefined();
  if (a.kind() != b.kind()) return false;
  if (a.kind() == Value::Kind::kNamespace) return &a.ns() == &b.ns();
  if (a.kind() == Value::Kind::kLoop) return &a.loop() == &b.loop();
  if (a.kind() == Value::Kind::kCallable) return &a.fn() == &b.fn();
  if (IsNumber(a) && IsNumber(b)) {
    if (IsInt(a.json()) && IsInt(b.json())) return AsInt(a.json()) == AsInt(b.json());
    return AsDouble(a.json()) == AsDouble(b.json());
  }
  return a.json() == b.json();
}

int Interpreter::Order(const Value& a, const Value& b, const char* op) {
  if (a.is_json() && b.is_json()) {
    if (IsNumber(a) && IsNumber(b)) {
      if (IsInt(a.json()) && IsInt(b.json())) {
        int64_t p = AsInt(a.json()), q = AsInt(b.json());
        return p < q ? -1 : p > q ? 1 : 0;
      }
      double p = AsDouble(a.json()), q = AsDouble(b.json());
      return p < q ? -1 : p > q ? 1 : 0;
    }
    if (a.is_string() && b.is_string()) {
      int c = a.str().compare(b.str());
      return c < 0 ? -1 : c > 0 ? 1 : 0;
    }
  }
  if (a.is_undefined()) TypeError(a.UndefinedMessage());
  if (b.is_undefined()) TypeError(b.UndefinedMessage());
  TypeError(std::string("'") + op + "' not supported between instances of '" + PyTypeName(a) + "' and '" +
            PyTypeName(b) + "'");
}

namespace {

bool Contains(Interpreter& in, const Value& container, const Value& item) {
  if (container.is_undefined()) return false;
  if (!container.is_json()) TypeError("argument of type '" + PyTypeName(container) + "' is not iterable");
  const Json& c = container.json();
  if (c.is_string()) {
    if (!item.is_string()) TypeError("'in <string>' requires string as left operand, not " + PyTypeName(item));
    return c.get_ref<const std::string&>().find(item.str()) != std::string::npos;
  }
  if (c.is_object()) {
    if (!item.is_json()) return false;
    return item.is_string() && c.contains(item.str());
  }
  if (c.is_array()) {
    for (const Json& e : c) {
      in.Step();
      if (in.Equals(Value::Ref(Unowned(&e), &e), item)) return true;
    }
    return false;
  }
  TypeError("argument of type '" + PyTypeName(container) + "' is not iterable");
}

}  // namespace

Value Interpreter::EvalCompare(const Expr& e) {
  Value left = Eval(*e.args[0]);
  for (size_t i = 0; i < e.ops.size(); ++i) {
    Value right = Eval(*e.args[i + 1]);
    const std::string& op = e.ops[i];
    bool r;
    if (op == "==") r = Equals(left, right);
    else if (op == "!=") r = !Equals(left, right);
    else if (op == "in") r = Contains(*this, right, left);
    else if (op == "notin") r = !Contains(*this, right, left);
    else {
      int c = Order(left, right, op.c_str());
      r = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
    }
    if (!r) return Value::Of(false);
    left = std::move(right);
  }
  return Value::Of(true);
}

Value Interpreter::EvalSlice(const Expr& e) {
  Value obj = Eval(*e.args[0]);
  std::optional<int64_t> parts[3];
  for (int i = 0; i < 3; ++i) {
    if (!e.args[i + 1]) continue;
    Value v = Eval(*e.args[i + 1]);
    if (v.is_none()) continue;
    parts[i] = ToInt(v, "slice indices must be integers or None");
  }
  int64_t step = parts[2].value_or(1);
  if (step == 0) TypeError("slice step cannot be zero");
  if (obj.is_undefined()) TypeError(obj.UndefinedMessage());
  if (!obj.is_json() || !(obj.json().is_array() || obj.json().is_string())) {
    TypeError("'" + PyTypeName(obj) + "' object is not subscriptable");
  }
  const Json& j = obj.json();
  std::vector<uint32_t> cps;
  int64_t n;
  if (j.is_string()) {
    cps = py::Decode(j.get_ref<const std::string&>());
    n = static_cast<int64_t>(cps.size());
  } else {
    n = static_cast<int64_t>(j.size());
  }
  int64_t b, en;
  SliceIndices(n, parts[0], parts[1], step, &b, &en);
  Json out = j.is_string() ? Json(std::string()) : Json::array();
  for (int64_t i = b; step > 0 ? i < en : i > en; i += step) {
    Step();
    if (j.is_string()) py::AppendUtf8(out.get_ref<std::string&>(), cps[static_cast<size_t>(i)]);
    else out.push_back(j[static_cast<size_t>(i)]);
  }
  return Value::Of(std::move(out));
}

Value Interpreter::EvalCall(const Expr& e) {
  Value fn = Eval(*e.args[0]);
  CallArgs args = EvalArgs(e, 1);
  return Call(fn, args);
}

Value Interpreter::Call(const Value& fn, CallArgs& args) {
  if (fn.is_undefined()) TypeError(fn.UndefinedMessage());
  if (fn.kind() != Value::Kind::kCallable) TypeError("'" + PyTypeName(fn) + "' object is not callable");
  return fn.fn()(*this, args);
}

Value Interpreter::GetAttr(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Value::Kind::kUndefined:
      TypeError(obj.UndefinedMessage());
    case Value::Kind::kNamespace: {
      auto f = obj.ns().find(name);
      if (f != obj.ns().end()) return f->second;
      return Value::Undefined(name, "jinja2.utils.Namespace object");
    }
    case Value::Kind::kLoop: {
      const LoopState& l = obj.loop();
      int64_t n = static_cast<int64_t>(l.items->size());
      if (name == "index0") return Value::Of(l.index0);
      if (name == "index") return Value::Of(l.index0 + 1);
      if (name == "revindex") return Value::Of(n - l.index0);
      if (name == "revindex0") return Value::Of(n - l.index0 - 1);
      if (name == "first") return Value::Of(l.index0 == 0);
      if (name == "last") return Value::Of(l.index0 == n - 1);
      if (name == "length") return Value::Of(n);
      if (name == "depth") return Value::Of(1);
      if (name == "depth0") return Value::Of(0);
      if (name == "previtem") {
        if (l.index0 == 0) return Value::Undefined("there is no previous item");
        return (*l.items)[static_cast<size_t>(l.index0 - 1)];
      }
      if (name == "nextitem") {
        if (l.index0 + 1 >= n) return Value::Undefined("there is no next item");
        return (*l.items)[static_cast<size_t>(l.index0 + 1)];
      }
      if (name == "cycle") {
        int64_t i = l.index0;
        return Value::Callable("cycle", [i](Interpreter&, CallArgs& a) -> Value {
          if (a.positional.empty()) TypeError("no items for cycling given");
          return a.positional[static_cast<size_t>(i) % a.positional.size()];
        });
      }
      return Value::Undefined(name, "jinja2.runtime.LoopContext object");
    }
    case Value::Kind::kCallable:
      return Value::Undefined(name, "function object");
    case Value::Kind::kJson:
      break;
  }
  if (auto m = BoundMethod(obj, name)) return *m;
  const Json& j = obj.json();
  if (j.is_object()) {
    auto f = j.find(name);
    if (f != j.end()) return Value::Ref(obj.json_ptr(), &*f);
  }
  return Value::Undefined(name, ObjectTypeRepr(j));
}


Value Interpreter::GetItem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) TypeError(obj.UndefinedMessage());
  if (obj.is_json()) {
    const Json& j = obj.json();
    if (j.is_object() && key.is_string()) {
      auto f = j.find(key.str());
      if (f != j.end()) return Value::Ref(obj.json_ptr(), &*f);
    } else if ((j.is_array() || j.is_string()) && key.is_json() && IsInt(key.json())) {
      int64_t i = AsInt(key.json());
      if (j.is_array()) {
        int64_t n = static_cast<int64_t>(j.size());
        if (i < 0) i += n;
        if (i >= 0 && i < n) return Value::Ref(obj.json_ptr(), &j[static_cast<size_t>(i)]);
      } else {
        std::vector<uint32_t> cps = py::Decode(j.get_ref<const std::string&>());
        int64_t n = static_cast<int64_t>(cps.size());
        if (i < 0) i += n;
        if (i >= 0 && i < n) return Value::Of(py::Encode(cps, static_cast<size_t>(i), static_cast<size_t>(i) + 1));
      }
    }
  }
  if (key.is_string()) {
    // jinja2's getitem falls back on the attribute of that name.
    if (obj.kind() == Value::Kind::kNamespace || obj.kind() == Value::Kind::kLoop) return GetAttr(obj, key.str());
    if (obj.is_json()) {
      if (auto m = BoundMethod(obj, key.str())) return *m;
    }
    return Value::Undefined(key.str(), obj.is_json() ? ObjectTypeRepr(obj.json()) : PyTypeName(obj) + " object");
  }
  std::string owner = obj.is_json() ? ObjectTypeRepr(obj.json()) : PyTypeName(obj) + " object";
  return Value::Undefined(key.is_json() ? py::Repr(key.json()) : ToStr(key), owner, true);
}

std::string Interpreter::ToStr(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return "";
    case Value::Kind::kJson: return py::ToStr(v.json());
    case Value::Kind::kNamespace: return "<Namespace>";
    case Value::Kind::kLoop: return "<LoopContext>";
    case Value::Kind::kCallable: return "<function " + v.name() + ">";
  }
  return "";
}

std::vector<Value> Interpreter::Iterate(const Value& v) {
  std::vector<Value> out;
  if (v.is_undefined()) return out;
  if (!v.is_json()) TypeError("'" + PyTypeName(v) + "' object is not iterable");
  const Json& j = v.json();
  if (j.is_array()) {
    out.reserve(j.size());
    for (const Json& e : j) out.push_back(Value::Ref(v.json_ptr(), &e));
  } else if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) out.push_back(Value::Of(it.key()));
  } else if (j.is_string()) {
    std::vector<uint32_t> cps = py::Decode(j.get_ref<const std::string&>());
    for (size_t i = 0; i < cps.size(); ++i) out.push_back(Value::Of(py::Encode(cps, i, i + 1)));
  } else {
    TypeError("'" + PyTypeName(v) + "' object is not iterable");
  }
  return out;
}

Value Interpreter::ApplyFilter(const std::string& name, const Value& v, CallArgs& args) {
  return CallFilter(*this, name, v, args);
}

bool Interpreter::ApplyTest(const std::string& name, const Value& v, CallArgs& args) {
  return CallTest(*this, name, v, args);
}

const Value* Arg(const CallArgs& args, size_t i, const char* key) {
  if (key) {
    for (const auto& [k, v] : args.keyword) if (k == key) return &v;
  }
  if (i < args.positional.size()) return &args.positional[i];
  return nullptr;
}

bool IsNumber(const Value& v) {
  return v.is_json() && (v.json().is_number() || v.json().is_boolean());
}

bool IsInteger(const Value& v) { return v.is_json() && v.json().is_number_integer(); }

int64_t ToInt(const Value& v, const char* what) {
  if (!v.is_json() || !IsInt(v.json())) TypeError(what);
  return AsInt(v.json());
}

double ToDouble(const Value& v) {
  if (!IsNumber(v)) TypeError("must be real number, not " + PyTypeName(v));
  return AsDouble(v.json());
}

}  // namespace kvidx::chat::jinja
