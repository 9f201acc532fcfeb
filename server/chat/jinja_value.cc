#include "server/chat/jinja_value.h"

namespace kvidx::chat::jinja {

Value Value::Undefined(std::string name, std::string owner, bool item) {
  Value v;
  v.kind_ = Kind::kUndefined;
  v.name_ = std::move(name);
  v.owner_ = std::move(owner);
  v.item_ = item;
  return v;
}

Value Value::Of(Json j) {
  Value v;
  v.kind_ = Kind::kJson;
  v.json_ = std::make_shared<const Json>(std::move(j));
  return v;
}

Value Value::Ref(const std::shared_ptr<const Json>& root, const Json* node) {
  Value v;
  v.kind_ = Kind::kJson;
  v.json_ = std::shared_ptr<const Json>(root, node);
  return v;
}

Value Value::Namespace(std::shared_ptr<std::map<std::string, Value>> attrs) {
  Value v;
  v.kind_ = Kind::kNamespace;
  v.ns_ = std::move(attrs);
  return v;
}

Value Value::Loop(std::shared_ptr<LoopState> loop) {
  Value v;
  v.kind_ = Kind::kLoop;
  v.loop_ = std::move(loop);
  return v;
}

Value Value::Callable(std::string name, Builtin fn) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.name_ = std::move(name);
  v.fn_ = std::make_shared<Builtin>(std::move(fn));
  return v;
}

std::string Value::UndefinedMessage() const {
  if (owner_.empty()) return "'" + name_ + "' is undefined";
  // A non-string key: jinja prints the owner bare and the key's repr.
  if (item_) return owner_ + " has no element " + name_;
  return "'" + owner_ + "' has no attribute '" + name_ + "'";
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined: return false;
    case Kind::kJson: break;
    default: return true;
  }
  const Json& j = *json_;
  switch (j.type()) {
    case Json::value_t::null: return false;
    case Json::value_t::boolean: return j.get<bool>();
    case Json::value_t::number_integer: return j.get<int64_t>() != 0;
    case Json::value_t::number_unsigned: return j.get<uint64_t>() != 0;
    case Json::value_t::number_float: return j.get<double>() != 0.0;
    case Json::value_t::string: return !j.get_ref<const std::string&>().empty();
    case Json::value_t::array:
    case Json::value_t::object: return !j.empty();
    default: return false;
  }
}

Json Value::ToJson() const {
  switch (kind_) {
    case Kind::kJson: return *json_;
    case Kind::kNamespace: throw RenderError{"Object of type Namespace is not JSON serializable"};
    case Kind::kLoop: throw RenderError{"Object of type LoopContext is not JSON serializable"};
    case Kind::kCallable: throw RenderError{"Object of type function is not JSON serializable"};
    default: throw RenderError{"Object of type Undefined is not JSON serializable"};
  }
}

std::string ObjectTypeRepr(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null: return "None";
    case Json::value_t::boolean: return "bool object";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return "int object";
    case Json::value_t::number_float: return "float object";
    case Json::value_t::string: return "str object";
    case Json::value_t::array: return "list object";
    case Json::value_t::object: return "dict object";
    default: return "object";
  }
}

std::string PyTypeName(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return "Undefined";
    case Value::Kind::kNamespace: return "Namespace";
    case Value::Kind::kLoop: return "LoopContext";
    case Value::Kind::kCallable: return "function";
    case Value::Kind::kJson: break;
  }
  switch (v.json().type()) {
    case Json::value_t::null: return "NoneType";
    case Json::value_t::boolean: return "bool";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return "int";
    case Json::value_t::number_float: return "float";
    case Json::value_t::string: return "str";
    case Json::value_t::array: return "list";
    case Json::value_t::object: return "dict";
    default: return "object";
  }
}

}  // namespace kvidx::chat::jinja
