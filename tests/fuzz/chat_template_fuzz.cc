// libFuzzer target for the chat-template renderer (scripts/fuzz.sh --target
// chat_template builds and runs it).
//
// Input: a template source, optionally followed by a NUL byte and a chat
// request (JSON); without one, a fixed multi-turn request with tools is used.
// Checks, for any input:
//   - FromSource and Render never crash, hang, leak or trip UBSan, and keep
//     within the limits (small here so that runaway templates end fast);
//   - an error always carries a message, and limits give OutOfRange only;
//   - rendering is deterministic (twice, the same result).
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "server/chat/chat_template.h"

namespace {

constexpr char kDefaultRequest[] = R"({"messages": [
  {"role": "system", "content": "sys"},
  {"role": "user", "content": [{"type": "text", "text": "hi ✓"}]},
  {"role": "assistant", "content": "<think>t</think>a", "tool_calls": [
    {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{\"x\": [1, {\"y\": null}]}"}}]},
  {"role": "tool", "tool_call_id": "c", "content": "r"},
  {"role": "user", "content": "again"}],
  "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
  "chat_template_kwargs": {"enable_thinking": false}})";

constexpr char kConfig[] = R"({"bos_token": "<s>", "eos_token": {"content": "</s>"}})";

void Check(bool ok, const char* what) {
  if (!ok) {
    __builtin_printf("chat_template_fuzz: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  size_t nul = input.find('\0');
  std::string_view source = input.substr(0, nul);
  std::string request = nul == std::string_view::npos ? kDefaultRequest : std::string(input.substr(nul + 1));
  kvidx::chat::RenderLimits limits;
  limits.max_output_bytes = 1 << 16;
  limits.max_steps = 20'000;
  auto tmpl = kvidx::chat::ChatTemplate::FromSource(source, kConfig, limits);
  if (!tmpl.ok()) {
    Check(!tmpl.status().message().empty(), "load error without a message");
    return 0;
  }
  auto first = (*tmpl)->Render(request);
  auto second = (*tmpl)->Render(request);
  Check(first.ok() == second.ok(), "render is not deterministic");
  if (first.ok()) {
    Check(first.value().size() <= limits.max_output_bytes, "output beyond max_output_bytes");
    Check(first.value() == second.value(), "render is not deterministic");
  } else {
    Check(!first.status().message().empty(), "render error without a message");
    Check(first.status().code() == kvidx::StatusCode::kInvalidArgument ||
              first.status().code() == kvidx::StatusCode::kOutOfRange,
          "render error of an unexpected code");
  }
  return 0;
}
