// The Python str, dict and list methods templates call (message.content.
// split(...), tool.items(), ...), as jinja2's getattr finds them on the
// Python objects. The immutable sandbox of transformers forbids the
// mutating ones (list.append, dict.update, ...); they are absent here.
#include "server/chat/jinja_interpreter.h"
#include "server/chat/py_text.h"

namespace kvidx::chat::jinja {
namespace {

[[noreturn]] void Fail(const std::string& msg) { throw RenderError{msg}; }

std::optional<std::string> OptStrArg(const CallArgs& a, size_t i, const char* key, const char* method) {
  const Value* v = Arg(a, i, key);
  if (!v || v->is_none()) return std::nullopt;
  if (!v->is_string()) Fail(std::string(method) + " arg must be None or str");
  return v->str();
}

std::string StrArg(const CallArgs& a, size_t i, const char* key, const char* method) {
  const Value* v = Arg(a, i, key);
  if (!v) Fail(std::string(method) + "() takes at least 1 argument (0 given)");
  if (!v->is_string()) Fail(std::string("must be str, not ") + PyTypeName(*v));
  return v->str();
}

Value StrList(const std::vector<std::string>& parts) {
  Json arr = Json::array();
  for (const auto& p : parts) arr.push_back(p);
  return Value::Of(std::move(arr));
}

// startswith/endswith accept a str or a tuple (list) of them.
bool Affix(const std::string& s, const Value& arg, bool prefix) {
  auto one = [&](const std::string& x) {
    if (x.size() > s.size()) return false;
    return prefix ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (arg.is_string()) return one(arg.str());
  if (arg.is_json() && arg.json().is_array()) {
    for (const Json& e : arg.json()) {
      if (!e.is_string()) Fail("tuple for startswith must only contain str");
      if (one(e.get<std::string>())) return true;
    }
    return false;
  }
  Fail(std::string(prefix ? "startswith" : "endswith") + " first arg must be str or a tuple of str, not " + PyTypeName(arg));
}

std::optional<Value> StrMethod(const Value& obj, const std::string& name) {
  std::string s = obj.str();
  auto make = [&](auto fn) {
    return Value::Callable(name, [s, fn](Interpreter& in, CallArgs& a) -> Value { return fn(in, s, a); });
  };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    bool l = name != "rstrip", r = name != "lstrip";
    return make([l, r, name](Interpreter&, const std::string& s, CallArgs& a) {
      return Value::Of(py::Strip(s, OptStrArg(a, 0, "chars", name.c_str()), l, r));
    });
  }
  if (name == "split" || name == "rsplit") {
    bool right = name == "rsplit";
    return make([right](Interpreter&, const std::string& s, CallArgs& a) {
      auto sep = OptStrArg(a, 0, "sep", "split");
      if (sep && sep->empty()) Fail("empty separator");
      const Value* m = Arg(a, 1, "maxsplit");
      int64_t maxsplit = m ? ToInt(*m, "maxsplit must be int") : -1;
      return StrList(py::Split(s, sep, maxsplit, right));
    });
  }
  if (name == "startswith" || name == "endswith") {
    bool prefix = name == "startswith";
    return make([prefix](Interpreter&, const std::string& s, CallArgs& a) {
      const Value* v = Arg(a, 0, nullptr);
      if (!v) Fail("startswith() takes at least 1 argument (0 given)");
      return Value::Of(Affix(s, *v, prefix));
    });
  }
  if (name == "replace") {
    return make([](Interpreter&, const std::string& s, CallArgs& a) {
      const Value* c = Arg(a, 2, "count");
      int64_t n = c ? ToInt(*c, "count must be int") : -1;
      return Value::Of(py::Replace(s, StrArg(a, 0, "old", "replace"), StrArg(a, 1, "new", "replace"), n));
    });
  }
  if (name == "upper") return make([](Interpreter&, const std::string& s, CallArgs&) { return Value::Of(py::Upper(s)); });
  if (name == "lower") return make([](Interpreter&, const std::string& s, CallArgs&) { return Value::Of(py::Lower(s)); });
  if (name == "title") return make([](Interpreter&, const std::string& s, CallArgs&) { return Value::Of(py::TitleMethod(s)); });
  if (name == "capitalize") return make([](Interpreter&, const std::string& s, CallArgs&) { return Value::Of(py::Capitalize(s)); });
  if (name == "find" || name == "rfind") {
    bool right = name == "rfind";
    return make([right](Interpreter&, const std::string& s, CallArgs& a) {
      return Value::Of(py::Find(s, StrArg(a, 0, "sub", "find"), right));
    });
  }
  if (name == "count") {
    return make([](Interpreter&, const std::string& s, CallArgs& a) { return Value::Of(py::Count(s, StrArg(a, 0, "sub", "count"))); });
  }
  if (name == "join") {
    return make([](Interpreter& in, const std::string& s, CallArgs& a) {
      const Value* v = Arg(a, 0, nullptr);
      if (!v) Fail("join() takes exactly one argument (0 given)");
      std::string out;
      bool first = true;
      for (const Value& item : in.Iterate(*v)) {
        if (!item.is_string()) Fail("sequence item: expected str instance, " + PyTypeName(item) + " found");
        if (!first) out += s;
        first = false;
        out += item.str();
      }
      return Value::Of(out);
    });
  }
  if (name == "isdigit" || name == "isspace" || name == "isalpha" || name == "isalnum") {
    return make([name](Interpreter&, const std::string& s, CallArgs&) {
      std::vector<uint32_t> cps = py::Decode(s);
      if (cps.empty()) return Value::Of(false);
      for (uint32_t c : cps) {
        bool ok = name == "isspace" ? py::IsSpace(c)
                  : name == "isdigit" ? (c >= '0' && c <= '9')
                  : name == "isalpha" ? ((c | 32) >= 'a' && (c | 32) <= 'z')
                                      : ((c | 32) >= 'a' && (c | 32) <= 'z') || (c >= '0' && c <= '9');
        if (!ok) return Value::Of(false);
      }
      return Value::Of(true);
    });
  }
  if (name == "splitlines") {
    return make([](Interpreter&, const std::string& s, CallArgs&) {
      std::vector<std::string> parts = py::Split(s, std::string("\n"), -1, false);
      if (!parts.empty() && parts.back().empty()) parts.pop_back();
      return StrList(parts);
    });
  }
  if (name == "format") {
    // str.format with positional {} / {0} and keyword {name} fields.
    return make([](Interpreter& in, const std::string& s, CallArgs& a) {
      std::string out;
      size_t auto_index = 0;
      for (size_t i = 0; i < s.size(); ++i) {
        char c = s[i];
        if (c == '{' && i + 1 < s.size() && s[i + 1] == '{') { out += '{'; ++i; continue; }
        if (c == '}' && i + 1 < s.size() && s[i + 1] == '}') { out += '}'; ++i; continue; }
        if (c != '{') { out += c; continue; }
        size_t close = s.find('}', i);
        if (close == std::string::npos) Fail("Single '{' encountered in format string");
        std::string field = s.substr(i + 1, close - i - 1);
        const Value* v = nullptr;
        if (field.empty()) v = Arg(a, auto_index++, nullptr);
        else if (field.find_first_not_of("0123456789") == std::string::npos) v = Arg(a, std::stoul(field), nullptr);
        else v = Arg(a, SIZE_MAX, field.c_str());
        if (!v) Fail("Replacement index out of range for positional args tuple");
        out += in.ToStr(*v);
        i = close;
      }
      return Value::Of(out);
    });
  }
  return std::nullopt;
}

std::optional<Value> DictMethod(const Value& obj, const std::string& name) {
  Value self = obj;
  if (name == "items") {
    return Value::Callable(name, [self](Interpreter&, CallArgs&) {
      Json arr = Json::array();
      for (auto it = self.json().begin(); it != self.json().end(); ++it) arr.push_back(Json::array({it.key(), it.value()}));
      return Value::Of(std::move(arr));
    });
  }
  if (name == "keys") {
    return Value::Callable(name, [self](Interpreter&, CallArgs&) {
      Json arr = Json::array();
      for (auto it = self.json().begin(); it != self.json().end(); ++it) arr.push_back(it.key());
      return Value::Of(std::move(arr));
    });
  }
  if (name == "values") {
    return Value::Callable(name, [self](Interpreter&, CallArgs&) {
      Json arr = Json::array();
      for (auto it = self.json().begin(); it != self.json().end(); ++it) arr.push_back(it.value());
      return Value::Of(std::move(arr));
    });
  }
  if (name == "get") {
    return Value::Callable(name, [self](Interpreter&, CallArgs& a) -> Value {
      const Value* k = Arg(a, 0, nullptr);
      if (!k) Fail("get expected at least 1 argument, got 0");
      if (k->is_string()) {
        auto f = self.json().find(k->str());
        if (f != self.json().end()) return Value::Ref(self.json_ptr(), &*f);
      }
      const Value* d = Arg(a, 1, nullptr);
      return d ? *d : Value::Of(nullptr);
    });
  }
  return std::nullopt;
}

std::optional<Value> ListMethod(const Value& obj, const std::string& name) {
  Value self = obj;
  if (name == "index" || name == "count") {
    bool index = name == "index";
    return Value::Callable(name, [self, index](Interpreter& in, CallArgs& a) -> Value {
      const Value* x = Arg(a, 0, nullptr);
      if (!x) Fail("list method takes exactly one argument (0 given)");
      int64_t n = 0, i = 0;
      for (const Value& e : in.Iterate(self)) {
        if (in.Equals(e, *x)) {
          if (index) return Value::Of(i);
          ++n;
        }
        ++i;
      }
      if (index) Fail(in.ToStr(*x) + " is not in list");
      return Value::Of(n);
    });
  }
  return std::nullopt;
}

}  // namespace

std::optional<Value> BoundMethod(const Value& obj, const std::string& name) {
  if (!obj.is_json()) return std::nullopt;
  const Json& j = obj.json();
  if (j.is_string()) return StrMethod(obj, name);
  if (j.is_object()) return DictMethod(obj, name);
  if (j.is_array()) return ListMethod(obj, name);
  return std::nullopt;
}

}  // namespace kvidx::chat::jinja
