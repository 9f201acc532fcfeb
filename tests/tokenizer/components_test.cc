// Unit tests of the tokenizer's components, each on hand-written specs:
// the BPE model's options, normalizers, pre-tokenizer behaviours, added
// token flags, post-processors, tokenizer_config rules and the cache.
#include <gtest/gtest.h>

#include <atomic>
#include <nlohmann/json.hpp>
#include <thread>

#include "server/tokenizer/normalizer.h"
#include "server/tokenizer/post_processor.h"
#include "server/tokenizer/pre_tokenizer.h"
#include "server/tokenizer/segment_cache.h"
#include "server/tokenizer/tokenizer.h"
#include "tokenizer/reference_data.h"
#include "tokenizer/tiny_tokenizer.h"

namespace kvidx::tokenizer {
namespace {

using nlohmann::json;
using testing::TinyTokenizerJson;
using Ids = std::vector<uint32_t>;

std::unique_ptr<Tokenizer> Load(const json& doc, const std::string& config = "") {
  auto t = Tokenizer::FromJson(doc.dump(), config);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(t).value() : nullptr;
}

Ids Encode(const Tokenizer& t, std::string_view text, bool special = false) {
  Ids ids;
  Status s = t.Encode(text, special, &ids);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return ids;
}

std::string Normalized(const json& spec, std::string text) {
  auto n = ParseNormalizer(spec, "normalizer");
  EXPECT_TRUE(n.ok()) << n.status().ToString();
  if (!n.ok()) return {};
  EXPECT_TRUE((*n)->Normalize(&text).ok());
  return text;
}

std::vector<std::string> PreTokens(const json& spec, std::string text) {
  auto p = ParsePreTokenizer(spec, "pre_tokenizer");
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  if (!p.ok()) return {};
  std::vector<Piece> pieces{Piece{text, true}};
  EXPECT_TRUE(p->pre_tokenizer->PreTokenize(&pieces).ok());
  std::vector<std::string> out;
  for (const Piece& piece : pieces) out.push_back(piece.text);
  // A pre-tokenizer that only cuts must cut the same pre-tokens as ranges.
  if (p->pre_tokenizer->CutsOnly()) {
    std::vector<Range> ranges;
    if (!text.empty()) ranges.emplace_back(0, text.size());
    EXPECT_TRUE(p->pre_tokenizer->Cut(text, &ranges).ok());
    std::vector<std::string> cut;
    for (const Range& r : ranges) cut.push_back(text.substr(r.first, r.second - r.first));
    EXPECT_EQ(cut, out) << spec.dump();
  }
  return out;
}

bool CutsOnly(const json& spec) {
  auto p = ParsePreTokenizer(spec, "pre_tokenizer");
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() && p->pre_tokenizer->CutsOnly();
}

TEST(BpeModel, MergesByRankLeftmostFirst) {
  auto t = Load(TinyTokenizerJson());
  EXPECT_EQ(Encode(*t, "abc"), (Ids{7}));       // a b -> ab (rank 0), ab c -> abc (rank 1)
  EXPECT_EQ(Encode(*t, "bc"), (Ids{12}));
  EXPECT_EQ(Encode(*t, "abcde"), (Ids{7, 8}));
  EXPECT_EQ(Encode(*t, "cab"), (Ids{3, 6}));
}

TEST(BpeModel, UnknownCharactersBecomeUnkOneEachWithoutFuse) {
  auto t = Load(TinyTokenizerJson());
  EXPECT_EQ(Encode(*t, "aQQb"), (Ids{1, 0, 0, 2}));
}

TEST(BpeModel, FuseUnkJoinsARunOfUnknowns) {
  json doc = TinyTokenizerJson();
  doc["model"]["fuse_unk"] = true;
  EXPECT_EQ(Encode(*Load(doc), "aQQb"), (Ids{1, 0, 2}));
}

TEST(BpeModel, ByteFallbackBeforeUnk) {
  json doc = TinyTokenizerJson();
  doc["model"]["byte_fallback"] = true;
  auto t = Load(doc);
  EXPECT_EQ(Encode(*t, "aZ!"), (Ids{1, 9, 10}));
  EXPECT_EQ(Encode(*t, "\xC3\xA9"), (Ids{0}));  // <0xC3> <0xA9> absent: unk
}

TEST(BpeModel, IgnoreMergesTakesAWholeWordFromTheVocabulary) {
  json doc = TinyTokenizerJson();
  doc["model"]["vocab"]["cab"] = 13;
  EXPECT_EQ(Encode(*Load(doc), "cab"), (Ids{3, 6}));
  doc["model"]["ignore_merges"] = true;
  EXPECT_EQ(Encode(*Load(doc), "cab"), (Ids{13}));
}

TEST(BpeModel, ContinuingSubwordPrefixAndSuffix) {
  json doc = TinyTokenizerJson();
  doc["model"]["continuing_subword_prefix"] = "##";
  doc["model"]["end_of_word_suffix"] = "</w>";
  doc["model"]["vocab"] = {{"<unk>", 0}, {"a", 1}, {"##b", 2}, {"##c</w>", 3}, {"a##b", 4}, {"ab", 5},
                           {"abc</w>", 6}, {"<s>", 20}, {"</s>", 21}};
  doc["model"]["merges"] = {"a ##b", "ab ##c</w>"};
  EXPECT_EQ(Encode(*Load(doc), "abc"), (Ids{6}));
}

TEST(Normalizers, UnicodeFormsCaseStripReplacePrepend) {
  EXPECT_EQ(Normalized({{"type", "NFC"}}, "e\xCC\x81"), "\xC3\xA9");
  EXPECT_EQ(Normalized({{"type", "NFD"}}, "\xC3\xA9"), "e\xCC\x81");
  EXPECT_EQ(Normalized({{"type", "NFKC"}}, "\xEF\xAC\x81"), "fi");           // U+FB01 ligature
  EXPECT_EQ(Normalized({{"type", "NFKD"}}, "\xE2\x84\xAB"), "A\xCC\x8A");   // U+212B angstrom
  EXPECT_EQ(Normalized({{"type", "Lowercase"}}, "ABC \xCE\xA3\xCE\x91\xCE\xA3"), "abc \xCF\x83\xCE\xB1\xCF\x82");
  EXPECT_EQ(Normalized({{"type", "Strip"}, {"strip_left", true}, {"strip_right", false}}, " \t x \xE3\x80\x80"),
            "x \xE3\x80\x80");
  EXPECT_EQ(Normalized({{"type", "Strip"}, {"strip_left", true}, {"strip_right", true}}, " \t x \xE3\x80\x80"), "x");
  EXPECT_EQ(Normalized({{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "_"}}, "a b  c"), "a_b__c");
  EXPECT_EQ(Normalized({{"type", "Replace"}, {"pattern", {{"Regex", "\\s+"}}}, {"content", " "}}, "a \t\nb"), "a b");
  EXPECT_EQ(Normalized({{"type", "Prepend"}, {"prepend", "_"}}, "ab"), "_ab");
  EXPECT_EQ(Normalized({{"type", "Prepend"}, {"prepend", "_"}}, ""), "");
  EXPECT_EQ(Normalized({{"type", "Sequence"},
                        {"normalizers", json::array({json{{"type", "Lowercase"}}, json{{"type", "Prepend"}, {"prepend", "x"}}})}},
                       "AB"),
            "xab");
}

json SplitSpec(const std::string& behavior, bool invert = false) {
  return {{"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", behavior}, {"invert", invert}};
}

TEST(PreTokenizers, SplitBehaviours) {
  using V = std::vector<std::string>;
  EXPECT_EQ(PreTokens(SplitSpec("Removed"), "a-b--c"), (V{"a", "b", "c"}));
  EXPECT_EQ(PreTokens(SplitSpec("Isolated"), "a-b--c"), (V{"a", "-", "b", "-", "-", "c"}));
  EXPECT_EQ(PreTokens(SplitSpec("MergedWithPrevious"), "a-b--c"), (V{"a-", "b-", "-", "c"}));
  EXPECT_EQ(PreTokens(SplitSpec("MergedWithNext"), "a-b--c"), (V{"a", "-b", "-", "-c"}));
  EXPECT_EQ(PreTokens(SplitSpec("Contiguous"), "a-b--c"), (V{"a", "-", "b", "--", "c"}));
  EXPECT_EQ(PreTokens(SplitSpec("Removed", true), "a-b--c"), (V{"-", "-", "-"}));
  json re = {{"type", "Split"}, {"pattern", {{"Regex", "\\p{N}{1,3}"}}}, {"behavior", "Isolated"}, {"invert", false}};
  EXPECT_EQ(PreTokens(re, "ab12345c"), (V{"ab", "123", "45", "c"}));
}

TEST(PreTokenizers, MetaspaceDigitsPunctuationWhitespaceByteLevel) {
  using V = std::vector<std::string>;
  const std::string m = "\xE2\x96\x81";
  json meta = {{"type", "Metaspace"}, {"replacement", m}, {"prepend_scheme", "always"}, {"split", true}};
  EXPECT_EQ(PreTokens(meta, "hello world"), (V{m + "hello", m + "world"}));
  meta["split"] = false;
  EXPECT_EQ(PreTokens(meta, "hello world"), (V{m + "hello" + m + "world"}));
  meta["prepend_scheme"] = "never";
  EXPECT_EQ(PreTokens(meta, "hi"), (V{"hi"}));
  EXPECT_EQ(PreTokens({{"type", "Digits"}, {"individual_digits", true}}, "a123b"), (V{"a", "1", "2", "3", "b"}));
  EXPECT_EQ(PreTokens({{"type", "Digits"}, {"individual_digits", false}}, "a123b"), (V{"a", "123", "b"}));
  EXPECT_EQ(PreTokens({{"type", "Punctuation"}}, "hi!?"), (V{"hi", "!", "?"}));
  EXPECT_EQ(PreTokens({{"type", "WhitespaceSplit"}}, " a \t b\n"), (V{"a", "b"}));
  // tokenizers' own examples (whitespace.rs, bert.rs), and Unicode classes.
  EXPECT_EQ(PreTokens({{"type", "Whitespace"}}, "How are you doing?"), (V{"How", "are", "you", "doing", "?"}));
  EXPECT_EQ(PreTokens({{"type", "Whitespace"}}, "\n"), (V{}));
  EXPECT_EQ(PreTokens({{"type", "Whitespace"}}, "na\xC3\xAFve_x1 \xE0\xA4\xA8\xE0\xA4\xBF!?\xC2\xA0;"),
            (V{"na\xC3\xAFve_x1", "\xE0\xA4\xA8\xE0\xA4\xBF", "!?", ";"}));
  EXPECT_EQ(PreTokens({{"type", "BertPreTokenizer"}}, "Hey friend!     How are you?!?"),
            (V{"Hey", "friend", "!", "How", "are", "you", "?", "!", "?"}));
  EXPECT_TRUE(CutsOnly({{"type", "Whitespace"}}));
  EXPECT_TRUE(CutsOnly({{"type", "BertPreTokenizer"}}));
  json bl = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}, {"trim_offsets", false}};
  EXPECT_EQ(PreTokens(bl, "Hello world's"), (V{" Hello", " world", "'s"}));
}

