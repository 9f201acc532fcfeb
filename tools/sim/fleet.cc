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
  if (o.base_port != 0 && o.base_port + static_cast<long>(o.replicas) * Stride(o) > 65536) {
    return Status::InvalidArgument("ports run past 65535: lower --base-port, --replicas or --port-stride");
  }
  if (o.buffer_steps == 0) return Status::InvalidArgument("replay buffer must hold at least one batch");
  if (o.hasher.block_size == 0 || o.hasher.block_size > BlockHasher::kMaxBlockSize) {
    return Status::InvalidArgument("block size must be in [1, 2^20]");
  }
  if (Result<BlockHasher> h = BlockHasher::Create(o.hasher); !h.ok()) return h.status();
  return Status::Ok();
}

std::vector<EngineDesc> EngineList(const FleetOptions& o) {
  std::vector<EngineDesc> out;
  const int stride = Stride(o);
  for (int r = 0; r < o.replicas; ++r) {
    EngineDesc e;
    e.replica = o.replica_prefix + std::to_string(r);
    e.model = o.model;
    int pub = o.base_port + r * stride;
    e.endpoint = "tcp://127.0.0.1:" + std::to_string(pub);
    if (o.replay) e.replay_endpoint = "tcp://127.0.0.1:" + std::to_string(pub + stride / 2);
    e.dp_size = static_cast<uint32_t>(o.dp);
    e.topic = o.topic;
    e.gpu_blocks = o.blocks_per_rank;
    out.push_back(std::move(e));
  }
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
  const int span = options.replicas * stride;
  const bool pick = options.base_port == 0;
  if (pick && span > 30000) return Status::InvalidArgument("too many ports to pick a free range at random");
  Status last;
  for (int attempt = 0; attempt < (pick ? 40 : 1); ++attempt) {
    FleetOptions o = options;
    if (pick) o.base_port = 20000 + static_cast<int>(port_rng() % static_cast<uint64_t>(60000 - 20000 - span));
    std::unique_ptr<Fleet> f(new Fleet(o, hasher.value()));
    f->engines_ = EngineList(o);
    bool ok = true;
    for (const EngineDesc& e : f->engines_) {
      for (int d = 0; d < o.dp && ok; ++d) {
        SimRankOptions ro;
        ro.replica = e.replica;
        ro.dp_rank = static_cast<uint32_t>(d);
        ro.num_blocks = o.blocks_per_rank;
        ro.hasher = o.hasher;
        ro.bytes_hashes = o.bytes_hashes;
        ro.era = o.era;
        ro.publisher.endpoint = e.endpoint;  // FakeEngine applies the DP port offset
        ro.publisher.pub_bind = true;        // vLLM would bind tcp://*:P; loopback is enough here
        ro.publisher.replay_endpoint = e.replay_endpoint;
        ro.publisher.topic = e.topic.value_or("");
        ro.publisher.buffer_steps = o.buffer_steps;
        ro.publisher.replay_format = o.replay_format;
        Result<std::unique_ptr<SimRank>> r = SimRank::Create(ro);
        if (!r.ok()) {
          last = r.status();
          ok = false;
          break;
        }
        f->ranks_.push_back(std::move(r).value());
      }
      if (!ok) break;
    }
    if (!ok) continue;
    f->last_dropped_.assign(f->ranks_.size(), false);
    f->silent_.assign(f->ranks_.size(), false);
    return f;
  }
  return Status::Unavailable("cannot bind the simulated engines' ports on 127.0.0.1 (" + last.ToString() + ")" +
                             (pick ? "" : ": choose another --base-port, or 0 for a random free range"));
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
  uint64_t n = 0;
  for (const auto& r : ranks_) n += r->batches_published();
  return n;
}

uint64_t Fleet::events_published() const {
  uint64_t n = 0;
  for (const auto& r : ranks_) n += r->events_published();
  return n;
}

uint64_t Fleet::batches_dropped() const {
  uint64_t n = 0;
  for (const auto& r : ranks_) n += r->batches_dropped();
  return n;
}

}  // namespace kvidx::sim
