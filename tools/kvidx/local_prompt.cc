#include "tools/kvidx/local_prompt.h"

#include <memory>
#include <optional>

#include "server/prompt_encoder.h"

namespace kvidx::cli {

Status EncodeLocally(const std::string& dir, const std::string& chat_template, const v1::TextPrompt& p,
                     std::vector<int64_t>* ids, std::string* rendered, std::string* cache_salt) {
  Result<std::unique_ptr<server::PromptEncoder>> enc = server::PromptEncoder::Load(dir, chat_template);
  if (!enc.ok()) return enc.status();
  const bool chat = p.input_case() == v1::TextPrompt::kChatRequestJson;
  std::optional<bool> special;
  if (p.has_add_special_tokens()) special = p.add_special_tokens();
  return (*enc)->Encode(chat ? server::PromptKind::kChat : server::PromptKind::kText,
                        chat ? p.chat_request_json() : p.text(), special, ids, rendered, cache_salt);
}

}  // namespace kvidx::cli
