#include "tools/sim/fleet.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "ingest/source_config.h"

namespace kvidx::sim {

namespace {

int Stride(const FleetOptions& o) { return o.port_stride > 0 ? o.port_stride : std::max(10, 2 * o.dp); }

// A YAML double-quoted scalar.
std::string Yq(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(c));
      out += buf;
      continue;
    }
    out += c;
  }
  return out + "\"";
}

}  // namespace

Status ValidateFleet(const FleetOptions& o) {
  if (o.replicas < 1 || o.replicas > 1000) return Status::InvalidArgument("replicas must be in [1, 1000]");
  if (o.dp < 1 || o.dp > 256) return Status::InvalidArgument("dp must be in [1, 256]");
  if (o.blocks_per_rank < 1 || o.blocks_per_rank > (size_t{1} << 30)) {
    return Status::InvalidArgument("blocks per rank must be in [1, 2^30]");
  }
  if (o.model.empty()) return Status::InvalidArgument("model name must not be empty");
  if (o.replica_prefix.empty() || o.replica_prefix.find('/') != std::string::npos) {
    return Status::InvalidArgument("replica prefix must be non-empty and contain no '/'");
  }
  if (o.port_stride != 0 && o.port_stride < 2 * o.dp) {
    return Status::InvalidArgument("port stride must be >= 2 * dp (PUB and replay ports per rank)");
  }
  if (o.base_port < 0 || o.base_port > 65535) return Status::InvalidArgument("base port must be in [0, 65535]");
  if (!o.dns_domain.empty() && (o.dns_domain.front() == '.' || o.dns_domain.find_first_not_of(
                                   "abcdefghijklmnopqrstuvwxyz0123456789.-") != std::string::npos)) {
    return Status::InvalidArgument("DNS domain must be lower-case letters, digits, '.' and '-'");
  }
  if (o.base_port != 0 && o.base_port + static_cast<long>(o.dns_domain.empty() ? o.replicas : 1) * Stride(o) > 65536) {
    return Status::InvalidArgument("ports run past 65535: lower --base-port, --replicas or --port-stride");
  }
  if (o.buffer_steps == 0) return Status::InvalidArgument("replay buffer must hold at least one batch");
  if (o.hasher.block_size == 0 || o.hasher.block_size > BlockHasher::kMaxBlockSize) {
    return Status::InvalidArgument("block size must be in [1, 2^20]");
  }
  if (Result<BlockHasher> h = BlockHasher::Create(o.hasher); !h.ok()) return h.status();
  return Status::Ok();
}

EngineDesc EngineAt(const FleetOptions& o, int i) {
  EngineDesc e;
  const int stride = Stride(o);
  int pub = o.base_port + i * stride;
  e.replica = o.replica_prefix + std::to_string(i);
  e.host = "127.0.0.1";
  if (!o.dns_domain.empty()) {
    e.replica += "." + o.dns_domain;
    e.host = "127.1." + std::to_string(i / 250) + "." + std::to_string(i % 250 + 2);
    pub = o.base_port;
  }
  e.model = o.model;
  e.endpoint = "tcp://" + e.host + ":" + std::to_string(pub);
  if (o.replay) e.replay_endpoint = "tcp://" + e.host + ":" + std::to_string(pub + stride / 2);
  e.dp_size = static_cast<uint32_t>(o.dp);
  e.topic = o.topic;
  e.gpu_blocks = o.blocks_per_rank;
  return e;
}

std::vector<EngineDesc> EngineList(const FleetOptions& o) {
  std::vector<EngineDesc> out;
  for (int r = 0; r < o.replicas; ++r) out.push_back(EngineAt(o, r));
  return out;
}

