#include "tools/sim/ttft_command.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/kvidx/cli_common.h"
#include "tools/sim/fleet_policies.h"
#include "tools/sim/timed_run.h"
#include "tools/sim/timed_workload.h"

namespace kvidx::sim {
namespace {

constexpr char kUsage[] = R"(usage: kvidx-sim ttft --token-file F [options]

Replays timed requests through a latency-modelled fleet once per routing
policy (same requests, same fleet shape, a fresh cache each), with a real
kvidx-server in the loop, and reports TTFT per policy (docs/ROUTING.md).

scenario
  --scenario S          trace | overload | hotspot | burst | unique | scale-up (trace)
  --trace FILE          Mooncake-format JSONL (trace, overload; scale-up if given)
  --rate-scale X        trace arrivals sped up X times (1; overload: 3)
  --max-requests N      first N trace requests (0 = all)
  --requests N          synthetic requests (2000)
  --rate R              synthetic requests (burst: bursts) per second (hotspot 30, burst 1.5, unique 6)
  --system-prompts N    hotspot: shared system prompts (32)
  --zipf S              hotspot: popularity exponent (1.2)
  --burst-n N           burst: siblings per burst (8)
  --join-at S           the last replica joins at S simulated seconds (scale-up: a third of the run)
  --seed N              workload and random-policy seed (7)
policies
  --policies LIST       comma-separated (random,round-robin,least-loaded,prefix-only,dynamo,llm-d,kvidx)
fleet (must match the server's model: kvidx-sim --print-config)
  --replicas N          engines (8)    --dp N  DP ranks per engine (1)
  --blocks-per-rank N   GPU KV blocks per rank (16384)
  --model NAME          (sim-model)    --base-port P  (0 = random free range)
engine model (tools/sim/engine_model.h)
  --token-budget N      max_num_batched_tokens (8192)
  --prefill-tps X       prefill tokens per second (20000)
  --step-ms X           per-step overhead (5)
  --decode-us X         per decoding request per step (100)
  --ingress-ms X        router to engine queue (10)
  --scrape-interval S   simulated seconds between the engines' /metrics updates that kvidx
                        scrapes for Route (1; 0 = no /metrics). The server needs a short
                        routing.scrape_interval_ms (e.g. 10): each decision after an update
                        waits until kvidx has scraped it. With routing.clock: simulated
                        the loop drives the server's route clock and scrapes itself
                        (AdvanceClock, ScrapeLoads): kvidx's rows repeat exactly; the
                        server's scrape_interval_ms is then simulated time too (1000
                        for the default interval: readings fresh until the next one)
output
  --markdown            the table as Markdown
(--server, --token-file, --timeout-ms (30000 here), --json: as for the kvidx CLI)
)";

constexpr cli::FlagSpec kFlags[] = {
    {"--scenario"}, {"--trace"}, {"--rate-scale"}, {"--max-requests"}, {"--requests"}, {"--rate"},
    {"--system-prompts"}, {"--zipf"}, {"--burst-n"}, {"--join-at"}, {"--seed"}, {"--policies"},
    {"--replicas"}, {"--dp"}, {"--blocks-per-rank"}, {"--model"}, {"--base-port"}, {"--token-budget"},
    {"--prefill-tps"}, {"--step-ms"}, {"--decode-us"}, {"--ingress-ms"}, {"--scrape-interval"},
    {"--markdown", false},
};

struct Setup {
  std::string scenario = "trace";
  std::vector<TimedRequest> requests;
  std::vector<std::string> policies;
  TimedRunOptions run;
};

// A double flag in [lo, hi], or the default.
std::optional<int> GetDouble(const cli::CommandLine& cl, const char* flag, double lo, double hi, double* out) {
  const std::string* v = cl.Get(flag);
  if (v == nullptr) return std::nullopt;
  char* end = nullptr;
  const double x = std::strtod(v->c_str(), &end);
  if (v->empty() || end != v->c_str() + v->size() || !(x >= lo && x <= hi)) {
    return cl.UsageError(std::string(flag) + ": expected a number in [" + cli::FormatDouble(lo, 3) + ", " +
                         cli::FormatDouble(hi, 3) + "], got \"" + *v + "\"");
  }
  *out = x;
  return std::nullopt;
}

std::optional<int> ParsePolicies(const cli::CommandLine& cl, std::vector<std::string>* out) {
  const std::string* v = cl.Get("--policies");
  if (v == nullptr) {
    *out = FleetPolicyNames();
    return std::nullopt;
  }
  size_t start = 0;
  while (start <= v->size()) {
    size_t comma = v->find(',', start);
    if (comma == std::string::npos) comma = v->size();
    std::string name = v->substr(start, comma - start);
    bool known = false;
    for (const std::string& n : FleetPolicyNames()) known |= n == name;
    if (!known) return cl.UsageError("--policies: unknown policy \"" + name + "\"");
    out->push_back(name);
    start = comma + 1;
  }
  return std::nullopt;
}

std::optional<int> ParseFleet(const cli::CommandLine& cl, TimedRunOptions* run) {
  FleetOptions& f = run->fleet;
  f.replicas = 8;
  f.dp = 1;
  f.blocks_per_rank = 16384;
  f.base_port = 0;
  uint64_t v = 0;
  if (auto rc = cl.GetUint("--replicas", 1, 256, &(v = f.replicas))) return rc;
  f.replicas = static_cast<int>(v);
  if (auto rc = cl.GetUint("--dp", 1, 64, &(v = f.dp))) return rc;
  f.dp = static_cast<int>(v);
  if (auto rc = cl.GetUint("--blocks-per-rank", 16, 1u << 24, &(v = f.blocks_per_rank))) return rc;
  f.blocks_per_rank = v;
  if (auto rc = cl.GetUint("--base-port", 0, 65000, &(v = 0))) return rc;
  f.base_port = static_cast<int>(v);
  if (const std::string* m = cl.Get("--model")) f.model = *m;
  EngineModelOptions& e = run->engine;
  if (auto rc = cl.GetUint("--token-budget", 64, 1u << 20, &(v = e.token_budget))) return rc;
  e.token_budget = static_cast<uint32_t>(v);
  double tps = 1.0 / e.prefill_cost_s, step_ms = e.step_overhead_s * 1e3, decode_us = e.decode_cost_s * 1e6;
  double ingress_ms = run->ingress_s * 1e3;
  if (auto rc = GetDouble(cl, "--prefill-tps", 100, 1e8, &tps)) return rc;
  if (auto rc = GetDouble(cl, "--step-ms", 0, 1e4, &step_ms)) return rc;
  if (auto rc = GetDouble(cl, "--decode-us", 0, 1e6, &decode_us)) return rc;
  if (auto rc = GetDouble(cl, "--ingress-ms", 0, 1e5, &ingress_ms)) return rc;
  e.prefill_cost_s = 1.0 / tps;
  e.step_overhead_s = step_ms / 1e3;
  e.decode_cost_s = decode_us / 1e6;
  run->ingress_s = ingress_ms / 1e3;
  return std::nullopt;
}

std::optional<int> LoadTrace(const cli::CommandLine& cl, double default_scale, Setup* s) {
  const std::string* path = cl.Get("--trace");
  if (path == nullptr) return cl.UsageError("--scenario " + s->scenario + " needs --trace FILE");
  double scale = default_scale;
  uint64_t max = 0;
  if (auto rc = GetDouble(cl, "--rate-scale", 1e-3, 1e3, &scale)) return rc;
  if (auto rc = cl.GetUint("--max-requests", 0, 1u << 30, &max)) return rc;
  Result<std::vector<TimedRequest>> r = LoadTimedTrace(*path, scale, max);
  if (!r.ok()) return cl.Fail(r.status().ToString());
  s->requests = std::move(r).value();
  return std::nullopt;
}

std::optional<int> MakeRequests(const cli::CommandLine& cl, Setup* s) {
  if (s->scenario == "trace") return LoadTrace(cl, 1, s);
  if (s->scenario == "overload") return LoadTrace(cl, 3, s);
  SyntheticOptions o;
  o.scenario = s->scenario == "scale-up" ? "hotspot" : s->scenario;
  o.rate = o.scenario == "burst" ? 1.5 : o.scenario == "unique" ? 6 : 30;
  if (o.scenario == "hotspot") {
    // Long unique questions behind a shared system prompt: the hottest
    // prompt's traffic alone is more prefill than one rank can do.
    o.system_tokens = 2048;
    o.question_min = 1024;
    o.question_max = 4096;
  }
  uint64_t v = 0;
  if (auto rc = cl.GetUint("--requests", 1, 1u << 24, &(v = o.requests))) return rc;
  o.requests = v;
  if (auto rc = cl.GetUint("--system-prompts", 1, 1u << 20, &(v = o.system_prompts))) return rc;
  o.system_prompts = static_cast<uint32_t>(v);
  if (auto rc = cl.GetUint("--burst-n", 1, 1024, &(v = o.burst_n))) return rc;
  o.burst_n = static_cast<uint32_t>(v);
  if (auto rc = cl.GetUint("--seed", 0, UINT64_MAX, &(v = o.seed))) return rc;
  o.seed = v;
  if (auto rc = GetDouble(cl, "--rate", 1e-3, 1e6, &o.rate)) return rc;
  if (auto rc = GetDouble(cl, "--zipf", 0, 10, &o.zipf)) return rc;
  if (s->scenario == "scale-up" && cl.Has("--trace")) return LoadTrace(cl, 1, s);
  Result<std::vector<TimedRequest>> r = MakeSynthetic(o);
  if (!r.ok()) return cl.UsageError(r.status().message());
  s->requests = std::move(r).value();
  return std::nullopt;
}

std::optional<int> Parse(const cli::CommandLine& cl, Setup* s) {
  if (const std::string* sc = cl.Get("--scenario")) s->scenario = *sc;
  const std::string& sc = s->scenario;
  if (sc != "trace" && sc != "overload" && sc != "hotspot" && sc != "burst" && sc != "unique" && sc != "scale-up") {
    return cl.UsageError("--scenario: unknown scenario \"" + sc + "\"");
  }
  if (auto rc = ParsePolicies(cl, &s->policies)) return rc;
  if (auto rc = ParseFleet(cl, &s->run)) return rc;
  if (auto rc = MakeRequests(cl, s)) return rc;
  uint64_t seed = s->run.seed;
  if (auto rc = cl.GetUint("--seed", 0, UINT64_MAX, &seed)) return rc;
  s->run.seed = seed;
  if (sc == "scale-up") s->run.join_at = s->requests.back().arrival / 3;
  if (auto rc = GetDouble(cl, "--join-at", 0, 1e9, &s->run.join_at)) return rc;
  s->run.scrape_interval_s = 1.0;
  if (auto rc = GetDouble(cl, "--scrape-interval", 0, 3600, &s->run.scrape_interval_s)) return rc;
  return std::nullopt;
}

std::string Ms(double seconds) { return cli::FormatDouble(seconds * 1e3, 0); }

std::vector<std::string> Row(const TimedReport& r) {
  const std::string bursts =
      r.bursts == 0 ? "-" : cli::FormatDouble(static_cast<double>(r.burst_computations) / r.bursts, 2);
  const std::string join = r.join_to_half_share_s < 0 ? "-" : cli::FormatDouble(r.join_to_half_share_s, 1);
  return {r.policy, Ms(r.Percentile(50)), Ms(r.Percentile(90)), Ms(r.Percentile(99)),
          cli::FormatDouble(r.output_tokens_per_s(), 0), cli::FormatDouble(100 * r.hit_rate(), 1),
          cli::FormatDouble(r.imbalance(), 2), bursts, join, cli::FormatDouble(r.wall_s, 1)};
}

const std::vector<std::string> kHeader = {"policy", "TTFT p50 ms", "p90 ms", "p99 ms", "out tok/s", "hit %",
                                          "imbalance", "computations/burst", "join->half share s", "wall s"};

void PrintMarkdownRow(const std::vector<std::string>& cells) {
  std::printf("|");
  for (const std::string& c : cells) std::printf(" %s |", c.c_str());
  std::printf("\n");
}

void PrintMarkdown(const std::vector<TimedReport>& reports) {
  PrintMarkdownRow(kHeader);
  PrintMarkdownRow(std::vector<std::string>(kHeader.size(), "---"));
  for (const TimedReport& r : reports) PrintMarkdownRow(Row(r));
}

void PrintJson(const Setup& s, const std::vector<TimedReport>& reports) {
  nlohmann::json out = {{"scenario", s.scenario}, {"requests", s.requests.size()}, {"policies", nlohmann::json::array()}};
  for (const TimedReport& r : reports) {
    out["policies"].push_back({{"policy", r.policy}, {"ttft_p50_s", r.Percentile(50)}, {"ttft_p90_s", r.Percentile(90)},
                               {"ttft_p99_s", r.Percentile(99)}, {"output_tokens_per_s", r.output_tokens_per_s()},
                               {"hit_rate", r.hit_rate()}, {"imbalance", r.imbalance()}, {"bursts", r.bursts},
                               {"burst_computations", r.burst_computations},
                               {"join_to_half_share_s", r.join_to_half_share_s}, {"requests", r.requests},
                               {"kvidx_waits", r.kvidx_waits}, {"scrape_waits", r.scrape_waits}, {"wall_s", r.wall_s}});
    // Only Route reads the server's clock.
    if (r.policy == "kvidx") out["policies"].back()["server_clock"] = r.server_clock ? "simulated" : "wall";
  }
  std::printf("%s\n", out.dump(2).c_str());
}

}  // namespace

