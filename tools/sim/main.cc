// kvidx-sim: a simulated vLLM fleet with ground truth, run against a live
// kvidx-server.
//
// Starts replicas x DP ranks of SimRank (real block pools, real vLLM block
// hashes, real ZMQ PUB + ROUTER replay on 127.0.0.1, vLLM's port rule),
// optionally registers them with the server (admin API), drives a workload
// through them routed at random and/or by kvidx's longest-prefix answer,
// injects faults, and measures fidelity: kvidx's per-source answer against
// every rank's true cache contents. See `kvidx-sim --help` and
// docs/FIDELITY.md.
//
// Exit codes: 0 = fidelity 100% on every source kvidx reported EXACT;
// 1 = fidelity below 100%, or a runtime error (server unreachable, ports
// busy, ...); 2 = usage error.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "client/client.h"
#include "index/block_hasher.h"
#include "ingest/testing/encoder.h"
#include "tools/kvidx/json_writer.h"
#include "tools/sim/fidelity.h"
#include "tools/sim/fleet.h"
#include "tools/sim/fleet_dns.h"
#include "tools/sim/runner.h"
#include "tools/sim/ttft_command.h"
#include "tools/sim/workload.h"

namespace {

using namespace kvidx;
using namespace kvidx::sim;

constexpr char kUsage[] = R"(usage: kvidx-sim [options]
       kvidx-sim ttft [options]   routing policies compared by TTFT (kvidx-sim ttft --help)

Simulates a vLLM fleet (replicas x DP ranks) publishing KV events on
127.0.0.1, drives a workload through it routed at random and/or by kvidx,
and checks kvidx's answers against the engines' true cache contents.

server
  --server ADDR            kvidx-server gRPC address (127.0.0.1:50051)
  --token-file F           admin token file (needed by --register; gives per-source loss counts)
  --register               add the fleet's engines through the admin API (kvidx engines add)
  --unregister             remove them again at exit
  --timeout-ms N           per-call deadline (2000)
  --print-config           print the fleet as kvidx YAML (models: and engines:, or discovery: with
                           --dns-port) and exit
  --no-engines             with --print-config: only the models: section

fleet
  --replicas N             engines (4)
  --dp N                   data-parallel ranks per engine (2)
  --blocks-per-rank N      GPU blocks per rank, vLLM num_gpu_blocks (1024)
  --model NAME             kvidx model name (sim-model)
  --replica-prefix P       replica names P0, P1, ... (vllm-)
  --base-port P            replica i publishes on P + i*stride (+ rank), replay on that + stride/2;
                           0 = a random free range (25557)
  --port-stride N          ports per replica (max(10, 2*dp))
  --hash-algo A            sha256 | sha256_cbor | xxhash | xxhash_cbor (sha256)
  --hash-seed S            the engines' PYTHONHASHSEED (unset)
  --block-size N           tokens per block (16)
  --wire-era E             map | map-origin | array-v1..array-v6 [-norank] [-signed] (map)
  --bytes-hashes           publish digests as bytes (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0)
  --replay-format F        new (with topic, vLLM >= #45177) | old (new)
  --topic T                KVEventsConfig.topic ("")
  --buffer-steps N         replay ring size in batches (10000)

fleet published through DNS (kvidx follows it with a `discovery:` DNS provider)
  --dns-port P             run dnsmasq on 127.0.0.1:P publishing one SRV record per running replica
                           (_kvevents._tcp.DOMAIN -> <prefix><i>.DOMAIN, each on its own 127.1.x.y
                           address with the same ports); no engines are registered
  --dns-domain D           the domain of the replicas' names (sim.test)
  --scale-at N:R[,N:R...]  before global request N (0-based, counted over all phases) scale to R
                           replicas: new ones get new names, the newest ones stop; e.g.
                           --scale-at 20000:5,40000:1 (needs --dns-port, or --register)
  --grace-ms N             with --print-config: the provider's grace_ms (5000)
  --dns-interval-ms N      with --print-config: the provider's interval_ms (1000)
  --removal-wait S         at the end, wait this long for the stopped replicas' sources to leave
                           kvidx (after its grace period); fail if they do not (60)

workload
  --requests N             requests per routing phase (5000 unless --duration)
  --duration S             seconds per routing phase
  --rate R                 requests per second (0 = as fast as possible)
  --routing R              random | kvidx | both (both: random, then kvidx, same requests)
  --system-prompts N       shared system prompts (100)
  --system-tokens MIN:MAX  system prompt length (256:1024)
  --zipf S                 Zipf exponent of system prompt popularity (1.0)
  --session-prob P         probability a request continues a conversation (0.3)
  --unique-prob P          probability of a prompt sharing nothing (0.05)
  --turn-tokens MIN:MAX    user turn length (16:256)
  --max-session-tokens N   conversations stop growing here (6000)
  --sessions N             conversations kept open (512)
  --full-report F          fraction of requests with kv_cache_report_mode=full (0.1)
  --seed N                 workload seed (7)

faults
  --drop-rate F            fraction of batches dropped at the publishers (0)
  --drop-mode M            hwm (lost live, kept for replay) | send-error (not buffered either) (hwm)
  --no-replay              engines without a replay socket: every drop is a counted loss
  --restart-at N           restart one engine rank before global request N (0-based)
  --restart-rank I         which rank, replica-major index (1)
  --restart-keep-sockets   restart without re-creating the sockets
  --pause-at N             pause all traffic before global request N
  --pause-seconds S        for this long (5)

fidelity and output
  --samples N              fidelity queries per checkpoint (200)
  --check-every N          checkpoint every N requests, besides the end of each phase (0)
  --json                   final report as JSON on stdout
  --quiet                  no progress line
  --help
)";

struct Flags {
  client::ClientOptions client;
  std::string token_file;
  bool do_register = false;
  bool unregister = false;
  bool print_config = false;
  bool no_engines = false;
  FleetOptions fleet;
  WorkloadOptions workload;
  uint64_t requests = 0;
  double duration = 0;
  double rate = 0;
  std::string routing = "both";
  double full_report = 0.1;
  double drop_rate = 0;
  std::optional<uint64_t> restart_at;
  size_t restart_rank = 1;
  std::optional<uint64_t> pause_at;
  double pause_seconds = 5;
  size_t samples = 200;
  uint64_t check_every = 0;
  bool json = false;
  bool quiet = false;
  int dns_port = 0;
  std::vector<ScaleStep> scale_at;
  DnsProviderTiming dns_timing;
  double removal_wait = 60;
};

[[noreturn]] void UsageError(const std::string& msg) {
  std::fprintf(stderr, "kvidx-sim: %s\n(see kvidx-sim --help)\n", msg.c_str());
  std::exit(2);
}

uint64_t ParseU64(const std::string& flag, const std::string& v, uint64_t lo, uint64_t hi) {
  char* end = nullptr;
  errno = 0;
  unsigned long long x = std::strtoull(v.c_str(), &end, 10);
  if (v.empty() || v[0] == '-' || end != v.c_str() + v.size() || errno != 0 || x < lo || x > hi) {
    UsageError(flag + ": expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got \"" +
               v + "\"");
  }
  return x;
}

double ParseDouble(const std::string& flag, const std::string& v, double lo, double hi) {
  char* end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  if (v.empty() || end != v.c_str() + v.size() || !(x >= lo && x <= hi)) {
    UsageError(flag + ": expected a number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got \"" +
               v + "\"");
  }
  return x;
}

void ParseRange(const std::string& flag, const std::string& v, uint32_t* lo, uint32_t* hi) {
  size_t colon = v.find(':');
  if (colon == std::string::npos) UsageError(flag + ": expected MIN:MAX, got \"" + v + "\"");
  *lo = static_cast<uint32_t>(ParseU64(flag, v.substr(0, colon), 1, 1u << 20));
  *hi = static_cast<uint32_t>(ParseU64(flag, v.substr(colon + 1), 1, 1u << 20));
  if (*lo > *hi) UsageError(flag + ": MIN must not exceed MAX");
}

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  f.client.target = "127.0.0.1:50051";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    std::string inline_value;
    bool has_inline = false;
    if (a.rfind("--", 0) == 0) {
      if (size_t eq = a.find('='); eq != std::string::npos) {
        inline_value = a.substr(eq + 1);
        a = a.substr(0, eq);
        has_inline = true;
      }
    }
    auto val = [&]() -> std::string {
      if (has_inline) return inline_value;
      if (i + 1 >= argc) UsageError(a + " needs a value");
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (a == "--server") f.client.target = val();
    else if (a == "--token-file") f.token_file = val();
    else if (a == "--register") f.do_register = true;
    else if (a == "--unregister") f.unregister = true;
    else if (a == "--timeout-ms") f.client.deadline = std::chrono::milliseconds(ParseU64(a, val(), 1, 3600000));
    else if (a == "--print-config") f.print_config = true;
    else if (a == "--no-engines") f.no_engines = true;
    else if (a == "--replicas") f.fleet.replicas = static_cast<int>(ParseU64(a, val(), 1, 1000));
    else if (a == "--dp") f.fleet.dp = static_cast<int>(ParseU64(a, val(), 1, 256));
    else if (a == "--blocks-per-rank") f.fleet.blocks_per_rank = ParseU64(a, val(), 1, 1u << 30);
    else if (a == "--model") f.fleet.model = val();
    else if (a == "--replica-prefix") f.fleet.replica_prefix = val();
    else if (a == "--base-port") f.fleet.base_port = static_cast<int>(ParseU64(a, val(), 0, 65535));
    else if (a == "--port-stride") f.fleet.port_stride = static_cast<int>(ParseU64(a, val(), 2, 10000));
    else if (a == "--hash-algo") {
      Result<HashAlgo> algo = ParseHashAlgo(val());
      if (!algo.ok()) UsageError(a + ": " + algo.status().message());
      f.fleet.hasher.algo = algo.value();
    } else if (a == "--hash-seed") f.fleet.hasher.seed = val();
    else if (a == "--block-size") f.fleet.hasher.block_size = ParseU64(a, val(), 1, 1u << 20);
    else if (a == "--wire-era") {
      std::string v = val();
      if (!ingest::ParseWireEra(v, &f.fleet.era)) UsageError(a + ": unknown era \"" + v + "\"");
    } else if (a == "--bytes-hashes") f.fleet.bytes_hashes = true;
    else if (a == "--replay-format") {
      std::string v = val();
      if (v == "new" || v == "with-topic") f.fleet.replay_format = ingest::ReplayFormat::kWithTopic;
      else if (v == "old" || v == "legacy") f.fleet.replay_format = ingest::ReplayFormat::kLegacy;
      else UsageError(a + ": expected new or old, got \"" + v + "\"");
    } else if (a == "--topic") f.fleet.topic = val();
    else if (a == "--buffer-steps") f.fleet.buffer_steps = ParseU64(a, val(), 1, 100000000);
    else if (a == "--requests") f.requests = ParseU64(a, val(), 1, uint64_t{1} << 40);
    else if (a == "--duration") f.duration = ParseDouble(a, val(), 0.001, 1e7);
    else if (a == "--rate") f.rate = ParseDouble(a, val(), 0, 1e9);
    else if (a == "--routing") {
      f.routing = val();
      if (f.routing != "random" && f.routing != "kvidx" && f.routing != "both") {
        UsageError(a + ": expected random, kvidx or both, got \"" + f.routing + "\"");
      }
    } else if (a == "--system-prompts") f.workload.system_prompts = static_cast<uint32_t>(ParseU64(a, val(), 1, 1000000));
    else if (a == "--system-tokens") ParseRange(a, val(), &f.workload.system_min, &f.workload.system_max);
    else if (a == "--zipf") f.workload.zipf_s = ParseDouble(a, val(), 0, 10);
    else if (a == "--session-prob") f.workload.session_prob = ParseDouble(a, val(), 0, 1);
    else if (a == "--unique-prob") f.workload.unique_prob = ParseDouble(a, val(), 0, 1);
    else if (a == "--turn-tokens") ParseRange(a, val(), &f.workload.turn_min, &f.workload.turn_max);
    else if (a == "--max-session-tokens") f.workload.max_session_tokens = static_cast<uint32_t>(ParseU64(a, val(), 1, 1u << 24));
    else if (a == "--sessions") f.workload.max_sessions = static_cast<uint32_t>(ParseU64(a, val(), 1, 1000000));
    else if (a == "--full-report") f.full_report = ParseDouble(a, val(), 0, 1);
    else if (a == "--seed") f.workload.seed = ParseU64(a, val(), 0, UINT64_MAX);
    else if (a == "--drop-rate") f.drop_rate = ParseDouble(a, val(), 0, 0.5);
    else if (a == "--drop-mode") {
      std::string v = val();
      if (v == "hwm") f.fleet.drop_mode = ingest::DropMode::kNotSent;
      else if (v == "send-error") f.fleet.drop_mode = ingest::DropMode::kNotBuffered;
      else UsageError(a + ": expected hwm or send-error, got \"" + v + "\"");
    } else if (a == "--no-replay") f.fleet.replay = false;
    else if (a == "--restart-at") f.restart_at = ParseU64(a, val(), 0, UINT64_MAX);
    else if (a == "--restart-rank") f.restart_rank = ParseU64(a, val(), 0, 1000000);
    else if (a == "--restart-keep-sockets") f.fleet.restart_new_sockets = false;
    else if (a == "--pause-at") f.pause_at = ParseU64(a, val(), 0, UINT64_MAX);
    else if (a == "--pause-seconds") f.pause_seconds = ParseDouble(a, val(), 0, 86400);
    else if (a == "--samples") f.samples = ParseU64(a, val(), 0, 10000000);
    else if (a == "--check-every") f.check_every = ParseU64(a, val(), 0, UINT64_MAX);
    else if (a == "--dns-port") f.dns_port = static_cast<int>(ParseU64(a, val(), 1, 65535));
    else if (a == "--dns-domain") f.fleet.dns_domain = val();
    else if (a == "--scale-at") {
      Result<std::vector<ScaleStep>> steps = ParseScaleSteps(val());
      if (!steps.ok()) UsageError(a + ": " + steps.status().message());
      f.scale_at = std::move(steps).value();
    } else if (a == "--grace-ms") f.dns_timing.grace_ms = static_cast<uint32_t>(ParseU64(a, val(), 0, 86400000));
    else if (a == "--dns-interval-ms") f.dns_timing.interval_ms = static_cast<uint32_t>(ParseU64(a, val(), 200, 86400000));
    else if (a == "--removal-wait") f.removal_wait = ParseDouble(a, val(), 0, 86400);
    else if (a == "--json") f.json = true;
    else if (a == "--quiet") f.quiet = true;
    else UsageError("unknown argument \"" + std::string(argv[i]) + "\"");
    if (has_inline && (a == "--register" || a == "--unregister" || a == "--print-config" || a == "--no-engines" ||
                       a == "--bytes-hashes" || a == "--no-replay" || a == "--restart-keep-sockets" ||
                       a == "--json" || a == "--quiet")) {
      UsageError(a + " takes no value");
    }
  }
  if (f.requests == 0 && f.duration == 0) f.requests = 5000;
  if (f.dns_port != 0 && f.fleet.dns_domain.empty()) f.fleet.dns_domain = "sim.test";
  if (f.dns_port == 0 && !f.fleet.dns_domain.empty()) UsageError("--dns-domain goes with --dns-port");
  if (f.dns_port != 0 && f.do_register) UsageError("--dns-port publishes the fleet through DNS: no --register");
  if (!f.scale_at.empty() && f.dns_port == 0 && !f.do_register) {
    UsageError("--scale-at needs --dns-port (kvidx follows DNS) or --register (the admin API)");
  }
  if (f.dns_port != 0 && f.dns_timing.min_interval_ms > f.dns_timing.interval_ms) {
    f.dns_timing.min_interval_ms = f.dns_timing.interval_ms;
  }
  if (f.do_register && f.token_file.empty()) UsageError("--register needs --token-file (admin API)");
  if (f.unregister && !f.do_register) UsageError("--unregister needs --register");
  if (f.print_config && f.fleet.base_port == 0) UsageError("--print-config needs a fixed --base-port");
  if (f.no_engines && !f.print_config) UsageError("--no-engines goes with --print-config");
  if (f.restart_at && f.restart_rank >= static_cast<size_t>(f.fleet.replicas) * static_cast<size_t>(f.fleet.dp)) {
    UsageError("--restart-rank must be below replicas * dp");
  }
  if (Status s = ValidateFleet(f.fleet); !s.ok()) UsageError(s.message());
  if (Status s = ValidateWorkload(f.workload); !s.ok()) UsageError(s.message());
  return f;
}