std::string ConfigYaml(const FleetOptions& o, bool models, bool engines) {
  std::string y;
  if (models) {
    y += "models:\n";
    y += "  - name: " + Yq(o.model) + "\n";
    y += "    hash_algo: " + std::string(HashAlgoName(o.hasher.algo)) + "\n";
    if (o.hasher.seed) y += "    hash_seed: " + Yq(*o.hasher.seed) + "\n";
    y += "    block_size: " + std::to_string(o.hasher.block_size) + "\n";
    y += std::string("    int_block_hashes: ") + (o.bytes_hashes ? "false" : "true") + "\n";
  }
  if (engines) {
    y += "engines:\n";
    for (const EngineDesc& e : EngineList(o)) {
      y += "  - replica: " + Yq(e.replica) + "\n";
      y += "    model: " + Yq(e.model) + "\n";
      y += "    endpoint: " + Yq(e.endpoint) + "\n";
      if (!e.replay_endpoint.empty()) y += "    replay_endpoint: " + Yq(e.replay_endpoint) + "\n";
      y += "    dp_size: " + std::to_string(e.dp_size) + "\n";
      if (e.topic) y += "    topic: " + Yq(*e.topic) + "\n";
      y += "    gpu_blocks: " + std::to_string(e.gpu_blocks) + "\n";
    }
  }
  return y;
}

Fleet::Fleet(const FleetOptions& options, BlockHasher hasher)
    : opts_(options), rng_(options.seed), hasher_(std::move(hasher)) {}

Result<std::unique_ptr<Fleet>> Fleet::Create(const FleetOptions& options) {
  if (Status s = ValidateFleet(options); !s.ok()) return s;
  Result<BlockHasher> hasher = BlockHasher::Create(options.hasher);
  if (!hasher.ok()) return hasher.status();
  std::mt19937_64 port_rng(options.seed ^ 0x9e3779b97f4a7c15ull ^ static_cast<uint64_t>(::getpid()));
  const int stride = Stride(options);
  const int span = (options.dns_domain.empty() ? options.replicas : 1) * stride;
  const bool pick = options.base_port == 0;
  if (pick && span > 30000) return Status::InvalidArgument("too many ports to pick a free range at random");
  Status last;
  for (int attempt = 0; attempt < (pick ? 40 : 1); ++attempt) {
    FleetOptions o = options;
    if (pick) o.base_port = 20000 + static_cast<int>(port_rng() % static_cast<uint64_t>(60000 - 20000 - span));
    std::unique_ptr<Fleet> f(new Fleet(o, hasher.value()));
    Status s;
    for (int r = 0; r < o.replicas && s.ok(); ++r) s = f->StartReplica(r);
    if (!s.ok()) {
      last = s;
      continue;
    }
    return f;
  }
  return Status::Unavailable("cannot bind the simulated engines' ports (" + last.ToString() + ")" +
                             (pick ? "" : ": choose another --base-port, or 0 for a random free range"));
}

Status Fleet::StartReplica(int i) {
  EngineDesc e = EngineAt(opts_, i);
  std::vector<std::unique_ptr<SimRank>> ranks;
  for (int d = 0; d < opts_.dp; ++d) {
    SimRankOptions ro;
    ro.replica = e.replica;
    ro.dp_rank = static_cast<uint32_t>(d);
    ro.num_blocks = opts_.blocks_per_rank;
    ro.hasher = opts_.hasher;
    ro.bytes_hashes = opts_.bytes_hashes;
    ro.era = opts_.era;
    ro.publisher.endpoint = e.endpoint;  // FakeEngine applies the DP port offset
    ro.publisher.pub_bind = true;        // vLLM would bind tcp://*:P; loopback is enough here
    ro.publisher.replay_endpoint = e.replay_endpoint;
    ro.publisher.topic = e.topic.value_or("");
    ro.publisher.buffer_steps = opts_.buffer_steps;
    ro.publisher.replay_format = opts_.replay_format;
    Result<std::unique_ptr<SimRank>> r = SimRank::Create(ro);
    if (!r.ok()) return r.status();
    ranks.push_back(std::move(r).value());
  }
  for (auto& r : ranks) {
    ranks_.push_back(std::move(r));
    last_dropped_.push_back(false);
    silent_.push_back(false);
  }
  engines_.push_back(std::move(e));
  next_replica_ = std::max(next_replica_, i + 1);
  return Status::Ok();
}

