#include "server/prompt_encoder.h"

#include <utility>

#include "server/chat/chat_template.h"
#include "server/tokenizer/tokenizer.h"

namespace kvidx::server {

PromptEncoder::PromptEncoder(std::unique_ptr<tokenizer::Tokenizer> tok, std::unique_ptr<chat::ChatTemplate> chat)
    : tokenizer_(std::move(tok)), chat_(std::move(chat)) {}

PromptEncoder::~PromptEncoder() = default;

Result<std::unique_ptr<PromptEncoder>> PromptEncoder::Load(const std::string& tokenizer_dir,
                                                            const std::string& chat_template_file) {
  Result<std::unique_ptr<tokenizer::Tokenizer>> tok = tokenizer::Tokenizer::LoadDir(tokenizer_dir);
  if (!tok.ok()) return tok.status().WithPrefix("tokenizer: ");
  Result<std::unique_ptr<chat::ChatTemplate>> chat = chat::ChatTemplate::LoadDir(tokenizer_dir, chat_template_file);
  std::unique_ptr<chat::ChatTemplate> chat_template;
  if (chat.ok()) {
    chat_template = std::move(chat.value());
  } else if (!chat_template_file.empty() || chat.status().code() != StatusCode::kNotFound) {
    // A base model without a template serves completions only; a template
    // that is there but broken, or a named file that is missing, is an error.
    return chat.status().WithPrefix("chat_template: ");
  }
  return std::unique_ptr<PromptEncoder>(new PromptEncoder(std::move(tok.value()), std::move(chat_template)));
}

Status PromptEncoder::Encode(PromptKind kind, std::string_view input, std::optional<bool> add_special_tokens,
                             std::vector<int64_t>* ids, std::string* rendered, std::string* cache_salt) const {
  thread_local std::vector<uint32_t> scratch;
  thread_local std::string prompt;
  std::string_view text = input;
  bool request_special = kind == PromptKind::kText;
  if (cache_salt != nullptr) cache_salt->clear();
  if (kind == PromptKind::kChat) {
    if (chat_ == nullptr) {
      return Status::FailedPrecondition("messages: the model's tokenizer directory has no chat template "
                                        "(set models[].chat_template)");
    }
    Result<chat::RenderedChat> r = chat_->RenderRequest(input);
    if (!r.ok()) return r.status().WithPrefix("messages: ");
    prompt = std::move(r.value().prompt);
    text = prompt;
    request_special = r.value().add_special_tokens;
    if (rendered != nullptr) *rendered = prompt;
    if (cache_salt != nullptr) *cache_salt = std::move(r.value().cache_salt);
  }
  const bool special = add_special_tokens.value_or(request_special);
  scratch.clear();
  if (Status s = tokenizer_->Encode(text, special, &scratch); !s.ok()) {
    return s.WithPrefix(kind == PromptKind::kText ? "text: " : "messages: ");
  }
  ids->assign(scratch.begin(), scratch.end());
  return Status::Ok();
}

}  // namespace kvidx::server
