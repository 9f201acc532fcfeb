#include "tools/sim/fidelity.h"

#include <algorithm>
#include <cstdio>
#include <initializer_list>
#include <string_view>
#include <thread>

namespace kvidx::sim {

namespace {

using Clock = std::chrono::steady_clock;

// Appends the parts (GCC 12's -Wrestrict misfires on `"lit" + std::string`).
void Cat(std::string* out, std::initializer_list<std::string_view> parts) {
  for (std::string_view p : parts) out->append(p);
}

}  // namespace

Status FromGrpc(const grpc::Status& s, const std::string& what) {
  if (s.ok()) return Status::Ok();
  std::string msg = what + ": gRPC code " + std::to_string(static_cast<int>(s.error_code())) + ": " + s.error_message();
  switch (s.error_code()) {
    case grpc::StatusCode::INVALID_ARGUMENT: return Status::InvalidArgument(msg);
    case grpc::StatusCode::NOT_FOUND: return Status::NotFound(msg);
    case grpc::StatusCode::FAILED_PRECONDITION: return Status::FailedPrecondition(msg);
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED: return Status::Unavailable(msg);
    default: return Status::Internal(msg);
  }
}

std::string StateName(v1::SourceState s) {
  switch (s) {
    case v1::SOURCE_STATE_CONNECTING: return "CONNECTING";
    case v1::SOURCE_STATE_REPLAYING: return "REPLAYING";
    case v1::SOURCE_STATE_EXACT: return "EXACT";
    case v1::SOURCE_STATE_DEGRADED: return "DEGRADED";
    case v1::SOURCE_STATE_DISCONNECTED: return "DISCONNECTED";
    default: return "UNSPECIFIED";
  }
}

Result<std::map<std::string, SourceView>> ListSources(const Fleet& fleet, const client::Client& kvidx) {
  v1::ListReplicasRequest req;
  req.set_model(fleet.options().model);
  v1::ListReplicasResponse resp;
  if (grpc::Status s = kvidx.ListReplicas(req, &resp); !s.ok()) return FromGrpc(s, "ListReplicas");
  std::map<std::string, SourceView> out;
  for (const v1::ReplicaSummary& r : resp.replicas()) {
    for (const v1::SourceSummary& s : r.sources()) {
      SourceView v;
      v.state = s.state();
      v.has_seq = s.has_seq();
      v.last_seq = s.last_seq();
      out[s.source()] = v;
    }
  }
  return out;
}

Status WaitConnected(const Fleet& fleet, const client::Client& kvidx, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  std::string missing;
  for (;;) {
    Result<std::map<std::string, SourceView>> src = ListSources(fleet, kvidx);
    if (src.ok()) {
      missing.clear();
      for (size_t i = 0; i < fleet.size(); ++i) {
        auto it = src->find(fleet.source_name(i));
        if (it == src->end()) {
          Cat(&missing, {" ", fleet.source_name(i), " (unknown to kvidx)"});
        } else if (it->second.state == v1::SOURCE_STATE_CONNECTING) {
          Cat(&missing, {" ", fleet.source_name(i), " (CONNECTING)"});
        }
      }
      if (missing.empty()) return Status::Ok();
    } else {
      missing.clear();
      Cat(&missing, {" ", src.status().ToString()});
    }
    if (Clock::now() >= deadline) return Status::Unavailable("sources not connected:" + missing);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

Status WaitCaughtUp(Fleet& fleet, const client::Client& kvidx, std::chrono::milliseconds timeout) {
  fleet.Flush();
  const auto deadline = Clock::now() + timeout;
  std::string behind;
  for (;;) {
    Result<std::map<std::string, SourceView>> src = ListSources(fleet, kvidx);
    if (src.ok()) {
      behind.clear();
      for (size_t i = 0; i < fleet.size(); ++i) {
        const std::string name = fleet.source_name(i);
        auto it = src->find(name);
        uint64_t next = fleet.rank(i).publisher().next_seq();
        if (it == src->end()) {
          Cat(&behind, {" ", name, " (unknown to kvidx)"});
          continue;
        }
        const SourceView& v = it->second;
        bool seq_ok = next == 0 ? !v.has_seq : (v.has_seq && v.last_seq == next - 1);
        bool state_ok = v.state == v1::SOURCE_STATE_EXACT || v.state == v1::SOURCE_STATE_DEGRADED;
        if (!seq_ok || !state_ok) {
          Cat(&behind, {" ", name, " (", StateName(v.state), ", kvidx at ",
                        v.has_seq ? std::to_string(v.last_seq) : std::string("none"), ", engine at ",
                        next == 0 ? std::string("none") : std::to_string(next - 1), ")"});
        }
      }
      if (behind.empty()) return Status::Ok();
    } else {
      behind.clear();
      Cat(&behind, {" ", src.status().ToString()});
    }
    if (Clock::now() >= deadline) return Status::Unavailable("kvidx did not catch up:" + behind);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

Result<std::vector<std::string>> RemovedStillListed(const Fleet& fleet, const client::Client& kvidx) {
  Result<std::map<std::string, SourceView>> src = ListSources(fleet, kvidx);
  if (!src.ok()) return src.status();
  std::vector<std::string> out;
  for (const EngineDesc& e : fleet.removed()) {
    auto it = src->lower_bound(e.replica + "/");
    if (it != src->end() && it->first.compare(0, e.replica.size() + 1, e.replica + "/") == 0) out.push_back(e.replica);
  }
  return out;
}

Status WaitRemovedGone(const Fleet& fleet, const client::Client& kvidx, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    Result<std::vector<std::string>> left = RemovedStillListed(fleet, kvidx);
    if (left.ok() && left->empty()) return Status::Ok();
    if (Clock::now() >= deadline) {
      if (!left.ok()) return left.status();
      std::string names;
      for (const std::string& r : *left) Cat(&names, {" ", r});
      return Status::Unavailable("sources of stopped replicas still listed:" + names);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

Status WarmUp(Fleet& fleet, const client::Client& kvidx, std::chrono::milliseconds timeout) {
  const auto start = Clock::now();
  if (Status s = WaitConnected(fleet, kvidx, timeout); !s.ok()) return s;
  // A SUB's subscription reaches the PUB a moment after the connection.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  fleet.ResetAll();
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(timeout - (Clock::now() - start));
  if (Status s = WaitCaughtUp(fleet, kvidx, std::max(left, std::chrono::milliseconds(1000))); !s.ok()) return s;
  Result<std::map<std::string, SourceView>> src = ListSources(fleet, kvidx);
  if (!src.ok()) return src.status();
  for (size_t i = 0; i < fleet.size(); ++i) {
    const std::string name = fleet.source_name(i);
    auto it = src->find(name);
    v1::SourceState st = it == src->end() ? v1::SOURCE_STATE_UNSPECIFIED : it->second.state;
    if (st != v1::SOURCE_STATE_EXACT) {
      std::string msg;
      Cat(&msg, {"source ", name, " is ", StateName(st), " after warm-up"});
      return Status::Unavailable(msg);
    }
  }
  return Status::Ok();
}

Status RegisterEngine(const EngineDesc& e, const client::Client& kvidx, bool quiet, const std::string& metrics_url) {
  v1::AddEngineRequest req;
  v1::EngineSpec* spec = req.mutable_engine();
  spec->set_replica(e.replica);
  spec->set_model(e.model);
  spec->set_endpoint(e.endpoint);
  spec->set_replay_endpoint(e.replay_endpoint);
  spec->set_dp_size(e.dp_size);
  if (e.topic) spec->set_topic(*e.topic);
  spec->set_mode("connect");
  spec->set_gpu_blocks(e.gpu_blocks);
  spec->set_metrics_url(metrics_url);
  v1::AddEngineResponse resp;
  grpc::Status s = kvidx.AddEngine(req, &resp);
  if (s.error_code() == grpc::StatusCode::FAILED_PRECONDITION &&
      s.error_message().find("already exists") != std::string::npos) {
    if (!quiet) std::fprintf(stderr, "kvidx-sim: replacing engine %s left by an earlier run\n", e.replica.c_str());
    if (grpc::Status r = kvidx.RemoveEngine(e.replica); !r.ok()) return FromGrpc(r, "RemoveEngine " + e.replica);
    resp.Clear();
    s = kvidx.AddEngine(req, &resp);
  }
  if (!s.ok()) return FromGrpc(s, "AddEngine " + e.replica);
  return Status::Ok();
}

Status RegisterEngines(const Fleet& fleet, const client::Client& kvidx, bool quiet,
                       const std::function<std::string(const std::string&)>& metrics_url) {
  for (const EngineDesc& e : fleet.engines()) {
    const std::string url = metrics_url ? metrics_url(e.replica) : std::string();
    if (Status s = RegisterEngine(e, kvidx, quiet, url); !s.ok()) return s;
  }
  return Status::Ok();
}

double FidelityResult::percent() const {
  return queries == 0 ? 100.0 : 100.0 * static_cast<double>(queries_ok) / static_cast<double>(queries);
}

void FidelityResult::Add(const FidelityResult& o) {
  queries += o.queries;
  queries_ok += o.queries_ok;
  comparisons_exact += o.comparisons_exact;
  mismatches_exact += o.mismatches_exact;
  comparisons_degraded += o.comparisons_degraded;
  mismatches_degraded += o.mismatches_degraded;
  comparisons_other += o.comparisons_other;
  mismatches_other += o.mismatches_other;
  rpc_errors += o.rpc_errors;
  for (const std::string& e : o.examples) {
    if (examples.size() < 10) examples.push_back(e);
  }
}

Result<FidelityResult> MeasureFidelity(Fleet& fleet, const client::Client& kvidx,
                                       const std::vector<std::vector<int64_t>>& queries, size_t max_examples) {
  Result<std::map<std::string, SourceView>> listed = ListSources(fleet, kvidx);
  if (!listed.ok()) return listed.status();
  std::vector<v1::SourceState> listed_state(fleet.size(), v1::SOURCE_STATE_UNSPECIFIED);
  for (size_t i = 0; i < fleet.size(); ++i) {
    auto it = listed->find(fleet.source_name(i));
    if (it != listed->end()) listed_state[i] = it->second.state;
  }

  FidelityResult res;
  v1::FindPrefixResponse resp;
  std::vector<uint32_t> believed(fleet.size());
  std::vector<v1::SourceState> state(fleet.size());
  for (const std::vector<int64_t>& q : queries) {
    ++res.queries;
    resp.Clear();
    grpc::Status s = kvidx.FindPrefixTokens(fleet.options().model, q, client::TokenOptions{}, &resp);
    if (!s.ok()) {
      ++res.rpc_errors;
      if (res.examples.size() < max_examples) res.examples.push_back("query failed: " + s.error_message());
      continue;
    }
    std::fill(believed.begin(), believed.end(), 0);
    state = listed_state;
    for (const v1::ReplicaMatch& m : resp.replicas()) {
      std::optional<size_t> i = fleet.IndexOf(m.replica(), m.dp_rank());
      if (!i) continue;
      believed[*i] = m.matched_blocks();
      state[*i] = m.state();  // the answer's own state is the freshest
    }
    const std::vector<BlockKey>& keys = fleet.Keys(q);
    std::span<const BlockKey> asked(keys.data(), std::min<size_t>(keys.size(), resp.blocks_in_query()));
    bool ok = true;
    for (size_t i = 0; i < fleet.size(); ++i) {
      size_t truth = fleet.rank(i).CachedPrefix(asked);
      bool equal = truth == believed[i];
      switch (state[i]) {
        case v1::SOURCE_STATE_EXACT:
          ++res.comparisons_exact;
          if (!equal) {
            ++res.mismatches_exact;
            ok = false;
            if (res.examples.size() < max_examples) {
              res.examples.push_back(fleet.source_name(i) + ": kvidx says " + std::to_string(believed[i]) +
                                     " blocks, the engine holds " + std::to_string(truth) + " (query of " +
                                     std::to_string(asked.size()) + " blocks)");
            }
          }
          break;
        case v1::SOURCE_STATE_DEGRADED:
          ++res.comparisons_degraded;
          res.mismatches_degraded += !equal;
          break;
        default:
          ++res.comparisons_other;
          res.mismatches_other += !equal;
          break;
      }
    }
    res.queries_ok += ok;
  }
  return res;
}

Result<KvidxCounters> ReadCounters(const Fleet& fleet, const client::Client& kvidx) {
  KvidxCounters c;
  Result<std::map<std::string, SourceView>> listed = ListSources(fleet, kvidx);
  if (!listed.ok()) return listed.status();
  for (size_t i = 0; i < fleet.size(); ++i) {
    auto it = listed->find(fleet.source_name(i));
    c.sources_by_state[it == listed->end() ? "ABSENT" : StateName(it->second.state)]++;
  }
  if (!kvidx.options().admin_token.empty()) {
    v1::ListSourcesResponse resp;
    if (kvidx.ListSources(&resp).ok()) {
      c.per_source = true;
      for (const v1::SourceInfo& s : resp.sources()) {
        std::optional<size_t> i = fleet.IndexOf(s.replica(), s.dp_rank());
        if (!i || s.model() != fleet.options().model) continue;
        c.batches_lost += s.batches_lost();
        c.gaps += s.gaps();
        c.batches_replayed += s.batches_replayed();
        c.restarts += s.restarts();
        c.events += s.events();
      }
      return c;
    }
  }
  v1::GetStatsResponse st;
  if (grpc::Status s = kvidx.GetStats(&st); !s.ok()) return FromGrpc(s, "GetStats");
  c.batches_lost = st.batches_lost();
  c.gaps = st.gaps();
  c.events = st.events();
  return c;
}

}  // namespace kvidx::sim
