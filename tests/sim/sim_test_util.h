// A kvidx Server in-process with a simulated fleet (tools/sim) registered
// in its configuration, for the fidelity harness.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "client/client.h"
#include "server/config.h"
#include "server/server.h"
#include "server/server_test_util.h"
#include "tools/sim/fidelity.h"
#include "tools/sim/fleet.h"
#include "tools/sim/runner.h"

namespace kvidx::sim::testing {

using server::testing::kModel;
using server::testing::kToken;

// Small, fast defaults: 2 replicas x 2 DP ranks with pools small enough that
// the workload evicts (so BlockRemoved is exercised), on a random port range.
inline FleetOptions SmallFleet() {
  FleetOptions o;
  o.replicas = 2;
  o.dp = 2;
  o.blocks_per_rank = 384;
  o.model = kModel;
  o.base_port = 0;
  o.seed = 11;
  return o;
}

inline WorkloadOptions SmallWorkload(uint64_t seed = 5) {
  WorkloadOptions w;
  w.seed = seed;
  w.system_prompts = 12;
  w.system_min = 64;
  w.system_max = 512;
  w.turn_min = 16;
  w.turn_max = 160;
  w.max_session_tokens = 3000;
  w.max_sessions = 64;
  return w;
}

class SimHarness {
 public:
  // Starts the fleet, then a Server configured with its engines, then warms
  // both up (every source EXACT at a common starting point).
  void Start(const FleetOptions& fleet_options) { StartWith(fleet_options, nullptr); }

  // Before Start: the server's route clock is simulated (routing.clock).
  void UseSimulatedClock() { simulated_clock_ = true; }

  // The same, but with `discover` set the config lists no engine: it is
  // called with the started fleet to add the discovery provider that finds
  // them (tests/sim/scale_test.cc).
  void StartWith(const FleetOptions& fleet_options,
                 const std::function<void(Fleet&, server::ServerConfig*)>& discover) {
    auto fleet = Fleet::Create(fleet_options);
    ASSERT_TRUE(fleet.ok()) << fleet.status().ToString();
    fleet_ = std::move(fleet).value();
    config_ = server::testing::TestConfig(dir_);
    config_.log.level = "warn";
    // kvidx-sim ttft's /metrics barrier waits for two scrape rounds.
    config_.routing.scrape_interval_ms = 10;
    if (simulated_clock_) {
      config_.routing.simulated_clock = true;
      config_.routing.scrape_interval_ms = 1000;   // readings stay fresh for 2 simulated seconds
    }
    config_.models[0].int_block_hashes = !fleet_options.bytes_hashes;
    config_.models[0].hash_algo = std::string(HashAlgoName(fleet_options.hasher.algo));
    config_.models[0].hash_seed = fleet_options.hasher.seed;
    config_.models[0].block_size = static_cast<uint32_t>(fleet_options.hasher.block_size);
    if (discover) discover(*fleet_, &config_);
    for (const EngineDesc& d : fleet_->engines()) {
      if (discover) break;
      server::EngineEntry e;
      e.engine.replica = d.replica;
      e.engine.model = d.model;
      e.engine.endpoint = d.endpoint;
      e.engine.replay_endpoint = d.replay_endpoint;
      e.engine.data_parallel_size = d.dp_size;
      e.engine.topic = d.topic;
      e.gpu_blocks = d.gpu_blocks;
      config_.engines.push_back(e);
    }
    ASSERT_NO_FATAL_FAILURE(StartServer());
    Status s = WarmUp(*fleet_, *client_, std::chrono::seconds(15));
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  // Creates and starts a Server from config_ (on its current listen address)
  // and a client for it.
  void StartServer() {
    auto srv = server::Server::Create(config_);
    ASSERT_TRUE(srv.ok()) << srv.status().ToString();
    server_ = std::move(srv).value();
    Status s = server_->Start();
    ASSERT_TRUE(s.ok()) << s.ToString();
    // A restart comes back on the same port, so routers' channels reconnect.
    config_.grpc.listen = "127.0.0.1:" + std::to_string(server_->grpc_port());
    if (client_ == nullptr) {
      client::ClientOptions co;
      co.target = config_.grpc.listen;
      co.admin_token = kToken;
      co.deadline = std::chrono::seconds(5);
      auto c = client::Client::Create(co);
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      client_ = std::move(c).value();
    }
  }

  void StopServer() {
    ASSERT_TRUE(server_->Shutdown(std::chrono::seconds(2)).ok());
    server_.reset();
  }

  Fleet& fleet() { return *fleet_; }
  client::Client& client() { return *client_; }
  server::Server& server() { return *server_; }

  KvidxCounters Counters() {
    auto c = ReadCounters(*fleet_, *client_);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_TRUE(c.ok() && c->per_source);
    return c.ok() ? c.value() : KvidxCounters{};
  }

  std::map<std::string, SourceView> Sources() {
    auto s = ListSources(*fleet_, *client_);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? s.value() : std::map<std::string, SourceView>{};
  }

 private:
  server::testing::TempDir dir_;
  bool simulated_clock_ = false;
  server::ServerConfig config_;
  std::unique_ptr<Fleet> fleet_;
  std::unique_ptr<server::Server> server_;
  std::unique_ptr<client::Client> client_;
};

inline PhaseOptions Phase(Routing routing, uint64_t requests, uint64_t seed = 5) {
  PhaseOptions p;
  p.name = RoutingName(routing);
  p.routing = routing;
  p.workload = SmallWorkload(seed);
  p.requests = requests;
  p.full_report = 0.2;
  p.samples = 150;
  p.seed = seed;
  p.catch_up_timeout = std::chrono::seconds(10);
  return p;
}

// Every EXACT comparison equal, and there were some.
#define EXPECT_FIDELITY_PERFECT(rep)                                                          \
  do {                                                                                        \
    EXPECT_GT((rep).fidelity.comparisons_exact, 0u);                                          \
    EXPECT_EQ((rep).fidelity.mismatches_exact, 0u)                                            \
        << ((rep).fidelity.examples.empty() ? std::string() : (rep).fidelity.examples[0]);    \
    EXPECT_EQ((rep).fidelity.rpc_errors, 0u);                                                 \
    EXPECT_TRUE((rep).fidelity.perfect()) << (rep).fidelity.percent() << "%";                 \
    EXPECT_EQ((rep).catch_up_error, "");                                                      \
  } while (0)

}  // namespace kvidx::sim::testing
