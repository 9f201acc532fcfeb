// kvidx snapshot / resync / engines: operations on a running server. Every
// one but `engines list` is a KvIndexAdmin call, authenticated by the bearer
// token (--token-file / KVIDX_TOKEN_FILE) or an mTLS client certificate.
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include "tools/kvidx/cli_common.h"
#include "tools/kvidx/commands.h"
#include "tools/kvidx/json_writer.h"

namespace kvidx::cli {

namespace {

constexpr char kSnapshotUsage[] =
    "usage: kvidx snapshot [connection options]\n"
    "\n"
    "Makes the server write a snapshot now; prints its generation, size, owner\n"
    "count and duration. Admin call.\n";

constexpr char kResyncUsage[] =
    "usage: kvidx resync SOURCE [connection options]\n"
    "\n"
    "Drops what the index holds for SOURCE (\"<replica>/dp<rank>\", or a replica\n"
    "name for all its ranks) and rebuilds it from the engine. Admin call.\n";

constexpr char kEnginesUsage[] =
    "usage: kvidx engines add --replica R --model M --endpoint E [--replay-endpoint E]\n"
    "                         [--dp-size N] [--topic T] [--mode connect|bind] [--gpu-blocks N]\n"
    "                         [--metrics-url URL]\n"
    "       kvidx engines remove REPLICA\n"
    "       kvidx engines list [--model M]\n"
    "\n"
    "add     starts indexing an engine (one source per DP rank). Admin call.\n"
    "          --endpoint         rank-0 PUB endpoint from kvidx's side, e.g. tcp://host:5557\n"
    "          --replay-endpoint  rank-0 replay (ROUTER) endpoint; default none\n"
    "          --dp-size          data-parallel size (default 1)\n"
    "          --topic            the engine's KVEventsConfig.topic\n"
    "          --mode             connect (default: vLLM binds) or bind (vLLM connects)\n"
    "          --gpu-blocks       vLLM num_gpu_blocks per rank (default unknown)\n"
    "          --metrics-url      the engine's Prometheus /metrics, scraped for Route's load signals\n"
    "remove  stops indexing a replica and drops its blocks. Admin call.\n"
    "list    replicas with their sources, states and blocks per tier.\n";

void SeqJson(JsonWriter& w, bool has_seq, uint64_t seq) {
  if (has_seq) {
    w.U64String(seq);
  } else {
    w.Null();
  }
}

int EnginesAdd(int argc, char** argv, const FlagValues& leading) {
  CommandLine cl("engines add", kEnginesUsage, leading);
  constexpr FlagSpec kFlags[] = {{"--replica"}, {"--model"}, {"--endpoint"},   {"--replay-endpoint"},
                                 {"--dp-size"}, {"--topic"}, {"--mode"},       {"--gpu-blocks"},
                                 {"--metrics-url"}};
  if (std::optional<int> rc = cl.Parse(argc, argv, kFlags, 0)) return *rc;
  v1::AddEngineRequest req;
  v1::EngineSpec* e = req.mutable_engine();
  for (const char* flag : {"--replica", "--model", "--endpoint"}) {
    const std::string* v = cl.Get(flag);
    if (v == nullptr || v->empty()) return cl.UsageError(std::string("missing ") + flag);
  }
  e->set_replica(*cl.Get("--replica"));
  e->set_model(*cl.Get("--model"));
  e->set_endpoint(*cl.Get("--endpoint"));
  if (const std::string* v = cl.Get("--replay-endpoint")) e->set_replay_endpoint(*v);
  if (const std::string* v = cl.Get("--topic")) e->set_topic(*v);
  if (const std::string* v = cl.Get("--metrics-url")) e->set_metrics_url(*v);
  if (const std::string* v = cl.Get("--mode")) {
    if (*v != "connect" && *v != "bind") return cl.UsageError("bad --mode '" + *v + "' (expected connect or bind)");
    e->set_mode(*v);
  }
  uint64_t dp_size = 1;
  uint64_t gpu_blocks = 0;
  if (std::optional<int> rc = cl.GetUint("--dp-size", 1, 256, &dp_size)) return *rc;
  if (std::optional<int> rc = cl.GetUint("--gpu-blocks", 0, UINT64_MAX, &gpu_blocks)) return *rc;
  e->set_dp_size(static_cast<uint32_t>(dp_size));
  e->set_gpu_blocks(gpu_blocks);

  std::unique_ptr<client::Client> client;
  if (std::optional<int> rc = cl.Connect(&client)) return *rc;
  v1::AddEngineResponse resp;
  if (grpc::Status s = client->AddEngine(req, &resp); !s.ok()) return cl.RpcError(s);
  if (cl.json()) {
    JsonWriter w;
    w.BeginObject().Key("replica").String(e->replica()).Key("sources").BeginArray();
    for (const std::string& s : resp.sources()) w.String(s);
    w.EndArray().EndObject();
    std::printf("%s\n", w.str().c_str());
  } else {
    std::string list;
    for (const std::string& s : resp.sources()) list += (list.empty() ? "" : ", ") + s;
    std::printf("added engine %s: sources %s\n", e->replica().c_str(), list.c_str());
  }
  return kExitOk;
}

int EnginesRemove(int argc, char** argv, const FlagValues& leading) {
  CommandLine cl("engines remove", kEnginesUsage, leading);
  if (std::optional<int> rc = cl.Parse(argc, argv, {}, 1)) return *rc;
  if (cl.positional().empty()) return cl.UsageError("missing REPLICA");
  const std::string& replica = cl.positional()[0];
  std::unique_ptr<client::Client> client;
  if (std::optional<int> rc = cl.Connect(&client)) return *rc;
  if (grpc::Status s = client->RemoveEngine(replica); !s.ok()) return cl.RpcError(s);
  if (cl.json()) {
    std::printf("{\"replica\": %s}\n", JsonWriter::Quote(replica).c_str());
  } else {
    std::printf("removed engine %s\n", replica.c_str());
  }
  return kExitOk;
}

int EnginesList(int argc, char** argv, const FlagValues& leading) {
  CommandLine cl("engines list", kEnginesUsage, leading);
  constexpr FlagSpec kFlags[] = {{"--model"}};
  if (std::optional<int> rc = cl.Parse(argc, argv, kFlags, 0)) return *rc;
  v1::ListReplicasRequest req;
  if (const std::string* m = cl.Get("--model")) req.set_model(*m);
  std::unique_ptr<client::Client> client;
  if (std::optional<int> rc = cl.Connect(&client)) return *rc;
  v1::ListReplicasResponse resp;
  if (grpc::Status s = client->ListReplicas(req, &resp); !s.ok()) return cl.RpcError(s);

  if (cl.json()) {
    JsonWriter w;
    w.BeginArray();
    for (const v1::ReplicaSummary& r : resp.replicas()) {
      w.BeginObject();
      w.Key("replica").String(r.replica());
      w.Key("model").String(r.model());
      w.Key("origin").String(r.origin());
      w.Key("sources").BeginArray();
      for (const v1::SourceSummary& s : r.sources()) {
        w.BeginObject();
        w.Key("source").String(s.source());
        w.Key("dp_rank").Uint(s.dp_rank());
        w.Key("state").String(StateName(s.state()));
        w.Key("last_seq");
        SeqJson(w, s.has_seq(), s.last_seq());
        w.Key("blocks").BeginObject();
        for (const v1::TierCount& t : s.blocks()) w.Key(t.tier()).Uint(t.blocks());
        w.EndObject();
        w.Key("gpu_capacity").Uint(s.gpu_capacity());
        w.EndObject();
      }
      w.EndArray();
      w.EndObject();
    }
    w.EndArray();
    std::printf("%s\n", w.str().c_str());
    return kExitOk;
  }
  Table t({"replica", "model", "origin", "source", "state", "last_seq", "blocks", "gpu_capacity"});
  for (const v1::ReplicaSummary& r : resp.replicas()) {
    for (const v1::SourceSummary& s : r.sources()) {
      std::string blocks;
      for (const v1::TierCount& tc : s.blocks()) {
        blocks += (blocks.empty() ? "" : " ") + tc.tier() + "=" + std::to_string(tc.blocks());
      }
      t.AddRow({r.replica(), r.model(), r.origin().empty() ? "-" : r.origin(), s.source(), std::string(StateName(s.state())),
                s.has_seq() ? std::to_string(s.last_seq()) : "-", blocks.empty() ? "-" : blocks,
                s.gpu_capacity() ? std::to_string(s.gpu_capacity()) : "-"});
    }
  }
  std::fputs(t.Render().c_str(), stdout);
  return kExitOk;
}

}  // namespace

int RunSnapshot(int argc, char** argv, const FlagValues& leading) {
  CommandLine cl("snapshot", kSnapshotUsage, leading);
  if (std::optional<int> rc = cl.Parse(argc, argv, {}, 0)) return *rc;
  std::unique_ptr<client::Client> client;
  if (std::optional<int> rc = cl.Connect(&client)) return *rc;
  v1::TriggerSnapshotResponse resp;
  if (grpc::Status s = client->TriggerSnapshot(&resp); !s.ok()) return cl.RpcError(s);
  if (cl.json()) {
    JsonWriter w;
    w.BeginObject();
    w.Key("generation").Uint(resp.generation());
    w.Key("bytes").Uint(resp.bytes());
    w.Key("owners").Uint(resp.owners());
    w.Key("duration_seconds").Double(resp.duration_seconds());
    w.EndObject();
    std::printf("%s\n", w.str().c_str());
  } else {
    std::printf("snapshot %llu written: %llu bytes, %llu owners in %ss\n",
                static_cast<unsigned long long>(resp.generation()), static_cast<unsigned long long>(resp.bytes()),
                static_cast<unsigned long long>(resp.owners()), FormatDouble(resp.duration_seconds(), 3).c_str());
  }
  return kExitOk;
}

int RunResync(int argc, char** argv, const FlagValues& leading) {
  CommandLine cl("resync", kResyncUsage, leading);
  if (std::optional<int> rc = cl.Parse(argc, argv, {}, 1)) return *rc;
  if (cl.positional().empty()) return cl.UsageError("missing SOURCE");
  const std::string& source = cl.positional()[0];
  std::unique_ptr<client::Client> client;
  if (std::optional<int> rc = cl.Connect(&client)) return *rc;
  if (grpc::Status s = client->Resync(source); !s.ok()) return cl.RpcError(s);
  if (cl.json()) {
    std::printf("{\"source\": %s}\n", JsonWriter::Quote(source).c_str());
  } else {
    std::printf("resync started for %s\n", source.c_str());
  }
  return kExitOk;
}

int RunEngines(int argc, char** argv, const FlagValues& leading) {
  if (argc < 2) {
    std::fprintf(stderr, "kvidx engines: missing action (add, remove or list)\nRun 'kvidx engines --help' for usage.\n");
    return kExitUsage;
  }
  const std::string_view action = argv[1];
  if (action == "add") return EnginesAdd(argc - 1, argv + 1, leading);
  if (action == "remove") return EnginesRemove(argc - 1, argv + 1, leading);
  if (action == "list") return EnginesList(argc - 1, argv + 1, leading);
  if (action == "--help" || action == "-h") {
    std::fputs(kEnginesUsage, stdout);
    std::fputs(kGlobalOptionsHelp, stdout);
    return kExitOk;
  }
  std::fprintf(stderr, "kvidx engines: unknown action '%s' (expected add, remove or list)\n", argv[1]);
  return kExitUsage;
}

}  // namespace kvidx::cli
