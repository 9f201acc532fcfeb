// The renderer's contract beyond the differential test: loading, limits,
// and a clear error (never a crash) for every bad input.
#include <filesystem>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "server/chat/chat_template.h"

namespace kvidx::chat {
namespace {

namespace fs = std::filesystem;

constexpr char kConfig[] = R"({"bos_token": "<s>", "eos_token": {"__type": "AddedToken", "content": "</s>"},
                               "pad_token": null, "unk_token": "<unk>"})";

Result<std::string> RenderWith(const std::string& tmpl, const std::string& request = R"({"messages": []})",
                               RenderLimits limits = {}) {
  auto t = ChatTemplate::FromSource(tmpl, kConfig, limits);
  if (!t.ok()) return t.status();
  return (*t)->Render(request);
}

std::string R(const std::string& tmpl, const std::string& request = R"({"messages": []})") {
  auto r = RenderWith(tmpl, request);
  EXPECT_TRUE(r.ok()) << tmpl << ": " << r.status().ToString();
  return r.ok() ? r.value() : "<error>";
}

TEST(ChatRender, SpecialTokensFromTokenizerConfig) {
  EXPECT_EQ(R("{{ bos_token }}|{{ eos_token }}|{{ unk_token }}|{{ pad_token is defined }}"), "<s>|</s>|<unk>|False");
}

TEST(ChatRender, RequestDefaults) {
  EXPECT_EQ(R("{{ add_generation_prompt }} {{ tools }} {{ documents }}"), "True None None");
  EXPECT_EQ(R("{{ add_generation_prompt }}", R"({"messages": [], "add_generation_prompt": false})"), "False");
  EXPECT_EQ(R("{{ enable_thinking }}", R"({"messages": [], "chat_template_kwargs": {"enable_thinking": false}})"),
            "False");
  // reasoning_effort sets enable_thinking unless the kwargs do.
  EXPECT_EQ(R("{{ enable_thinking }}{{ reasoning_effort }}", R"({"messages": [], "reasoning_effort": "none"})"),
            "Falsenone");
}

TEST(ChatRender, MessagesAsVllmPassesThem) {
  const std::string req = R"({"messages": [
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}], "extra": 1},
      {"role": "assistant", "content": null, "tool_calls": [
          {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"x\": [1, 2]}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "r"}]})";
  EXPECT_EQ(R("{{ messages | tojson }}", req),
            R"([{"role": "user", "content": "a\nb"}, {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", )"
            R"("type": "function", "function": {"name": "f", "arguments": {"x": [1, 2]}}}]}, {"role": "tool", )"
            R"("content": "r", "tool_call_id": "c1"}])");
  // A template that loops over message content gets text parts (the
  // assistant's none, the tool's a string still: one character, no .text).
  EXPECT_EQ(R("{% for m in messages %}{% for p in m['content'] %}[{{ p.text }}]{% endfor %}{% endfor %}", req),
            "[a][b][]");
}

TEST(ChatRender, ContinueFinalMessageCutsAfterTheMessage) {
  const std::string tmpl = "{% for m in messages %}<{{ m.role }}>{{ m.content }}</end>{% endfor %}";
  EXPECT_EQ(R(tmpl, R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "The "}],
                     "continue_final_message": true, "add_generation_prompt": false})"),
            "<user>q</end><assistant>The ");
  auto both = RenderWith(tmpl, R"({"messages": [{"role": "user", "content": "q"}], "continue_final_message": true,
                                   "add_generation_prompt": true})");
  ASSERT_FALSE(both.ok());
  EXPECT_EQ(both.status().code(), StatusCode::kInvalidArgument);
  auto dropped = RenderWith("nothing", R"({"messages": [{"role": "assistant", "content": "gone"}],
                                          "continue_final_message": true, "add_generation_prompt": false})");
  ASSERT_FALSE(dropped.ok());
  EXPECT_NE(dropped.status().message().find("does not appear"), std::string::npos);
}

TEST(ChatRender, DeveloperRoleBecomesSystemUnlessTheTemplateNamesIt) {
  const std::string req = R"({"messages": [{"role": "user", "content": "u"}, {"role": "developer", "content": "d"}]})";
  EXPECT_EQ(R("{% for m in messages %}{{ m.role }}:{{ m.content }};{% endfor %}", req), "system:d;user:u;");
  EXPECT_EQ(R("{% for m in messages %}{{ m.role }};{% endfor %}{# 'developer' #}", req), "user;developer;");
}

