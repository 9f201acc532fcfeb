// The value model of the renderer: JSON values (what a chat request carries,
// shared and never copied on access), jinja2's default Undefined (prints
// empty, is falsy, iterates empty; attribute access, arithmetic and calls
// fail), namespaces, loop objects and callables (macros, builtins, bound
// string and dict methods). Values are cheap to copy (shared pointers).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvidx::chat::jinja {

using Json = nlohmann::ordered_json;

// A template error as jinja2 raises it; `raised` marks raise_exception.
struct RenderError {
  std::string message;
  bool raised = false;
  bool limit = false;   // a RenderLimits bound was hit
};

class Value;
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};
class Interpreter;
using Builtin = std::function<Value(Interpreter&, CallArgs&)>;

struct LoopState {
  std::shared_ptr<std::vector<Value>> items;
  int64_t index0 = 0;
};

class Value {
 public:
  enum class Kind : uint8_t { kUndefined, kJson, kNamespace, kLoop, kCallable };

  Value() = default;
  static Value Undefined(std::string name, std::string owner = {}, bool item = false);
  static Value Of(Json j);
  // A node inside a shared JSON document (no copy).
  static Value Ref(const std::shared_ptr<const Json>& root, const Json* node);
  static Value Namespace(std::shared_ptr<std::map<std::string, Value>> attrs);
  static Value Loop(std::shared_ptr<LoopState> loop);
  static Value Callable(std::string name, Builtin fn);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_json() const { return kind_ == Kind::kJson; }
  const Json& json() const { return *json_; }
  // The owner of json(), for Ref()s to its children.
  const std::shared_ptr<const Json>& json_ptr() const { return json_; }
  bool is_string() const { return is_json() && json_->is_string(); }
  bool is_none() const { return is_json() && json_->is_null(); }
  const std::string& str() const { return json_->get_ref<const std::string&>(); }

  std::map<std::string, Value>& ns() const { return *ns_; }
  LoopState& loop() const { return *loop_; }
  const Builtin& fn() const { return *fn_; }
  const std::string& name() const { return name_; }

  // jinja2's messages for an undefined value: "'x' is undefined",
  // "'dict object' has no attribute 'x'".
  std::string UndefinedMessage() const;

  // Python truthiness.
  bool Truthy() const;
  // A JSON copy for a value stored in a list, dict or tojson; RenderError for
  // what Python could not serialize (namespaces, callables, Undefined).
  Json ToJson() const;

 private:
  Kind kind_ = Kind::kUndefined;
  std::shared_ptr<const Json> json_;
  std::shared_ptr<std::map<std::string, Value>> ns_;
  std::shared_ptr<LoopState> loop_;
  std::shared_ptr<Builtin> fn_;
  std::string name_;    // undefined: the missing name; callable: its name
  std::string owner_;   // undefined: jinja's object_type_repr of the owner
  bool item_ = false;   // undefined: came from [] (no element) vs . (no attribute)
};

// jinja2.utils.object_type_repr: "None", "dict object", "str object", ...
std::string ObjectTypeRepr(const Json& j);
// Python's type name for error messages: "str", "int", "dict", ...
std::string PyTypeName(const Value& v);

}  // namespace kvidx::chat::jinja
