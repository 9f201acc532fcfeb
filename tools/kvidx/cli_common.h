// What the server-facing subcommands share: command-line parsing with the
// global connection flags, building a client::Client from them, error and
// usage reporting with the CLI's exit codes, aligned tables, and parsers for
// token lists and block hashes.
//
// Global flags (accepted by every server-facing subcommand, before or after
// the subcommand name as in git and kubectl; see kGlobalOptionsHelp):
//   --server ADDR (env KVIDX_SERVER, default 127.0.0.1:50051), --tls,
//   --ca FILE, --cert FILE, --key FILE (any of them implies --tls),
//   --token-file FILE (env KVIDX_TOKEN_FILE), --timeout-ms N, --json.
//
// Flags after the subcommand are parsed after those before it, so when one
// is given on both sides the one after the subcommand wins.
//
// Messages: usage errors print "kvidx <command>: <message>" plus a hint to
// stderr and return kExitUsage; failed RPCs print "kvidx: <CODE>: <message>"
// (the gRPC code name and the server's message) and return kExitError.
// Single-threaded CLI code; nothing throws.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "client/client.h"
#include "tools/kvidx/commands.h"

namespace kvidx::cli {

extern const char kGlobalOptionsHelp[];

struct FlagSpec {
  std::string_view name;  // "--model"
  bool takes_value = true;
};

// Parses the global flags that come before the subcommand (`kvidx --server
// H:P status`) into *leading, stopping at the first word that is not a flag:
// the subcommand, whose index goes to *subcommand (argc if there is none).
// Returns kExitUsage after naming the problem (any other flag there, a
// missing value), nullopt to go on.
std::optional<int> ParseLeadingFlags(int argc, char** argv, FlagValues* leading, int* subcommand);

class CommandLine {
 public:
  // `command` names the subcommand in messages ("query", "engines add");
  // `usage` is printed (followed by kGlobalOptionsHelp) for --help;
  // `leading` are the global flags given before the subcommand.
  CommandLine(std::string command, const char* usage, const FlagValues& leading)
      : command_(std::move(command)), usage_(usage), values_(leading) {}

  // Parses argv[1..] (argv[0] is the subcommand word) against `flags` and the
  // global flags: "--flag VALUE", "--flag=VALUE", positionals, and "--" to
  // end flags. Returns the exit code if the command must end now (--help: 0
  // after printing usage; bad usage: 2 after naming the problem), nullopt to
  // go on. Flags may repeat; Get() returns the last value. More than
  // `max_positional` positionals is a usage error; missing ones are the
  // caller's to report (it knows their names).
  std::optional<int> Parse(int argc, char** argv, std::span<const FlagSpec> flags, size_t max_positional);

  bool Has(std::string_view flag) const;
  // The last value of `flag`, or nullptr.
  const std::string* Get(std::string_view flag) const;
  std::vector<std::string> GetAll(std::string_view flag) const;
  const std::vector<std::string>& positional() const { return positional_; }
  bool json() const { return Has("--json"); }

  // Parses the value of an unsigned flag in [min, max] into *out (left alone
  // if the flag is absent). Returns a usage exit code on a bad value.
  std::optional<int> GetUint(std::string_view flag, uint64_t min, uint64_t max, uint64_t* out) const;

  // Builds the client from the global flags and the environment, reading
  // the token file (flag or env) if one is named; the token goes with every
  // call. Returns the exit code on failure (2 for bad flags, 1 for
  // unreadable files), nullopt with *out set otherwise.
  std::optional<int> Connect(std::unique_ptr<client::Client>* out);
  // After Connect(): admin credentials (a token or a client certificate) are
  // configured, so admin calls may succeed.
  bool has_admin_credentials() const { return has_admin_credentials_; }

  int UsageError(const std::string& message) const;
  int Fail(const std::string& message) const;  // kExitError with "kvidx <command>: message"
  int RpcError(const grpc::Status& status) const;

 private:
  std::string command_;
  const char* usage_;
  FlagValues values_;  // in command-line order
  std::vector<std::string> positional_;
  bool has_admin_credentials_ = false;
};

// "NOT_FOUND", "UNAVAILABLE", ...
std::string_view GrpcCodeName(grpc::StatusCode code);
// "EXACT", "DEGRADED", ... ("UNSPECIFIED" for 0 or an unknown value).
std::string_view StateName(int state);

// Left-aligned columns two spaces apart; the last column is not padded.
class Table {
 public:
  explicit Table(std::vector<std::string> header) : rows_{std::move(header)} {}
  void AddRow(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  std::string Render() const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

// "%.<decimals>f".
std::string FormatDouble(double v, int decimals);

// Whole-string decimal uint64.
bool ParseU64(std::string_view text, uint64_t* out);

// Integers separated by commas and/or whitespace. Returns an error message,
// or nullopt on success.
std::optional<std::string> ParseInt64List(std::string_view text, std::vector<int64_t>* out);

// One block hash as the operator writes it: decimal uint64 (the integer form
// engines publish by default) or 0x + 32 or 64 hex digits (a 16- or 32-byte
// digest). Appends to `hashes` (u64 or digest list). Returns an error
// message, or nullopt on success.
std::optional<std::string> ParseBlockHash(std::string_view text, v1::BlockHashes* hashes);

// A file's contents; nullopt with *error set if unreadable.
std::optional<std::string> ReadWholeFile(const std::string& path, std::string* error);

// Lowercase hex of bytes.
std::string ToHex(std::string_view bytes);

}  // namespace kvidx::cli
