// kvidx: operator CLI. `kvidx [connection options] <subcommand> [args]`;
// see commands.h.
#include <cstdio>
#include <cstring>
#include <optional>
#include <string_view>

#include "tools/kvidx/cli_common.h"
#include "tools/kvidx/commands.h"

namespace {

struct Subcommand {
  std::string_view name;
  int (*run)(int argc, char** argv, const kvidx::cli::FlagValues& leading);
  std::string_view summary;
};

// Add new subcommands here (implementation in their own file, declared in commands.h).
constexpr Subcommand kSubcommands[] = {
    {"hash", kvidx::cli::RunHash, "compute vLLM block hashes of a token sequence"},
    {"status", kvidx::cli::RunStatus, "server version, uptime, models and ingest counters"},
    {"sources", kvidx::cli::RunSources, "every source's state, position and counters (admin)"},
    {"query", kvidx::cli::RunQuery, "longest cached prefix of a prompt, per replica"},
    {"block", kvidx::cli::RunBlock, "who holds one block"},
    {"route", kvidx::cli::RunRoute, "where a request should go, and every candidate's cost"},
    {"tokenize", kvidx::cli::RunTokenize, "token ids of a text prompt or chat request, as vLLM computes them"},
    {"engines", kvidx::cli::RunEngines, "add, remove or list engines (add/remove: admin)"},
    {"resync", kvidx::cli::RunResync, "resynchronise a source or replica (admin)"},
    {"snapshot", kvidx::cli::RunSnapshot, "write a snapshot now (admin)"},
    {"watch", kvidx::cli::RunWatch, "live rates and source states"},
};

void PrintUsage(FILE* out) {
  std::fprintf(out, "usage: kvidx [connection options] <subcommand> [args]\n\nsubcommands:\n");
  for (const Subcommand& c : kSubcommands) {
    std::fprintf(out, "  %-10.*s %.*s\n", static_cast<int>(c.name.size()), c.name.data(),
                 static_cast<int>(c.summary.size()), c.summary.data());
  }
  std::fprintf(out, "\nRun 'kvidx <subcommand> --help' for its options.\n");
  std::fputs(kvidx::cli::kGlobalOptionsHelp, out);
}

}  // namespace

int main(int argc, char** argv) {
  kvidx::cli::FlagValues leading;
  int sub_index = 0;
  if (std::optional<int> rc = kvidx::cli::ParseLeadingFlags(argc, argv, &leading, &sub_index)) return *rc;
  if (sub_index >= argc) {
    if (!leading.empty()) std::fprintf(stderr, "kvidx: missing subcommand after the connection options\n\n");
    PrintUsage(stderr);
    return kvidx::cli::kExitUsage;
  }
  const std::string_view sub = argv[sub_index];
  if (sub == "help" || sub == "--help" || sub == "-h") {
    PrintUsage(stdout);
    return kvidx::cli::kExitOk;
  }
  for (const Subcommand& c : kSubcommands) {
    if (c.name == sub) return c.run(argc - sub_index, argv + sub_index, leading);
  }
  std::fprintf(stderr, "kvidx: unknown subcommand '%s'\n\n", argv[sub_index]);
  PrintUsage(stderr);
  return kvidx::cli::kExitUsage;
}