TEST(PreTokenizers, OnlyTheRewritingOnesDoNotCut) {
  const json split = {{"type", "Split"}, {"pattern", {{"Regex", "\\s+"}}}, {"behavior", "Isolated"}, {"invert", false}};
  const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  EXPECT_TRUE(CutsOnly(split));
  EXPECT_TRUE(CutsOnly(byte_level));
  EXPECT_TRUE(CutsOnly({{"type", "Sequence"}, {"pretokenizers", {split, {{"type", "Digits"}}, byte_level}}}));
  EXPECT_FALSE(CutsOnly({{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}}));
  EXPECT_FALSE(CutsOnly({{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "always"}}));
  EXPECT_FALSE(CutsOnly({{"type", "Sequence"}, {"pretokenizers", {split, {{"type", "Metaspace"}}}}}));
  // Qwen-style: a GPT-4 regex, then ByteLevel without its own regex.
  using V = std::vector<std::string>;
  const json qwen = {{"type", "Sequence"},
                     {"pretokenizers",
                      {{{"type", "Split"},
                        {"pattern", {{"Regex", "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}}},
                        {"behavior", "Isolated"},
                        {"invert", false}},
                       {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  EXPECT_EQ(PreTokens(qwen, "Hi  there, 42!\n\n"), (V{"Hi", " ", " there", ",", " ", "4", "2", "!\n\n"}));
}

TEST(AddedTokens, LstripRstripSingleWordAndLongestMatch) {
  json doc = TinyTokenizerJson();
  doc["added_tokens"].push_back({{"id", 30}, {"content", "<m>"}, {"single_word", false}, {"lstrip", true},
                                 {"rstrip", true}, {"normalized", false}, {"special", true}});
  doc["added_tokens"].push_back({{"id", 31}, {"content", "cd"}, {"single_word", true}, {"lstrip", false},
                                 {"rstrip", false}, {"normalized", false}, {"special", false}});
  doc["added_tokens"].push_back({{"id", 32}, {"content", "<s>x"}, {"single_word", false}, {"lstrip", false},
                                 {"rstrip", false}, {"normalized", false}, {"special", false}});
  auto t = Load(doc);
  EXPECT_EQ(Encode(*t, "a <m>  b"), (Ids{1, 30, 2}));   // the spaces around <m> are its own
  EXPECT_EQ(Encode(*t, "a cd b"), (Ids{1, 11, 31, 11, 2}));
  EXPECT_EQ(Encode(*t, "acd"), (Ids{1, 3, 4}));         // not a single word: left to the model
  EXPECT_EQ(Encode(*t, "<s>xa<s>"), (Ids{32, 1, 20}));  // leftmost-longest
}

TEST(AddedTokens, NormalizedTokensMatchNormalizedText) {
  json doc = TinyTokenizerJson();
  doc["normalizer"] = {{"type", "Lowercase"}};
  doc["added_tokens"].push_back({{"id", 40}, {"content", "DE"}, {"single_word", false}, {"lstrip", false},
                                 {"rstrip", false}, {"normalized", true}, {"special", false}});
  doc["added_tokens"].push_back({{"id", 41}, {"content", "AB"}, {"single_word", false}, {"lstrip", false},
                                 {"rstrip", false}, {"normalized", false}, {"special", false}});
  auto t = Load(doc);
  EXPECT_EQ(Encode(*t, "De"), (Ids{40}));   // normalized: "de" matches the lowercased "DE"
  EXPECT_EQ(Encode(*t, "AB"), (Ids{41}));   // raw: matched before normalization
  EXPECT_EQ(Encode(*t, "ab"), (Ids{6}));
}

TEST(PostProcessors, TemplateBertSequenceAndByteLevel) {
  json tmpl = {{"type", "TemplateProcessing"},
               {"single", json::array({json{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                       json{{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                                       json{{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}})},
               {"pair", json::array()},
               {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", json::array({20u})}, {"tokens", json::array({"<s>"})}}},
                                   {"</s>", {{"id", "</s>"}, {"ids", json::array({21u})}, {"tokens", json::array({"</s>"})}}}}}};
  auto frame = ParsePostProcessor(tmpl, "post_processor");
  ASSERT_TRUE(frame.ok()) << frame.status().ToString();
  EXPECT_EQ(frame->prefix, (Ids{20}));
  EXPECT_EQ(frame->suffix, (Ids{21}));
  json bert = {{"type", "BertProcessing"}, {"cls", {"[CLS]", 101u}}, {"sep", {"[SEP]", 102u}}};
  json seq = {{"type", "Sequence"}, {"processors", json::array({json{{"type", "ByteLevel"}}, tmpl, bert})}};
  auto nested = ParsePostProcessor(seq, "post_processor");
  ASSERT_TRUE(nested.ok()) << nested.status().ToString();
  EXPECT_EQ(nested->prefix, (Ids{101, 20}));
  EXPECT_EQ(nested->suffix, (Ids{21, 102}));
  json doc = TinyTokenizerJson();
  doc["post_processor"] = tmpl;
  auto t = Load(doc);
  EXPECT_EQ(Encode(*t, "ab", true), (Ids{20, 6, 21}));
  EXPECT_EQ(Encode(*t, "ab", false), (Ids{6}));
  EXPECT_EQ(Encode(*t, "", true), (Ids{20, 21}));
}

TEST(ConfigRules, LlamaAndGemmaRebuildThePostProcessor) {
  json doc = TinyTokenizerJson();
  auto llama = Load(doc, R"({"tokenizer_class": "LlamaTokenizerFast", "add_bos_token": true, "add_eos_token": true})");
  EXPECT_EQ(Encode(*llama, "ab", true), (Ids{20, 6, 21}));
  auto defaults = Load(doc, R"({"tokenizer_class": "LlamaTokenizer"})");  // bos "<s>" on, eos off
  EXPECT_EQ(Encode(*defaults, "ab", true), (Ids{20, 6}));
  auto none = Load(doc, R"({"tokenizer_class": "LlamaTokenizerFast", "add_bos_token": false,
                             "bos_token": {"__type": "AddedToken", "content": "<s>"}})");
  EXPECT_EQ(Encode(*none, "ab", true), (Ids{6}));
  auto gemma = Load(doc, R"({"tokenizer_class": "GemmaTokenizer", "bos_token": "</s>"})");
  EXPECT_EQ(Encode(*gemma, "ab", true), (Ids{21, 6}));
  auto other = Load(doc, R"({"tokenizer_class": "Qwen2Tokenizer", "add_bos_token": true})");
  EXPECT_EQ(Encode(*other, "ab", true), (Ids{6}));
}

TEST(ConfigRules, DeepSeekV3GetsItsBosFromLlamaTokenizerFast) {
  auto raw = Tokenizer::FromJson(testing::ReadWholeFile(testing::ModelDir("deepseek_v3") + "/tokenizer.json"), "");
  auto dir = Tokenizer::LoadDir(testing::ModelDir("deepseek_v3"));
  ASSERT_TRUE(raw.ok() && dir.ok());
  EXPECT_EQ(Encode(**raw, "Hello world", true), (Ids{19923, 2058}));
  EXPECT_EQ(Encode(**dir, "Hello world", true), (Ids{0, 19923, 2058}));
  EXPECT_EQ(Encode(**dir, "Hello world", false), (Ids{19923, 2058}));
}

TEST(Cache, RepeatedAndConcurrentEncodesGiveTheSameIds) {
  auto t = Tokenizer::LoadDir(testing::ModelDir("qwen3"));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const std::string text = "You are a helpful assistant. 你好，世界! def f(x): return x ** 2  \n\n";
  const Ids first = Encode(**t, text);
  EXPECT_EQ(Encode(**t, text), first);
  std::vector<std::thread> threads;
  std::vector<Ids> results(4);
  for (size_t i = 0; i < results.size(); ++i) {
    threads.emplace_back([&, i] {
      for (int k = 0; k < 200; ++k) {
        Ids ids;
        ASSERT_TRUE((*t)->Encode(text + std::to_string(k % 7), false, &ids).ok());
        if (k == 199) results[i] = ids;
      }
    });
  }
  for (auto& th : threads) th.join();
  for (const Ids& r : results) EXPECT_EQ(r, Encode(**t, text + "3"));
}

// Runs are kept the second time they are inserted.
void InsertTwice(const SegmentCache& cache, std::string_view text, bool at_origin, const Ids& ids) {
  cache.Insert(text, at_origin, ids);
  cache.Insert(text, at_origin, ids);
}

TEST(SegmentCache, KeyIsTheWholeTextAndWhetherItStartsTheInput) {
  SegmentCache cache(SegmentCacheOptions{1 << 20, 4, 64});
  const std::string text = "some text";
  Ids ids = {9};
  EXPECT_FALSE(cache.Lookup(text, false, &ids));
  cache.Insert(text, false, Ids{1, 2, 3});
  EXPECT_FALSE(cache.Lookup(text, false, &ids));  // seen once: not kept yet
  cache.Insert(text, false, Ids{1, 2, 3});
  EXPECT_TRUE(cache.Lookup(text, false, &ids));
  EXPECT_EQ(ids, (Ids{9, 1, 2, 3}));  // appended
  EXPECT_FALSE(cache.Lookup(text, true, &ids));
  EXPECT_FALSE(cache.Lookup("some tex", false, &ids));
  EXPECT_FALSE(cache.Lookup("some text ", false, &ids));
  InsertTwice(cache, text, true, Ids{4});
  ids.clear();
  EXPECT_TRUE(cache.Lookup(text, true, &ids));
  EXPECT_EQ(ids, (Ids{4}));
  // Too short or too long: never kept.
  InsertTwice(cache, "abc", false, Ids{1});
  InsertTwice(cache, std::string(65, 'x'), false, Ids{1});
  EXPECT_FALSE(cache.Lookup("abc", false, &ids));
  EXPECT_FALSE(cache.Lookup(std::string(65, 'x'), false, &ids));
  EXPECT_EQ(cache.Entries(), 2u);
}

TEST(SegmentCache, StaysUnderItsByteBound) {
  const size_t max_bytes = 64 << 10;
  SegmentCache cache(SegmentCacheOptions{max_bytes, 8, 4096});
  const Ids ids(200, 7);
  for (int i = 0; i < 5000; ++i) {
    InsertTwice(cache, "segment number " + std::to_string(i) + std::string(static_cast<size_t>(i % 300), 'y'), i % 2 == 0,
                ids);
    ASSERT_LE(cache.Bytes(), max_bytes);
  }
  EXPECT_GT(cache.Entries(), 10u);
  // An entry larger than a shard's share is not kept.
  InsertTwice(cache, std::string(4000, 'z'), false, Ids(5000, 1));
  Ids out;
  EXPECT_FALSE(cache.Lookup(std::string(4000, 'z'), false, &out));
}

TEST(SegmentCache, ConcurrentInsertsAndLookupsAgree) {
  SegmentCache cache(SegmentCacheOptions{256 << 10, 8, 4096});
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        const int k = (i * 7 + t) % 300;
        const std::string key = "key " + std::to_string(k) + " padding";
        Ids got;
        if (cache.Lookup(key, false, &got)) {
          if (got != Ids{static_cast<uint32_t>(k), 1, 2}) ++wrong;
        } else {
          cache.Insert(key, false, Ids{static_cast<uint32_t>(k), 1, 2});
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
}

// Metaspace's "first" scheme prepends only at the start of the input: the
// same run of text has other ids after an added token, and the cache keeps
// the two apart.
TEST(SegmentCache, ARunAtTheStartAndAfterAnAddedTokenKeepTheirOwnIds) {
  json doc = TinyTokenizerJson();
  doc["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "first"},
                          {"split", false}};
  auto t = Load(doc);
  ASSERT_NE(t, nullptr);
  std::string run;
  while (run.size() < 120) run += "abcde";
  Ids body;
  for (size_t i = 0; i < run.size() / 5; ++i) body.insert(body.end(), {7, 8});
  Ids at_start = {0};  // the unknown U+2581
  at_start.insert(at_start.end(), body.begin(), body.end());
  Ids after_token = {20};
  after_token.insert(after_token.end(), body.begin(), body.end());
  for (int round = 0; round < 3; ++round) {  // the third round hits the cache
    EXPECT_EQ(Encode(*t, run), at_start);
    EXPECT_EQ(Encode(*t, "<s>" + run), after_token);
  }
}

TEST(Vocabulary, TokenToIdAndVocabSize) {
  auto t = Load(TinyTokenizerJson());
  EXPECT_EQ(t->TokenToId("abc"), 7);
  EXPECT_EQ(t->TokenToId("</s>"), 21);
  EXPECT_EQ(t->TokenToId("zzz"), -1);
  EXPECT_EQ(t->VocabSize(), 22u);
}

}  // namespace
}  // namespace kvidx::tokenizer
