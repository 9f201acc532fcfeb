// Offline tokenization for `kvidx tokenize --tokenizer` and `kvidx hash
// --tokenizer`: the server's PromptEncoder, loaded from a model directory in
// the CLI's own process.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "kvidx/v1/kvidx.pb.h"

namespace kvidx::cli {

// `p`'s token ids (and, for chat, the rendered template and, when
// `cache_salt` is not null, the body's cache_salt) with the tokenizer of
// `dir`; `chat_template` ("" = the directory's own) as models[].chat_template.
Status EncodeLocally(const std::string& dir, const std::string& chat_template, const v1::TextPrompt& p,
                     std::vector<int64_t>* ids, std::string* rendered, std::string* cache_salt = nullptr);

}  // namespace kvidx::cli
