#include "tools/kvidx/prompt_flags.h"

#include <string>
#include <vector>

namespace kvidx::cli {

namespace {

std::optional<int> ReadHashes(const CommandLine& cl, const std::string& list, v1::BlockHashes* h) {
  if (cl.Has("--lora") || cl.Has("--salt")) return cl.UsageError("--lora and --salt apply to token and text prompts only");
  std::string_view rest = list;
  while (true) {
    const size_t comma = rest.find(',');
    if (std::optional<std::string> err = ParseBlockHash(rest.substr(0, comma), h)) {
      return cl.UsageError("--hashes: " + *err);
    }
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  if (h->u64_size() > 0 && h->digest_size() > 0) return cl.UsageError("--hashes mixes integer and 0x digest forms");
  return std::nullopt;
}

std::optional<int> ReadTokens(const CommandLine& cl, v1::TokenPrompt* p) {
  std::string text;
  const char* flag = "--tokens";
  if (const std::string* t = cl.Get("--tokens")) {
    text = *t;
  } else {
    flag = "--tokens-file";
    std::string error;
    std::optional<std::string> contents = ReadWholeFile(*cl.Get("--tokens-file"), &error);
    if (!contents) return cl.Fail(error);
    text = std::move(*contents);
  }
  std::vector<int64_t> tokens;
  if (std::optional<std::string> err = ParseInt64List(text, &tokens)) {
    return cl.UsageError(std::string(flag) + ": " + *err);
  }
  if (tokens.empty()) return cl.UsageError(std::string(flag) + ": no token ids given");
  p->mutable_token_ids()->Add(tokens.begin(), tokens.end());
  if (const std::string* lora = cl.Get("--lora")) p->set_lora_name(*lora);
  if (const std::string* salt = cl.Get("--salt")) p->set_cache_salt(*salt);
  return std::nullopt;
}

std::optional<int> ReadText(const CommandLine& cl, v1::TextPrompt* p) {
  std::string error;
  if (const std::string* t = cl.Get("--text")) {
    p->set_text(*t);
  } else if (const std::string* f = cl.Get("--text-file")) {
    std::optional<std::string> contents = ReadWholeFile(*f, &error);
    if (!contents) return cl.Fail(error);
    p->set_text(std::move(*contents));
  } else {
    std::optional<std::string> contents = ReadWholeFile(*cl.Get("--messages-file"), &error);
    if (!contents) return cl.Fail(error);
    p->set_chat_request_json(ChatBody(std::move(*contents)));
  }
  if (cl.Has("--special-tokens") && cl.Has("--no-special-tokens")) {
    return cl.UsageError("give --special-tokens or --no-special-tokens, not both");
  }
  if (cl.Has("--special-tokens")) p->set_add_special_tokens(true);
  if (cl.Has("--no-special-tokens")) p->set_add_special_tokens(false);
  if (const std::string* lora = cl.Get("--lora")) p->set_lora_name(*lora);
  if (const std::string* salt = cl.Get("--salt")) p->set_cache_salt(*salt);
  return std::nullopt;
}

int TextFlagsGiven(const CommandLine& cl) {
  return cl.Has("--text") + cl.Has("--text-file") + cl.Has("--messages-file");
}

}  // namespace

std::string ChatBody(std::string contents) {
  const size_t first = contents.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && contents[first] == '[') return "{\"messages\": " + contents + "}";
  return contents;
}

std::optional<int> ReadPrompt(const CommandLine& cl, Prompt* prompt) {
  const int text = TextFlagsGiven(cl);
  const int given = cl.Has("--tokens") + cl.Has("--tokens-file") + cl.Has("--hashes") + text;
  constexpr const char* kForms = "--tokens, --tokens-file, --hashes, --text, --text-file or --messages-file";
  if (given == 0) return cl.UsageError(std::string("missing ") + kForms);
  if (given > 1) return cl.UsageError(std::string("give only one of ") + kForms);
  if (text == 0 && (cl.Has("--special-tokens") || cl.Has("--no-special-tokens"))) {
    return cl.UsageError("--special-tokens and --no-special-tokens apply to text prompts only");
  }
  if (cl.Has("--hashes")) {
    prompt->kind = Prompt::Kind::kHashes;
    return ReadHashes(cl, *cl.Get("--hashes"), &prompt->hashes);
  }
  if (text > 0) {
    prompt->kind = Prompt::Kind::kText;
    return ReadText(cl, &prompt->text);
  }
  prompt->kind = Prompt::Kind::kTokens;
  return ReadTokens(cl, &prompt->tokens);
}

std::optional<int> ReadTextPrompt(const CommandLine& cl, v1::TextPrompt* text) {
  const int given = TextFlagsGiven(cl);
  if (given == 0) return cl.UsageError("missing --text, --text-file or --messages-file");
  if (given > 1) return cl.UsageError("give only one of --text, --text-file and --messages-file");
  return ReadText(cl, text);
}

}  // namespace kvidx::cli
