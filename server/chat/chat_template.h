// ChatTemplate: an OpenAI chat-completions request in, the prompt text
// vLLM's chat endpoint renders for it out.
//
// vLLM's /v1/chat/completions normalizes the request's messages (string or
// text-part content, tool calls with their JSON arguments parsed, tool
// results), then renders the model's chat template -- a Jinja2 program from
// tokenizer_config.json's `chat_template`, `chat_template.jinja`, or an
// override file -- with transformers' environment (trim_blocks,
// lstrip_blocks, loop controls, raise_exception, tojson, strftime_now) and
// the context apply_chat_template builds (messages, tools, documents,
// add_generation_prompt, continue_final_message handling, bos/eos and the
// other special tokens of tokenizer_config.json, chat_template_kwargs).
// The result is then tokenized without adding special tokens.
//
// Ownership and threading: a loaded ChatTemplate is immutable (the template
// is parsed once at load); Render is const and safe from many threads.
//
// Errors: Load returns NotFound (no template in the directory and no
// override) or InvalidArgument (a template that does not parse, with line
// and message). Render returns InvalidArgument for a request that is not
// valid JSON or not a chat request, and for a template error (including
// raise_exception), with the template's message; OutOfRange when rendering
// exceeds the limits below. It never throws.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"

namespace kvidx::chat {

// A rendered chat request and the body fields vLLM applies to the prompt
// after rendering (ChatCompletionRequest in
// vllm/entrypoints/openai/chat_completion/protocol.py).
struct RenderedChat {
  std::string prompt;
  bool add_special_tokens = false;  // the body's, default false
  std::string cache_salt;           // the body's; empty = none
};

struct RenderLimits {
  size_t max_output_bytes = 16u << 20;
  // Template statements and expressions evaluated per Render.
  uint64_t max_steps = 50'000'000;
};

class ChatTemplate {
 public:
  // Template source, first found: `override_file` (if not empty),
  // <model_dir>/chat_template.jinja, tokenizer_config.json's chat_template
  // (a string, or a list of named templates: "default", and "tool_use" for
  // requests with tools, as transformers' get_chat_template picks).
  static Result<std::unique_ptr<ChatTemplate>> LoadDir(const std::string& model_dir,
                                                        const std::string& override_file,
                                                        RenderLimits limits = {});
  // The same from contents: the template source and tokenizer_config.json
  // (for the special tokens; may be empty).
  static Result<std::unique_ptr<ChatTemplate>> FromSource(std::string_view template_source,
                                                           std::string_view tokenizer_config_json,
                                                           RenderLimits limits = {});

  virtual ~ChatTemplate() = default;

  // `request_json`: the chat-completions request body (or any JSON object
  // with its fields): messages (required), tools, documents,
  // add_generation_prompt (default true), continue_final_message (default
  // false), chat_template_kwargs, reasoning_effort; add_special_tokens (a
  // boolean) and cache_salt (a non-empty string) are checked and returned.
  // Other fields are ignored.
  virtual Result<RenderedChat> RenderRequest(std::string_view request_json) const = 0;

  // The prompt of RenderRequest alone.
  Result<std::string> Render(std::string_view request_json) const {
    Result<RenderedChat> r = RenderRequest(request_json);
    if (!r.ok()) return r.status();
    return std::move(r.value().prompt);
  }
};

}  // namespace kvidx::chat
