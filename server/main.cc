// kvidx-server: the kvidx service.
//
//   kvidx-server [--config FILE] [--on-corrupt=fail|start-empty] [--check-config]
//   kvidx-server --print-metric-families
//
// Without --config every setting takes its embedded default: gRPC on
// 127.0.0.1:50051, metrics on 127.0.0.1:9464, data in ./kvidx-data, no
// engines (add them with `kvidx engines add`). Signals: SIGTERM/SIGINT stop
// gracefully (finish in-flight calls, final snapshot, exit 0); SIGHUP
// re-reads the config file and applies its engine list.
//
// Exit codes: 0 clean stop; 1 a runtime failure (cannot listen, final
// snapshot failed, corrupt data directory); 2 bad command line or config.
#include <csignal>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include <grpc/support/log.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "server/config.h"
#include "server/metric_families.h"
#include "server/server.h"

namespace {

// %*: the log message as a JSON string body (quotes, backslashes and control
// characters escaped), so --log json lines always parse.
class JsonEscapedMessage final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    for (char c : std::string_view(msg.payload.data(), msg.payload.size())) {
      switch (c) {
        case '"': dest.append(std::string_view("\\\"")); break;
        case '\\': dest.append(std::string_view("\\\\")); break;
        case '\n': dest.append(std::string_view("\\n")); break;
        case '\t': dest.append(std::string_view("\\t")); break;
        default:
          if (static_cast<unsigned char>(c) < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", c);
            dest.append(std::string_view(buf));
          } else {
            dest.push_back(c);
          }
      }
    }
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<JsonEscapedMessage>(); }
};

// gRPC core logs (gpr_log, e.g. a failed bind or TLS handshake) straight to
// stderr in its own format, which would break one-JSON-object-per-line
// output: route them through our logger instead. The logger is kept alive on
// purpose, since gRPC may log while statics are being destroyed at exit.
std::shared_ptr<spdlog::logger>* grpc_logger = nullptr;

void GrpcLogToSpdlog(gpr_log_func_args* args) {
  spdlog::level::level_enum level = spdlog::level::err;
  if (args->severity == GPR_LOG_SEVERITY_DEBUG) level = spdlog::level::debug;
  if (args->severity == GPR_LOG_SEVERITY_INFO) level = spdlog::level::info;
  (*grpc_logger)->log(level, "grpc: {} ({}:{})", args->message, args->file, args->line);
}

void SetupLogging(const kvidx::server::LogConfig& log) {
  auto logger = spdlog::stderr_color_mt("kvidx");
  spdlog::set_default_logger(logger);
  grpc_logger = new std::shared_ptr<spdlog::logger>(logger);
  gpr_set_log_function(GrpcLogToSpdlog);
  spdlog::set_level(spdlog::level::from_str(log.level));
  if (log.json) {
    auto f = std::make_unique<spdlog::pattern_formatter>(spdlog::pattern_time_type::utc);
    f->add_flag<JsonEscapedMessage>('*').set_pattern(
        R"({"ts":"%Y-%m-%dT%H:%M:%S.%fZ","level":"%l","logger":"%n","msg":"%*"})");
    spdlog::set_formatter(std::move(f));
  } else {
    spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  }
}

int Usage(FILE* out, int code) {
  std::fprintf(out,
               "usage: kvidx-server [--config FILE] [--on-corrupt=fail|start-empty] [--check-config]\n"
               "  --config FILE       YAML configuration (docs/CONFIG.md); default: embedded defaults\n"
               "  --on-corrupt=MODE   fail (default): a corrupt data directory is an error;\n"
               "                      start-empty: move it aside, log, count and start empty\n"
               "  --check-config      parse and check the configuration, then exit\n"
               "  --print-metric-families\n"
               "                      print every exported metric family (name, kind, help), then exit\n");
  return code;
}

