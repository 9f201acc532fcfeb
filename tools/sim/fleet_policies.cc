#include "tools/sim/fleet_policies.h"

#include <algorithm>
#include <limits>
#include <map>
#include <utility>

#include "tools/sim/fidelity.h"

namespace kvidx::sim {
namespace {

void SetHashes(const std::vector<BlockKey>& keys, v1::BlockHashes* h) {
  for (const BlockKey& k : keys) h->add_u64(k.wire());
}

// GPU overlap per candidate from kvidx FindPrefix (what an exact index gives
// the peers' routers).
class Overlap {
 public:
  Overlap(const client::Client* kvidx, std::string model) : kvidx_(kvidx), model_(std::move(model)) {}

  Result<std::vector<uint32_t>> Get(const RouteInput& in, std::span<const CandidateView> cands) {
    v1::FindPrefixRequest req;
    req.set_model(model_);
    SetHashes(*in.keys, req.mutable_hashes());
    req.add_tiers("GPU");
    resp_.Clear();
    if (grpc::Status s = kvidx_->FindPrefix(req, &resp_); !s.ok()) return FromGrpc(s, "FindPrefix");
    std::map<std::pair<std::string, uint32_t>, uint32_t> held;
    for (const v1::ReplicaMatch& m : resp_.replicas()) held[{m.replica(), m.dp_rank()}] = m.matched_blocks();
    std::vector<uint32_t> out(cands.size(), 0);
    for (size_t i = 0; i < cands.size(); ++i) {
      auto it = held.find({cands[i].replica, cands[i].dp_rank});
      if (it != held.end()) out[i] = it->second;
    }
    return out;
  }

 private:
  const client::Client* kvidx_;
  std::string model_;
  v1::FindPrefixResponse resp_;
};

// Lowest `key`, ties to the lowest index.
template <typename KeyFn>
size_t ArgMin(std::span<const CandidateView> cands, KeyFn key) {
  size_t best = 0;
  for (size_t i = 1; i < cands.size(); ++i) {
    if (key(i) < key(best)) best = i;
  }
  return best;
}

class RandomPolicy : public FleetPolicy {
 public:
  explicit RandomPolicy(uint64_t seed) : rng_(seed) {}
  const char* name() const override { return "random"; }
  Result<RouteDecision> Choose(const RouteInput&, std::span<const CandidateView> c) override {
    return RouteDecision{static_cast<size_t>(rng_() % c.size()), 0, 0};
  }

 private:
  std::mt19937_64 rng_;
};

class RoundRobinPolicy : public FleetPolicy {
 public:
  const char* name() const override { return "round-robin"; }
  Result<RouteDecision> Choose(const RouteInput&, std::span<const CandidateView> c) override {
    return RouteDecision{static_cast<size_t>(next_++ % c.size()), 0, 0};
  }

 private:
  uint64_t next_ = 0;
};

class LeastLoadedPolicy : public FleetPolicy {
 public:
  const char* name() const override { return "least-loaded"; }
  Result<RouteDecision> Choose(const RouteInput&, std::span<const CandidateView> c) override {
    return RouteDecision{ArgMin(c, [&](size_t i) { return c[i].in_flight; }), 0, 0};
  }
};

class PrefixOnlyPolicy : public FleetPolicy {
 public:
  PrefixOnlyPolicy(const client::Client* kvidx, const std::string& model) : overlap_(kvidx, model) {}
  const char* name() const override { return "prefix-only"; }
  Result<RouteDecision> Choose(const RouteInput& in, std::span<const CandidateView> c) override {
    Result<std::vector<uint32_t>> ov = overlap_.Get(in, c);
    if (!ov.ok()) return ov.status();
    const std::vector<uint32_t>& o = ov.value();
    size_t i = ArgMin(c, [&](size_t k) { return std::pair<int64_t, uint32_t>(-int64_t{o[k]}, c[k].in_flight); });
    return RouteDecision{i, 0, o[i]};
  }

 private:
  Overlap overlap_;
};

class DynamoPolicy : public FleetPolicy {
 public:
  DynamoPolicy(const client::Client* kvidx, const std::string& model) : overlap_(kvidx, model) {}
  const char* name() const override { return "dynamo"; }
  Result<RouteDecision> Choose(const RouteInput& in, std::span<const CandidateView> c) override {
    Result<std::vector<uint32_t>> ov = overlap_.Get(in, c);
    if (!ov.ok()) return ov.status();
    const std::vector<uint32_t>& o = ov.value();
    const uint64_t blocks = (uint64_t{in.prompt_tokens} + in.block_size - 1) / in.block_size;
    auto logit = [&](size_t k) {
      const double prefill = static_cast<double>(blocks - std::min<uint64_t>(blocks, o[k]) + c[k].prefill_blocks);
      const double decode = static_cast<double>(c[k].active_blocks + blocks);
      return kOverlapScoreWeight * prefill + decode;
    };
    size_t i = ArgMin(c, logit);
    return RouteDecision{i, 0, o[i]};
  }

