// Tokenizer: text in, the token ids vLLM's engine will see out.
//
// vLLM tokenizes through transformers' AutoTokenizer, i.e. Hugging Face's
// Rust `tokenizers` library running a model's tokenizer.json, with the
// tokenizer class's rules from tokenizer_config.json layered on top (for
// example LlamaTokenizerFast rebuilding the post-processor from
// add_bos_token / add_eos_token). A Tokenizer is a native implementation of
// both layers. It is exact or it refuses: a tokenizer.json feature it does
// not implement fails Load with that feature's name; it never approximates.
//
// Ownership and threading: a loaded Tokenizer is immutable; Encode is const
// and safe to call from any number of threads at once. The caches it keeps
// (pre-token -> ids: at most 131,072 pre-tokens of up to 128 bytes; run of
// text between added tokens -> ids: at most 32 MiB) are internally
// synchronized and cannot change a result.
//
// Errors: Load returns InvalidArgument (a malformed or unsupported file, with
// the JSON path and the feature's name) or NotFound (a missing file). Encode
// returns InvalidArgument for text that is not valid UTF-8, naming the byte
// offset of the first bad byte; it never throws.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace kvidx::tokenizer {

class Tokenizer {
 public:
  // Reads <model_dir>/tokenizer.json and, if present,
  // <model_dir>/tokenizer_config.json: the files vLLM itself loads.
  static Result<std::unique_ptr<Tokenizer>> LoadDir(const std::string& model_dir);
  // The same from file contents; `tokenizer_config_json` may be empty.
  static Result<std::unique_ptr<Tokenizer>> FromJson(std::string_view tokenizer_json,
                                                      std::string_view tokenizer_config_json);

  virtual ~Tokenizer() = default;

  // Appends the ids of `text` to *ids, as transformers'
  // tokenizer(text, add_special_tokens=...)["input_ids"] does: vLLM's
  // completions endpoint passes true, its chat endpoint false (the rendered
  // template already holds the special tokens). On error *ids is unchanged.
  virtual Status Encode(std::string_view text, bool add_special_tokens,
                        std::vector<uint32_t>* ids) const = 0;

  // The id of a vocabulary or added token, or -1.
  virtual int64_t TokenToId(std::string_view token) const = 0;
  virtual size_t VocabSize() const = 0;
};

}  // namespace kvidx::tokenizer
