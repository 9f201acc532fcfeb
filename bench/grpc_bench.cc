#include "bench/grpc_bench.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include "base/clock.h"
#include "index/block_hasher.h"
#include "ingest/testing/encoder.h"
#include "bench/publish_store.h"
#include "ingest/testing/fake_engine.h"
#include "kvidx/v1/kvidx.grpc.pb.h"
#include "server/node.h"
#include "server/server.h"

namespace {

using namespace kvidx;
using Clock = std::chrono::steady_clock;

struct Flags {
  int replicas = 64;
  int prompt_tokens = 8192;
  int prompts = 64;
  int clients = 2;
  double seconds = 5;
  int runs = 3;
  std::string mode = "all";
  bool churn = true;
  double churn_rate = 5000;  // batches/s during measurement; 0 = as fast as ingest takes them
  int holders = 8;          // replicas holding (a prefix of) each prompt; 0 = 3/4 of all
  int shared_blocks = 32;   // system prompt every replica holds (blocks)
  // kvidx-server binaries to measure, each in its own process, taking turns
  // run by run; none = a server in this process.
  std::vector<std::string> server_bins;
};

bool ParseFlags(int argc, char** argv, Flags* f) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&]() -> const char* { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--replicas") f->replicas = std::atoi(val());
    else if (a == "--prompt-tokens") f->prompt_tokens = std::atoi(val());
    else if (a == "--prompts") f->prompts = std::atoi(val());
    else if (a == "--clients") f->clients = std::atoi(val());
    else if (a == "--seconds") f->seconds = std::atof(val());
    else if (a == "--runs") f->runs = std::atoi(val());
    else if (a == "--mode") f->mode = val();
    else if (a == "--no-churn") f->churn = false;
    else if (a == "--churn-rate") f->churn_rate = std::atof(val());
    else if (a == "--holders") f->holders = std::atoi(val());
    else if (a == "--shared-blocks") f->shared_blocks = std::atoi(val());
    else if (a == "--server-bin") f->server_bins.emplace_back(val());
    else return false;
  }
  return f->replicas >= 1 && f->replicas <= 1024 && f->holders >= 0 && f->shared_blocks >= 0 &&
         f->prompt_tokens >= 16 && f->prompts >= 1 && f->clients >= 1 &&
         f->seconds > 0 && f->runs >= 1 &&
         (f->mode == "tokens" || f->mode == "hashes" || f->mode == "stream" || f->mode == "all");
}

struct Sample {
  double qps = 0, p50 = 0, p90 = 0, p99 = 0, ingest_bps = 0;
  double server_cpu_us = -1;   // server process CPU per query (-1: in this process)
  double bench_cpu_us = 0;     // this process's CPU per query: clients, publishers (and an in-process server)
};

double Pct(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  size_t k = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<long>(k), v.end());
  return v[k];
}

// The server one session measures: in this process, or a kvidx-server
// binary in its own (so its CPU is told apart from the clients').
class BenchServer {
 public:
  virtual ~BenchServer() = default;
  virtual std::string target() const = 0;
  virtual uint64_t applied_batches() const = 0;
  // CPU seconds the server has used; < 0 when it shares this process.
  virtual double cpu_seconds() const = 0;
  // In-process only: the server itself (for the index-alone comparison).
  virtual server::Server* in_process() { return nullptr; }
};

class InProcessServer : public BenchServer {
 public:
  static std::unique_ptr<InProcessServer> Start(const server::ServerConfig& cfg) {
    auto srv = server::Server::Create(cfg);
    if (!srv.ok() || !srv.value()->Start().ok()) return nullptr;
    while (!srv.value()->serving()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    auto out = std::make_unique<InProcessServer>();
    out->srv_ = std::move(srv).value();
    return out;
  }
  ~InProcessServer() override { (void)srv_->Shutdown(std::chrono::seconds(1)); }
  std::string target() const override { return "127.0.0.1:" + std::to_string(srv_->grpc_port()); }
  uint64_t applied_batches() const override { return srv_->node().sink().stats().applied_batches.load(); }
  double cpu_seconds() const override { return -1; }
  server::Server* in_process() override { return srv_.get(); }

 private:
  std::unique_ptr<server::Server> srv_;
};

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  close(fd);
  return port;
}