void Fleet::StopNewestReplica() {
  for (int d = 0; d < opts_.dp; ++d) {
    const SimRank& r = *ranks_.back();
    retired_batches_ += r.batches_published();
    retired_events_ += r.events_published();
    retired_dropped_ += r.batches_dropped();
    ranks_.pop_back();
    last_dropped_.pop_back();
    silent_.pop_back();
  }
  removed_.push_back(std::move(engines_.back()));
  engines_.pop_back();
}

Status Fleet::ScaleTo(int replicas) {
  if (replicas < 1 || replicas > 1000) return Status::InvalidArgument("replicas must be in [1, 1000]");
  while (this->replicas() > replicas) StopNewestReplica();
  while (this->replicas() < replicas) {
    if (Status s = StartReplica(next_replica_); !s.ok()) return s;
  }
  return Status::Ok();
}

std::string Fleet::source_name(size_t i) const {
  return ingest::SourceName(engines_[replica_of(i)].replica, dp_of(i));
}

std::optional<size_t> Fleet::IndexOf(const std::string& replica, uint32_t dp_rank) const {
  if (dp_rank >= static_cast<uint32_t>(opts_.dp)) return std::nullopt;
  for (size_t r = 0; r < engines_.size(); ++r) {
    if (engines_[r].replica == replica) return r * static_cast<size_t>(opts_.dp) + dp_rank;
  }
  return std::nullopt;
}

const std::vector<BlockKey>& Fleet::Keys(std::span<const int64_t> tokens) {
  keys_.clear();
  if (!hasher_.HashRequest(tokens, &digests_).ok()) return keys_;
  for (const BlockDigest& d : digests_) keys_.push_back(opts_.bytes_hashes ? d.ToBytesKey() : d.ToKey());
  return keys_;
}

Result<ServeResult> Fleet::Serve(size_t i, std::span<const int64_t> tokens, bool full_report, bool drop) {
  Result<ServeResult> r =
      ranks_[i]->Serve(tokens, full_report, drop ? std::optional<ingest::DropMode>(opts_.drop_mode) : std::nullopt);
  if (r.ok() && r->published) {
    last_dropped_[i] = r->dropped;
    silent_[i] = false;
    if (r->dropped && (!opts_.replay || opts_.drop_mode == ingest::DropMode::kNotBuffered)) ++unrecoverable_;
  }
  return r;
}

Status Fleet::Restart(size_t i) {
  Status s = ranks_[i]->Restart(opts_.restart_new_sockets);
  if (!s.ok()) return s;
  ++restarts_;
  last_dropped_[i] = false;
  silent_[i] = true;
  return s;
}

void Fleet::ResetAll() {
  for (size_t i = 0; i < ranks_.size(); ++i) {
    ranks_[i]->ResetPrefixCache();
    last_dropped_[i] = false;
    silent_[i] = false;
  }
}

void Fleet::Flush() {
  for (auto& r : ranks_) r->publisher().Flush();
}

Result<size_t> Fleet::Settle() {
  size_t n = 0;
  std::vector<int64_t> prompt(opts_.hasher.block_size);
  for (size_t i = 0; i < ranks_.size(); ++i) {
    if (!unsettled(i)) continue;
    // One full block of tokens no workload uses: a miss, so exactly one
    // BlockStored (plus at most one eviction) goes out, undropped.
    for (auto& t : prompt) t = static_cast<int64_t>(3000000 + rng_() % 1000000000);
    Result<ServeResult> r = Serve(i, prompt, /*full_report=*/false, /*drop=*/false);
    if (!r.ok()) return r.status();
    if (!r->published) return Status::Internal("settle request on " + source_name(i) + " published nothing");
    ++n;
  }
  Flush();
  return n;
}

uint64_t Fleet::batches_published() const {
  uint64_t n = retired_batches_;
  for (const auto& r : ranks_) n += r->batches_published();
  return n;
}

uint64_t Fleet::events_published() const {
  uint64_t n = retired_events_;
  for (const auto& r : ranks_) n += r->events_published();
  return n;
}

uint64_t Fleet::batches_dropped() const {
  uint64_t n = retired_dropped_;
  for (const auto& r : ranks_) n += r->batches_dropped();
  return n;
}

}  // namespace kvidx::sim
