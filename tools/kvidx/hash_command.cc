// kvidx hash: prints the block hashes vLLM computes for a token sequence, so
// an operator can check what key a prompt should have in the index.
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "index/block_hasher.h"
#include "tools/kvidx/cli_common.h"
#include "tools/kvidx/commands.h"
#include "tools/kvidx/local_prompt.h"
#include "tools/kvidx/prompt_flags.h"

namespace kvidx::cli {

namespace {

constexpr char kHashUsage[] =
    "usage: kvidx hash [--algo sha256|sha256_cbor|xxhash|xxhash_cbor] [--seed S]\n"
    "                  [--block-size N] [--lora NAME] [--salt S]\n"
    "                  (--tokens 1,2,3,... | --tokens-file FILE |\n"
    "                   --tokenizer DIR [--chat-template F] (--text S | --text-file F | --messages-file F)\n"
    "                   [--special-tokens | --no-special-tokens]) [--json]\n"
    "\n"
    "Prints the vLLM block hash of every full block of the tokens.\n"
    "  --algo         vLLM --prefix-caching-hash-algo (default sha256)\n"
    "  --seed         the engine's PYTHONHASHSEED; default \"vllm-none-hash\" for\n"
    "                 sha256*, required for xxhash* (random in vLLM otherwise)\n"
    "  --block-size   hash block size in tokens (default 16)\n"
    "  --lora         LoRA adapter name (lora_request.lora_name)\n"
    "  --salt         cache_salt of the request\n"
    "  --tokens       comma-separated token ids\n"
    "  --tokens-file  file of token ids separated by commas or whitespace\n"
    "  --tokenizer    a Hugging Face model directory: hash a text prompt (--text,\n"
    "                 --text-file) or chat request (--messages-file) tokenized as\n"
    "                 vLLM's endpoints do (see kvidx tokenize)\n"
    "  --json         print {\"none_hash\": ..., \"blocks\": [...]} instead of a table\n";

int UsageError(const std::string& msg) {
  std::fprintf(stderr, "kvidx hash: %s\nRun 'kvidx hash --help' for usage.\n", msg.c_str());
  return kExitUsage;
}

// --text S, --text-file F or --messages-file F into `p` (as kvidx query reads them).
std::optional<int> ReadTextFlag(std::string_view flag, const std::string& value, v1::TextPrompt* p) {
  if (flag == "--text") {
    p->set_text(value);
    return std::nullopt;
  }
  std::string error;
  std::optional<std::string> contents = ReadWholeFile(value, &error);
  if (!contents) {
    std::fprintf(stderr, "kvidx hash: %s\n", error.c_str());
    return kExitError;
  }
  if (flag == "--text-file") {
    p->set_text(std::move(*contents));
    return std::nullopt;
  }
  p->set_chat_request_json(ChatBody(std::move(*contents)));
  return std::nullopt;
}

}  // namespace

int RunHash(int argc, char** argv, const FlagValues& leading) {
  BlockHasherOptions opts;
  std::optional<std::string> lora, salt, tokens_arg, tokens_file, tokenizer, chat_template;
  v1::TextPrompt text_prompt;
  int text_forms = 0;
  bool json = false;
  for (const auto& [flag, value] : leading) {
    if (flag != "--json") return UsageError("works offline and takes no " + flag + " (only --json)");
    json = true;
  }

  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kHashUsage, stdout);
      return kExitOk;
    }
    if (arg == "--json") {
      json = true;
      continue;
    }
    if (arg == "--special-tokens" || arg == "--no-special-tokens") {
      text_prompt.set_add_special_tokens(arg == "--special-tokens");
      continue;
    }
    // --flag VALUE or --flag=VALUE
    std::string_view flag = arg;
    std::optional<std::string> value;
    if (const size_t eq = arg.find('='); arg.starts_with("--") && eq != std::string_view::npos) {
      flag = arg.substr(0, eq);
      value = std::string(arg.substr(eq + 1));
    }
    const bool known = flag == "--algo" || flag == "--seed" || flag == "--block-size" || flag == "--lora" ||
                       flag == "--salt" || flag == "--tokens" || flag == "--tokens-file" || flag == "--tokenizer" ||
                       flag == "--chat-template" || flag == "--text" || flag == "--text-file" ||
                       flag == "--messages-file";
    if (!known) return UsageError("unknown argument '" + std::string(arg) + "'");
    if (!value) {
      if (i + 1 >= argc) return UsageError(std::string(flag) + " needs a value");
      value = argv[++i];
    }
    if (flag == "--algo") {
      Result<HashAlgo> algo = ParseHashAlgo(*value);
      if (!algo.ok()) return UsageError(algo.status().message());
      opts.algo = *algo;
    } else if (flag == "--seed") {
      opts.seed = *value;
    } else if (flag == "--block-size") {
      size_t n = 0;
      const char* end = value->data() + value->size();
      auto [ptr, ec] = std::from_chars(value->data(), end, n);
      if (ec != std::errc() || ptr != end || value->empty()) {
        return UsageError("bad --block-size '" + *value + "' (expected a positive integer)");
      }
      opts.block_size = n;
    } else if (flag == "--lora") {
      lora = *value;
    } else if (flag == "--salt") {
      salt = *value;
    } else if (flag == "--tokens") {
      tokens_arg = *value;
    } else if (flag == "--tokenizer") {
      tokenizer = *value;
    } else if (flag == "--chat-template") {
      chat_template = *value;
    } else if (flag == "--text" || flag == "--text-file" || flag == "--messages-file") {
      ++text_forms;
      if (std::optional<int> rc = ReadTextFlag(flag, *value, &text_prompt)) return *rc;
    } else {
      tokens_file = *value;
    }
  }

  if (int(tokens_arg.has_value()) + int(tokens_file.has_value()) + text_forms > 1) {
    return UsageError("give only one of --tokens, --tokens-file, --text, --text-file and --messages-file");
  }
  if (!tokens_arg && !tokens_file && text_forms == 0) return UsageError("missing --tokens or --tokens-file");
  if ((text_forms > 0) != tokenizer.has_value()) {
    return UsageError("--text, --text-file and --messages-file go with --tokenizer (and only they do)");
  }
  if (chat_template && !tokenizer) return UsageError("--chat-template needs --tokenizer");
  if (text_prompt.has_add_special_tokens() && text_forms == 0) {
    return UsageError("--special-tokens and --no-special-tokens apply to text prompts only");
  }

  std::vector<int64_t> tokens;
  std::string text;
  std::string body_salt;  // a chat body's cache_salt; --salt wins
  if (text_forms > 0) {
    std::string rendered;
    if (Status s =
            EncodeLocally(*tokenizer, chat_template.value_or(""), text_prompt, &tokens, &rendered, &body_salt);
        !s.ok()) {
      std::fprintf(stderr, "kvidx hash: %s\n", s.ToString().c_str());
      return kExitError;
    }
  } else if (tokens_arg) {
    text = *tokens_arg;
  } else {
    std::string error;
    std::optional<std::string> contents = ReadWholeFile(*tokens_file, &error);
    if (!contents) {
      std::fprintf(stderr, "kvidx hash: %s\n", error.c_str());
      return kExitError;
    }
    text = std::move(*contents);
  }
  if (text_forms == 0) {
    if (std::optional<std::string> err = ParseInt64List(text, &tokens)) return UsageError(*err);
  }
  if (tokens.empty()) return UsageError("no token ids given");

  Result<BlockHasher> hasher = BlockHasher::Create(opts);
  if (!hasher.ok()) return UsageError(hasher.status().message());

  RequestExtras extras;
  if (lora) extras.lora_name = *lora;
  if (salt) {
    extras.cache_salt = *salt;
  } else if (!body_salt.empty()) {
    extras.cache_salt = body_salt;
  }
  std::vector<BlockDigest> blocks;
  if (Status s = hasher->HashRequest(tokens, extras, &blocks); !s.ok()) {
    std::fprintf(stderr, "kvidx hash: %s\n", s.ToString().c_str());
    return kExitError;
  }

  if (json) {
    std::string out = "{\"none_hash\": \"" + hasher->none_hash().ToHex() + "\", \"blocks\": [";
    for (size_t i = 0; i < blocks.size(); ++i) {
      if (i) out += ", ";
      out += "{\"index\": " + std::to_string(i) + ", \"wire_u64\": \"" + std::to_string(blocks[i].wire_u64()) +
             "\", \"hash_hex\": \"" + blocks[i].ToHex() + "\"}";
    }
    out += "]}\n";
    std::fputs(out.c_str(), stdout);
  } else {
    // index column as wide as the largest index or its header; u64 is <= 20 digits.
    const int iw = std::max<int>(5, static_cast<int>(std::to_string(blocks.empty() ? 0 : blocks.size() - 1).size()));
    std::printf("%-*s  %-20s  %s\n", iw, "index", "wire_u64", "hash_hex");
    for (size_t i = 0; i < blocks.size(); ++i) {
      std::printf("%-*zu  %-20s  %s\n", iw, i, std::to_string(blocks[i].wire_u64()).c_str(),
                  blocks[i].ToHex().c_str());
    }
  }
  if (blocks.empty()) {
    std::fprintf(stderr, "kvidx hash: note: %zu tokens make no full block of %zu\n", tokens.size(),
                 opts.block_size);
  }
  return kExitOk;
}

}  // namespace kvidx::cli
