// PromptEncoder: a model's prompt as an OpenAI request carries it -- a
// completions prompt string or a chat-completions body -- turned into the
// token ids vLLM's engine will see for it.
//
// vLLM's completions endpoint tokenizes the prompt with
// add_special_tokens=True (CompletionRequest's default); its chat endpoint
// renders the chat template and tokenizes the result with
// add_special_tokens=False (ChatCompletionRequest's default: the template
// already wrote BOS). Both defaults can be overridden per request, as
// vLLM's request bodies can (vllm/entrypoints/openai/chat_completion/
// protocol.py): a chat body's own add_special_tokens is honoured, and its
// cache_salt is returned for the first block's hash.
//
// Ownership and threading: built once per model at Node creation from the
// model's `tokenizer` directory and optional `chat_template` file; immutable
// after; every method is const and safe from many threads at once.
//
// Errors: Load returns the tokenizer's or template's load error (NotFound,
// InvalidArgument) prefixed with the config field. Encode returns
// InvalidArgument for bad UTF-8 (with the byte offset), a chat body that is
// not a chat request, or a template error (with the template's message);
// FailedPrecondition for a chat request to a model without a chat template;
// OutOfRange when rendering exceeds its limits.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace kvidx::tokenizer {
class Tokenizer;
}
namespace kvidx::chat {
class ChatTemplate;
}

namespace kvidx::server {

enum class PromptKind { kText, kChat };

class PromptEncoder {
 public:
  static Result<std::unique_ptr<PromptEncoder>> Load(const std::string& tokenizer_dir,
                                                      const std::string& chat_template_file);
  ~PromptEncoder();

  // Replaces *ids with the prompt's token ids. `add_special_tokens` unset =
  // the request's own (text: true; chat: the body's add_special_tokens,
  // default false). For chat, *rendered (when not null) receives the
  // rendered template text and *cache_salt (when not null) the body's
  // cache_salt (empty when it has none).
  Status Encode(PromptKind kind, std::string_view input, std::optional<bool> add_special_tokens,
                std::vector<int64_t>* ids, std::string* rendered = nullptr, std::string* cache_salt = nullptr) const;

  bool has_chat_template() const { return chat_ != nullptr; }

 private:
  PromptEncoder(std::unique_ptr<tokenizer::Tokenizer> tok, std::unique_ptr<chat::ChatTemplate> chat);

  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  std::unique_ptr<chat::ChatTemplate> chat_;  // null: the model has no chat template
};

}  // namespace kvidx::server
