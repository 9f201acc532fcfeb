// Shared by the client tests: a real kvidx::server::Server on 127.0.0.1
// (ephemeral gRPC port, no metrics endpoint, a fresh data directory and an
// admin token file), fed by FakeEngine publishers, plus waits and the
// batches the tests publish.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "client/client.h"
#include "index/block_hasher.h"
#include "ingest/event.h"
#include "ingest/ingest_test_util.h"
#include "ingest/testing/encoder.h"
#include "ingest/testing/fake_engine.h"
#include "server/config.h"
#include "server/server.h"

namespace kvidx::client_testing {

inline constexpr char kToken[] = "s3cret-admin-token";
inline constexpr char kModel[] = "m";

// Polls `pred` every 20 ms until true or `timeout`.
inline bool WaitUntil(const std::function<bool()>& pred,
                      std::chrono::milliseconds timeout = std::chrono::milliseconds(15000)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pred();
}

// A FakeEngine on ephemeral ports with a replay socket, so batches published
// before kvidx subscribes are recovered by the cold-start replay.
inline std::unique_ptr<ingest::FakeEngine> MakeEngine() {
  ingest::FakeEngineOptions o;
  o.endpoint = "tcp://127.0.0.1:*";
  o.replay_endpoint = "tcp://127.0.0.1:*";
  auto e = ingest::FakeEngine::Create(o);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? std::move(e.value()) : nullptr;
}

// vLLM's hashes of `tokens` for model "m" (sha256, PYTHONHASHSEED unset,
// block size 16: the ModelConfig defaults), integer wire form.
inline std::vector<uint64_t> TokenHashes(const std::vector<int64_t>& tokens) {
  std::vector<uint64_t> out;
  Result<BlockHasher> hasher = BlockHasher::Create(BlockHasherOptions{});
  EXPECT_TRUE(hasher.ok()) << hasher.status().ToString();
  if (!hasher.ok()) return out;
  std::vector<BlockDigest> digests;
  Status s = hasher->HashRequest(tokens, &digests);
  EXPECT_TRUE(s.ok()) << s.ToString();
  for (const BlockDigest& d : digests) out.push_back(d.wire_u64());
  return out;
}

// One BlockStored of the full blocks of `tokens` on GPU, as vLLM publishes it.
inline std::string TokenStorePayload(const std::vector<int64_t>& tokens) {
  const std::vector<uint64_t> hashes = TokenHashes(tokens);
  ingest::EventBatch b;
  b.ts = 1.7e9;
  b.data_parallel_rank = 0;
  ingest::KvEvent e;
  e.type = ingest::EventType::kBlockStored;
  e.block_hashes = {0, static_cast<uint32_t>(hashes.size())};
  e.token_ids = {0, static_cast<uint32_t>(hashes.size() * 16)};
  e.block_size = 16;
  e.medium = "GPU";
  for (uint64_t h : hashes) b.keys.push_back(BlockKey::FromU64(h));
  b.tokens.assign(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(hashes.size() * 16));
  b.events.push_back(e);
  return ingest::EncodePayload(b, ingest::WireEra::Newest());
}

inline std::vector<int64_t> Iota(int64_t first, int64_t n) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(first + i);
  return v;
}

