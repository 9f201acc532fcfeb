// kvidx-router-example: the smallest useful router built on kvidx.
//
//   kvidx-router-example --model M [--replica NAME ...] [--n N]
//                        [--expected-output N] [--cached-tokens N] [TOKEN ...]
//
// Token ids come from the arguments or, if there are none, from stdin
// (separated by commas or whitespace). One Route call asks kvidx where the
// request should go among the healthy replicas (--replica; none = every
// replica of the model): kvidx weighs what each rank holds (GPU, CPU,
// storage, and blocks predicted there by requests routed moments ago)
// against its load (scraped from the engine's /metrics and kvidx's own
// in-flight accounting) and a fresh replica's warm-up credit
// (docs/ROUTING.md). The router then sends the request -- here it only
// prints the pick -- and reports the end with RouteDone, passing vLLM's
// usage.prompt_tokens_details.cached_tokens (--cached-tokens) so kvidx can
// compare what it expected with what the engine reused.
//
// kvidx is advisory: if it cannot answer in time, route without it (here:
// the first healthy replica; a real router would use its own balancing).
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "client/client.h"

namespace {

int Usage(const std::string& msg) {
  std::fprintf(stderr,
               "kvidx-router-example: %s\n"
               "usage: kvidx-router-example --model M [--replica NAME ...] [--server ADDR] [--n N]\n"
               "                            [--expected-output N] [--cached-tokens N] [--timeout-ms N] [TOKEN ...]\n",
               msg.c_str());
  return 2;
}

bool ParseU64(const std::string& s, uint64_t* out) {
  char* end = nullptr;
  errno = 0;
  *out = std::strtoull(s.c_str(), &end, 10);
  return !s.empty() && s[0] != '-' && errno == 0 && end == s.c_str() + s.size();
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

struct Flags {
  kvidx::client::ClientOptions client;
  kvidx::v1::RouteRequest request;
  std::vector<int64_t> tokens;
  uint64_t cached_tokens = 0;
  bool tokens_in_args = false;
};

// Returns an exit code on bad usage.
std::optional<int> Parse(int argc, char** argv, Flags* f) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (!arg.starts_with("--")) {
      f->tokens_in_args = true;
      if (!ParseTokens(arg, &f->tokens)) return Usage("bad token ids '" + arg + "'");
      continue;
    }
    if (i + 1 >= argc) return Usage(arg + " needs a value");
    const std::string value = argv[++i];
    uint64_t n = 0;
    if (arg == "--server") {
      f->client.target = value;
    } else if (arg == "--model") {
      f->request.set_model(value);
    } else if (arg == "--replica") {
      f->request.add_replicas(value);
    } else if (arg == "--n" || arg == "--expected-output" || arg == "--cached-tokens" || arg == "--timeout-ms") {
      if (!ParseU64(value, &n) || n > (1u << 30)) return Usage("bad " + arg + " '" + value + "'");
      if (arg == "--n") f->request.set_n(static_cast<uint32_t>(n));
      if (arg == "--expected-output") f->request.set_expected_output_tokens(static_cast<uint32_t>(n));
      if (arg == "--cached-tokens") f->cached_tokens = n;
      if (arg == "--timeout-ms") f->client.deadline = std::chrono::milliseconds(std::max<uint64_t>(n, 1));
    } else {
      return Usage("unknown flag " + arg);
    }
  }
  if (f->request.model().empty()) return Usage("missing --model");
  return std::nullopt;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  if (const char* env = std::getenv("KVIDX_SERVER")) f.client.target = env;
  f.client.deadline = std::chrono::milliseconds(50);  // a router cannot wait long
  if (std::optional<int> rc = Parse(argc, argv, &f)) return *rc;
  if (!f.tokens_in_args) {
    const std::string in{std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>()};
    if (!ParseTokens(in, &f.tokens)) return Usage("bad token ids on stdin");
  }
  f.request.mutable_tokens()->mutable_token_ids()->Add(f.tokens.begin(), f.tokens.end());

  auto client = kvidx::client::Client::Create(f.client);
  if (!client.ok()) return Usage(client.status().message());
  kvidx::v1::RouteResponse route;
  const grpc::Status status = (*client)->Route(f.request, &route);
  if (!status.ok()) {
    std::fprintf(stderr, "kvidx unavailable (%d: %s); routing without it\n", static_cast<int>(status.error_code()),
                 status.error_message().c_str());
    if (f.request.replicas_size() == 0) return 1;
    std::printf("pick: %s (without kvidx)\n", f.request.replicas(0).c_str());
    return 0;
  }
  std::printf("%zu tokens; %-24s %6s %6s %6s %6s %10s\n", f.tokens.size(), "candidate", "gpu", "cpu", "stor",
              "pred", "cost");
  for (const kvidx::v1::RouteCandidate& c : route.candidates()) {
    std::printf("%-36s %6u %6u %6u %6u %10.0f\n", c.source().c_str(), c.gpu_blocks(), c.cpu_blocks(),
                c.storage_blocks(), c.predicted_blocks(), c.cost());
  }
  std::printf("pick: %s dp%u (%s)\n", route.replica().c_str(), route.dp_rank(),
              kvidx::v1::RouteReason_Name(route.reason()).c_str());

  // ... the request goes to the pick; when vLLM answers, report its usage.
  kvidx::v1::RouteDoneRequest done;
  done.set_route_id(route.route_id());
  done.set_outcome(kvidx::v1::ROUTE_OUTCOME_OK);
  done.set_prompt_tokens(route.prompt_tokens());
  done.set_cached_tokens(f.cached_tokens);
  kvidx::v1::RouteDoneResponse done_resp;
  if (grpc::Status s = (*client)->RouteDone(done, &done_resp); !s.ok()) {
    std::fprintf(stderr, "RouteDone failed (%d: %s)\n", static_cast<int>(s.error_code()), s.error_message().c_str());
    return 1;
  }
  std::printf("done: kvidx expected %llu cached tokens, the engine reported %llu\n",
              static_cast<unsigned long long>(done_resp.predicted_cached_tokens()),
              static_cast<unsigned long long>(f.cached_tokens));
  return 0;
}
