// Global functions of the template environment: jinja2's range, dict and
// namespace, and the two transformers adds (chat_template_utils.py
// _compile_jinja_template): raise_exception(message), which fails the
// render with that message, and strftime_now(format), local time now.
#include <ctime>

#include "server/chat/jinja_interpreter.h"

namespace kvidx::chat::jinja {
namespace {

[[noreturn]] void Fail(const std::string& msg) { throw RenderError{msg}; }

Value Range(Interpreter& in, CallArgs& a) {
  int64_t start = 0, stop, step = 1;
  if (a.positional.empty()) Fail("range expected at least 1 argument, got 0");
  if (a.positional.size() == 1) {
    stop = ToInt(a.positional[0], "range() argument must be int");
  } else {
    start = ToInt(a.positional[0], "range() argument must be int");
    stop = ToInt(a.positional[1], "range() argument must be int");
    if (a.positional.size() > 2) step = ToInt(a.positional[2], "range() argument must be int");
  }
  if (step == 0) Fail("range() arg 3 must not be zero");
  Json arr = Json::array();
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    // jinja2's sandbox caps range() at MAX_RANGE (100000) items.
    if (arr.size() >= 100000) Fail("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    in.Step();
    arr.push_back(i);
  }
  return Value::Of(std::move(arr));
}

Value Dict(Interpreter&, CallArgs& a) {
  Json obj = Json::object();
  for (auto& [k, v] : a.keyword) obj[k] = v.ToJson();
  return Value::Of(std::move(obj));
}

Value MakeNamespace(Interpreter& in, CallArgs& a) {
  auto attrs = std::make_shared<std::map<std::string, Value>>();
  for (const Value& init : a.positional) {
    if (!init.is_json() || !init.json().is_object()) Fail("namespace() positional argument must be a mapping");
    for (auto it = init.json().begin(); it != init.json().end(); ++it) {
      (*attrs)[it.key()] = Value::Ref(init.json_ptr(), &it.value());
    }
  }
  for (auto& [k, v] : a.keyword) (*attrs)[k] = v;
  (void)in;
  return Value::Namespace(std::move(attrs));
}

Value RaiseException(Interpreter& in, CallArgs& a) {
  const Value* m = Arg(a, 0, "message");
  throw RenderError{m ? in.ToStr(*m) : std::string(), true};
}

Value StrftimeNow(Interpreter& in, CallArgs& a) {
  const Value* f = Arg(a, 0, "format");
  if (!f || !f->is_string()) Fail("strftime_now() needs a format string");
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[512];
  size_t n = std::strftime(buf, sizeof buf, f->str().c_str(), &tm);
  (void)in;
  return Value::Of(std::string(buf, n));
}

}  // namespace

std::optional<Value> Global(const std::string& name) {
  if (name == "range") return Value::Callable(name, Range);
  if (name == "dict") return Value::Callable(name, Dict);
  if (name == "namespace") return Value::Callable(name, MakeNamespace);
  if (name == "raise_exception") return Value::Callable(name, RaiseException);
  if (name == "strftime_now") return Value::Callable(name, StrftimeNow);
  return std::nullopt;
}

}  // namespace kvidx::chat::jinja