// A running server with engine "r1" (FakeEngine `engine`) unless
// `with_engine` is false. Members are destroyed server first, engines last.
class ServerFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kvidx_client_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    token_file_ = dir_ + "/token";
    std::ofstream(token_file_) << kToken << "\n";
  }

  void TearDown() override {
    client_.reset();
    if (server_) {
      Status s = server_->Shutdown(std::chrono::milliseconds(2000));
      (void)s;
      server_.reset();
    }
    engine_.reset();
    extra_engines_.clear();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  server::ServerConfig Config(bool with_engine) {
    server::ServerConfig c;
    c.grpc.listen = "127.0.0.1:0";
    c.grpc.admin_token_file = token_file_;
    c.grpc.require_auth_for_reads = require_auth_for_reads_;
    c.metrics.listen = "";
    c.data_dir = dir_ + "/data";
    c.snapshot.interval_seconds = 0;
    c.snapshot.sync = false;
    server::ModelConfig m;
    m.name = kModel;
    m.block_size = 16;
    c.models.push_back(m);
    if (with_engine) {
      server::EngineEntry e;
      e.engine.replica = "r1";
      e.engine.model = kModel;
      e.engine.endpoint = engine_->pub_endpoint();
      e.engine.replay_endpoint = engine_->replay_endpoint();
      e.gpu_blocks = 1000;
      c.engines.push_back(e);
    }
    return c;
  }

  // Starts the server (engine r1 first gets `payloads`, published before
  // kvidx subscribes) and a client with the admin token.
  void StartServer(bool with_engine, const std::vector<std::string>& payloads = {}) {
    if (with_engine) {
      engine_ = MakeEngine();
      ASSERT_NE(engine_, nullptr);
      for (const std::string& p : payloads) engine_->Publish(p);
      engine_->Flush();
    }
    auto server = server::Server::Create(Config(with_engine));
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server.value());
    Status s = server_->Start();
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_GT(server_->grpc_port(), 0);
    client_ = MakeClient(kToken);
    ASSERT_NE(client_, nullptr);
  }

  std::string Target() const { return "127.0.0.1:" + std::to_string(server_->grpc_port()); }

  std::unique_ptr<client::Client> MakeClient(const std::string& token,
                                             std::chrono::milliseconds deadline = std::chrono::milliseconds(5000),
                                             bool token_on_reads = false) {
    client::ClientOptions o;
    o.target = Target();
    o.admin_token = token;
    o.token_on_reads = token_on_reads;
    o.deadline = deadline;
    auto c = client::Client::Create(o);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(c.value()) : nullptr;
  }

  // Waits until a hash query shows `replica` holding `blocks` leading blocks.
  bool WaitMatched(const std::vector<uint64_t>& hashes, const std::string& replica, uint32_t blocks) {
    return WaitUntil([&] {
      v1::FindPrefixResponse r;
      if (!client_->FindPrefixHashes(kModel, hashes, &r).ok()) return false;
      for (const v1::ReplicaMatch& m : r.replicas()) {
        if (m.replica() == replica && m.matched_blocks() == blocks) return true;
      }
      return false;
    });
  }

  // Waits until the admin ListSources reports `source` in `state`.
  bool WaitSourceState(const std::string& source, v1::SourceState state) {
    return WaitUntil([&] {
      v1::ListSourcesResponse r;
      if (!client_->ListSources(&r).ok()) return false;
      for (const v1::SourceInfo& s : r.sources()) {
        if (s.source() == source && s.state() == state) return true;
      }
      return false;
    });
  }

  std::string dir_;
  std::string token_file_;
  bool require_auth_for_reads_ = false;  // set before StartServer
  std::unique_ptr<ingest::FakeEngine> engine_;
  std::vector<std::unique_ptr<ingest::FakeEngine>> extra_engines_;
  std::unique_ptr<server::Server> server_;
  std::unique_ptr<client::Client> client_;
};

// A port nothing listens on: bound to an ephemeral port, then released
// (connecting to it is refused unless someone grabs it in between).
inline int DeadPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  int port = 1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

// A TCP listener that accepts connections (the kernel completes the
// handshake) but never speaks HTTP/2: calls to it can only time out.
class SilentListener {
 public:
  SilentListener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (fd_ >= 0 && ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 && ::listen(fd_, 16) == 0 &&
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      port_ = ntohs(addr.sin_port);
    }
  }
  ~SilentListener() {
    if (fd_ >= 0) ::close(fd_);
  }
  SilentListener(const SilentListener&) = delete;
  SilentListener& operator=(const SilentListener&) = delete;
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

}  // namespace kvidx::client_testing
