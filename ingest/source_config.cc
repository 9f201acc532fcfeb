#include "ingest/source_config.h"

#include <charconv>

namespace kvidx::ingest {

std::string_view ConnectModeName(ConnectMode m) {
  switch (m) {
    case ConnectMode::kConnect: return "connect";
    case ConnectMode::kBind: return "bind";
  }
  return "unknown";
}

std::string SourceName(std::string_view replica, uint32_t dp_rank) {
  std::string s(replica);
  s += "/dp";
  s += std::to_string(dp_rank);
  return s;
}

Result<std::string> OffsetEndpoint(std::string_view endpoint, uint32_t dp_rank) {
  std::string ep(endpoint);
  if (ep.empty() || dp_rank == 0) return ep;
  // Same test order as vLLM: "inproc" wins over "tcp" anywhere in the string.
  if (ep.find("inproc") != std::string::npos) return ep + "_dp" + std::to_string(dp_rank);
  if (ep.find("tcp") != std::string::npos) {
    size_t colon = ep.rfind(':');
    if (colon == std::string::npos) return ep;
    std::string_view port_text = std::string_view(ep).substr(colon + 1);
    uint32_t port = 0;
    auto [ptr, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (ec != std::errc() || ptr != port_text.data() + port_text.size() || port_text.empty()) {
      return Status::InvalidArgument("endpoint '" + ep + "': port '" + std::string(port_text) +
                                     "' is not a number, cannot offset it for dp rank " +
                                     std::to_string(dp_rank));
    }
    uint64_t offset = uint64_t{port} + dp_rank;
    if (offset > 65535) {
      return Status::InvalidArgument("endpoint '" + ep + "': port + dp rank " + std::to_string(dp_rank) +
                                " exceeds 65535");
    }
    return ep.substr(0, colon + 1) + std::to_string(offset);
  }
  return Status::InvalidArgument("endpoint '" + ep +
                                 "' must contain 'inproc' or 'tcp' to be offset for dp rank " +
                                 std::to_string(dp_rank) + " (vLLM rejects it too)");
}

std::string TopicTemplate::TopicFor(const EngineConfig& engine) const {
  if (engine.topic.has_value()) return *engine.topic;
  if (pattern_.empty()) return "";
  std::string out;
  for (size_t i = 0; i < pattern_.size();) {
    if (pattern_.compare(i, 9, "{replica}") == 0) {
      out += engine.replica;
      i += 9;
    } else if (pattern_.compare(i, 7, "{model}") == 0) {
      out += engine.model;
      i += 7;
    } else {
      out += pattern_[i++];
    }
  }
  return out;
}

bool TopicTemplate::Parse(std::string_view topic, std::string* replica, std::string* model) const {
  if (pattern_.empty()) return false;
  std::string_view pat = pattern_;
  size_t t = 0;
  replica->clear();
  model->clear();
  while (!pat.empty()) {
    std::string* slot = nullptr;
    if (pat.starts_with("{replica}")) {
      slot = replica;
      pat.remove_prefix(9);
    } else if (pat.starts_with("{model}")) {
      slot = model;
      pat.remove_prefix(7);
    }
    if (slot == nullptr) {
      if (t >= topic.size() || topic[t] != pat.front()) return false;
      ++t;
      pat.remove_prefix(1);
      continue;
    }
    // The literal run after the placeholder (up to the next placeholder).
    size_t lit_end = pat.find('{');
    std::string_view lit = pat.substr(0, lit_end == std::string_view::npos ? pat.size() : lit_end);
    size_t end = lit.empty() ? topic.size() : topic.find(lit, t);
    if (end == std::string_view::npos || end == t) return false;
    slot->assign(topic.substr(t, end - t));
    t = end;
  }
  return t == topic.size();
}

namespace {

bool HasScheme(std::string_view ep) {
  return ep.starts_with("tcp://") || ep.starts_with("inproc://") || ep.starts_with("ipc://");
}

// Endpoints can be anything an operator or an admin client typed; errors
// quote at most this much of one.
constexpr size_t kMaxQuoted = 128;

std::string Quoted(std::string_view ep) {
  std::string out = "'";
  out.append(ep.substr(0, kMaxQuoted));
  if (ep.size() <= kMaxQuoted) return out.append("'");
  return out.append("...' (").append(std::to_string(ep.size())).append(" bytes)");
}

// tcp://HOST:PORT with a non-empty HOST and PORT in 1..65535 (or "*" where
// kvidx binds: the OS picks one). Without this ZMQ takes "tcp://h" or port 0
// and the source stays CONNECTING forever (or the bind fails at start).
Status CheckTcpAddress(std::string_view what, std::string_view ep, ConnectMode mode, uint32_t dp_size) {
  std::string_view addr = ep.substr(6);  // after "tcp://"
  size_t colon = addr.rfind(':');
  if (colon == std::string_view::npos || colon == 0) {
    return Status::InvalidArgument(std::string(what) + " " + Quoted(ep) + ": expected tcp://HOST:PORT");
  }
  std::string_view port_text = addr.substr(colon + 1);
  if (mode == ConnectMode::kBind && port_text == "*") return Status::Ok();
  uint32_t port = 0;
  auto [ptr, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || ec != std::errc() || ptr != port_text.data() + port_text.size() || port == 0 ||
      port > 65535) {
    return Status::InvalidArgument(std::string(what) + " " + Quoted(ep) + ": port must be a number in 1..65535");
  }
  if (uint64_t{port} + dp_size - 1 > 65535) {
    return Status::InvalidArgument(std::string(what) + " " + Quoted(ep) + ": port + dp_size - 1 = " +
                                   std::to_string(uint64_t{port} + dp_size - 1) +
                                   " exceeds 65535 (rank r uses port + r)");
  }
  return Status::Ok();
}

Status CheckEndpoint(std::string_view what, std::string_view ep, ConnectMode mode, uint32_t dp_size) {
  if (!HasScheme(ep)) {
    return Status::InvalidArgument(std::string(what) + " " + Quoted(ep) + ": expected tcp://, ipc:// or inproc://");
  }
  if (mode == ConnectMode::kConnect && ep.starts_with("tcp://") &&
      (ep.find('*') != std::string_view::npos)) {
    return Status::InvalidArgument(std::string(what) + " " + Quoted(ep) +
                                   ": kvidx connects here and cannot connect to a wildcard host; "
                                   "give the engine's address (or use bind mode)");
  }
  if (ep.starts_with("tcp://")) return CheckTcpAddress(what, ep, mode, dp_size);
  if (ep.ends_with("://")) {
    return Status::InvalidArgument(std::string(what) + " " + Quoted(ep) + ": the address after :// is empty");
  }
  return Status::Ok();
}

}  // namespace

Status CheckReplicaName(std::string_view replica) {
  if (replica.empty()) return Status::InvalidArgument("replica name is empty");
  if (replica.size() > kMaxReplicaNameBytes) {
    return Status::InvalidArgument("replica name of " + std::to_string(replica.size()) + " bytes exceeds " +
                                   std::to_string(kMaxReplicaNameBytes));
  }
  for (size_t i = 0; i < replica.size(); ++i) {
    const char c = replica[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '-' || c == '_' || c == ':' || c == '[' || c == ']';
    if (!ok) {
      // '/' separates replica and rank in the source name; the rest keeps
      // the name safe in metric labels, topics ('@') and logs.
      return Status::InvalidArgument("replica name '" + std::string(replica.substr(0, 64)) +
                                     (replica.size() > 64 ? "...'" : "'") + ": character " + std::to_string(i) +
                                     " is not one of A-Z a-z 0-9 . - _ : [ ]");
    }
  }
  return Status::Ok();
}

Result<std::vector<SourceSpec>> ExpandEngine(const EngineConfig& engine, const TopicTemplate& topics) {
  if (Status s = CheckReplicaName(engine.replica); !s.ok()) return Status::InvalidArgument("engine: " + s.message());
  if (engine.data_parallel_size == 0 || engine.data_parallel_size > 4096) {
    return Status::InvalidArgument("engine '" + engine.replica + "': data_parallel_size " +
                                   std::to_string(engine.data_parallel_size) + " not in 1..4096");
  }
  if (Status s = CheckEndpoint("engine '" + engine.replica + "': endpoint", engine.endpoint, engine.mode,
                              engine.data_parallel_size);
      !s.ok()) {
    return s;
  }
  if (!engine.replay_endpoint.empty()) {
    // The replay ROUTER always binds on vLLM's side; kvidx always connects.
    if (Status s = CheckEndpoint("engine '" + engine.replica + "': replay_endpoint", engine.replay_endpoint,
                                 ConnectMode::kConnect, engine.data_parallel_size);
        !s.ok()) {
      return s;
    }
  }
  std::string topic = topics.TopicFor(engine);
  std::vector<SourceSpec> out;
  out.reserve(engine.data_parallel_size);
  for (uint32_t rank = 0; rank < engine.data_parallel_size; ++rank) {
    SourceSpec s;
    s.replica = engine.replica;
    s.model = engine.model;
    s.dp_rank = rank;
    s.name = SourceName(engine.replica, rank);
    auto ep = OffsetEndpoint(engine.endpoint, rank);
    if (!ep.ok()) return ep.status();
    s.endpoint = std::move(ep.value());
    if (!engine.replay_endpoint.empty()) {
      auto rep = OffsetEndpoint(engine.replay_endpoint, rank);
      if (!rep.ok()) return rep.status();
      s.replay_endpoint = std::move(rep.value());
    }
    s.topic = topic;
    s.mode = engine.mode;
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace kvidx::ingest
