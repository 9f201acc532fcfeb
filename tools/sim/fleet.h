// Fleet: a simulated vLLM deployment — `replicas` engines x `dp` data-parallel
// ranks, each rank a SimRank publishing on 127.0.0.1 — plus the faults
// kvidx-sim and the fidelity tests inject into it.
//
// Ports follow vLLM's rule: an engine configured with PUB port P and replay
// port R runs rank r on P + r and R + r. Replica i gets P = base + i * stride
// and R = P + stride / 2 (stride >= 2 * dp), so an engine list written from
// FleetOptions (EngineList / ConfigYaml) is exactly what kvidx must be told.
// base_port 0 picks a free range at random (tests, the demo).
//
// Published through DNS (`dns_domain` set, tools/sim/fleet_dns.h): replica i
// runs on its own loopback address 127.1.<i / 250>.<i % 250 + 2> with the
// same ports as every other replica (P = base, R = base + stride / 2), as
// the pods behind a headless Service do, and is named
// "<prefix><i>.<dns_domain>": the SRV target kvidx takes as replica name.
//
// Scaling: ScaleTo(n) starts new replicas (new names, never reused: a new
// pod) or stops the newest ones (their ranks and sockets are gone at once,
// as when a pod is deleted); rank indices are then renumbered.
//
// Faults:
//   - drops: Serve(..., drop=true) drops the batch that request publishes at
//     the publisher, in `drop_mode` (kNotSent: lost live but replayable, a
//     PUB high-water-mark drop; kNotBuffered: gone for good, a send error);
//   - no replay: engines without a replay socket (`replay = false`), so every
//     dropped batch is a counted loss and the source turns DEGRADED;
//   - Restart(i): the engine process restarts (empty cache, seq from 0,
//     optionally new sockets); vLLM sends no event for it.
// A lost batch or a restart is only visible to a subscriber once the engine
// publishes again; Settle() makes every rank whose last batch was dropped,
// or that restarted and has been silent since, serve one short unique
// request, so a measurement afterwards compares against a known stream.
//
// Not thread-safe: one thread drives a Fleet (SimRank's rule).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "index/block_hasher.h"
#include "ingest/testing/encoder.h"
#include "ingest/testing/fake_engine.h"
#include "tools/sim/sim_rank.h"

namespace kvidx::sim {

struct FleetOptions {
  int replicas = 4;
  int dp = 2;
  size_t blocks_per_rank = 1024;       // vLLM num_gpu_blocks per rank
  std::string model = "sim-model";     // the kvidx model name
  std::string replica_prefix = "vllm-";
  int base_port = 25557;               // 0 = a random free range
  int port_stride = 0;                 // 0 = max(10, 2 * dp)
  BlockHasherOptions hasher;           // algorithm, PYTHONHASHSEED, block size
  bool bytes_hashes = false;           // VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0
  ingest::WireEra era = ingest::WireEra::Newest();
  ingest::ReplayFormat replay_format = ingest::ReplayFormat::kWithTopic;
  bool replay = true;                  // engines have a replay ROUTER
  size_t buffer_steps = 10000;         // replay ring size, in batches
  std::optional<std::string> topic;    // KVEventsConfig.topic (absent = "")
  ingest::DropMode drop_mode = ingest::DropMode::kNotSent;
  bool restart_new_sockets = true;     // a restart re-creates PUB/ROUTER
  uint64_t seed = 1;                   // settle prompts, random port choice
  std::string dns_domain;              // "" = every replica on 127.0.0.1 with its own ports
};

// InvalidArgument naming the bad option, or OK.
Status ValidateFleet(const FleetOptions& o);

// One engine (replica) as kvidx must be configured for it.
struct EngineDesc {
  std::string replica;
  std::string host;             // the loopback address it binds
  std::string model;
  std::string endpoint;         // rank-0 PUB, kvidx's side: tcp://127.0.0.1:P
  std::string replay_endpoint;  // rank-0 ROUTER; empty without replay
  uint32_t dp_size = 1;
  std::optional<std::string> topic;
  uint64_t gpu_blocks = 0;
};

// The engines FleetOptions describe (base_port must be non-zero).
std::vector<EngineDesc> EngineList(const FleetOptions& o);
// Replica number i of the fleet (base_port must be non-zero).
EngineDesc EngineAt(const FleetOptions& o, int i);
// kvidx YAML (docs/CONFIG.md): the `models:` section for the fleet's hasher
// and/or the `engines:` section.
std::string ConfigYaml(const FleetOptions& o, bool models, bool engines);

class Fleet {
 public:
  // Binds every rank's sockets. With base_port 0, tries random ranges.
  static Result<std::unique_ptr<Fleet>> Create(const FleetOptions& options);

