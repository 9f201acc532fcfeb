#include "tools/kvidx/prompt_flags.h"

#include <string>
#include <vector>

namespace kvidx::cli {

namespace {

std::optional<int> ReadHashes(const CommandLine& cl, const std::string& list, v1::BlockHashes* h) {
  if (cl.Has("--lora") || cl.Has("--salt")) return cl.UsageError("--lora and --salt apply to token queries only");
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

}  // namespace

std::optional<int> ReadPrompt(const CommandLine& cl, v1::TokenPrompt* tokens, v1::BlockHashes* hashes,
                              bool* is_hashes) {
  const int given = cl.Has("--tokens") + cl.Has("--tokens-file") + cl.Has("--hashes");
  if (given == 0) return cl.UsageError("missing --tokens, --tokens-file or --hashes");
  if (given > 1) return cl.UsageError("give only one of --tokens, --tokens-file and --hashes");
  *is_hashes = cl.Has("--hashes");
  return *is_hashes ? ReadHashes(cl, *cl.Get("--hashes"), hashes) : ReadTokens(cl, tokens);
}

}  // namespace kvidx::cli
