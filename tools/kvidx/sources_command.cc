// kvidx sources: every source (one DP rank of one engine) with its ingest
// state, position and loss counters, to tell which engines the index is exact
// for and which ones need attention. Admin call: needs a token or mTLS.
#include <cstdio>
#include <optional>
#include <string>

#include "tools/kvidx/cli_common.h"
#include "tools/kvidx/commands.h"
#include "tools/kvidx/json_writer.h"

namespace kvidx::cli {

namespace {

constexpr char kSourcesUsage[] =
    "usage: kvidx sources [connection options]\n"
    "\n"
    "Lists every source (\"<replica>/dp<rank>\") with its state (CONNECTING,\n"
    "REPLAYING, EXACT, DEGRADED, DISCONNECTED), last applied seq, lag behind the\n"
    "engine, gaps, batches replayed and lost, publisher restarts and decode\n"
    "errors. Admin call: needs --token-file (or KVIDX_TOKEN_FILE) or --cert.\n";

}  // namespace

int RunSources(int argc, char** argv, const FlagValues& leading) {
  CommandLine cl("sources", kSourcesUsage, leading);
  if (std::optional<int> rc = cl.Parse(argc, argv, {}, 0)) return *rc;
  std::unique_ptr<client::Client> client;
  if (std::optional<int> rc = cl.Connect(&client)) return *rc;
  v1::ListSourcesResponse resp;
  if (grpc::Status s = client->ListSources(&resp); !s.ok()) return cl.RpcError(s);

  if (cl.json()) {
    JsonWriter w;
    w.BeginArray();
    for (const v1::SourceInfo& si : resp.sources()) {
      w.BeginObject();
      w.Key("source").String(si.source());
      w.Key("replica").String(si.replica());
      w.Key("dp_rank").Uint(si.dp_rank());
      w.Key("model").String(si.model());
      w.Key("state").String(StateName(si.state()));
      w.Key("last_seq");
      if (si.has_seq()) {
        w.U64String(si.last_seq());
      } else {
        w.Null();
      }
      w.Key("lag_seconds");
      if (si.lag_seconds() < 0) {
        w.Null();
      } else {
        w.Double(si.lag_seconds());
      }
      w.Key("endpoint").String(si.endpoint());
      w.Key("replay_endpoint").String(si.replay_endpoint());
      w.Key("batches").Uint(si.batches());
      w.Key("events").Uint(si.events());
      w.Key("gaps").Uint(si.gaps());
      w.Key("batches_replayed").Uint(si.batches_replayed());
      w.Key("batches_lost").Uint(si.batches_lost());
      w.Key("duplicates").Uint(si.duplicates());
      w.Key("restarts").Uint(si.restarts());
      w.Key("decode_errors").Uint(si.decode_errors());
      w.EndObject();
    }
    w.EndArray();
    std::printf("%s\n", w.str().c_str());
    return kExitOk;
  }

  Table t({"source", "state", "last_seq", "lag", "gaps", "replayed", "lost", "restarts", "decode_errors"});
  for (const v1::SourceInfo& si : resp.sources()) {
    t.AddRow({si.source(), std::string(StateName(si.state())), si.has_seq() ? std::to_string(si.last_seq()) : "-",
              si.lag_seconds() < 0 ? "-" : FormatDouble(si.lag_seconds(), 3) + "s", std::to_string(si.gaps()),
              std::to_string(si.batches_replayed()), std::to_string(si.batches_lost()),
              std::to_string(si.restarts()), std::to_string(si.decode_errors())});
  }
  std::fputs(t.Render().c_str(), stdout);
  return kExitOk;
}

}  // namespace kvidx::cli
