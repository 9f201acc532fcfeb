// kvidx status / kvidx watch: the server's health at a glance (GetStats),
// once or refreshed, so an operator can tell whether the index is serving,
// keeping up and exact.
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tools/kvidx/cli_common.h"
#include "tools/kvidx/commands.h"
#include "tools/kvidx/json_writer.h"

namespace kvidx::cli {

namespace {

constexpr char kStatusUsage[] =
    "usage: kvidx status [connection options]\n"
    "\n"
    "Prints the server's version, uptime, serving state, models, sources by\n"
    "state, ingest counters (applied batches, events, lost batches, gaps),\n"
    "queries served and the age of the newest snapshot.\n";

constexpr char kWatchUsage[] =
    "usage: kvidx watch [--interval-ms N] [--count N] [connection options]\n"
    "\n"
    "Refreshes every interval: events/s, applied batches/s and queries/s (from\n"
    "successive GetStats), gaps, lost batches, and every source's state. Source\n"
    "details come from the admin ListSources when a token or client certificate\n"
    "is configured, else from ListReplicas.\n"
    "  --interval-ms  time between refreshes (default 1000)\n"
    "  --count        stop after N refreshes (default: until interrupted)\n"
    "  --json         one JSON object per line and refresh\n"
    "On a terminal the screen is cleared before each refresh.\n";

constexpr int kStates[] = {v1::SOURCE_STATE_CONNECTING, v1::SOURCE_STATE_REPLAYING, v1::SOURCE_STATE_EXACT,
                           v1::SOURCE_STATE_DEGRADED, v1::SOURCE_STATE_DISCONNECTED};

uint64_t SourcesIn(const v1::GetStatsResponse& s, int state) {
  uint64_t n = 0;
  for (const v1::StateCount& c : s.sources_by_state()) {
    if (c.state() == state) n += c.sources();
  }
  return n;
}

std::string Seconds(double s) { return s < 0 ? "none" : FormatDouble(s, 1) + "s"; }

void PrintStatusJson(const v1::GetStatsResponse& s) {
  JsonWriter w;
  w.BeginObject();
  w.Key("version").String(s.version());
  w.Key("uptime_seconds").Double(s.uptime_seconds());
  w.Key("serving").Bool(s.serving());
  w.Key("models").BeginArray();
  for (const v1::ModelStats& m : s.models()) {
    w.BeginObject();
    w.Key("name").String(m.name());
    w.Key("hash_algo").String(m.hash_algo());
    w.Key("block_size").Uint(m.block_size());
    w.Key("blocks").Uint(m.blocks());
    w.EndObject();
  }
  w.EndArray();
  w.Key("sources_by_state").BeginObject();
  for (const int st : kStates) w.Key(StateName(st)).Uint(SourcesIn(s, st));
  if (const uint64_t other = SourcesIn(s, v1::SOURCE_STATE_UNSPECIFIED)) w.Key("UNSPECIFIED").Uint(other);
  w.EndObject();
  w.Key("applied_batches").Uint(s.applied_batches());
  w.Key("events").Uint(s.events());
  w.Key("batches_lost").Uint(s.batches_lost());
  w.Key("gaps").Uint(s.gaps());
  w.Key("queries").Uint(s.queries());
  w.Key("snapshot_age_seconds");
  if (s.snapshot_age_seconds() < 0) {
    w.Null();
  } else {
    w.Double(s.snapshot_age_seconds());
  }
  w.EndObject();
  std::printf("%s\n", w.str().c_str());
}

void PrintStatusTable(const v1::GetStatsResponse& s) {
  std::string states;
  for (const int st : kStates) {
    if (!states.empty()) states += ' ';
    states += std::string(StateName(st)) + "=" + std::to_string(SourcesIn(s, st));
  }
  Table t({"version", s.version()});
  t.AddRow({"uptime", Seconds(s.uptime_seconds())});
  t.AddRow({"serving", s.serving() ? "yes" : "no"});
  t.AddRow({"sources", states});
  t.AddRow({"applied batches", std::to_string(s.applied_batches())});
  t.AddRow({"events", std::to_string(s.events())});
  t.AddRow({"batches lost", std::to_string(s.batches_lost())});
  t.AddRow({"gaps", std::to_string(s.gaps())});
  t.AddRow({"queries", std::to_string(s.queries())});
  t.AddRow({"snapshot age", Seconds(s.snapshot_age_seconds())});
  std::fputs(t.Render().c_str(), stdout);

  Table m({"model", "algo", "block_size", "blocks"});
  for (const v1::ModelStats& ms : s.models()) {
    m.AddRow({ms.name(), ms.hash_algo(), std::to_string(ms.block_size()), std::to_string(ms.blocks())});
  }
  std::printf("\n%s", m.Render().c_str());
}

// One refresh's per-source lines, from whichever call the credentials allow.
struct SourceLine {
  std::string source;
  std::string state;
  std::optional<uint64_t> last_seq;
  double lag_seconds = -1;  // -1 = unknown (ListReplicas carries no lag)
};

}  // namespace

int RunStatus(int argc, char** argv, const FlagValues& leading) {
  CommandLine cl("status", kStatusUsage, leading);
  if (std::optional<int> rc = cl.Parse(argc, argv, {}, 0)) return *rc;
  std::unique_ptr<client::Client> client;
  if (std::optional<int> rc = cl.Connect(&client)) return *rc;
  v1::GetStatsResponse stats;
  if (grpc::Status s = client->GetStats(&stats); !s.ok()) return cl.RpcError(s);
  if (cl.json()) {
    PrintStatusJson(stats);
  } else {
    PrintStatusTable(stats);
  }
  return kExitOk;
}

int RunWatch(int argc, char** argv, const FlagValues& leading) {
  CommandLine cl("watch", kWatchUsage, leading);
  constexpr FlagSpec kFlags[] = {{"--interval-ms"}, {"--count"}};
  if (std::optional<int> rc = cl.Parse(argc, argv, kFlags, 0)) return *rc;
  uint64_t interval_ms = 1000;
  uint64_t count = 0;  // 0 = forever
  if (std::optional<int> rc = cl.GetUint("--interval-ms", 10, 3'600'000, &interval_ms)) return *rc;
  if (std::optional<int> rc = cl.GetUint("--count", 1, UINT64_MAX, &count)) return *rc;
  std::unique_ptr<client::Client> client;
  if (std::optional<int> rc = cl.Connect(&client)) return *rc;

  const bool tty = isatty(STDOUT_FILENO) != 0;
  bool use_admin = cl.has_admin_credentials();
  std::optional<v1::GetStatsResponse> prev;
  std::chrono::steady_clock::time_point prev_at;
  for (uint64_t n = 0; count == 0 || n < count; ++n) {
    if (n > 0) std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms));
    v1::GetStatsResponse stats;
    if (grpc::Status s = client->GetStats(&stats); !s.ok()) return cl.RpcError(s);
    const auto now = std::chrono::steady_clock::now();

