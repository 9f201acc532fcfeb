// kvidx-router-example: the smallest useful router built on kvidx.
//
//   kvidx-router-example --model M --replica a=0.2 --replica b=0.7 [TOKEN ...]
//
// Token ids come from the arguments or, if there are none, from stdin
// (separated by commas or whitespace). One FindPrefixTokens call asks kvidx
// which replicas hold a prefix of the prompt; each candidate then scores
//
//   score = (1.0 * gpu_blocks + 0.75 * (lower_tier_blocks - gpu_blocks)) / blocks_in_query
//           - load_weight * load
//
// i.e. the fraction of the prompt it need not recompute, where blocks in a
// lower tier (CPU, storage) earn less because they must be copied back first,
// minus the caller's own load signal (queue depth, KV usage, ... scaled to
// roughly 0..1). A replica with several DP ranks counts its best rank. The
// answer tells GPU apart from "GPU or any lower tier" only; a router wanting
// storage at 0.25 would add a second query with tiers = {"CPU"} (in one
// FindPrefixBatch) and credit the blocks between the two answers at 0.25.
//
// kvidx is advisory: if it cannot answer in time, route by load alone.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "client/client.h"

namespace {

struct Candidate {
  std::string name;
  double load = 0;
  double credit = 0;  // overlap credit in [0, 1]
  double score = 0;
};

int Usage(const std::string& msg) {
  std::fprintf(stderr,
               "kvidx-router-example: %s\n"
               "usage: kvidx-router-example --model M --replica NAME=LOAD ... [--server ADDR]\n"
               "                            [--load-weight W] [--timeout-ms N] [TOKEN ...]\n",
               msg.c_str());
  return 2;
}

bool ParseDouble(const std::string& s, double* out) {
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return !s.empty() && end == s.c_str() + s.size();
}

// Appends the integers in `text` (separated by commas or whitespace).
bool ParseTokens(const std::string& text, std::vector<int64_t>* out) {
  std::string cur;
  for (size_t i = 0; i <= text.size(); ++i) {
    const char c = i < text.size() ? text[i] : ' ';
    if (c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      if (cur.empty()) continue;
      char* end = nullptr;
      const long long v = std::strtoll(cur.c_str(), &end, 10);
      if (end != cur.c_str() + cur.size()) return false;
      out->push_back(v);
      cur.clear();
    } else {
      cur += c;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  kvidx::client::ClientOptions options;
  if (const char* env = std::getenv("KVIDX_SERVER")) options.target = env;
  options.deadline = std::chrono::milliseconds(50);  // a router cannot wait long
  std::string model;
  double load_weight = 1.0;
  std::vector<Candidate> candidates;
  std::vector<int64_t> tokens;
  bool tokens_in_args = false;

  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.starts_with("--")) {
      if (i + 1 >= argc) return Usage(arg + " needs a value");
      const std::string value = argv[++i];
      if (arg == "--server") {
        options.target = value;
      } else if (arg == "--model") {
        model = value;
      } else if (arg == "--load-weight") {
        if (!ParseDouble(value, &load_weight)) return Usage("bad --load-weight '" + value + "'");
      } else if (arg == "--timeout-ms") {
        double ms = 0;
        if (!ParseDouble(value, &ms) || ms < 1) return Usage("bad --timeout-ms '" + value + "'");
        options.deadline = std::chrono::milliseconds(static_cast<int64_t>(ms));
      } else if (arg == "--replica") {
        const size_t eq = value.find('=');
        Candidate c;
        c.name = value.substr(0, eq);
        if (eq == std::string::npos || c.name.empty() || !ParseDouble(value.substr(eq + 1), &c.load)) {
          return Usage("bad --replica '" + value + "' (expected NAME=LOAD)");
        }
        candidates.push_back(c);
      } else {
        return Usage("unknown flag " + arg);
      }
    } else {
      tokens_in_args = true;
      if (!ParseTokens(arg, &tokens)) return Usage("bad token ids '" + arg + "'");
    }
  }
  if (model.empty()) return Usage("missing --model");
  if (candidates.empty()) return Usage("missing --replica");
  if (!tokens_in_args) {
    const std::string in{std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>()};
    if (!ParseTokens(in, &tokens)) return Usage("bad token ids on stdin");
  }

  auto client = kvidx::client::Client::Create(options);
  if (!client.ok()) return Usage(client.status().message());
  kvidx::v1::FindPrefixResponse resp;
  const grpc::Status status = (*client)->FindPrefixTokens(model, tokens, {}, &resp);
  if (!status.ok()) {
    std::fprintf(stderr, "kvidx unavailable (%d: %s); routing by load only\n", static_cast<int>(status.error_code()),
                 status.error_message().c_str());
  }

  for (Candidate& c : candidates) {
    if (status.ok() && resp.blocks_in_query() > 0) {
      for (const kvidx::v1::ReplicaMatch& m : resp.replicas()) {
        if (m.replica() != c.name) continue;
        const double gpu = m.matched_blocks();
        const double lower = std::max(0.0, m.matched_blocks_with_lower_tiers() - gpu);
        c.credit = std::max(c.credit, (1.0 * gpu + 0.75 * lower) / resp.blocks_in_query());
      }
    }
    c.score = c.credit - load_weight * c.load;
  }
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    return a.score != b.score ? a.score > b.score : a.name < b.name;
  });

  std::printf("%zu tokens, %u full blocks\n", tokens.size(), status.ok() ? resp.blocks_in_query() : 0u);
  std::printf("%-20s %8s %8s %8s\n", "replica", "overlap", "load", "score");
  for (const Candidate& c : candidates) {
    std::printf("%-20s %8.3f %8.3f %8.3f\n", c.name.c_str(), c.credit, c.load, c.score);
  }
  std::printf("pick: %s\n", candidates.front().name.c_str());
  return 0;
}
