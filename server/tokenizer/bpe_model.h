// BpeModel: the "model" of tokenizer.json when its type is BPE, turning one
// pre-token into ids as tokenizers' BPE::tokenize does (dropout null).
//
// Two vocabularies are supported: byte-level ones (the pre-tokenizer ends
// with ByteLevel; tokens are sequences of GPT-2's byte-to-character map,
// held here un-mapped so the model works on raw bytes) and character ones,
// optionally with byte_fallback (<0xXX> tokens), an unk_token (fuse_unk),
// continuing_subword_prefix and end_of_word_suffix. ignore_merges looks a
// whole pre-token up before merging.
//
// Threading: immutable after Parse; Tokenize is const and thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"
#include "server/tokenizer/merge_table.h"

namespace kvidx::tokenizer {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using Vocab = std::unordered_map<std::string, uint32_t, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  // `spec` is the JSON value of "model"; `byte_level` says the pre-tokens
  // arrive as raw bytes to be read through the byte-level map.
  static Result<std::unique_ptr<BpeModel>> Parse(const nlohmann::json& spec, bool byte_level);

  // Appends the ids of `word` (a non-empty pre-token) to *ids. Fails only
  // when an unknown character meets a vocabulary without unk_token.
  Status Tokenize(std::string_view word, std::vector<uint32_t>* ids) const;

  // Token string (as written in tokenizer.json) -> id.
  const Vocab& vocab() const { return vocab_; }

 private:
  BpeModel() = default;
  const MergeTable::Target* FindMerge(uint32_t left, uint32_t right) const { return merges_.Find(left, right); }
  // Looks a unit (a raw byte or a character) up in the model's space.
  const uint32_t* Lookup(std::string_view key) const;
  Status InitialSymbols(std::string_view word, std::vector<uint32_t>* symbols) const;
  void MergeAll(std::vector<uint32_t>* symbols) const;
  void MergeAllShort(std::vector<uint32_t>* symbols) const;

  Vocab vocab_;             // as written in tokenizer.json
  Vocab byte_vocab_;        // byte-level: vocab_ with tokens un-mapped to raw bytes
  uint32_t byte_ids_[256];  // byte-level: the id of each single byte, or kNone
  bool byte_level_ = false;
  MergeTable merges_;
  std::optional<uint32_t> unk_id_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::string prefix_;  // continuing_subword_prefix
  std::string suffix_;  // end_of_word_suffix
};

// GPT-2's byte-to-character map of ByteLevel (bytes_to_unicode).
char32_t ByteToChar(uint8_t b);

}  // namespace kvidx::tokenizer
