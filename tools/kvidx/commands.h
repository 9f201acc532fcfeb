// Subcommands of the `kvidx` operator CLI.
//
// Each subcommand lives in its own file and is registered in the dispatch
// table in main.cc. A Run* function receives argv starting at the subcommand
// name (argv[0] == "hash"), writes results to stdout and diagnostics to
// stderr, and returns one of the exit codes below. Nothing throws.
#pragma once

namespace kvidx::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;  // the operation failed (server, I/O)
inline constexpr int kExitUsage = 2;  // bad command line

// kvidx hash: vLLM block hashes of a token sequence (hash_command.cc).
int RunHash(int argc, char** argv);

}  // namespace kvidx::cli