 private:
  static constexpr double kOverlapScoreWeight = 1.0;
  Overlap overlap_;
};

class LlmdPolicy : public FleetPolicy {
 public:
  LlmdPolicy(const client::Client* kvidx, const std::string& model) : overlap_(kvidx, model) {}
  const char* name() const override { return "llm-d"; }
  Result<RouteDecision> Choose(const RouteInput& in, std::span<const CandidateView> c) override {
    Result<std::vector<uint32_t>> ov = overlap_.Get(in, c);
    if (!ov.ok()) return ov.status();
    const std::vector<uint32_t>& o = ov.value();
    size_t qmin = std::numeric_limits<size_t>::max(), qmax = 0;
    for (const CandidateView& v : c) {
      qmin = std::min(qmin, v.waiting);
      qmax = std::max(qmax, v.waiting);
    }
    const double blocks = std::max<double>(1, static_cast<double>(in.keys->size()));
    auto score = [&](size_t k) {
      const double queue = qmax == qmin ? 1.0 : 1.0 - static_cast<double>(c[k].waiting - qmin) / (qmax - qmin);
      const double kv = 1.0 - c[k].kv_usage;
      const double prefix = o[k] / blocks;
      return -(2 * queue + 2 * kv + 3 * prefix);
    };
    size_t i = ArgMin(c, score);
    return RouteDecision{i, 0, o[i]};
  }

 private:
  Overlap overlap_;
};

class KvidxRoutePolicy : public FleetPolicy {
 public:
  KvidxRoutePolicy(const client::Client* kvidx, std::string model) : kvidx_(kvidx), model_(std::move(model)) {}
  const char* name() const override { return "kvidx"; }
  Result<RouteDecision> Choose(const RouteInput& in, std::span<const CandidateView> c) override;
  Status Done(const RouteDecision& d, uint32_t prompt_tokens, uint32_t cached_tokens) override {
    v1::RouteDoneRequest req;
    req.set_route_id(d.route_id);
    req.set_outcome(v1::ROUTE_OUTCOME_OK);
    req.set_prompt_tokens(prompt_tokens);
    req.set_cached_tokens(cached_tokens);
    v1::RouteDoneResponse resp;
    if (grpc::Status s = kvidx_->RouteDone(req, &resp); !s.ok()) return FromGrpc(s, "RouteDone");
    return Status::Ok();
  }

 private:
  const client::Client* kvidx_;
  std::string model_;
  v1::RouteResponse resp_;
};

Result<RouteDecision> KvidxRoutePolicy::Choose(const RouteInput& in, std::span<const CandidateView> c) {
  v1::RouteRequest req;
  req.set_model(model_);
  SetHashes(*in.keys, req.mutable_hashes());
  req.set_prompt_tokens(in.prompt_tokens);
  req.set_expected_output_tokens(in.output_tokens);
  req.set_n(in.n);
  req.set_request_id(in.request_id);
  std::vector<std::string> replicas;
  for (const CandidateView& v : c) {
    if (replicas.empty() || replicas.back() != v.replica) replicas.push_back(v.replica);
  }
  for (const std::string& r : replicas) req.add_replicas(r);
  resp_.Clear();
  if (grpc::Status s = kvidx_->Route(req, &resp_); !s.ok()) return FromGrpc(s, "Route");
  for (size_t i = 0; i < c.size(); ++i) {
    if (c[i].replica == resp_.replica() && c[i].dp_rank == resp_.dp_rank()) {
      const uint32_t held = resp_.candidates_size() > 0 ? resp_.candidates(0).gpu_blocks() : 0;
      return RouteDecision{i, resp_.route_id(), held};
    }
  }
  return Status::Internal("Route chose " + resp_.source() + ", not a candidate");
}

}  // namespace

const std::vector<std::string>& FleetPolicyNames() {
  static const std::vector<std::string> names = {"random", "round-robin", "least-loaded", "prefix-only",
                                                 "dynamo", "llm-d",       "kvidx"};
  return names;
}

Result<std::unique_ptr<FleetPolicy>> MakeFleetPolicy(const std::string& name, const client::Client* kvidx,
                                                     const std::string& model, uint64_t seed) {
  if (name == "random") return std::unique_ptr<FleetPolicy>(new RandomPolicy(seed));
  if (name == "round-robin") return std::unique_ptr<FleetPolicy>(new RoundRobinPolicy());
  if (name == "least-loaded") return std::unique_ptr<FleetPolicy>(new LeastLoadedPolicy());
  if (name == "prefix-only") return std::unique_ptr<FleetPolicy>(new PrefixOnlyPolicy(kvidx, model));
  if (name == "dynamo") return std::unique_ptr<FleetPolicy>(new DynamoPolicy(kvidx, model));
  if (name == "llm-d") return std::unique_ptr<FleetPolicy>(new LlmdPolicy(kvidx, model));
  if (name == "kvidx") return std::unique_ptr<FleetPolicy>(new KvidxRoutePolicy(kvidx, model));
  return Status::InvalidArgument("unknown policy \"" + name + "\"");
}

}  // namespace kvidx::sim