// `bin --config F` with the session's engines; stopped with SIGTERM.
class ServerProcess : public BenchServer {
 public:
  static std::unique_ptr<ServerProcess> Start(const std::string& bin, const server::ServerConfig& cfg) {
    auto out = std::unique_ptr<ServerProcess>(new ServerProcess());
    char tmpl[] = "/tmp/kvidx-grpc-bench-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) return nullptr;
    out->dir_ = tmpl;
    out->port_ = FreePort();
    std::string y = "grpc: {listen: \"127.0.0.1:" + std::to_string(out->port_) + "\", max_query_tokens: 1048576}\n";
    y += "metrics: {listen: \"\"}\ndata_dir: \"\"\nlog: {level: warn}\nmodels:\n  - {name: bench}\nengines:\n";
    for (const server::EngineEntry& e : cfg.engines) {
      y += "  - {replica: " + e.engine.replica + ", model: bench, endpoint: \"" + e.engine.endpoint +
           "\", replay_endpoint: \"" + e.engine.replay_endpoint + "\"}\n";
    }
    const std::string config = out->dir_ + "/kvidx.yaml";
    if (FILE* f = std::fopen(config.c_str(), "w")) {
      std::fputs(y.c_str(), f);
      std::fclose(f);
    }
    const std::string log = out->dir_ + "/server.log";
    out->pid_ = fork();
    if (out->pid_ == 0) {
      if (std::freopen(log.c_str(), "w", stderr) == nullptr) _exit(127);
      execl(bin.c_str(), bin.c_str(), "--config", config.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    auto ch = grpc::CreateChannel(out->target(), grpc::InsecureChannelCredentials());
    auto stub = kvidx::v1::KvIndex::NewStub(ch);
    for (int i = 0; i < 500; ++i) {
      grpc::ClientContext ctx;
      kvidx::v1::GetStatsResponse st;
      if (stub->GetStats(&ctx, kvidx::v1::GetStatsRequest(), &st).ok() &&
          st.serving()) {
        out->stub_ = std::move(stub);
        return out;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::fprintf(stderr, "%s did not start serving (log: %s)\n", bin.c_str(), log.c_str());
    return nullptr;
  }
  ~ServerProcess() override {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      int status = 0;
      waitpid(pid_, &status, 0);
    }
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string target() const override { return "127.0.0.1:" + std::to_string(port_); }
  uint64_t applied_batches() const override {
    grpc::ClientContext ctx;
    kvidx::v1::GetStatsResponse st;
    return stub_->GetStats(&ctx, kvidx::v1::GetStatsRequest(), &st).ok() ? st.applied_batches() : 0;
  }
  double cpu_seconds() const override {
    FILE* f = std::fopen(("/proc/" + std::to_string(pid_) + "/stat").c_str(), "r");
    if (f == nullptr) return 0;
    char buf[1024];
    const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
    std::fclose(f);
    buf[n] = '\0';
    const char* p = std::strrchr(buf, ')');   // fields after the command name
    unsigned long utime = 0, stime = 0;
    if (p == nullptr || std::sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime,
                                    &stime) != 2) {
      return 0;
    }
    return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
  }

 private:
  ServerProcess() = default;
  std::string dir_;
  int port_ = 0;
  pid_t pid_ = -1;
  std::unique_ptr<kvidx::v1::KvIndex::Stub> stub_;
};

double ProcessCpuSeconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

// The prompts every session queries: token ids and their vLLM block hashes,
// all starting with the same system prompt.
struct Workload {
  std::vector<std::vector<int64_t>> prompts;
  std::vector<std::vector<BlockKey>> keys;
  std::vector<kvidx::v1::FindPrefixRequest> by_tokens, by_hashes;
};

Workload MakeWorkload(const Flags& f, std::mt19937_64& rng) {
  Workload w;
  auto hasher = BlockHasher::Create(BlockHasherOptions{});
  w.prompts.resize(f.prompts);
  w.keys.resize(f.prompts);
  std::vector<int64_t> system_prompt(static_cast<size_t>(f.shared_blocks) * 16);
  for (auto& t : system_prompt) t = static_cast<int64_t>(rng() % 128000);
  for (int p = 0; p < f.prompts; ++p) {
    w.prompts[p].resize(f.prompt_tokens);
    for (auto& t : w.prompts[p]) t = static_cast<int64_t>(rng() % 128000);
    std::copy_n(system_prompt.begin(), std::min(system_prompt.size(), w.prompts[p].size()), w.prompts[p].begin());
    std::vector<BlockDigest> d;
    (void)hasher->HashRequest(w.prompts[p], &d);
    for (const auto& x : d) w.keys[p].push_back(x.ToKey());
  }
  w.by_tokens.resize(f.prompts);
  w.by_hashes.resize(f.prompts);
  for (int p = 0; p < f.prompts; ++p) {
    w.by_tokens[p].set_model("bench");
    for (int64_t t : w.prompts[p]) w.by_tokens[p].mutable_tokens()->add_token_ids(t);
    w.by_hashes[p].set_model("bench");
    for (const BlockKey& k : w.keys[p]) w.by_hashes[p].mutable_hashes()->add_u64(k.wire());
  }
  return w;
}

// One server with its own fleet of publishers, filled and checked.
struct Session {
  std::vector<std::unique_ptr<ingest::FakeEngine>> engines;
  std::unique_ptr<BenchServer> server;
  std::vector<std::vector<uint32_t>> held;   // [replica][prompt] blocks held
  std::atomic<uint64_t> published{0};
};

bool StartSession(const Flags& f, const Workload& w, const std::string& server_bin, std::mt19937_64& rng,
                  Session* s) {
  server::ServerConfig cfg;
  cfg.grpc.listen = "127.0.0.1:0";
  cfg.grpc.max_query_tokens = 1 << 20;
  cfg.metrics.listen = "";
  cfg.data_dir = "";
  cfg.snapshot.interval_seconds = 0;
  server::ModelConfig mc;
  mc.name = "bench";
  cfg.models.push_back(mc);
  for (int r = 0; r < f.replicas; ++r) {
    ingest::FakeEngineOptions o;
    o.endpoint = "tcp://127.0.0.1:*";
    o.pub_bind = true;
    o.replay_endpoint = "tcp://127.0.0.1:*";
    auto e = ingest::FakeEngine::Create(o);
    if (!e.ok()) {
      std::fprintf(stderr, "engine: %s\n", e.status().ToString().c_str());
      return false;
    }
    server::EngineEntry ee;
    ee.engine.replica = "vllm-" + std::to_string(r);
    ee.engine.model = "bench";
    ee.engine.endpoint = e.value()->pub_endpoint();
    ee.engine.replay_endpoint = e.value()->replay_endpoint();
    cfg.engines.push_back(ee);
    s->engines.push_back(std::move(e).value());
  }
  if (server_bin.empty()) {
    s->server = InProcessServer::Start(cfg);
  } else {
    s->server = ServerProcess::Start(server_bin, cfg);
  }
  if (s->server == nullptr) {
    std::fprintf(stderr, "server failed to start\n");
    return false;
  }
  // Each prompt is held to a random depth by `holders` random replicas (by
  // 3/4 of them with --holders 0: the worst case); every replica holds the
  // system prompt.
  const size_t nblocks = w.keys[0].size();
  const uint32_t shared = std::min<uint32_t>(static_cast<uint32_t>(f.shared_blocks), static_cast<uint32_t>(nblocks));
  s->held.assign(f.replicas, std::vector<uint32_t>(f.prompts));
  for (int r = 0; r < f.replicas; ++r) {
    for (int p = 0; p < f.prompts; ++p) {
      const bool holds = f.holders == 0 ? rng() % 4 != 0
                                        : rng() % static_cast<uint64_t>(f.replicas) < static_cast<uint64_t>(f.holders);
      uint32_t n = holds ? static_cast<uint32_t>(rng() % (nblocks + 1)) : 0;
      n = std::max(n, shared);
      s->held[r][p] = n;
      if (n == 0) continue;
      PublishStore(s->engines[r].get(), std::span<const BlockKey>(w.keys[p]).first(n));
      ++s->published;
    }
  }
  while (s->server->applied_batches() < s->published) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  return true;
}

// The answers equal what was published.
bool CheckAnswers(const Flags& f, const Workload& w, const Session& s) {
  auto stub = kvidx::v1::KvIndex::NewStub(grpc::CreateChannel(s.server->target(), grpc::InsecureChannelCredentials()));
  for (int p = 0; p < std::min(f.prompts, 4); ++p) {
    grpc::ClientContext ctx;
    kvidx::v1::FindPrefixResponse resp;
    if (!stub->FindPrefix(&ctx, w.by_tokens[p], &resp).ok()) {
      std::fprintf(stderr, "sanity query failed\n");
      return false;
    }
    for (const auto& m : resp.replicas()) {
      int r = std::atoi(m.replica().c_str() + 5);
      if (m.matched_blocks() != s.held[r][p]) {
        std::fprintf(stderr, "sanity: %s prompt %d: %u != %u\n", m.replica().c_str(), p, m.matched_blocks(),
                     s.held[r][p]);
        return false;
      }
    }
  }
  return true;
}

// In-process only: FindPrefix on the server's index and the hashing alone.
void ReportIndexAlone(const Flags& f, const Workload& w, server::Server& server, std::mt19937_64& rng) {
  auto hasher = BlockHasher::Create(BlockHasherOptions{});
  PrefixMatch pm;
  auto model = server.node().FindModel("bench");
  std::vector<double> us;
  for (int i = 0; i < 20000; ++i) {
    int p = static_cast<int>(rng() % static_cast<uint64_t>(f.prompts));
    auto t0 = Clock::now();
    (void)server.node().index().FindPrefix(model->id, w.keys[p], PrefixFilter{}, &pm);
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  std::vector<double> hs;
  std::vector<BlockDigest> d;
  for (int i = 0; i < 2000; ++i) {
    int p = static_cast<int>(rng() % static_cast<uint64_t>(f.prompts));
    auto t0 = Clock::now();
    (void)hasher->HashRequest(w.prompts[p], &d);
    hs.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  std::printf("in-process: index FindPrefix p50 %.1f us p99 %.1f us (%zu sources matched); hashing p50 %.1f us\n",
              Pct(us, 0.5), Pct(us, 0.99), pm.sources.size(), Pct(hs, 0.5));
}

// Store 16 fresh blocks and remove the 16 stored before, per batch, to
// random replicas, while `on`; paced at --churn-rate and never more than
// ~1000 batches ahead of ingest.
void Churn(const Flags& f, Session& s, const std::atomic<bool>& on, const std::atomic<bool>& stop) {
  std::mt19937_64 crng(7);
  std::vector<std::vector<BlockKey>> last(f.replicas);
  Clock::time_point next_at = Clock::now();
  uint64_t applied = s.server->applied_batches();
  while (!stop.load()) {
    if (!on.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      continue;
    }
    int r = static_cast<int>(crng() % static_cast<uint64_t>(f.replicas));
    ingest::EventBatch b;
    b.ts = WallSeconds();
    b.data_parallel_rank = 0;
    if (!last[r].empty()) {
      ingest::KvEvent e;
      e.type = ingest::EventType::kBlockRemoved;
      e.block_hashes = {0, static_cast<uint32_t>(last[r].size())};
      b.keys = last[r];
      e.medium = "GPU";
      b.events.push_back(e);
    }
    last[r].clear();
    for (int i = 0; i < 16; ++i) last[r].push_back(BlockKey::FromU64(crng()));
    ingest::KvEvent st;
    st.type = ingest::EventType::kBlockStored;
    st.block_hashes = {static_cast<uint32_t>(b.keys.size()), 16};
    b.keys.insert(b.keys.end(), last[r].begin(), last[r].end());
    st.block_size = 16;
    st.medium = "GPU";
    b.events.push_back(st);
    s.engines[r]->Publish(b, ingest::WireEra::Newest());
    ++s.published;
    if (f.churn_rate > 0) {
      next_at += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(1.0 / f.churn_rate));
      if (next_at < Clock::now() - std::chrono::milliseconds(100)) next_at = Clock::now();
      std::this_thread::sleep_until(next_at);
    }
    while (!stop.load() && s.published > applied + 1000) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      applied = s.server->applied_batches();
    }
  }
}

// One closed-loop client: queries until `done`, latencies in `lat`.
void Client(const Flags& f, const Workload& w, const std::string& target, const std::string& mode, int c,
            const std::atomic<bool>& go, const std::atomic<bool>& done, std::vector<double>* lat) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // one connection per client
  auto stub = kvidx::v1::KvIndex::NewStub(grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args));
  std::mt19937_64 qrng(1000 + static_cast<uint64_t>(c));
  kvidx::v1::FindPrefixResponse resp;
  kvidx::v1::FindPrefixResult res;
  std::unique_ptr<grpc::ClientContext> sctx;
  std::unique_ptr<grpc::ClientReaderWriter<kvidx::v1::FindPrefixRequest, kvidx::v1::FindPrefixResult>> stream;
  if (mode == "stream") {
    sctx = std::make_unique<grpc::ClientContext>();
    stream = stub->FindPrefixStream(sctx.get());
  }
  lat->reserve(1 << 20);
  while (!go.load()) std::this_thread::yield();
  while (!done.load()) {
    int p = static_cast<int>(qrng() % static_cast<uint64_t>(f.prompts));
    auto t0 = Clock::now();
    bool ok;
    if (mode == "stream") {
      ok = stream->Write(w.by_hashes[p]) && stream->Read(&res) && res.code() == 0;
    } else {
      grpc::ClientContext ctx;
      resp.Clear();
      ok = stub->FindPrefix(&ctx, mode == "tokens" ? w.by_tokens[p] : w.by_hashes[p], &resp).ok();
    }
    auto t1 = Clock::now();
    if (!ok) {
      std::fprintf(stderr, "query failed\n");
      std::exit(1);
    }
    lat->push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  if (stream) {
    stream->WritesDone();
    (void)stream->Finish();
  }
}

Sample RunMode(const Flags& f, const Workload& w, const Session& s, const std::string& mode) {
  std::atomic<bool> go{false}, done{false};
  std::vector<std::vector<double>> lat(f.clients);
  std::vector<std::thread> th;
  const std::string target = s.server->target();
  for (int c = 0; c < f.clients; ++c) {
    th.emplace_back([&, c] { Client(f, w, target, mode, c, go, done, &lat[c]); });
  }
  const uint64_t b0 = s.server->applied_batches();
  const double server_cpu0 = s.server->cpu_seconds(), bench_cpu0 = ProcessCpuSeconds();
  auto t0 = Clock::now();
  go.store(true);
  std::this_thread::sleep_for(std::chrono::duration<double>(f.seconds));
  done.store(true);
  for (auto& t : th) t.join();
  double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  const double server_cpu = s.server->cpu_seconds() - server_cpu0, bench_cpu = ProcessCpuSeconds() - bench_cpu0;
  const uint64_t b1 = s.server->applied_batches();
  std::vector<double> all;
  for (auto& v : lat) all.insert(all.end(), v.begin(), v.end());
  Sample out;
  out.qps = static_cast<double>(all.size()) / secs;
  out.ingest_bps = static_cast<double>(b1 - b0) / secs;
  out.p50 = Pct(all, 0.50);
  out.p90 = Pct(all, 0.90);
  out.p99 = Pct(all, 0.99);
  const double n = std::max<double>(1, static_cast<double>(all.size()));
  out.server_cpu_us = server_cpu0 < 0 ? -1 : server_cpu * 1e6 / n;
  out.bench_cpu_us = bench_cpu * 1e6 / n;
  return out;
}

}  // namespace

int RunGrpcBench(int argc, char** argv) {
  Flags f;
  if (!ParseFlags(argc, argv, &f)) {
    std::fprintf(stderr,
                 "usage: kvidx-bench grpc [--replicas N] [--prompt-tokens N] [--prompts N] [--clients N] "
                 "[--seconds S] [--runs N] [--mode tokens|hashes|stream|all] [--no-churn] "
                 "[--server-bin PATH]...\n");
    return 2;
  }
  spdlog::set_level(spdlog::level::warn);
  std::mt19937_64 rng(42);
  const Workload w = MakeWorkload(f, rng);
  // "" = the server in this process.
  const std::vector<std::string> servers = f.server_bins.empty() ? std::vector<std::string>{""} : f.server_bins;
  std::vector<std::string> modes =
      f.mode == "all" ? std::vector<std::string>{"hashes", "tokens", "stream"} : std::vector<std::string>{f.mode};
  // samples[server][mode]
  std::vector<std::vector<std::vector<Sample>>> samples(servers.size(), std::vector<std::vector<Sample>>(modes.size()));
  std::printf("%-8s %-8s %4s %12s %10s %10s %10s %16s %14s %14s\n", "server", "mode", "run", "queries/s", "p50 us",
              "p90 us", "p99 us", "ingest batch/s", "srv cpu us/q", "bench cpu us/q");
  for (int run = 0; run < f.runs; ++run) {
    for (size_t si = 0; si < servers.size(); ++si) {
      // Alternated: the servers take turns going first.
      const size_t k = (si + static_cast<size_t>(run)) % servers.size();
      Session s;
      std::mt19937_64 srng(43);   // the same fleet for every server
      if (!StartSession(f, w, servers[k], srng, &s) || !CheckAnswers(f, w, s)) return 1;
      if (run == 0 && s.server->in_process() != nullptr) ReportIndexAlone(f, w, *s.server->in_process(), rng);
      std::atomic<bool> churn_on{f.churn}, stop{false};
      std::thread churn([&] { Churn(f, s, churn_on, stop); });
      for (size_t mi = 0; mi < modes.size(); ++mi) {
        const Sample x = RunMode(f, w, s, modes[mi]);
        samples[k][mi].push_back(x);
        std::printf("%-8s %-8s %4d %12.0f %10.1f %10.1f %10.1f %16.0f %14.1f %14.1f\n",
                    servers[k].empty() ? "inproc" : ("bin" + std::to_string(k)).c_str(), modes[mi].c_str(), run + 1,
                    x.qps, x.p50, x.p90, x.p99, x.ingest_bps, x.server_cpu_us, x.bench_cpu_us);
        std::fflush(stdout);
      }
      stop.store(true);
      churn.join();
    }
  }
  for (size_t k = 0; k < servers.size(); ++k) {
    if (!servers[k].empty()) std::printf("bin%zu = %s\n", k, servers[k].c_str());
    for (size_t mi = 0; mi < modes.size(); ++mi) {
      auto med = [&](double Sample::*m) {
        std::vector<double> v;
        for (auto& x : samples[k][mi]) v.push_back(x.*m);
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
      };
      std::printf("%-8s %-8s %4s %12.0f %10.1f %10.1f %10.1f %16.0f %14.1f %14.1f\n",
                  servers[k].empty() ? "inproc" : ("bin" + std::to_string(k)).c_str(), modes[mi].c_str(), "med",
                  med(&Sample::qps), med(&Sample::p50), med(&Sample::p90), med(&Sample::p99),
                  med(&Sample::ingest_bps), med(&Sample::server_cpu_us), med(&Sample::bench_cpu_us));
    }
  }
  return 0;
}