std::string Pct(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f%%", x);
  return buf;
}

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))];
}

int Fail(const std::string& msg) {
  std::fprintf(stderr, "kvidx-sim: %s\n", msg.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "ttft") == 0) return TtftMain(argc - 1, argv + 1);
  Flags f = ParseFlags(argc, argv);

  if (f.print_config) {
    std::fputs(ConfigYaml(f.fleet, true, !f.no_engines && f.dns_port == 0).c_str(), stdout);
    if (f.dns_port != 0 && !f.no_engines) {
      std::fputs(DiscoveryYaml(f.fleet, "127.0.0.1:" + std::to_string(f.dns_port), f.dns_timing).c_str(), stdout);
    }
    return 0;
  }

  if (!f.token_file.empty()) {
    Result<std::string> tok = client::ReadTokenFile(f.token_file);
    if (!tok.ok()) return Fail("--token-file: " + tok.status().ToString());
    f.client.admin_token = tok.value();
  }
  Result<std::unique_ptr<client::Client>> kv = client::Client::Create(f.client);
  if (!kv.ok()) return Fail(kv.status().ToString());
  const client::Client& kvidx = *kv.value();

  // The server must know the model (models are fixed at server start).
  {
    v1::GetStatsResponse st;
    if (grpc::Status s = kvidx.GetStats(&st); !s.ok()) {
      return Fail("cannot reach kvidx-server at " + f.client.target + ": " + s.error_message());
    }
    const v1::ModelStats* model = nullptr;
    for (const auto& m : st.models()) {
      if (m.name() == f.fleet.model) model = &m;
    }
    if (model == nullptr) {
      return Fail("the server has no model \"" + f.fleet.model + "\"; add this to its config:\n" +
                  ConfigYaml(f.fleet, true, false));
    }
    if (model->hash_algo() != HashAlgoName(f.fleet.hasher.algo) || model->block_size() != f.fleet.hasher.block_size) {
      std::fprintf(stderr,
                   "kvidx-sim: warning: the server's model %s uses %s with %u-token blocks, the fleet %s with %zu: "
                   "expect fidelity failures\n",
                   f.fleet.model.c_str(), model->hash_algo().c_str(), model->block_size(),
                   std::string(HashAlgoName(f.fleet.hasher.algo)).c_str(), f.fleet.hasher.block_size);
    }
  }

  Result<std::unique_ptr<Fleet>> fleet_or = Fleet::Create(f.fleet);
  if (!fleet_or.ok()) return Fail(fleet_or.status().ToString());
  Fleet& fleet = *fleet_or.value();
  const FleetOptions& fo = fleet.options();
  if (!f.quiet) {
    std::fprintf(stderr, "kvidx-sim: %d replicas x %d DP ranks on 127.0.0.1 ports %d.., %zu GPU blocks per rank, %s%s, "
                 "%zu-token blocks, wire %s%s, replay %s\n",
                 fo.replicas, fo.dp, fo.base_port, fo.blocks_per_rank, std::string(HashAlgoName(fo.hasher.algo)).c_str(),
                 fo.hasher.seed ? (" seed " + *fo.hasher.seed).c_str() : "", fo.hasher.block_size,
                 ingest::WireEraName(fo.era).c_str(), fo.bytes_hashes ? " (bytes hashes)" : "",
                 !fo.replay ? "off" : fo.replay_format == ingest::ReplayFormat::kLegacy ? "on (old format)" : "on");
  }

  std::unique_ptr<FleetDns> dns;
  std::filesystem::path dns_dir;
  if (f.dns_port != 0) {
    char tmpl[] = "/tmp/kvidx-sim-dns.XXXXXX";
    if (mkdtemp(tmpl) == nullptr) return Fail(std::string("mkdtemp: ") + std::strerror(errno));
    dns_dir = tmpl;
    Result<std::unique_ptr<FleetDns>> d = FleetDns::Start(fleet, dns_dir, f.dns_port);
    if (!d.ok()) return Fail("DNS: " + d.status().ToString());
    dns = std::move(d).value();
    if (!f.quiet) {
      std::fprintf(stderr, "kvidx-sim: fleet published as SRV %s on %s (kvidx-sim --print-config gives the provider)\n",
                   SrvName(fo).c_str(), dns->nameserver().c_str());
    }
  }
  struct DirRemover {
    std::filesystem::path dir;
    ~DirRemover() {
      std::error_code ec;
      if (!dir.empty()) std::filesystem::remove_all(dir, ec);
    }
  } remove_dns_dir{dns_dir};

  if (f.do_register) {
    if (Status s = RegisterEngines(fleet, kvidx, f.quiet); !s.ok()) return Fail("register: " + s.ToString());
  }
  if (Status s = WarmUp(fleet, kvidx, std::chrono::seconds(30)); !s.ok()) {
    return Fail("warm-up: " + s.ToString() +
                (f.do_register || dns ? "" : "\n(are the engines configured in kvidx? use --register or --print-config)"));
  }
  Result<KvidxCounters> before = ReadCounters(fleet, kvidx);
  if (!before.ok()) return Fail(before.status().ToString());

  std::vector<Routing> routings;
  if (f.routing != "kvidx") routings.push_back(Routing::kRandom);
  if (f.routing != "random") routings.push_back(Routing::kKvidx);

  const bool tty = isatty(STDERR_FILENO) == 1;
  Runner runner(&fleet, &kvidx);
  size_t removed_unregistered = 0;
  std::set<std::string> registered;  // --register: replica names added so far
  for (const EngineDesc& e : fleet.engines()) registered.insert(e.replica);
  runner.set_on_scale([&]() -> Status {
    if (!f.quiet) std::fprintf(stderr, "\nkvidx-sim: scaled to %d replicas\n", fleet.replicas());
    if (dns) return dns->Publish(fleet);
    for (; removed_unregistered < fleet.removed().size(); ++removed_unregistered) {
      const std::string& r = fleet.removed()[removed_unregistered].replica;
      if (grpc::Status s = kvidx.RemoveEngine(r); !s.ok()) return FromGrpc(s, "RemoveEngine " + r);
    }
    for (const EngineDesc& e : fleet.engines()) {
      if (!registered.insert(e.replica).second) continue;
      if (Status s = RegisterEngine(e, kvidx, true); !s.ok()) return s;
    }
    return Status::Ok();
  });
  std::vector<PhaseReport> phases;
  uint64_t global = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t p = 0; p < routings.size(); ++p) {
    if (p > 0) {
      // Same requests from an empty cache: reset_prefix_cache on every engine.
      fleet.ResetAll();
      if (Status s = WaitCaughtUp(fleet, kvidx, std::chrono::seconds(20)); !s.ok()) return Fail(s.ToString());
    }
    PhaseOptions po;
    po.name = RoutingName(routings[p]);
    po.routing = routings[p];
    po.workload = f.workload;
    po.requests = f.requests;
    po.duration_seconds = f.duration;
    po.rate = f.rate;
    po.full_report = f.full_report;
    po.drop_rate = f.drop_rate;
    po.first_request = global;
    po.restart_at = f.restart_at;
    po.restart_rank = f.restart_rank;
    po.pause_at = f.pause_at;
    po.pause_seconds = f.pause_seconds;
    po.scale_at = f.scale_at;
    po.check_every = f.check_every;
    po.samples = f.samples;
    po.seed = f.workload.seed * 31 + p;
    ProgressFn progress;
    if (!f.quiet) {
      progress = [&](const PhaseReport& r, double evs, double qps) {
        std::fprintf(stderr, "%s[kvidx-sim] %-6s routing: %7" PRIu64 " requests, %8.0f events/s, %6.0f queries/s, "
                     "hit rate %5.1f%%, fidelity %s%s",
                     tty ? "\r" : "", r.name.c_str(), r.requests, evs, qps, 100 * r.hit_rate(),
                     r.checks ? Pct(r.fidelity.percent()).c_str() : "-", tty ? "   " : "\n");
        std::fflush(stderr);
      };
    }
    Result<PhaseReport> rep = runner.Run(po, progress);
    if (tty && !f.quiet) std::fputc('\n', stderr);
    if (!rep.ok()) return Fail(rep.status().ToString());
    global += rep->requests;
    phases.push_back(std::move(rep).value());
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  // Stopped replicas must leave kvidx once their grace period ends.
  std::string removal_error;
  double removal_seconds = 0;
  if (!fleet.removed().empty()) {
    const auto r0 = std::chrono::steady_clock::now();
    Status gone = WaitRemovedGone(fleet, kvidx, std::chrono::milliseconds(static_cast<int64_t>(f.removal_wait * 1000)));
    removal_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - r0).count();
    if (!gone.ok()) removal_error = gone.ToString();
  }

  Result<KvidxCounters> after = ReadCounters(fleet, kvidx);
  if (!after.ok()) return Fail(after.status().ToString());

  // Totals.
  FidelityResult fid;
  uint64_t requests = 0, routing_q = 0, fidelity_q = 0, routing_err = 0, events = 0, batches = 0, dropped = 0,
           restarts = 0, pauses = 0, settles = 0;
  double traffic_s = 0, routed_s = 0;
  std::vector<double> lat;
  std::string catch_up_error;
  for (const PhaseReport& r : phases) {
    fid.Add(r.fidelity);
    requests += r.requests;
    routing_q += r.routing_queries;
    fidelity_q += r.fidelity_queries;
    routing_err += r.routing_errors;
    events += r.events_published;
    batches += r.batches_published;
    dropped += r.batches_dropped;
    restarts += r.restarts;
    pauses += r.pauses;
    settles += r.settle_requests;
    traffic_s += r.seconds;
    if (r.routing == Routing::kKvidx) routed_s += r.seconds;
    lat.insert(lat.end(), r.query_us.begin(), r.query_us.end());
    if (catch_up_error.empty()) catch_up_error = r.catch_up_error;
  }
  const uint64_t lost = after->batches_lost - std::min(after->batches_lost, before->batches_lost);
  const uint64_t expected_lost = fleet.unrecoverable_drops();
  const double evs = traffic_s > 0 ? static_cast<double>(events) / traffic_s : 0;
  // Routing queries per second of kvidx-routed traffic.
  const double qps = routed_s > 0 ? static_cast<double>(routing_q) / routed_s : 0;
  const bool pass = fid.perfect() && removal_error.empty();
  uint64_t scale_steps = 0;
  for (const PhaseReport& r : phases) scale_steps += r.scale_steps;
  const PhaseReport* random = nullptr;
  const PhaseReport* routed = nullptr;
  for (const PhaseReport& r : phases) (r.routing == Routing::kRandom ? random : routed) = &r;

  if (f.json) {
    cli::JsonWriter j;
    j.BeginObject();
    j.Key("fleet").BeginObject();
    j.Key("replicas").Int(fo.replicas).Key("dp").Int(fo.dp).Key("blocks_per_rank").Uint(fo.blocks_per_rank);
    j.Key("model").String(fo.model).Key("hash_algo").String(HashAlgoName(fo.hasher.algo));
    j.Key("block_size").Uint(fo.hasher.block_size).Key("wire_era").String(ingest::WireEraName(fo.era));
    j.Key("bytes_hashes").Bool(fo.bytes_hashes).Key("replay").Bool(fo.replay).Key("base_port").Int(fo.base_port);
    j.EndObject();
    j.Key("phases").BeginArray();
    for (const PhaseReport& r : phases) {
      j.BeginObject();
      j.Key("routing").String(RoutingName(r.routing)).Key("requests").Uint(r.requests);
      j.Key("prompt_blocks").Uint(r.prompt_blocks).Key("hit_blocks").Uint(r.hit_blocks);
      j.Key("hit_rate").Double(r.hit_rate()).Key("seconds").Double(r.seconds);
      j.Key("events_published").Uint(r.events_published).Key("batches_published").Uint(r.batches_published);
      j.Key("batches_dropped").Uint(r.batches_dropped).Key("restarts").Uint(r.restarts);
      j.Key("routing_queries").Uint(r.routing_queries).Key("routing_errors").Uint(r.routing_errors);
      j.Key("fidelity_queries").Uint(r.fidelity.queries).Key("fidelity_percent").Double(r.fidelity.percent());
      j.Key("checks").Uint(r.checks);
      j.EndObject();
    }
    j.EndArray();
    j.Key("hit_rate_random");
    random ? j.Double(random->hit_rate()) : j.Null();
    j.Key("hit_rate_kvidx");
    routed ? j.Double(routed->hit_rate()) : j.Null();
    j.Key("fidelity").BeginObject();
    j.Key("percent").Double(fid.percent()).Key("queries").Uint(fid.queries).Key("queries_ok").Uint(fid.queries_ok);
    j.Key("comparisons_exact").Uint(fid.comparisons_exact).Key("mismatches_exact").Uint(fid.mismatches_exact);
    j.Key("comparisons_degraded").Uint(fid.comparisons_degraded);
    j.Key("mismatches_degraded").Uint(fid.mismatches_degraded);
    j.Key("comparisons_other").Uint(fid.comparisons_other).Key("mismatches_other").Uint(fid.mismatches_other);
    j.Key("rpc_errors").Uint(fid.rpc_errors);
    j.Key("examples").BeginArray();
    for (const std::string& e : fid.examples) j.String(e);
    j.EndArray();
    j.EndObject();
    j.Key("requests").Uint(requests).Key("traffic_seconds").Double(traffic_s).Key("wall_seconds").Double(wall);
    j.Key("events_published").Uint(events).Key("batches_published").Uint(batches);
    j.Key("events_per_second").Double(evs);
    j.Key("routing_queries").Uint(routing_q).Key("fidelity_queries").Uint(fidelity_q);
    j.Key("queries_per_second").Double(qps).Key("routing_errors").Uint(routing_err);
    j.Key("query_latency_us").BeginObject();
    j.Key("p50").Double(Quantile(lat, 0.5)).Key("p99").Double(Quantile(lat, 0.99)).EndObject();
    j.Key("faults").BeginObject();
    j.Key("batches_dropped").Uint(dropped).Key("unrecoverable_drops").Uint(expected_lost);
    j.Key("restarts").Uint(restarts).Key("pauses").Uint(pauses).Key("settle_requests").Uint(settles);
    j.EndObject();
    j.Key("kvidx").BeginObject();
    j.Key("per_source_counters").Bool(after->per_source);
    j.Key("batches_lost").Uint(lost).Key("expected_lost").Uint(expected_lost);
    j.Key("gaps").Uint(after->gaps - std::min(after->gaps, before->gaps));
    j.Key("batches_replayed");
    after->per_source ? j.Uint(after->batches_replayed - std::min(after->batches_replayed, before->batches_replayed))
                      : j.Null();
    j.Key("restarts_detected");
    after->per_source ? j.Uint(after->restarts - std::min(after->restarts, before->restarts)) : j.Null();
    j.Key("events_ingested").Uint(after->events - std::min(after->events, before->events));
    j.Key("sources_by_state").BeginObject();
    for (const auto& [state, n] : after->sources_by_state) j.Key(state).Uint(n);
    j.EndObject();
    j.Key("catch_up_error").String(catch_up_error);
    j.EndObject();
    j.Key("scaling").BeginObject();
    j.Key("steps").Uint(scale_steps).Key("replicas_at_end").Int(fleet.replicas());
    j.Key("replicas_stopped").Uint(fleet.removed().size());
    j.Key("dns_publications").Uint(dns ? dns->publications() : 0);
    j.Key("removal_wait_seconds").Double(removal_seconds).Key("removal_error").String(removal_error);
    j.EndObject();
    j.Key("ok").Bool(pass);
    j.EndObject();
    std::printf("%s\n", j.str().c_str());
  } else {
    std::printf("==== kvidx-sim report ====\n");
    std::printf("fleet:      %d replicas x %d DP ranks, %zu GPU blocks per rank, %s, %zu-token blocks, wire %s%s, "
                "replay %s\n",
                fo.replicas, fo.dp, fo.blocks_per_rank, std::string(HashAlgoName(fo.hasher.algo)).c_str(),
                fo.hasher.block_size, ingest::WireEraName(fo.era).c_str(), fo.bytes_hashes ? " (bytes hashes)" : "",
                fo.replay ? "on" : "off");
    for (const PhaseReport* r : {random, routed}) {
      if (r == nullptr) continue;
      std::printf("hit rate:   %-6s routing %5.1f%%  (%" PRIu64 " of %" PRIu64 " prompt blocks reused, %" PRIu64
                  " requests in %.1f s)\n",
                  RoutingName(r->routing), 100 * r->hit_rate(), r->hit_blocks, r->prompt_blocks, r->requests, r->seconds);
    }
    std::printf("fidelity:   %s of %" PRIu64 " queries exact on every EXACT source (%" PRIu64 " comparisons, %" PRIu64
                " wrong); DEGRADED sources: %" PRIu64 " of %" PRIu64 " comparisons differ; other states: %" PRIu64
                "\n",
                Pct(fid.percent()).c_str(), fid.queries, fid.comparisons_exact, fid.mismatches_exact,
                fid.mismatches_degraded, fid.comparisons_degraded, fid.comparisons_other);
    if (fid.comparisons_exact == 0) std::printf("            (no source was EXACT: nothing kvidx promised to check)\n");
    for (const std::string& e : fid.examples) std::printf("            mismatch: %s\n", e.c_str());
    std::printf("events:     %" PRIu64 " published in %" PRIu64 " batches, %.0f events/s; kvidx ingested %" PRIu64 "\n",
                events, batches, evs, after->events - std::min(after->events, before->events));
    std::printf("queries:    %" PRIu64 " routing queries, %.0f queries/s, p50 %.0f us, p99 %.0f us (client side); "
                "%" PRIu64 " fidelity queries%s\n",
                routing_q, qps, Quantile(lat, 0.5), Quantile(lat, 0.99), fidelity_q,
                routing_err ? (", " + std::to_string(routing_err) + " routing queries failed").c_str() : "");
    std::printf("faults:     %" PRIu64 " batches dropped (%" PRIu64 " unrecoverable), engine restarts %" PRIu64
                ", pauses %" PRIu64 "\n",
                dropped, expected_lost, restarts, pauses);
    std::printf("kvidx:      lost %" PRIu64 " batches (expected %" PRIu64 "), gaps %" PRIu64, lost, expected_lost,
                after->gaps - std::min(after->gaps, before->gaps));
    if (after->per_source) {
      std::printf(", replayed %" PRIu64 ", restarts detected %" PRIu64,
                  after->batches_replayed - std::min(after->batches_replayed, before->batches_replayed),
                  after->restarts - std::min(after->restarts, before->restarts));
    }
    std::printf("; sources:");
    for (const auto& [state, n] : after->sources_by_state) std::printf(" %s=%" PRIu64, state.c_str(), n);
    std::printf("\n");
    if (!catch_up_error.empty()) std::printf("warning:    %s\n", catch_up_error.c_str());
    if (scale_steps > 0 || dns) {
      std::printf("scaling:    %" PRIu64 " steps, %d replicas at the end, %zu stopped%s; their sources left kvidx "
                  "%.1f s after the traffic ended%s%s\n",
                  scale_steps, fleet.replicas(), fleet.removed().size(), dns ? " (published through DNS)" : "",
                  removal_seconds, removal_error.empty() ? "" : ": ", removal_error.c_str());
    }
    std::printf("result:     %s\n", pass                  ? "PASS (100% fidelity on EXACT sources)"
                                     : !fid.perfect()       ? "FAIL (kvidx answered wrong for an EXACT source)"
                                                            : "FAIL (stopped replicas' sources not removed)");
  }
  std::fflush(stdout);

  if (f.unregister && !dns) {
    for (const EngineDesc& e : fleet.engines()) {
      if (grpc::Status s = kvidx.RemoveEngine(e.replica); !s.ok()) {
        std::fprintf(stderr, "kvidx-sim: remove %s: %s\n", e.replica.c_str(), s.error_message().c_str());
      }
    }
  }
  return pass ? 0 : 1;
}