  const FleetOptions& options() const { return opts_; }  // base_port resolved
  // The running engines, oldest first.
  const std::vector<EngineDesc>& engines() const { return engines_; }
  // Engines ScaleTo stopped, in the order it stopped them.
  const std::vector<EngineDesc>& removed() const { return removed_; }
  int replicas() const { return static_cast<int>(engines_.size()); }

  // Starts or stops replicas until `replicas` run (see the header comment).
  // InvalidArgument outside [1, 1000]; a failure to bind leaves the fleet
  // with the replicas started so far.
  Status ScaleTo(int replicas);
  size_t size() const { return ranks_.size(); }
  // Ranks are replica-major: index = replica * dp + dp_rank.
  SimRank& rank(size_t i) { return *ranks_[i]; }
  const SimRank& rank(size_t i) const { return *ranks_[i]; }
  size_t replica_of(size_t i) const { return i / static_cast<size_t>(opts_.dp); }
  uint32_t dp_of(size_t i) const { return static_cast<uint32_t>(i % static_cast<size_t>(opts_.dp)); }
  // "<replica>/dp<rank>", kvidx's source name.
  std::string source_name(size_t i) const;
  std::optional<size_t> IndexOf(const std::string& replica, uint32_t dp_rank) const;

  // Block keys of a prompt as the fleet's engines publish them.
  const std::vector<BlockKey>& Keys(std::span<const int64_t> tokens);

  // Serves a request on rank i; with `drop`, its batch (if any) is dropped.
  Result<ServeResult> Serve(size_t i, std::span<const int64_t> tokens, bool full_report, bool drop = false);
  Status Restart(size_t i);
  // vLLM reset_prefix_cache() on every rank (AllBlocksCleared on the wire).
  void ResetAll();
  // Waits until every published batch has left the publishers.
  void Flush();
  // See the header comment. Returns how many ranks served a settle request.
  Result<size_t> Settle();

  // Ranks whose last publication was dropped / restarted and silent since.
  bool unsettled(size_t i) const { return last_dropped_[i] || silent_[i]; }

  // Totals over all ranks.
  uint64_t batches_published() const;
  uint64_t events_published() const;
  uint64_t batches_dropped() const;
  uint64_t restarts() const { return restarts_; }
  // Dropped batches no replay can bring back (no replay socket, or
  // kNotBuffered): what kvidx must count as lost.
  uint64_t unrecoverable_drops() const { return unrecoverable_; }

 private:
  Fleet(const FleetOptions& options, BlockHasher hasher);
  // Binds replica number i's ranks and appends them.
  Status StartReplica(int i);
  void StopNewestReplica();

  FleetOptions opts_;
  std::vector<EngineDesc> engines_;
  std::vector<EngineDesc> removed_;
  int next_replica_ = 0;
  // Totals of stopped ranks.
  uint64_t retired_batches_ = 0;
  uint64_t retired_events_ = 0;
  uint64_t retired_dropped_ = 0;
  std::vector<std::unique_ptr<SimRank>> ranks_;
  std::vector<bool> last_dropped_;
  std::vector<bool> silent_;
  uint64_t restarts_ = 0;
  uint64_t unrecoverable_ = 0;
  std::mt19937_64 rng_;
  BlockHasher hasher_;
  std::vector<BlockDigest> digests_;
  std::vector<BlockKey> keys_;
};

}  // namespace kvidx::sim
