// The renderer's language features and every bad input.
#include <gtest/gtest.h>

#include "server/chat/chat_template.h"

namespace kvidx::chat {
namespace {

Result<std::string> RenderWith(const std::string& tmpl, const std::string& request = R"({"messages": []})",
                               RenderLimits limits = {}) {
  auto t = ChatTemplate::FromSource(tmpl, R"({"bos_token": "<s>", "eos_token": {"content": "</s>"}})", limits);
  if (!t.ok()) return t.status();
  return (*t)->Render(request);
}

std::string R(const std::string& tmpl, const std::string& request = R"({"messages": []})") {
  auto r = RenderWith(tmpl, request);
  EXPECT_TRUE(r.ok()) << tmpl << ": " << r.status().ToString();
  return r.ok() ? r.value() : "<error>";
}

TEST(ChatRender, Placeholder) { EXPECT_EQ(R("{{ bos_token }}{{ eos_token }}"), "<s></s>"); }

}  // namespace
}  // namespace kvidx::chat