    std::vector<SourceLine> lines;
    if (use_admin) {
      v1::ListSourcesResponse sources;
      grpc::Status s = client->ListSources(&sources);
      if (s.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
          s.error_code() == grpc::StatusCode::PERMISSION_DENIED) {
        // Credentials that do not work will not start working: stop asking.
        use_admin = false;
      } else if (!s.ok()) {
        return cl.RpcError(s);
      } else {
        for (const v1::SourceInfo& si : sources.sources()) {
          lines.push_back({si.source(), std::string(StateName(si.state())),
                           si.has_seq() ? std::optional<uint64_t>(si.last_seq()) : std::nullopt, si.lag_seconds()});
        }
      }
    }
    if (!use_admin) {
      v1::ListReplicasResponse replicas;
      if (grpc::Status s = client->ListReplicas(v1::ListReplicasRequest(), &replicas); !s.ok()) {
        return cl.RpcError(s);
      }
      for (const v1::ReplicaSummary& r : replicas.replicas()) {
        for (const v1::SourceSummary& ss : r.sources()) {
          lines.push_back({ss.source(), std::string(StateName(ss.state())),
                           ss.has_seq() ? std::optional<uint64_t>(ss.last_seq()) : std::nullopt, -1});
        }
      }
    }

    // Rates need two samples; a counter that went backwards means the server
    // restarted in between, so that interval has no meaningful rate.
    std::optional<double> events_ps, batches_ps, queries_ps;
    if (prev) {
      const double dt = std::chrono::duration<double>(now - prev_at).count();
      auto rate = [dt](uint64_t cur, uint64_t old) -> std::optional<double> {
        if (dt <= 0 || cur < old) return std::nullopt;
        return static_cast<double>(cur - old) / dt;
      };
      events_ps = rate(stats.events(), prev->events());
      batches_ps = rate(stats.applied_batches(), prev->applied_batches());
      queries_ps = rate(stats.queries(), prev->queries());
    }
    prev = stats;
    prev_at = now;

    if (cl.json()) {
      JsonWriter w;
      w.BeginObject();
      w.Key("uptime_seconds").Double(stats.uptime_seconds());
      w.Key("serving").Bool(stats.serving());
      auto opt = [&w](const char* key, const std::optional<double>& v) {
        w.Key(key);
        if (v) {
          w.Double(*v);
        } else {
          w.Null();
        }
      };
      opt("events_per_second", events_ps);
      opt("applied_batches_per_second", batches_ps);
      opt("queries_per_second", queries_ps);
      w.Key("gaps").Uint(stats.gaps());
      w.Key("batches_lost").Uint(stats.batches_lost());
      w.Key("sources").BeginArray();
      for (const SourceLine& l : lines) {
        w.BeginObject();
        w.Key("source").String(l.source);
        w.Key("state").String(l.state);
        w.Key("last_seq");
        if (l.last_seq) {
          w.U64String(*l.last_seq);
        } else {
          w.Null();
        }
        w.EndObject();
      }
      w.EndArray();
      w.EndObject();
      std::printf("%s\n", w.str().c_str());
    } else {
      auto fmt = [](const std::optional<double>& v) { return v ? FormatDouble(*v, 1) : std::string("-"); };
      std::string out = tty ? "\033[H\033[2J" : (n > 0 ? "\n" : "");
      out += "kvidx " + client->options().target + "  uptime " + Seconds(stats.uptime_seconds()) +
             (stats.serving() ? "  serving" : "  not serving") + "\n\n";
      Table rates({"events/s", "batches/s", "queries/s", "gaps", "lost"});
      rates.AddRow({fmt(events_ps), fmt(batches_ps), fmt(queries_ps), std::to_string(stats.gaps()),
                    std::to_string(stats.batches_lost())});
      out += rates.Render() + "\n";
      Table sources({"source", "state", "last_seq", "lag"});
      for (const SourceLine& l : lines) {
        sources.AddRow({l.source, l.state, l.last_seq ? std::to_string(*l.last_seq) : "-",
                        l.lag_seconds < 0 ? "-" : FormatDouble(l.lag_seconds, 3) + "s"});
      }
      out += sources.Render();
      std::fputs(out.c_str(), stdout);
    }
    std::fflush(stdout);
  }
  return kExitOk;
}

}  // namespace kvidx::cli
