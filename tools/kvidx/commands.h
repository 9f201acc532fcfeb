// Subcommands of the `kvidx` operator CLI.
//
// Each subcommand lives in its own file and is registered in the dispatch
// table in main.cc. A Run* function receives argv starting at the subcommand
// name (argv[0] == "hash") and the global flags written before that name,
// writes results to stdout and diagnostics to stderr, and returns one of the
// exit codes below. Nothing throws.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace kvidx::cli {

// (flag, value) pairs in command-line order; "" for a flag without a value.
using FlagValues = std::vector<std::pair<std::string, std::string>>;

inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;  // the operation failed (server, I/O)
inline constexpr int kExitUsage = 2;  // bad command line

// kvidx hash: vLLM block hashes of a token sequence (hash_command.cc).
int RunHash(int argc, char** argv, const FlagValues& leading);

// Subcommands that talk to a kvidx server through client::Client. They share
// the connection flags and output conventions of cli_common.h: aligned
// tables by default, one JSON document with --json (written by
// json_writer.h; hashes and seqs as decimal strings).

// kvidx status: GetStats (status_command.cc).
int RunStatus(int argc, char** argv, const FlagValues& leading);
// kvidx watch: GetStats deltas and source states, refreshed (status_command.cc).
int RunWatch(int argc, char** argv, const FlagValues& leading);
// kvidx sources: admin ListSources (sources_command.cc).
int RunSources(int argc, char** argv, const FlagValues& leading);
// kvidx query: FindPrefix by tokens or hashes (query_command.cc).
int RunQuery(int argc, char** argv, const FlagValues& leading);
// kvidx block: GetBlock, the owners of one block (query_command.cc).
int RunBlock(int argc, char** argv, const FlagValues& leading);
// kvidx route: Route, the chosen rank and every candidate's cost (route_command.cc).
int RunRoute(int argc, char** argv, const FlagValues& leading);
// kvidx tokenize: a text prompt's token ids, from the server (Tokenize) or
// offline from a model directory (tokenize_command.cc).
int RunTokenize(int argc, char** argv, const FlagValues& leading);
// kvidx snapshot / resync / engines add|remove|list (admin_commands.cc).
int RunSnapshot(int argc, char** argv, const FlagValues& leading);
int RunResync(int argc, char** argv, const FlagValues& leading);
int RunEngines(int argc, char** argv, const FlagValues& leading);

}  // namespace kvidx::cli
