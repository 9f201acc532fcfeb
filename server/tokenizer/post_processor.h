// PostProcessor: the special tokens the "post_processor" of tokenizer.json
// puts around a single sequence when special tokens are added.
//
// Supported types: TemplateProcessing (its "single" template), ByteLevel
// (no ids), RobertaProcessing and BertProcessing (cls ... sep), Sequence.
// Anything else fails with InvalidArgument naming it. Only ids matter
// here: offsets, type ids and pair templates are not modelled.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"

namespace kvidx::tokenizer {

// The ids before and after a sequence: prefix + ids + suffix.
struct SpecialTokenFrame {
  std::vector<uint32_t> prefix;
  std::vector<uint32_t> suffix;
};

// `spec` is the JSON value of "post_processor" (null: an empty frame).
Result<SpecialTokenFrame> ParsePostProcessor(const nlohmann::json& spec, const std::string& path);

}  // namespace kvidx::tokenizer
