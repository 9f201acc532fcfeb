// Every bad input gets a clear error, never a crash: malformed files,
// unsupported tokenizer.json features (named), bad tokenizer_config.json,
// text that is not UTF-8 (its byte offset), and the empty text.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server/tokenizer/tokenizer.h"
#include "tokenizer/tiny_tokenizer.h"

namespace kvidx::tokenizer {
namespace {

using nlohmann::json;
using testing::TinyTokenizerJson;

// Loading `doc` fails with InvalidArgument mentioning `needle`.
void ExpectRefused(const std::string& doc, const std::string& needle, const std::string& config = "") {
  auto t = Tokenizer::FromJson(doc, config);
  ASSERT_FALSE(t.ok()) << "loaded, expected an error naming " << needle;
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument) << t.status().ToString();
  EXPECT_NE(t.status().message().find(needle), std::string::npos) << t.status().ToString();
}

TEST(BadTokenizerJson, MalformedJson) {
  ExpectRefused("{\"model\": ", "malformed JSON");
  ExpectRefused("", "malformed JSON");
  ExpectRefused("[1, 2]", "expected an object");
  ExpectRefused(TinyTokenizerJson().dump(), "tokenizer_config.json: malformed JSON", "{oops");
}

TEST(BadTokenizerJson, UnsupportedFeaturesAreNamed) {
  json doc = TinyTokenizerJson();
  doc["normalizer"] = {{"type", "BertNormalizer"}};
  ExpectRefused(doc.dump(), "unsupported normalizer type BertNormalizer");
  doc = TinyTokenizerJson();
  doc["pre_tokenizer"] = {{"type", "UnicodeScripts"}};
  ExpectRefused(doc.dump(), "unsupported pre-tokenizer type UnicodeScripts");
  doc = TinyTokenizerJson();
  doc["post_processor"] = {{"type", "Fancy"}};
  ExpectRefused(doc.dump(), "unsupported post-processor type Fancy");
  doc = TinyTokenizerJson();
  doc["model"]["type"] = "WordPiece";
  ExpectRefused(doc.dump(), "unsupported model type WordPiece");
  doc = TinyTokenizerJson();
  doc["model"]["dropout"] = 0.1;
  ExpectRefused(doc.dump(), "dropout");
  doc = TinyTokenizerJson();
  doc["truncation"] = {{"max_length", 8}};
  ExpectRefused(doc.dump(), "truncation");
  doc = TinyTokenizerJson();
  doc["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", "x"}}}, {"behavior", "Sideways"}, {"invert", false}};
  ExpectRefused(doc.dump(), "unsupported split behavior Sideways");
  doc = TinyTokenizerJson();
  doc["pre_tokenizer"] = {{"type", "Sequence"},
                          {"pretokenizers", json::array({json{{"type", "ByteLevel"}}, json{{"type", "Digits"}}})}};
  ExpectRefused(doc.dump(), "ByteLevel pre-tokenizer before another step");
  ExpectRefused(TinyTokenizerJson().dump(), "split_special_tokens", R"({"split_special_tokens": true})");
}

