// The kvidx-server binary as a subprocess: exit codes for bad configs and
// usage, --check-config, JSON logs, the metrics endpoint, SIGHUP reloading
// the engine list, SIGTERM stopping with a final snapshot, and a corrupt data
// directory (exit 1 unless --on-corrupt=start-empty).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <cstring>
#include <future>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <string_view>

#include <grpcpp/generic/generic_stub.h>

#include "common/child_process.h"
#include "common/http_get.h"
#include "common/json_lite.h"
#include "server/node.h"
#include "server_test_util.h"

namespace kvidx::server::testing {
namespace {

using namespace std::chrono_literals;
using kvidx::testing::Child;
using kvidx::testing::HttpGet;
using kvidx::testing::RandomFreePort;
using kvidx::testing::Slurp;
using kvidx::testing::WriteAtomically;

const std::string kServerBin = std::string(KVIDX_BIN_DIR) + "/kvidx-server";

struct RunResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs kvidx-server to completion (at most 20 s).
RunResult RunServer(const TempDir& dir, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {kServerBin};
  argv.insert(argv.end(), args.begin(), args.end());
  const std::string out = dir.path() + "/run.out", err = dir.path() + "/run.err";
  RunResult r;
  std::unique_ptr<Child> c = Child::Spawn(argv, out, err);
  if (!c) return r;
  std::optional<int> code = c->WaitExit(20s);
  EXPECT_TRUE(code.has_value()) << "kvidx-server did not exit";
  r.exit_code = code.value_or(-1);
  r.out = Slurp(out);
  r.err = Slurp(err);
  return r;
}

// --- JSON log lines -----------------------------------------------------------

// True if `text` is exactly one JSON object (strict: common/json_lite.h); its
// string members go to `strings` (the same key twice is an error).
bool ParseJsonObject(std::string_view text, std::map<std::string, std::string>* strings, std::string* error) {
  const std::optional<kvidx::testing::JsonValue> v = kvidx::testing::JsonParser::Parse(text, error);
  if (!v) return false;
  if (!v->is_object()) {
    *error = "not an object";
    return false;
  }
  for (const auto& [key, value] : v->members) {
    if (value.is_string() && !strings->emplace(key, value.text).second) {
      *error = "duplicate key " + key;
      return false;
    }
  }
  return true;
}

TEST(ServerProcessJson, TheCheckerItself) {
  std::map<std::string, std::string> f;
  std::string e;
  EXPECT_TRUE(ParseJsonObject(R"({"a":"x\"y\\z\u0001","b":[1,-2.5e3,{"c":null}],"d":true})", &f, &e)) << e;
  EXPECT_EQ(f["a"], std::string("x\"y\\z\x01"));
  for (const char* bad : {R"({"a":"x"y"})", R"({"a":"x\qy"})", "{\"a\":\"x\ty\"}", R"({"a":1,})", R"({"a":1} x)",
                          R"(["a"])", R"({"a":01})", R"({a:1})", "{\"a\":\"x"}) {
    f.clear();
    EXPECT_FALSE(ParseJsonObject(bad, &f, &e)) << bad;
  }
  // \u escapes decode to UTF-8, a surrogate pair to one code point; an
  // unpaired surrogate and a repeated key are errors.
  f.clear();
  EXPECT_TRUE(ParseJsonObject(R"({"a":"\u00e9\u20ac\ud83d\ude00"})", &f, &e)) << e;
  EXPECT_EQ(f["a"], "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
  for (const char* bad : {R"({"a":"\ud83d"})", R"({"a":"\ude00"})", R"({"a":"x","a":"y"})"}) {
    f.clear();
    EXPECT_FALSE(ParseJsonObject(bad, &f, &e)) << bad;
  }
}

// Every non-empty line of `log` must be a JSON object with string ts, level
// and msg; returns the decoded messages.
std::vector<std::string> JsonLogMessages(const std::string& log) {
  std::vector<std::string> msgs;
  std::istringstream in(log);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    std::map<std::string, std::string> f;
    std::string error;
    EXPECT_TRUE(ParseJsonObject(line, &f, &error)) << "stderr line " << n << " is not a JSON object (" << error
                                                   << "): " << line;
    if (!error.empty()) continue;
    for (const char* key : {"ts", "level", "msg"}) EXPECT_EQ(f.count(key), 1u) << key << " missing: " << line;
    const std::string& ts = f["ts"];
    EXPECT_TRUE(ts.size() >= 20 && ts[4] == '-' && ts[10] == 'T' && ts.back() == 'Z') << "ts: " << line;
    EXPECT_TRUE(f["level"] == "trace" || f["level"] == "debug" || f["level"] == "info" || f["level"] == "warning" ||
                f["level"] == "error" || f["level"] == "critical")
        << "level: " << line;
    msgs.push_back(f["msg"]);
  }
  return msgs;
}

bool AnyContains(const std::vector<std::string>& msgs, const std::string& what) {
  for (const std::string& m : msgs) {
    if (m.find(what) != std::string::npos) return true;
  }
  return false;
}

// --- Ports, HTTP -------------------------------------------------------------

bool HasLine(const std::string& text, const std::string& line) {
  std::istringstream in(text);
  std::string l;
  while (std::getline(in, l)) {
    if (!l.empty() && l.back() == '\r') l.pop_back();
    if (l == line) return true;
  }
  return false;
}

// --- The server under test ----------------------------------------------------

struct ProcConfig {
  bool metrics = true;
  std::string engines_yaml;  // the `engines:` section's entries (flow maps, one per line)
  std::string extra_yaml;    // appended verbatim
};

class ServerProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(access(kServerBin.c_str(), X_OK), 0) << kServerBin << " not built";
    config_path_ = dir_.path() + "/kvidx.yaml";
    token_file_ = dir_.File("token", std::string(kToken) + "\n");
    data_dir_ = dir_.path() + "/data";
    err_path_ = dir_.path() + "/server.err";
  }
  void TearDown() override {
    if (child_ && !child_->Poll()) child_.reset();  // SIGKILL
    if (HasFailure()) std::cerr << "--- kvidx-server stderr ---\n" << Slurp(err_path_) << "---\n";
  }

  std::string Yaml(const ProcConfig& pc) const {
    std::string y;
    y += "# kvidx-server test config\n";
    y += "grpc:\n";
    y += "  listen: \"127.0.0.1:" + std::to_string(grpc_port_) + "\"\n";
    y += "  admin_token_file: \"" + token_file_ + "\"\n";
    y += "metrics:\n";
    y += pc.metrics ? "  listen: \"127.0.0.1:" + std::to_string(metrics_port_) + "\"\n" : "  listen: \"\"\n";
    y += "data_dir: \"" + data_dir_ + "\"\n";
    y += "snapshot: {interval_seconds: 0, sync: false}\n";
    y += "ingest: {replay_timeout_ms: 500, heartbeat_ivl_ms: 200, heartbeat_timeout_ms: 1000}\n";
    y += "log: {level: info, json: true}\n";
    y += "models:\n  - {name: " + std::string(kModel) + "}\n";
    if (!pc.engines_yaml.empty()) y += "engines:\n" + pc.engines_yaml;
    y += pc.extra_yaml;
    return y;
  }
  void WriteConfig(const ProcConfig& pc) { WriteAtomically(config_path_, Yaml(pc)); }

  // Starts kvidx-server on random free ports, retrying when it cannot bind;
  // returns once it logged that it listens.
  void Launch(const ProcConfig& pc, const std::vector<std::string>& extra_args = {}) {
    for (int attempt = 0; attempt < 8; ++attempt) {
      grpc_port_ = RandomFreePort();
      metrics_port_ = RandomFreePort();
      ASSERT_GT(grpc_port_, 0);
      ASSERT_GT(metrics_port_, 0);
      if (grpc_port_ == metrics_port_) continue;
      WriteConfig(pc);
      std::vector<std::string> argv = {kServerBin, "--config", config_path_};
      argv.insert(argv.end(), extra_args.begin(), extra_args.end());
      child_ = Child::Spawn(argv, dir_.path() + "/server.out", err_path_);
      ASSERT_NE(child_, nullptr);
      std::optional<int> exited;
      const bool listening = WaitFor(
          [&] {
            exited = child_->Poll();
            return exited.has_value() || Slurp(err_path_).find("kvidx-server listening") != std::string::npos;
          },
          20s);
      ASSERT_TRUE(listening) << "kvidx-server neither listened nor exited within 20 s";
      if (!exited) {
        const std::string want = "(port " + std::to_string(grpc_port_);
        ASSERT_NE(Slurp(err_path_).find(want), std::string::npos) << Slurp(err_path_);
        return;
      }
      const std::string err = Slurp(err_path_);
      // Lost a race for a port: try others.
      if (*exited == 1 && err.find("cannot listen") != std::string::npos) continue;
      FAIL() << "kvidx-server exited with " << *exited << " at start:\n" << err;
    }
    FAIL() << "kvidx-server could not bind after 8 attempts";
  }

  Stubs Client() const {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500);
    return Connect(grpc_port_, grpc::InsecureChannelCredentials(), args);
  }
  static grpc::Status Stats(const Stubs& s, v1::GetStatsResponse* resp) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 5s);
    return s.index->GetStats(&ctx, v1::GetStatsRequest(), resp);
  }
  void WaitServing(const Stubs& s) {
    v1::GetStatsResponse st;
    ASSERT_TRUE(WaitFor(
        [&] {
          if (child_->Poll()) return true;
          return Stats(s, &st).ok() && st.serving();
        },
        20s))
        << "GetStats never reported serving";
    ASSERT_FALSE(child_->Poll().has_value()) << "kvidx-server exited with " << *child_->Poll();
  }
  // SIGTERM, then the exit code within `timeout` (-1 if it hangs).
  int Stop(std::chrono::milliseconds timeout = 10s) {
    child_->Signal(SIGTERM);
    return child_->WaitExit(timeout).value_or(-1);
  }

  TempDir dir_;
  std::string config_path_, token_file_, data_dir_, err_path_;
  int grpc_port_ = 0;
  int metrics_port_ = 0;
  std::unique_ptr<Child> child_;
};

