// A small hand-written tokenizer.json for unit tests: a character BPE
// vocabulary over a-e, "ab", "abc", "de", byte-fallback tokens for 'Z' and
// '!', and <unk>; parts can be replaced to exercise one component at a time.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace kvidx::tokenizer::testing {

inline nlohmann::json TinyTokenizerJson() {
  return nlohmann::json::parse(R"({
    "version": "1.0", "truncation": null, "padding": null,
    "added_tokens": [
      {"id": 20, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
      {"id": 21, "content": "</s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}
    ],
    "normalizer": null, "pre_tokenizer": null, "post_processor": null, "decoder": null,
    "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>", "continuing_subword_prefix": null,
              "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
              "vocab": {"<unk>": 0, "a": 1, "b": 2, "c": 3, "d": 4, "e": 5, "ab": 6, "abc": 7, "de": 8,
                        "<0x5A>": 9, "<0x21>": 10, " ": 11, "bc": 12, "<s>": 20, "</s>": 21},
              "merges": ["a b", "ab c", "d e", "b c"]}
  })");
}

}  // namespace kvidx::tokenizer::testing
