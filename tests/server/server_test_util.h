// Helpers for tests that run a real kvidx Server on loopback with simulated
// engines (SimRank: real block pools, real vLLM hashes, real ZMQ).
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "kvidx/v1/kvidx.grpc.pb.h"
#include "server/config.h"
#include "server/server.h"
#include "tools/sim/sim_rank.h"

namespace kvidx::server::testing {

inline constexpr char kModel[] = "m";
inline constexpr char kToken[] = "s3cret-token";

// A fresh directory removed at destruction.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "kvidx-server-test-XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string File(const std::string& name, const std::string& contents) const {
    std::string p = path_ + "/" + name;
    std::ofstream(p) << contents;
    return p;
  }

 private:
  std::string path_;
};

// Polls `pred` until true or `timeout`.
inline bool WaitFor(const std::function<bool()>& pred, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pred();
}

inline std::unique_ptr<sim::SimRank> MakeRank(const std::string& replica, size_t blocks = 512) {
  sim::SimRankOptions o;
  o.replica = replica;
  o.num_blocks = blocks;
  o.publisher.endpoint = "tcp://127.0.0.1:*";
  o.publisher.pub_bind = true;
  o.publisher.replay_endpoint = "tcp://127.0.0.1:*";
  auto r = sim::SimRank::Create(o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(r).value() : nullptr;
}

inline EngineEntry EngineFor(const sim::SimRank& rank) {
  EngineEntry e;
  e.engine.replica = rank.options().replica;
  e.engine.model = kModel;
  e.engine.endpoint = const_cast<sim::SimRank&>(rank).publisher().pub_endpoint();
  e.engine.replay_endpoint = const_cast<sim::SimRank&>(rank).publisher().replay_endpoint();
  e.gpu_blocks = rank.options().num_blocks;
  return e;
}

// A config for tests: loopback port 0, no metrics unless asked, fast
// timeouts, no fsync, admin token from a file in `dir`.
inline ServerConfig TestConfig(const TempDir& dir, bool persistent = true) {
  ServerConfig c;
  c.grpc.listen = "127.0.0.1:0";
  c.grpc.admin_token_file = dir.File("token", std::string(kToken) + "\n");
  c.metrics.listen = "";
  c.data_dir = persistent ? dir.path() + "/data" : "";
  c.snapshot.interval_seconds = 0;
  c.snapshot.sync = false;
  c.ingest.replay_timeout_ms = 500;
  c.ingest.heartbeat_ivl_ms = 200;
  c.ingest.heartbeat_timeout_ms = 1000;
  ModelConfig m;
  m.name = kModel;
  c.models.push_back(m);
  return c;
}

// Two engines "a" and "b" (SimRank) and an in-memory config that lists
// both: the usual start of a fixture. Check *a and *b before use.
inline ServerConfig TwoRankConfig(const TempDir& dir, std::unique_ptr<sim::SimRank>* a,
                                  std::unique_ptr<sim::SimRank>* b) {
  *a = MakeRank("a");
  *b = MakeRank("b");
  ServerConfig cfg = TestConfig(dir, /*persistent=*/false);
  if (*a && *b) cfg.engines = {EngineFor(**a), EngineFor(**b)};
  return cfg;
}

inline std::vector<int64_t> Prompt(uint64_t seed, size_t tokens) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> t(tokens);
  for (auto& x : t) x = static_cast<int64_t>(rng() % 32000);
  return t;
}

// Block keys of a prompt as the default model's engines publish them.
inline std::vector<BlockKey> KeysOf(const std::vector<int64_t>& tokens) {
  BlockHasherOptions ho;
  auto h = BlockHasher::Create(ho);
  std::vector<BlockDigest> d;
  EXPECT_TRUE(h->HashRequest(tokens, &d).ok());
  std::vector<BlockKey> keys;
  for (const auto& x : d) keys.push_back(x.ToKey());
  return keys;
}

inline std::vector<uint64_t> U64Of(const std::vector<BlockKey>& keys) {
  std::vector<uint64_t> out;
  for (const auto& k : keys) out.push_back(k.wire());
  return out;
}

struct Stubs {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::KvIndex::Stub> index;
  std::unique_ptr<v1::KvIndexAdmin::Stub> admin;
};

inline Stubs Connect(int port, std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials(),
                     const grpc::ChannelArguments& args = {}) {
  Stubs s;
  s.channel = grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(port), creds, args);
  s.index = v1::KvIndex::NewStub(s.channel);
  s.admin = v1::KvIndexAdmin::NewStub(s.channel);
  return s;
}

// A started Server and stubs connected to it.
struct RunningServer {
  std::unique_ptr<Server> server;
  Stubs stubs;
};

// Creates and starts a Server on `cfg` and connects to its gRPC port; a
// failure is a test failure (and `server` may then be null).
inline RunningServer StartServer(ServerConfig cfg) {
  RunningServer r;
  auto s = Server::Create(std::move(cfg));
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  if (!s.ok()) return r;
  r.server = std::move(s).value();
  Status st = r.server->Start();
  EXPECT_TRUE(st.ok()) << st.ToString();
  r.stubs = Connect(r.server->grpc_port());
  return r;
}

inline void Admin(grpc::ClientContext* ctx, const std::string& token = kToken) {
  ctx->AddMetadata("authorization", "Bearer " + token);
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
}

inline grpc::Status QueryTokens(v1::KvIndex::Stub* stub, const std::vector<int64_t>& tokens,
                                v1::FindPrefixResponse* resp, const std::string& model = kModel) {
  v1::FindPrefixRequest req;
  req.set_model(model);
  for (int64_t t : tokens) req.mutable_tokens()->add_token_ids(t);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  return stub->FindPrefix(&ctx, req, resp);
}

// GPU blocks the server reports for `replica` (0 if absent).
inline uint32_t MatchedOn(const v1::FindPrefixResponse& r, const std::string& replica) {
  for (const auto& m : r.replicas()) {
    if (m.replica() == replica) return m.matched_blocks();
  }
  return 0;
}

// GPU blocks kvidx reports for `replica` when asked for `tokens`; nullopt if
// the query failed.
inline std::optional<uint32_t> MatchedBlocks(v1::KvIndex::Stub* stub, const std::vector<int64_t>& tokens,
                                             const std::string& replica) {
  v1::FindPrefixResponse r;
  if (!QueryTokens(stub, tokens, &r).ok()) return std::nullopt;
  return MatchedOn(r, replica);
}

}  // namespace kvidx::server::testing