int TtftMain(int argc, char** argv) {
  // Each policy adds and removes its engines through the admin API, which
  // can take seconds on a loaded machine: a longer default deadline.
  cli::CommandLine cl("sim ttft", kUsage, {{"--timeout-ms", "30000"}});
  if (auto rc = cl.Parse(argc, argv, kFlags, 0)) return *rc;
  Setup s;
  if (auto rc = Parse(cl, &s)) return *rc;
  std::unique_ptr<client::Client> kvidx;
  if (auto rc = cl.Connect(&kvidx)) return *rc;
  if (!cl.has_admin_credentials()) return cl.UsageError("needs --token-file (each policy registers its own engines)");
  std::vector<TimedReport> reports;
  for (const std::string& p : s.policies) {
    TimedRunOptions o = s.run;
    o.policy = p;
    if (!cl.json()) std::fprintf(stderr, "kvidx-sim ttft: %s: %zu requests...\n", p.c_str(), s.requests.size());
    Result<TimedReport> r = RunTimed(o, s.requests, *kvidx);
    if (!r.ok()) return cl.Fail(p + ": " + r.status().ToString());
    if (p == "kvidx" && !cl.json()) {
      std::fprintf(stderr, "kvidx-sim ttft: kvidx Route ran on %s\n",
                   r->server_clock ? "simulated time (routing.clock: simulated): its row repeats exactly"
                                   : "the server's wall clock (routing.clock: wall): its row may vary a little");
    }
    reports.push_back(std::move(r).value());
  }
  if (cl.json()) {
    PrintJson(s, reports);
  } else if (cl.Has("--markdown")) {
    PrintMarkdown(reports);
  } else {
    cli::Table t(kHeader);
    for (const TimedReport& r : reports) t.AddRow(Row(r));
    std::printf("scenario %s, %zu requests\n%s", s.scenario.c_str(), s.requests.size(), t.Render().c_str());
  }
  return 0;
}

}  // namespace kvidx::sim
