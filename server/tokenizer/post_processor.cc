#include "server/tokenizer/post_processor.h"

#include <nlohmann/json.hpp>

#include "server/tokenizer/json_fields.h"

namespace kvidx::tokenizer {
namespace {

using nlohmann::json;

Result<std::vector<uint32_t>> SpecialIds(const json& specials, const std::string& name, const std::string& path) {
  auto it = specials.find(name);
  if (it == specials.end() || !it->is_object()) {
    return Status::InvalidArgument(path + ".special_tokens: no entry for " + name);
  }
  auto ids = it->find("ids");
  if (ids == it->end() || !ids->is_array()) return Status::InvalidArgument(path + ".special_tokens." + name + ".ids: expected an array");
  std::vector<uint32_t> out;
  for (const json& id : *ids) {
    if (!id.is_number_unsigned()) return Status::InvalidArgument(path + ".special_tokens." + name + ".ids: expected ids");
    out.push_back(id.get<uint32_t>());
  }
  return out;
}

Result<SpecialTokenFrame> ParseTemplate(const json& spec, const std::string& path) {
  auto single = spec.find("single");
  auto specials = spec.find("special_tokens");
  if (single == spec.end() || !single->is_array()) return Status::InvalidArgument(path + ".single: expected an array");
  const json empty = json::object();
  const json& table = (specials != spec.end() && specials->is_object()) ? *specials : empty;
  SpecialTokenFrame frame;
  bool seen_sequence = false;
  for (const json& item : *single) {
    if (auto seq = item.find("Sequence"); seq != item.end()) {
      if (seen_sequence || seq->value("id", "") != "A") {
        return Status::InvalidArgument(path + ".single: unsupported template (one $A expected)");
      }
      seen_sequence = true;
      continue;
    }
    auto tok = item.find("SpecialToken");
    if (tok == item.end() || !tok->is_object() || !tok->contains("id") || !(*tok)["id"].is_string()) {
      return Status::InvalidArgument(path + ".single: unsupported template piece");
    }
    auto ids = SpecialIds(table, (*tok)["id"].get<std::string>(), path);
    if (!ids.ok()) return ids.status();
    auto& into = seen_sequence ? frame.suffix : frame.prefix;
    into.insert(into.end(), ids->begin(), ids->end());
  }
  if (!seen_sequence) return Status::InvalidArgument(path + ".single: no $A sequence");
  return frame;
}

Result<SpecialTokenFrame> ParseClsSep(const json& spec, const std::string& path) {
  SpecialTokenFrame frame;
  for (const char* key : {"cls", "sep"}) {
    auto it = spec.find(key);
    if (it == spec.end() || !it->is_array() || it->size() != 2 || !(*it)[1].is_number_unsigned()) {
      return Status::InvalidArgument(path + "." + key + ": expected [token, id]");
    }
    (std::string(key) == "cls" ? frame.prefix : frame.suffix).push_back((*it)[1].get<uint32_t>());
  }
  return frame;
}

}  // namespace

Result<SpecialTokenFrame> ParsePostProcessor(const json& spec, const std::string& path) {
  if (spec.is_null()) return SpecialTokenFrame{};
  Result<std::string> type = TypeOf(spec, path);
  if (!type.ok()) return type.status();
  const std::string& t = *type;
  if (t == "ByteLevel") return SpecialTokenFrame{};
  if (t == "TemplateProcessing") return ParseTemplate(spec, path);
  if (t == "RobertaProcessing" || t == "BertProcessing") return ParseClsSep(spec, path);
  if (t == "Sequence") {
    auto it = spec.find("processors");
    if (it == spec.end() || !it->is_array()) return Status::InvalidArgument(path + ".processors: expected an array");
    // Each processor wraps the result of the one before it.
    SpecialTokenFrame frame;
    for (size_t i = 0; i < it->size(); ++i) {
      auto inner = ParsePostProcessor((*it)[i], path + ".processors[" + std::to_string(i) + "]");
      if (!inner.ok()) return inner.status();
      inner->prefix.insert(inner->prefix.end(), frame.prefix.begin(), frame.prefix.end());
      frame.suffix.insert(frame.suffix.end(), inner->suffix.begin(), inner->suffix.end());
      frame.prefix = std::move(inner->prefix);
    }
    return frame;
  }
  return Status::InvalidArgument(path + ": unsupported post-processor type " + t);
}

}  // namespace kvidx::tokenizer