TEST(BadTokenizerJson, BrokenPartsAreNamed) {
  json doc = TinyTokenizerJson();
  doc["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(ab"}}}, {"behavior", "Isolated"}, {"invert", false}};
  ExpectRefused(doc.dump(), "regex (ab does not compile");
  doc = TinyTokenizerJson();
  doc["model"]["merges"].push_back("a zz");
  ExpectRefused(doc.dump(), "model.merges[4]: token not in the vocabulary");
  doc = TinyTokenizerJson();
  doc["model"]["merges"].push_back("c d");
  ExpectRefused(doc.dump(), "merged token not in the vocabulary");
  doc = TinyTokenizerJson();
  doc["model"]["unk_token"] = "<nope>";
  ExpectRefused(doc.dump(), "model.unk_token");
  doc = TinyTokenizerJson();
  doc.erase("model");
  ExpectRefused(doc.dump(), "model: missing");
  doc = TinyTokenizerJson();
  doc["model"]["vocab"] = {{"a", "one"}};
  ExpectRefused(doc.dump(), "model.vocab[a]");
  doc = TinyTokenizerJson();
  doc["added_tokens"][0]["special"] = "yes";
  ExpectRefused(doc.dump(), "added_tokens[0].special");
  doc = TinyTokenizerJson();
  doc["normalizer"] = {{"type", "Replace"}, {"pattern", {{"Glob", "*"}}}, {"content", ""}};
  ExpectRefused(doc.dump(), "normalizer.pattern");
  doc = TinyTokenizerJson();
  doc["post_processor"] = {{"type", "TemplateProcessing"},
                           {"single", json::array({json{{"SpecialToken", {{"id", "<x>"}, {"type_id", 0}}}},
                                                   json{{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
                           {"special_tokens", json::object()}};
  ExpectRefused(doc.dump(), "no entry for <x>");
}

TEST(BadTokenizerConfig, RulesThatCannotBeApplied) {
  const std::string doc = TinyTokenizerJson().dump();
  ExpectRefused(doc, "bos_token is null", R"({"tokenizer_class": "LlamaTokenizerFast", "bos_token": null})");
  ExpectRefused(doc, "<zz> is not in the vocabulary", R"({"tokenizer_class": "LlamaTokenizerFast", "bos_token": "<zz>"})");
  ExpectRefused(doc, "add_bos_token: expected a boolean", R"({"tokenizer_class": "LlamaTokenizer", "add_bos_token": 1})");
  ExpectRefused(doc, "expected an object", "[]");
}

TEST(BadFiles, MissingDirectoryIsNotFound) {
  auto t = Tokenizer::LoadDir("/nonexistent/model");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kNotFound) << t.status().ToString();
}

TEST(BadText, InvalidUtf8NamesTheByteOffsetAndLeavesIdsAlone) {
  auto t = Tokenizer::FromJson(TinyTokenizerJson().dump(), "");
  ASSERT_TRUE(t.ok());
  struct Case {
    std::string text;
    size_t offset;
  };
  for (const Case& c : {Case{"ab\xC3(", 2}, Case{"\xFF", 0}, Case{"a\xC0\x80", 1}, Case{"ab\xED\xA0\x80", 2},
                        Case{"abc\xE2\x82", 3}, Case{"\xF4\x90\x80\x80", 0}, Case{"a\x80", 1},
                        Case{"\xC3\xA9\xF0\x9F\x98", 2}}) {
    std::vector<uint32_t> ids{99};
    Status s = (*t)->Encode(c.text, true, &ids);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << ::testing::PrintToString(c.text);
    EXPECT_NE(s.message().find("byte offset " + std::to_string(c.offset)), std::string::npos) << s.ToString();
    EXPECT_EQ(ids, (std::vector<uint32_t>{99}));
  }
}

TEST(BadText, EmptyTextHasOnlyTheSpecialTokens) {
  json doc = TinyTokenizerJson();
  auto t = Tokenizer::FromJson(doc.dump(), R"({"tokenizer_class": "LlamaTokenizerFast"})");
  ASSERT_TRUE(t.ok());
  std::vector<uint32_t> ids;
  ASSERT_TRUE((*t)->Encode("", false, &ids).ok());
  EXPECT_TRUE(ids.empty());
  ASSERT_TRUE((*t)->Encode("", true, &ids).ok());
  EXPECT_EQ(ids, (std::vector<uint32_t>{20}));
}

TEST(BadText, NulBytesAndControlCharactersAreText) {
  auto t = Tokenizer::FromJson(TinyTokenizerJson().dump(), "");
  ASSERT_TRUE(t.ok());
  std::vector<uint32_t> ids;
  ASSERT_TRUE((*t)->Encode(std::string("a\0b", 3), false, &ids).ok());
  EXPECT_EQ(ids, (std::vector<uint32_t>{1, 0, 2}));
}

}  // namespace
}  // namespace kvidx::tokenizer
