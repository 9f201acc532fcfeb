// The rules transformers' tokenizer classes layer on tokenizer.json from
// tokenizer_config.json, as vLLM gets them through AutoTokenizer
// (use_fast=True): the class named by "tokenizer_class" (the Fast variant)
// may rewrite the post-processor.
//
// Implemented (each rule names its transformers 4.x source, the
// PreTrainedTokenizerFast line vLLM's AutoTokenizer returns):
//  * LlamaTokenizerFast (models/llama/tokenization_llama_fast.py) and
//    GemmaTokenizerFast (models/gemma/tokenization_gemma_fast.py):
//    __init__ calls update_post_processor(), which replaces the
//    post-processor by TemplateProcessing "[bos] $A [eos]" with bos present
//    iff add_bos_token (default true) and eos iff add_eos_token (default
//    false); bos_token / eos_token default to the class's "<s>"/"</s>"
//    (Llama) or "<bos>"/"<eos>" (Gemma).
//  * split_special_tokens true (tokenization_utils_base.py) would stop
//    special tokens from being matched; it is refused, not implemented.
// Other classes (PreTrainedTokenizerFast, Qwen2TokenizerFast, ...) keep
// tokenizer.json's post-processor. Of the six reference models only
// DeepSeek-V3 changes (LlamaTokenizerFast, add_bos_token true, a
// tokenizer.json whose post-processor adds nothing: BOS is prepended); Llama 2
// and Gemma 3 get the BOS template their tokenizer.json already has.
// transformers.js does not port update_post_processor (it adds no BOS for
// DeepSeek-V3); Python transformers is the reference for this rule.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"
#include "server/tokenizer/post_processor.h"

namespace kvidx::tokenizer {

// The frame the config's tokenizer class imposes, or nullopt to keep
// tokenizer.json's. `token_to_id` resolves token strings (-1: unknown).
Result<std::optional<SpecialTokenFrame>> ApplyConfigRules(
    const nlohmann::json& config, const std::function<int64_t(std::string_view)>& token_to_id);

}  // namespace kvidx::tokenizer
