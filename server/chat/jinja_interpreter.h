// The Jinja2 evaluator: runs a parsed template against a context, with
// jinja2's scoping (each for-loop iteration and macro call is a scope;
// namespaces are the way out), loop objects, break/continue, Python's
// operator semantics and jinja2's attribute/item lookup (a.b tries the
// attribute first, a['b'] the item first; a miss is Undefined).
//
// One Interpreter renders once, on one thread; it is bounded by the step
// and output limits (RenderError with limit set). Errors are thrown as
// RenderError inside the renderer and turned into a Status by the caller.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "server/chat/jinja_ast.h"
#include "server/chat/jinja_value.h"

namespace kvidx::chat::jinja {

struct Limits {
  size_t max_output_bytes = 16u << 20;
  uint64_t max_steps = 50'000'000;
};

class Interpreter {
 public:
  Interpreter(const Stmt& root, Limits limits) : root_(root), limits_(limits) {}

  // The template's output for `context`; throws RenderError.
  std::string Render(std::map<std::string, Value> context);

  // Evaluation services for the built-in filters, tests and functions.
  void Step();
  Value GetAttr(const Value& obj, const std::string& name);
  Value GetItem(const Value& obj, const Value& key);
  std::string ToStr(const Value& v);
  Value Call(const Value& fn, CallArgs& args);
  std::vector<Value> Iterate(const Value& v);
  bool Equals(const Value& a, const Value& b);
  // -1, 0, 1 for Python's < / == / > on numbers and strings; TypeError otherwise.
  int Order(const Value& a, const Value& b, const char* op);
  Value ApplyFilter(const std::string& name, const Value& v, CallArgs& args);
  bool ApplyTest(const std::string& name, const Value& v, CallArgs& args);

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Flow Exec(const Stmt& s);
  Flow ExecBody(const std::vector<StmtPtr>& body);
  Flow ExecFor(const Stmt& s);
  void ExecSet(const Stmt& s);
  void Assign(const std::vector<std::string>& targets, const Value& v);
  Value DefineMacro(const Stmt& s, const Stmt* caller_body);
  std::string Capture(const std::vector<StmtPtr>& body);
  void Write(std::string_view text);

  Value Eval(const Expr& e);
  Value EvalBinary(const Expr& e);
  Value EvalCompare(const Expr& e);
  Value EvalSlice(const Expr& e);
  Value EvalCall(const Expr& e);
  CallArgs EvalArgs(const Expr& e, size_t first);
  Value Lookup(const std::string& name);

  const Stmt& root_;
  Limits limits_;
  uint64_t steps_ = 0;
  std::vector<std::map<std::string, Value>> scopes_;
  std::vector<std::string> outputs_;
  int call_depth_ = 0;
};

// Built-ins (jinja_filters.cc, jinja_tests.cc, jinja_methods.cc, jinja_globals.cc).
Value CallFilter(Interpreter& in, const std::string& name, const Value& v, CallArgs& args);
bool CallTest(Interpreter& in, const std::string& name, const Value& v, CallArgs& args);
// A bound method of a str, dict or list (Python's getattr on it), if any.
std::optional<Value> BoundMethod(const Value& obj, const std::string& name);
std::optional<Value> Global(const std::string& name);

// Helpers for built-ins: argument `i` / keyword `key`, or absent.
const Value* Arg(const CallArgs& args, size_t i, const char* key);
int64_t ToInt(const Value& v, const char* what);
bool IsNumber(const Value& v);       // int, float or bool (Python's Number)
bool IsInteger(const Value& v);      // int (bool excluded)
double ToDouble(const Value& v);

}  // namespace kvidx::chat::jinja
