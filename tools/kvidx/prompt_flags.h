// The prompt flags `kvidx query`, `kvidx route` and `kvidx tokenize` share:
// token ids (--tokens, --tokens-file), block hashes (--hashes), or text the
// server tokenizes with the model's tokenizer (--text, --text-file,
// --messages-file), with --lora and --salt for token and text prompts.
#pragma once

#include <optional>

#include "kvidx/v1/kvidx.pb.h"
#include "tools/kvidx/cli_common.h"

namespace kvidx::cli {

inline constexpr char kPromptFlagsUsage[] =
    "  --tokens       comma-separated token ids (the server hashes them)\n"
    "  --tokens-file  file of token ids separated by commas or whitespace\n"
    "  --hashes       comma-separated block hashes: decimal uint64 (integer form)\n"
    "                 or 0x + 32/64 hex digits (16/32-byte digest form)\n"
    "  --text         a completions prompt, tokenized by the server as vLLM's\n"
    "                 /v1/completions does (the model needs a tokenizer)\n"
    "  --text-file    the same from a file (bytes as they are)\n"
    "  --messages-file  a chat request: a JSON array of messages, or a whole\n"
    "                 /v1/chat/completions body (tools, chat_template_kwargs, ...);\n"
    "                 rendered and tokenized by the server as vLLM's chat endpoint does\n"
    "  --special-tokens / --no-special-tokens  override the endpoint's default\n"
    "                 (text: added, chat: not added)\n"
    "  --lora         LoRA adapter name (token and text prompts)\n"
    "  --salt         cache_salt (token and text prompts)\n";

// The flags above, for a command's FlagSpec list.
inline constexpr FlagSpec kPromptFlags[] = {
    {"--tokens"}, {"--tokens-file"}, {"--hashes"}, {"--text"}, {"--text-file"}, {"--messages-file"},
    {"--special-tokens", false}, {"--no-special-tokens", false}, {"--lora"}, {"--salt"}};

struct Prompt {
  enum class Kind { kTokens, kHashes, kText };
  Kind kind = Kind::kTokens;
  v1::TokenPrompt tokens;
  v1::BlockHashes hashes;
  v1::TextPrompt text;

  // Moves the prompt into a request's `query` oneof.
  template <class Request>
  void MoveInto(Request* req) {
    switch (kind) {
      case Kind::kTokens: *req->mutable_tokens() = std::move(tokens); break;
      case Kind::kHashes: *req->mutable_hashes() = std::move(hashes); break;
      case Kind::kText: *req->mutable_text() = std::move(text); break;
    }
  }
};

// Fills `prompt` from `cl`; on a bad command line, the exit code (after
// printing why).
std::optional<int> ReadPrompt(const CommandLine& cl, Prompt* prompt);
// A --messages-file's contents as a chat request body: a bare messages
// array becomes {"messages": [...]}; anything else is passed on as it is
// (the server checks the JSON).
std::string ChatBody(std::string contents);
// Only the text forms (kvidx tokenize).
std::optional<int> ReadTextPrompt(const CommandLine& cl, v1::TextPrompt* text);

}  // namespace kvidx::cli
