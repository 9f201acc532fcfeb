// HfTokenizer: the Tokenizer of a tokenizer.json (plus tokenizer_config.json
// rules): added tokens, normalizer, pre-tokenizer, BPE model and the special
// tokens of the post-processor, run in tokenizers' order. Runs of text
// between added tokens go through a SegmentCache, their pre-tokens through
// a PretokenCache; a pre-tokenizer that only cuts is run on ranges of the
// text (PreTokenizer::Cut), without a copy per pre-token.
//
// Threading and errors: as Tokenizer (tokenizer.h).
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "server/tokenizer/added_vocabulary.h"
#include "server/tokenizer/bpe_model.h"
#include "server/tokenizer/normalizer.h"
#include "server/tokenizer/post_processor.h"
#include "server/tokenizer/pre_tokenizer.h"
#include "server/tokenizer/pretoken_cache.h"
#include "server/tokenizer/segment_cache.h"
#include "server/tokenizer/tokenizer.h"

namespace kvidx::tokenizer {

class HfTokenizer final : public Tokenizer {
 public:
  // `config` is null when there is no tokenizer_config.json (the raw
  // tokenizers library's behaviour).
  static Result<std::unique_ptr<Tokenizer>> Build(const nlohmann::json& tokenizer, const nlohmann::json& config);

  Status Encode(std::string_view text, bool add_special_tokens, std::vector<uint32_t>* ids) const override;
  int64_t TokenToId(std::string_view token) const override;
  size_t VocabSize() const override { return vocab_size_; }

 private:
  HfTokenizer() = default;
  // A run of text between added tokens of the raw input (SegmentCache).
  Status EncodeRun(std::string_view run, bool at_origin, std::vector<uint32_t>* ids) const;
  Status EncodeText(Piece piece, std::vector<uint32_t>* ids) const;
  Status EncodeWord(std::string_view word, std::vector<uint32_t>* ids) const;

  std::unique_ptr<Normalizer> normalizer_;          // may be null
  std::unique_ptr<PreTokenizer> pre_tokenizer_;     // may be null
  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<AddedVocabulary> added_;
  Vocab added_ids_;                                  // content -> id
  SpecialTokenFrame frame_;
  size_t vocab_size_ = 0;
  PretokenCache cache_;
  SegmentCache segments_;
};

}  // namespace kvidx::tokenizer
