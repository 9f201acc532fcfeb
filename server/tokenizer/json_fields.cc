#include "server/tokenizer/json_fields.h"

namespace kvidx::tokenizer {

using nlohmann::json;

Result<std::string> TypeOf(const json& spec, const std::string& path) {
  if (!spec.is_object()) return Status::InvalidArgument(path + ": expected an object");
  auto it = spec.find("type");
  if (it == spec.end() || !it->is_string()) return Status::InvalidArgument(path + ".type: expected a string");
  return it->get<std::string>();
}

Result<std::string> StringField(const json& spec, const char* key, const std::string& path, const char* fallback) {
  auto it = spec.find(key);
  if (it == spec.end() || it->is_null()) {
    if (fallback != nullptr) return std::string(fallback);
    return Status::InvalidArgument(path + "." + key + ": missing");
  }
  if (!it->is_string()) return Status::InvalidArgument(path + "." + key + ": expected a string");
  return it->get<std::string>();
}

Result<bool> BoolField(const json& spec, const char* key, const std::string& path, bool fallback) {
  auto it = spec.find(key);
  if (it == spec.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return Status::InvalidArgument(path + "." + key + ": expected a boolean");
  return it->get<bool>();
}

Result<Pattern> ParsePattern(const json& spec, const std::string& path) {
  auto it = spec.find("pattern");
  const std::string where = path + ".pattern";
  if (it == spec.end() || !it->is_object() || it->size() != 1) {
    return Status::InvalidArgument(where + ": expected {\"String\": ...} or {\"Regex\": ...}");
  }
  Pattern p;
  if (auto s = it->find("String"); s != it->end() && s->is_string()) {
    p.literal = s->get<std::string>();
    return p;
  }
  if (auto r = it->find("Regex"); r != it->end() && r->is_string()) {
    auto re = Regex::Compile(r->get<std::string>());
    if (!re.ok()) return re.status().WithPrefix(where + ": ");
    p.regex = std::move(re).value();
    return p;
  }
  return Status::InvalidArgument(where + ": expected {\"String\": ...} or {\"Regex\": ...}");
}

}  // namespace kvidx::tokenizer
