#include "server/tokenizer/tokenizer.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "server/tokenizer/hf_tokenizer.h"

namespace kvidx::tokenizer {
namespace {

using nlohmann::json;

Result<json> ParseJson(std::string_view text, const char* name) {
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return Status::InvalidArgument(std::string(name) + ": malformed JSON");
  return doc;
}

// The contents of `path`; NotFound if it does not exist.
Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(path + ": cannot open");
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) return Status::InvalidArgument(path + ": read error");
  return buf.str();
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(std::string_view tokenizer_json,
                                                       std::string_view tokenizer_config_json) {
  auto doc = ParseJson(tokenizer_json, "tokenizer.json");
  if (!doc.ok()) return doc.status();
  json config;  // null: no config
  if (!tokenizer_config_json.empty()) {
    auto parsed = ParseJson(tokenizer_config_json, "tokenizer_config.json");
    if (!parsed.ok()) return parsed.status();
    config = std::move(parsed).value();
  }
  try {
    return HfTokenizer::Build(*doc, config);
  } catch (const std::exception& e) {
    // nlohmann's accessors throw on a mistyped value that a check missed.
    return Status::InvalidArgument(std::string("tokenizer.json: ") + e.what());
  }
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::LoadDir(const std::string& model_dir) {
  auto tokenizer = ReadFile(model_dir + "/tokenizer.json");
  if (!tokenizer.ok()) return tokenizer.status();
  std::string config;
  std::ifstream probe(model_dir + "/tokenizer_config.json");
  if (probe) {
    auto read = ReadFile(model_dir + "/tokenizer_config.json");
    if (!read.ok()) return read.status();
    config = std::move(read).value();
  }
  auto t = FromJson(*tokenizer, config);
  if (!t.ok()) return t.status().WithPrefix(model_dir + ": ");
  return t;
}

}  // namespace kvidx::tokenizer