// --- (a) and (b): configs and the command line ---------------------------------

TEST_F(ServerProcessTest, BadConfigExits2NamingFileLineAndKey) {
  struct Case {
    const char* yaml;
    const char* key;
    const char* what;
  };
  const Case cases[] = {
      {"grpc:\n  listen: \"127.0.0.1:0\"\nmetrics:\n  listen: \"\"\n  bogus_key: 1\n", "metrics.bogus_key",
       "unknown key"},
      {"# a comment\ndata_dir: \"\"\nlog:\n  level: info\n  json: maybe\n", "log.json", "\"maybe\""},
      {"models:\n  - {name: m}\nengines:\n  - replica: r0\n    dp_size: two\n    model: m\n"
       "    endpoint: \"tcp://127.0.0.1:5557\"\n",
       "engines[0].dp_size", "\"two\""},
  };
  for (const Case& c : cases) {
    const std::string path = dir_.File("bad.yaml", c.yaml);
    RunResult r = RunServer(dir_, {"--config", path});
    EXPECT_EQ(r.exit_code, 2) << c.yaml << "\n" << r.err;
    EXPECT_NE(r.err.find(path + ":5: " + c.key + ": "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(c.what), std::string::npos) << r.err;
    // --check-config reports the same error.
    r = RunServer(dir_, {"--check-config", "--config", path});
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find(path + ":5: " + c.key + ": "), std::string::npos) << r.err;
  }
  // A missing file is a config error too, naming the path.
  const std::string missing = dir_.path() + "/missing.yaml";
  RunResult r = RunServer(dir_, {"--config", missing});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(missing), std::string::npos) << r.err;
}