// One family per line: name, kind and help separated by tabs.
int PrintMetricFamilies() {
  for (const kvidx::MetricFamily* f : kvidx::server::AllMetricFamilies()) {
    std::printf("%.*s\t%.*s\t%.*s\n", static_cast<int>(f->name.size()), f->name.data(),
                static_cast<int>(kvidx::MetricKindName(f->kind).size()), kvidx::MetricKindName(f->kind).data(),
                static_cast<int>(f->help.size()), f->help.data());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string config_path;
  std::string on_corrupt;
  bool check_only = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") return Usage(stdout, 0);
    if (a == "--version") {
      std::printf("kvidx-server %s\n", KVIDX_VERSION);
      return 0;
    }
    if (a == "--print-metric-families") return PrintMetricFamilies();
    if (a == "--config" && i + 1 < argc) {
      config_path = argv[++i];
    } else if (a.rfind("--config=", 0) == 0) {
      config_path = a.substr(9);
    } else if (a.rfind("--on-corrupt=", 0) == 0) {
      on_corrupt = a.substr(13);
      if (on_corrupt != "fail" && on_corrupt != "start-empty") {
        std::fprintf(stderr, "kvidx-server: --on-corrupt must be fail or start-empty, got \"%s\"\n", on_corrupt.c_str());
        return 2;
      }
    } else if (a == "--check-config") {
      check_only = true;
    } else {
      std::fprintf(stderr, "kvidx-server: unknown argument \"%s\"\n", a.c_str());
      return Usage(stderr, 2);
    }
  }

  kvidx::Result<kvidx::server::ServerConfig> cfg =
      config_path.empty() ? kvidx::server::ParseConfig("", "<defaults>") : kvidx::server::LoadConfigFile(config_path);
  if (!cfg.ok()) {
    std::fprintf(stderr, "kvidx-server: %s\n", cfg.status().message().c_str());
    return 2;
  }
  if (on_corrupt == "start-empty") cfg->on_corrupt = kvidx::server::OnCorruptData::kStartEmpty;
  if (on_corrupt == "fail") cfg->on_corrupt = kvidx::server::OnCorruptData::kFail;
  if (check_only) {
    std::printf("%s: OK (%zu models, %zu engines)\n", config_path.empty() ? "<defaults>" : config_path.c_str(),
                cfg->models.size(), cfg->engines.size());
    return 0;
  }
  SetupLogging(cfg->log);

  // Signals are taken synchronously by this thread (sigwait); every other
  // thread inherits the blocked mask.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  kvidx::Result<std::unique_ptr<kvidx::server::Server>> server = kvidx::server::Server::Create(cfg.value());
  if (!server.ok()) {
    spdlog::critical("cannot start: {}", server.status().ToString());
    if (server.status().code() == kvidx::StatusCode::kCorruption ||
        server.status().code() == kvidx::StatusCode::kFailedPrecondition) {
      spdlog::critical("the data directory \"{}\" is unusable; fix or remove it, or restart with "
                       "--on-corrupt=start-empty to move it aside and start empty",
                       cfg->data_dir);
    }
    return 1;
  }
  if (kvidx::Status s = server.value()->Start(); !s.ok()) {
    spdlog::critical("cannot start: {}", s.ToString());
    return 1;
  }
  for (;;) {
    int sig = 0;
    if (sigwait(&sigs, &sig) != 0) continue;
    if (sig == SIGHUP) {
      if (config_path.empty()) {
        spdlog::warn("SIGHUP: no --config file to reload");
        continue;
      }
      kvidx::Result<kvidx::server::ServerConfig> next = kvidx::server::LoadConfigFile(config_path);
      if (!next.ok()) {
        spdlog::error("SIGHUP: config not reloaded: {}", next.status().message());
        continue;
      }
      if (kvidx::Status s = server.value()->Reload(next.value()); !s.ok()) {
        spdlog::error("SIGHUP: reload incomplete: {}", s.ToString());
      }
      continue;
    }
    spdlog::info("{}: shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    kvidx::Status s = server.value()->Shutdown(std::chrono::seconds(5));
    return s.ok() ? 0 : 1;
  }
}
