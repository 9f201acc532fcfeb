#include "server/tokenizer/config_rules.h"

#include <nlohmann/json.hpp>
#include <string>

namespace kvidx::tokenizer {
namespace {

using nlohmann::json;

// A token field of tokenizer_config.json: a string, an AddedToken object
// {"content": ...}, null, or absent (the class default).
Result<std::optional<std::string>> TokenField(const json& config, const char* key, const char* fallback) {
  auto it = config.find(key);
  if (it == config.end()) return std::optional<std::string>(fallback);
  if (it->is_null()) return std::optional<std::string>();
  if (it->is_string()) return std::optional<std::string>(it->get<std::string>());
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return std::optional<std::string>((*it)["content"].get<std::string>());
  }
  return Status::InvalidArgument(std::string("tokenizer_config.json ") + key + ": expected a token");
}

Result<bool> FlagField(const json& config, const char* key, bool fallback) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return Status::InvalidArgument(std::string("tokenizer_config.json ") + key + ": expected a boolean");
  return it->get<bool>();
}

// update_post_processor() of LlamaTokenizerFast / GemmaTokenizerFast.
Result<std::optional<SpecialTokenFrame>> BosEosFrame(const json& config, const char* bos_default,
                                                     const char* eos_default,
                                                     const std::function<int64_t(std::string_view)>& token_to_id) {
  Result<bool> add_bos = FlagField(config, "add_bos_token", true);
  Result<bool> add_eos = FlagField(config, "add_eos_token", false);
  if (!add_bos.ok()) return add_bos.status();
  if (!add_eos.ok()) return add_eos.status();
  SpecialTokenFrame frame;
  struct Side {
    bool add;
    const char* key;
    const char* fallback;
    std::vector<uint32_t>* into;
  };
  for (const Side& side : {Side{*add_bos, "bos_token", bos_default, &frame.prefix},
                           Side{*add_eos, "eos_token", eos_default, &frame.suffix}}) {
    if (!side.add) continue;
    auto token = TokenField(config, side.key, side.fallback);
    if (!token.ok()) return token.status();
    if (!token->has_value()) {
      return Status::InvalidArgument(std::string("tokenizer_config.json: add_") + side.key + " is true but " +
                                     side.key + " is null");
    }
    const int64_t id = token_to_id(**token);
    if (id < 0) {
      return Status::InvalidArgument(std::string("tokenizer_config.json ") + side.key + " " + **token +
                                     " is not in the vocabulary");
    }
    side.into->push_back(static_cast<uint32_t>(id));
  }
  return std::optional<SpecialTokenFrame>(std::move(frame));
}

}  // namespace

Result<std::optional<SpecialTokenFrame>> ApplyConfigRules(const json& config,
                                                          const std::function<int64_t(std::string_view)>& token_to_id) {
  if (!config.is_object()) return Status::InvalidArgument("tokenizer_config.json: expected an object");
  Result<bool> split_special = FlagField(config, "split_special_tokens", false);
  if (!split_special.ok()) return split_special.status();
  if (*split_special) return Status::InvalidArgument("tokenizer_config.json: split_special_tokens true is unsupported");
  std::string cls;
  if (auto it = config.find("tokenizer_class"); it != config.end() && it->is_string()) cls = it->get<std::string>();
  if (cls.size() > 4 && cls.compare(cls.size() - 4, 4, "Fast") == 0) cls.resize(cls.size() - 4);
  if (cls == "LlamaTokenizer") return BosEosFrame(config, "<s>", "</s>", token_to_id);
  if (cls == "GemmaTokenizer") return BosEosFrame(config, "<bos>", "<eos>", token_to_id);
  return std::optional<SpecialTokenFrame>();
}

}  // namespace kvidx::tokenizer