TEST_F(ServerProcessTest, CheckConfigAndUsage) {
  grpc_port_ = 50051;
  metrics_port_ = 9464;
  WriteConfig({});
  RunResult r = RunServer(dir_, {"--config", config_path_, "--check-config"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("OK"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(data_dir_)) << "--check-config must not touch the data directory";

  r = RunServer(dir_, {"--config", config_path_, "--frobnicate"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--frobnicate"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("usage"), std::string::npos) << r.err;

  r = RunServer(dir_, {"--config", config_path_, "--on-corrupt=maybe"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--on-corrupt"), std::string::npos) << r.err;

  r = RunServer(dir_, {"--help"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("usage"), std::string::npos) << r.out;
}

// --- (c): the life of a server ----------------------------------------------------

TEST_F(ServerProcessTest, ServesReloadsOnSighupAndSnapshotsOnSigterm) {
  auto rank = MakeRank("r0");
  ASSERT_NE(rank, nullptr);
  ASSERT_NO_FATAL_FAILURE(Launch({}));
  Stubs s = Client();
  ASSERT_NO_FATAL_FAILURE(WaitServing(s));

  // Prometheus says the same.
  std::string metrics;
  ASSERT_TRUE(WaitFor(
      [&] {
        metrics = HttpGet(metrics_port_, "/metrics");
        return HasLine(metrics, "kvidx_serving 1");
      },
      10s))
      << metrics.substr(0, 500);
  EXPECT_NE(metrics.find("200 OK"), std::string::npos);
  EXPECT_NE(metrics.find("# TYPE kvidx_serving gauge"), std::string::npos);

  // A reload with a broken config keeps the old one and logs why (the error
  // carries quotes and a backslash: the JSON log must escape them).
  const EngineEntry e = EngineFor(*rank);
  const std::string engine = "  - {replica: r0, model: " + std::string(kModel) + ", endpoint: \"" + e.engine.endpoint +
                             "\", replay_endpoint: \"" + e.engine.replay_endpoint + "\", gpu_blocks: 512}\n";
  ProcConfig broken;
  broken.engines_yaml = "  - {replica: r0, model: m, endpoint: \"" + e.engine.endpoint + "\", dp_size: tw\\o}\n";
  WriteConfig(broken);
  child_->Signal(SIGHUP);
  ASSERT_TRUE(WaitFor([&] { return Slurp(err_path_).find("config not reloaded") != std::string::npos; }, 10s));
  {
    v1::ListReplicasResponse lr;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 5s);
    ASSERT_TRUE(s.index->ListReplicas(&ctx, v1::ListReplicasRequest(), &lr).ok());
    EXPECT_EQ(lr.replicas_size(), 0);
  }

  // A good one adds the engine.
  ProcConfig with_engine;
  with_engine.engines_yaml = engine;
  WriteConfig(with_engine);
  child_->Signal(SIGHUP);
  ASSERT_TRUE(WaitFor(
      [&] {
        v1::ListReplicasResponse lr;
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + 5s);
        return s.index->ListReplicas(&ctx, v1::ListReplicasRequest(), &lr).ok() && lr.replicas_size() == 1 &&
               lr.replicas(0).replica() == "r0";
      },
      10s))
      << "ListReplicas never showed r0 after SIGHUP";

  const std::vector<int64_t> prompt = Prompt(21, 16 * 5);
  ASSERT_TRUE(rank->Serve(prompt, false).ok());
  rank->publisher().Flush();
  const size_t truth = rank->CachedPrefix(KeysOf(prompt));
  ASSERT_EQ(truth, 5u);
  ASSERT_TRUE(WaitFor([&] { return MatchedBlocks(s.index.get(), prompt, "r0") == truth; }, 10s))
      << "FindPrefix never reflected the served prompt";
  {
    grpc::ClientContext ctx;
    Admin(&ctx);
    v1::ListSourcesResponse ls;
    ASSERT_TRUE(s.admin->ListSources(&ctx, v1::ListSourcesRequest(), &ls).ok());
    ASSERT_EQ(ls.sources_size(), 1);
    EXPECT_EQ(ls.sources(0).source(), "r0/dp0");
  }

  // SIGTERM: clean exit with a final snapshot. Our channel goes first: an
  // idle connection holds the server's shutdown for its whole grace period
  // (CorruptDataDirExits1UnlessStartEmpty covers that case).
  s = Stubs();
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(Stop(10s), 0);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
  EXPECT_TRUE(std::filesystem::exists(data_dir_ + "/rocksdb/CURRENT"));

  const std::vector<std::string> msgs = JsonLogMessages(Slurp(err_path_));
  EXPECT_TRUE(AnyContains(msgs, "kvidx-server listening")) << Slurp(err_path_);
  EXPECT_TRUE(AnyContains(msgs, "SIGHUP: config not reloaded"));
  EXPECT_TRUE(AnyContains(msgs, R"(engines[0].dp_size: expected an integer in [1, 256], got "tw\\o")"))
      << Slurp(err_path_);
  EXPECT_TRUE(AnyContains(msgs, "reload: 0 engine(s) removed, 1 added"));
  EXPECT_TRUE(AnyContains(msgs, "SIGTERM: shutting down"));
  EXPECT_TRUE(AnyContains(msgs, "kvidx-server stopped"));

  // The snapshot restores in a new server on the same config.
  Result<ServerConfig> cfg = LoadConfigFile(config_path_);
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  auto again = Server::Create(cfg.value());
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(again.value()->node().restore_report().had_snapshot);
  EXPECT_GE(again.value()->node().restore_report().owners, truth);
}

// --- (d): a corrupt data directory --------------------------------------------------

TEST_F(ServerProcessTest, CorruptDataDirExits1UnlessStartEmpty) {
  ProcConfig pc;
  pc.metrics = false;
  grpc_port_ = 50051;
  WriteConfig(pc);
  {
    // A snapshot from an in-process server on the same data directory.
    Result<ServerConfig> cfg = LoadConfigFile(config_path_);
    ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
    cfg->grpc.listen = "127.0.0.1:0";
    auto s = Server::Create(cfg.value());
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ASSERT_TRUE(s.value()->Start().ok());
    ASSERT_TRUE(s.value()->SnapshotNow().ok());
    ASSERT_TRUE(s.value()->Shutdown().ok());
  }
  const std::string current = data_dir_ + "/rocksdb/CURRENT";
  ASSERT_TRUE(std::filesystem::exists(current));
  std::filesystem::resize_file(current, 0);

  RunResult r = RunServer(dir_, {"--config", config_path_});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find(data_dir_), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--on-corrupt=start-empty"), std::string::npos) << r.err;
  const std::vector<std::string> msgs = JsonLogMessages(r.err);
  EXPECT_TRUE(AnyContains(msgs, "the data directory \"" + data_dir_ + "\"")) << r.err;

  ASSERT_NO_FATAL_FAILURE(Launch(pc, {"--on-corrupt=start-empty"}));
  Stubs s = Client();
  ASSERT_NO_FATAL_FAILURE(WaitServing(s));
  v1::GetStatsResponse st;
  EXPECT_TRUE(Stats(s, &st).ok());
  // A client still connected: the grace period (5 s) runs out before the
  // final snapshot, well within 10 s.
  EXPECT_EQ(Stop(10s), 0);
  JsonLogMessages(Slurp(err_path_));
}

// --- JSON logs stay JSON when gRPC itself logs ------------------------------------------

TEST_F(ServerProcessTest, JsonLogStaysJsonWhenGrpcLogs) {
  // Hold the gRPC port: the server cannot listen, and gRPC core logs the
  // bind error itself before kvidx reports it.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = 0;
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t len = sizeof a;
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  grpc_port_ = ntohs(a.sin_port);
  ProcConfig pc;
  pc.metrics = false;
  WriteConfig(pc);
  RunResult r = RunServer(dir_, {"--config", config_path_});
  close(fd);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  const std::vector<std::string> msgs = JsonLogMessages(r.err);
  EXPECT_TRUE(AnyContains(msgs, "grpc.listen \"127.0.0.1:" + std::to_string(grpc_port_) + "\": cannot listen"))
      << r.err;
  // gRPC's own report is kept, as a JSON line.
  EXPECT_TRUE(AnyContains(msgs, "grpc: ")) << r.err;
}

// --- Hostile 16 MiB requests: the server's peak RSS stays bounded ---------------

// VmHWM (peak) or VmRSS of `pid`, in bytes.
uint64_t ProcMemory(pid_t pid, const std::string& key) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) == 0) return std::stoull(line.substr(key.size() + 1)) * 1024;
  }
  return 0;
}

TEST_F(ServerProcessTest, EightConcurrentSixteenMiBBatchesKeepPeakRssBounded) {
  ProcConfig pc;
  pc.metrics = false;
  Launch(pc);
  Stubs s = Client();
  WaitServing(s);
  const uint64_t idle = ProcMemory(child_->pid(), "VmRSS");
  // The shape that amplified most: 8M empty queries in one batch (~1 GB
  // parsed each; eight at once took 3.5 GB). The other shapes take the same
  // path (hostile_request_test.cc).
  std::string batch;
  for (int i = 0; i < (8 << 20); ++i) batch.append("\x0a\x00", 2);
  grpc::GenericStub stub(s.channel);
  constexpr int kCalls = 8;
  std::vector<std::unique_ptr<grpc::ClientContext>> ctxs;
  std::vector<grpc::ByteBuffer> resps(kCalls);
  std::vector<std::promise<grpc::Status>> done(kCalls);
  grpc::Slice slice(batch);
  const grpc::ByteBuffer req(&slice, 1);
  for (int i = 0; i < kCalls; ++i) {
    ctxs.push_back(std::make_unique<grpc::ClientContext>());
    ctxs.back()->set_deadline(std::chrono::system_clock::now() + 60s);
    stub.UnaryCall(ctxs.back().get(), "/kvidx.v1.KvIndex/FindPrefixBatch", grpc::StubOptions(), &req, &resps[i],
                   [&done, i](grpc::Status st) { done[i].set_value(st); });
  }
  for (int i = 0; i < kCalls; ++i) {
    grpc::Status st = done[i].get_future().get();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  }
  const uint64_t peak = ProcMemory(child_->pid(), "VmHWM");
  std::printf("kvidx-server: idle RSS %llu MiB, peak %llu MiB under 8 concurrent 16 MiB batches of empty queries\n",
              static_cast<unsigned long long>(idle >> 20), static_cast<unsigned long long>(peak >> 20));
  EXPECT_LT(peak - idle, uint64_t{256} << 20) << "peak RSS " << (peak >> 20) << " MiB, idle " << (idle >> 20);
  EXPECT_EQ(Stop(), 0);
}

}  // namespace
}  // namespace kvidx::server::testing