TEST(ChatRender, UnparseableTemplateNamesTheLine) {
  auto t = ChatTemplate::FromSource("line one\n{% if x %}\nno end", "");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("line 3"), std::string::npos) << t.status().message();
  for (const char* bad : {"{{ x", "{% for %}", "{{ 1 + }}", "{% if %}{% endfor %}", "{# open", "{% raw %}x",
                          "{{ 'unterminated }}", "{% unknown %}", "{{ a | }}", "{{ x is }}", "{% set %}",
                          "{{ ) }}", "{% endif %}", "{{ x[1:2:3:4] }}", "{% macro m( %}{% endmacro %}"}) {
    auto r = ChatTemplate::FromSource(bad, "");
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
      EXPECT_NE(r.status().message().find("line "), std::string::npos) << bad << ": " << r.status().message();
    }
  }
}

TEST(ChatRender, RunawayLoopHitsMaxSteps) {
  RenderLimits limits;
  limits.max_steps = 10'000;
  auto r = RenderWith("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                      R"({"messages": []})", limits);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(r.status().message().find("max_steps"), std::string::npos);
}

TEST(ChatRender, HugeOutputHitsMaxOutputBytes) {
  RenderLimits limits;
  limits.max_output_bytes = 1000;
  auto r = RenderWith("{% for i in range(1000) %}0123456789{% endfor %}", R"({"messages": []})", limits);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(r.status().message().find("max_output_bytes"), std::string::npos);
  auto rep = RenderWith("{{ 'x' * 100000 }}", R"({"messages": []})", limits);
  ASSERT_FALSE(rep.ok());
  EXPECT_EQ(rep.status().code(), StatusCode::kOutOfRange);
  // A captured block counts too.
  auto cap = RenderWith("{% set s %}{% for i in range(1000) %}0123456789{% endfor %}{% endset %}",
                        R"({"messages": []})", limits);
  EXPECT_FALSE(cap.ok());
}

TEST(ChatRender, DeepNestingAndRecursionAreRefused) {
  std::string deep = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  auto t = ChatTemplate::FromSource(deep, "");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("nested too deeply"), std::string::npos) << t.status().message();
  std::string ifs;
  for (int i = 0; i < 1000; ++i) ifs += "{% if true %}";
  for (int i = 0; i < 1000; ++i) ifs += "{% endif %}";
  EXPECT_FALSE(ChatTemplate::FromSource(ifs, "").ok());
  std::string deep_request = R"({"messages": [{"role": "user", "content": "x", "extra": )" + std::string(100000, '[') +
                             std::string(100000, ']') + "}]}";
  auto dr = RenderWith("{{ messages | tojson }}", deep_request);
  ASSERT_FALSE(dr.ok());
  EXPECT_EQ(dr.status().code(), StatusCode::kInvalidArgument);
  std::string deep_args = std::string(1000, '[') + std::string(1000, ']');
  std::string args_request = R"({"messages": [{"role": "assistant", "tool_calls": [{"type": "function", "function": )"
                             R"({"name": "f", "arguments": ")" + deep_args + R"("}}]}]})";
  EXPECT_FALSE(RenderWith("{{ messages | tojson }}", args_request).ok());
  EXPECT_FALSE(ChatTemplate::FromSource("{{ 1" + std::string(400, '0') + " }}", "").ok());
  EXPECT_FALSE(RenderWith("{{ 'a'.format(1)}}{{ '{99999999999999999999}'.format(1) }}").ok());
  auto r = RenderWith("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("recursion"), std::string::npos) << r.status().message();
  EXPECT_EQ(R("{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(5) }}"), "54321");
}

TEST(ChatRender, BadRequests) {
  const std::string tmpl = "{{ messages | length }}";
  for (const char* bad : {"", "not json", "[1, 2]", "{}", R"({"messages": "hi"})", R"({"messages": [1]})",
                          R"({"messages": [{"content": "no role"}]})",
                          R"({"messages": [{"role": "user", "content": 5}]})",
                          R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]})",
                          R"({"messages": [{"role": "user", "content": [{"text": "no type"}]}]})",
                          R"({"messages": [{"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{bad"}}]}]})",
                          R"({"messages": [{"role": "assistant", "tool_calls": [{"type": "retrieval"}]}]})",
                          R"({"messages": [{"role": "assistant", "tool_calls": [5]}]})",
                          R"({"messages": [], "add_generation_prompt": "yes"})",
                          R"({"messages": [], "chat_template_kwargs": [1]})",
                          R"({"messages": [], "chat_template_kwargs": {"tokenize": true}})",
                          R"({"messages": [], "chat_template_kwargs": {"messages": []}})",
                          R"({"messages": [], "tools": [{"type": "function"}]})",
                          R"({"messages": [], "tools": {}})"}) {
    auto r = RenderWith(tmpl, bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    }
  }
  EXPECT_EQ(R(tmpl, R"({"messages": [{"role": "user"}], "model": "ignored", "temperature": 0.5})"), "1");
}

