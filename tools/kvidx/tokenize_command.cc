// kvidx tokenize: the token ids of a completions prompt or a chat request,
// as kvidx-server computes them for FindPrefix and Route (Tokenize RPC), or
// offline from a model directory (--tokenizer), so an operator can compare
// them with what vLLM logged for the same request.
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "tools/kvidx/cli_common.h"
#include "tools/kvidx/commands.h"
#include "tools/kvidx/json_writer.h"
#include "tools/kvidx/local_prompt.h"
#include "tools/kvidx/prompt_flags.h"

namespace kvidx::cli {

namespace {

constexpr char kTokenizeUsage[] =
    "usage: kvidx tokenize (--model M | --tokenizer DIR [--chat-template F])\n"
    "                      (--text S | --text-file F | --messages-file F)\n"
    "                      [--special-tokens | --no-special-tokens] [--show-prompt]\n"
    "\n"
    "Prints the prompt's token ids, comma-separated, as vLLM's completions\n"
    "(--text) or chat (--messages-file) endpoint computes them.\n"
    "  --model          ask the server (the model's configured tokenizer)\n"
    "  --tokenizer      offline: a Hugging Face model directory (tokenizer.json,\n"
    "                   tokenizer_config.json, chat template)\n"
    "  --chat-template  offline: a Jinja2 file replacing the directory's template\n"
    "  --text, --text-file, --messages-file, --special-tokens, --no-special-tokens:\n"
    "                   as for kvidx query\n"
    "  --show-prompt    chat: print the rendered template too\n";

}  // namespace

int RunTokenize(int argc, char** argv, const FlagValues& leading) {
  CommandLine cl("tokenize", kTokenizeUsage, leading);
  std::vector<FlagSpec> flags = {{"--model"}, {"--tokenizer"}, {"--chat-template"}, {"--show-prompt", false}};
  flags.insert(flags.end(), std::begin(kPromptFlags), std::end(kPromptFlags));
  if (std::optional<int> rc = cl.Parse(argc, argv, flags, 0)) return *rc;
  const std::string* model = cl.Get("--model");
  const std::string* dir = cl.Get("--tokenizer");
  if ((model == nullptr) == (dir == nullptr)) return cl.UsageError("give exactly one of --model and --tokenizer");
  if (cl.Has("--chat-template") && dir == nullptr) return cl.UsageError("--chat-template needs --tokenizer");
  if (cl.Has("--tokens") || cl.Has("--tokens-file") || cl.Has("--hashes")) {
    return cl.UsageError("takes a text prompt (--text, --text-file or --messages-file)");
  }
  v1::TextPrompt text;
  if (std::optional<int> rc = ReadTextPrompt(cl, &text)) return *rc;

  std::vector<int64_t> ids;
  std::string rendered;
  if (dir != nullptr) {
    const std::string* tmpl = cl.Get("--chat-template");
    if (Status s = EncodeLocally(*dir, tmpl ? *tmpl : "", text, &ids, &rendered); !s.ok()) {
      return cl.Fail(s.ToString());
    }
  } else {
    std::unique_ptr<client::Client> client;
    if (std::optional<int> rc = cl.Connect(&client)) return *rc;
    v1::TokenizeRequest req;
    req.set_model(*model);
    *req.mutable_prompt() = std::move(text);
    v1::TokenizeResponse resp;
    if (grpc::Status s = client->Tokenize(req, &resp); !s.ok()) return cl.RpcError(s);
    ids.assign(resp.token_ids().begin(), resp.token_ids().end());
    rendered = resp.rendered_prompt();
  }

  if (cl.json()) {
    JsonWriter w;
    w.BeginObject();
    w.Key("prompt_tokens").Uint(ids.size());
    w.Key("token_ids").BeginArray();
    for (int64_t id : ids) w.Int(id);
    w.EndArray();
    if (cl.Has("--show-prompt")) w.Key("rendered_prompt").String(rendered);
    w.EndObject();
    std::printf("%s\n", w.str().c_str());
    return kExitOk;
  }
  if (cl.Has("--show-prompt") && !rendered.empty()) std::printf("%s\n---\n", rendered.c_str());
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) line += ',';
    line += std::to_string(ids[i]);
  }
  std::printf("%s\n", line.c_str());
  std::fprintf(stderr, "%zu tokens\n", ids.size());
  return kExitOk;
}

}  // namespace kvidx::cli
