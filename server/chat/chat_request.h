// What vLLM's /v1/chat/completions does to a request before the template
// renders it, and the context transformers' apply_chat_template passes:
//
// - messages (vllm/entrypoints/chat_utils.py _parse_chat_message_content):
//   content None -> no parts, a string -> one text part; text parts
//   (text, input_text, output_text, thinking; refusal) are joined with "\n"
//   for "string"-format templates and kept as [{"type": "text", "text"}]
//   for "openai"-format ones (vllm/renderers/hf.py _detect_content_format:
//   a template that loops over a message's content); tool messages' text
//   parts are always joined; the message keeps role, content, tool_calls
//   (assistant), reasoning and reasoning_content (from "reasoning"),
//   tool_call_id (tool), name and task (strings). Multimodal parts are
//   refused (kvidx has no media).
// - _postprocess_messages: empty tool_calls dropped; each must be a
//   function call; arguments JSON-parsed (empty or null -> {}).
// - developer messages become system messages (merged first) when the
//   template never names the "developer" role (hf.py safe_apply_chat_template).
// - tools as pydantic's model_dump of ChatCompletionToolsParam: type,
//   function{name, description (null), parameters (null), strict if set}.
// - protocol.py build_chat_params: chat_template_kwargs merged with
//   add_generation_prompt (default true), continue_final_message (default
//   false), documents and reasoning_effort (None and "auto" values dropped);
//   reasoning_effort sets enable_thinking unless given.
// - protocol.py check_cache_salt_support: cache_salt, when given, is a
//   non-empty string; add_special_tokens a boolean (default false).
// - transformers: special tokens of tokenizer_config.json (bos, eos, unk,
//   sep, pad, cls, mask, additional_special_tokens; a string or an
//   AddedToken {"content": ...}) under the kwargs; both add_generation_prompt
//   and continue_final_message is an error.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace kvidx::chat {

using Json = nlohmann::ordered_json;

enum class ContentFormat { kString, kOpenAI };

struct ChatRenderInput {
  Json context;                   // template variables
  bool continue_final_message = false;
  Json final_content;             // the last message's content (for the cut)
  // Body fields vLLM applies after rendering (ChatCompletionRequest in
  // vllm/entrypoints/openai/chat_completion/protocol.py):
  // add_special_tokens (default false: the template writes BOS) and
  // cache_salt (a non-empty string when given; empty = none).
  bool add_special_tokens = false;
  std::string cache_salt;
};

// Special tokens of a parsed tokenizer_config.json, as template variables.
Json SpecialTokens(const Json& tokenizer_config);

// InvalidArgument naming the field for a request that is not valid JSON
// or not a chat request.
Result<ChatRenderInput> BuildRenderInput(std::string_view request_json, ContentFormat format,
                                         bool template_names_developer, const Json& special_tokens);

// transformers' continue_final_message cut: the rendered prompt ends right
// after the final message's text (apply_chat_template / render_jinja_template).
Result<std::string> CutAfterFinalMessage(std::string rendered, const Json& final_content);

}  // namespace kvidx::chat