TEST(ChatRender, RaiseExceptionMessageIsSurfaced) {
  auto r = RenderWith("{% if messages | length == 0 %}{{ raise_exception('Conversation must not be empty!') }}{% endif %}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "Conversation must not be empty!");
}

TEST(ChatRender, RaiseExceptionWithoutAMessageStillSaysWhat) {
  for (const char* tmpl : {"{{ raise_exception('') }}", "{{ raise_exception() }}", "{{ raise_exception(none) }}"}) {
    auto r = RenderWith(tmpl);
    ASSERT_FALSE(r.ok()) << tmpl;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << tmpl;
    EXPECT_FALSE(r.status().message().empty()) << tmpl;
  }
}

TEST(ChatRender, TemplateRuntimeErrorsAreStatuses) {
  for (const char* bad : {"{{ x.y }}", "{{ none.a.b }}", "{{ 1 + 'a' }}", "{{ 1 // 0 }}", "{{ 5 % 0 }}",
                          "{{ x() }}", "{{ 'a'() }}", "{{ none | length }}", "{{ 3 | first }}", "{{ x | nofilter }}",
                          "{{ 1 is nosuchtest }}", "{% for a, b in [1] %}{% endfor %}", "{{ 'a' < 1 }}",
                          "{{ [1][::0] }}", "{{ range(10**9) | list }}", "{{ 2 ** 100 }}",
                          "{{ 9223372036854775807 + 1 }}", "{% set n = 1 %}{% set n.a = 2 %}",
                          "{{ ({'a': 1} | tojson(separators=1)) }}", "{{ namespace(a=1) | tojson }}"}) {
    auto r = RenderWith(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad << r.status().ToString();
    }
  }
}

TEST(ChatRender, LoadDirPicksOverrideThenJinjaFileThenConfig) {
  fs::path dir = fs::temp_directory_path() / ("kvidx_chat_load_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto write = [&](const fs::path& p, const std::string& text) { std::ofstream(p) << text; };
  EXPECT_EQ(ChatTemplate::LoadDir(dir.string(), "").status().code(), StatusCode::kNotFound);
  write(dir / "tokenizer_config.json", R"({"chat_template": [{"name": "default", "template": "cfg{{ bos_token }}"},
                                                            {"name": "tool_use", "template": "tools"}],
                                          "bos_token": "<B>"})");
  auto cfg = ChatTemplate::LoadDir(dir.string(), "");
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_EQ((*cfg)->Render(R"({"messages": []})").value(), "cfg<B>");
  EXPECT_EQ((*cfg)->Render(R"({"messages": [], "tools": [{"type": "function", "function": {"name": "f"}}]})").value(),
            "tools");
  write(dir / "chat_template.jinja", "file{{ bos_token }}\n");
  auto file = ChatTemplate::LoadDir(dir.string(), "");
  ASSERT_TRUE(file.ok());
  EXPECT_EQ((*file)->Render(R"({"messages": []})").value(), "file<B>");
  write(dir / "override.jinja", "over");
  auto over = ChatTemplate::LoadDir(dir.string(), (dir / "override.jinja").string());
  ASSERT_TRUE(over.ok());
  EXPECT_EQ((*over)->Render(R"({"messages": []})").value(), "over");
  EXPECT_EQ(ChatTemplate::LoadDir(dir.string(), (dir / "missing.jinja").string()).status().code(), StatusCode::kNotFound);
  write(dir / "chat_template.jinja", "{% if %}");
  EXPECT_EQ(ChatTemplate::LoadDir(dir.string(), "").status().code(), StatusCode::kInvalidArgument);
  fs::remove(dir / "chat_template.jinja");
  write(dir / "tokenizer_config.json", "{not json");
  EXPECT_EQ(ChatTemplate::LoadDir(dir.string(), "").status().code(), StatusCode::kInvalidArgument);
  fs::remove_all(dir);
}

TEST(ChatRender, RenderIsConstAndShareable) {
  auto t = ChatTemplate::FromSource("{% for m in messages %}{{ m.content }}{% endfor %}", "");
  ASSERT_TRUE(t.ok());
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      for (int k = 0; k < 200; ++k) {
        std::string c = std::to_string(i * 1000 + k);
        auto r = (*t)->Render(R"({"messages": [{"role": "user", "content": ")" + c + R"("}]})");
        if (!r.ok() || r.value() != c) ++bad;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

}  // namespace
}  // namespace kvidx::chat
