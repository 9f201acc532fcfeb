// The native tokenizer against Hugging Face's Rust tokenizers (through its
// Node binding) on 20,000 generated texts per model, with and without
// special tokens: every id must match. tokenizer_config.json is not loaded
// here (the Rust library does not read it); its rules are checked against
// transformers.js below.
#include <gtest/gtest.h>

#include <sstream>

#include "server/tokenizer/tokenizer.h"
#include "tokenizer/reference_data.h"

namespace kvidx::tokenizer {
namespace {

using testing::ModelDir;
using testing::ReadReference;
using testing::ReadWholeFile;
using testing::ReferenceCase;

std::string Ids(const std::vector<uint32_t>& ids) {
  std::ostringstream out;
  for (size_t i = 0; i < ids.size(); ++i) out << (i ? "," : "") << ids[i];
  return out.str();
}

// Compares every case; prints the first few mismatches. Each text is
// encoded three times: the tokenizer's run cache keeps a run on its second
// sight, so the third encoding is served from it where the text allows.
void ExpectSame(const Tokenizer& tok, const std::vector<ReferenceCase>& cases, const std::string& what,
                size_t expected_min_cases) {
  ASSERT_GE(cases.size(), expected_min_cases) << what;
  size_t mismatches = 0;
  for (const ReferenceCase& c : cases) {
    for (bool special : {true, false, true}) {
      std::vector<uint32_t> ids;
      Status s = tok.Encode(c.text, special, &ids);
      const auto& want = special ? c.with_special : c.without_special;
      if (s.ok() && ids == want) continue;
      if (++mismatches <= 5) {
        ADD_FAILURE() << what << " add_special_tokens=" << special << " text=" << ::testing::PrintToString(c.text)
                      << "\n  status: " << s.ToString() << "\n  want: " << Ids(want) << "\n  got:  " << Ids(ids);
      }
    }
  }
  EXPECT_EQ(mismatches, 0u) << what << ": mismatches out of " << 3 * cases.size() << " encodings";
}

class RustReference : public ::testing::TestWithParam<std::string> {};

TEST_P(RustReference, IdenticalIds) {
  const std::string name = GetParam();
  auto tok = Tokenizer::FromJson(ReadWholeFile(ModelDir(name) + "/tokenizer.json"), "");
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  ExpectSame(**tok, ReadReference(name + ".jsonl"), name + " vs tokenizers (Rust)", 20000);
}

INSTANTIATE_TEST_SUITE_P(Models, RustReference,
                         ::testing::Values("qwen3", "llama3_1", "deepseek_v3", "gemma3", "gptoss", "llama2"),
                         [](const auto& info) { return info.param; });

// Pre-tokenizers no model package uses (Whitespace, BertPreTokenizer), on
// Qwen3's tokenizer.json with the pre-tokenizer swapped (gen_reference.js).
class SyntheticReference : public ::testing::TestWithParam<std::string> {};

TEST_P(SyntheticReference, IdenticalIds) {
  const std::string name = GetParam();
  const std::string file = std::string(KVIDX_TOKENIZER_REF_DIR) + "/synthetic/" + name + "/tokenizer.json";
  auto tok = Tokenizer::FromJson(ReadWholeFile(file), "");
  ASSERT_TRUE(tok.ok()) << file << ": " << tok.status().ToString();
  ExpectSame(**tok, ReadReference(name + ".jsonl"), name + " vs tokenizers (Rust)", 20000);
}

INSTANTIATE_TEST_SUITE_P(PreTokenizers, SyntheticReference, ::testing::Values("qwen3-whitespace", "qwen3-bert"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) c = c == '-' ? '_' : c;
                           return n;
                         });

// LoadDir reads tokenizer_config.json too, as vLLM's AutoTokenizer does.
// transformers.js applies the same classes' rules except one: it does not
// port LlamaTokenizerFast.update_post_processor, so for DeepSeek-V3
// (LlamaTokenizerFast, add_bos_token true, a tokenizer.json without BOS) the
// reference is Python transformers' rule: BOS first when special tokens are
// added (checked in components_test.cc); the ids after it must match.
class TransformersReference : public ::testing::TestWithParam<std::string> {};

TEST_P(TransformersReference, IdenticalIds) {
  const std::string name = GetParam();
  auto tok = Tokenizer::LoadDir(ModelDir(name));
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  std::vector<ReferenceCase> cases = ReadReference(name + ".tjs.jsonl");
  if (name == "deepseek_v3") {
    const auto bos = static_cast<uint32_t>((*tok)->TokenToId("<\xEF\xBD\x9C" "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>"));
    for (ReferenceCase& c : cases) c.with_special.insert(c.with_special.begin(), bos);
  }
  ExpectSame(**tok, cases, name + " (with tokenizer_config.json) vs transformers.js", 500);
}

INSTANTIATE_TEST_SUITE_P(Models, TransformersReference,
                         ::testing::Values("qwen3", "llama3_1", "deepseek_v3", "gemma3", "gptoss", "llama2"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kvidx::tokenizer
