#include "tools/kvidx/cli_common.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "tools/kvidx/commands.h"

namespace kvidx::cli {

const char kGlobalOptionsHelp[] =
    "\n"
    "Connection options (any subcommand that talks to a server):\n"
    "  --server ADDR      kvidx gRPC address (env KVIDX_SERVER; default 127.0.0.1:50051)\n"
    "  --tls              use TLS (implied by --ca/--cert/--key)\n"
    "  --ca FILE          PEM roots to verify the server (default: system roots)\n"
    "  --cert FILE        PEM client certificate (mTLS), with --key\n"
    "  --key FILE         PEM private key of --cert\n"
    "  --token-file FILE  bearer token, first line (env KVIDX_TOKEN_FILE); sent on admin calls,\n"
    "                     and on reads for a server with grpc.require_auth_for_reads\n"
    "  --timeout-ms N     deadline of each call (default 2000)\n"
    "  --json             machine-readable output; hashes and seqs as decimal strings\n"
    "\n"
    "Exit status: 0 ok, 1 the server or I/O failed (\"kvidx: <CODE>: <message>\"), 2 bad usage.\n";

namespace {

constexpr FlagSpec kGlobalFlags[] = {
    {"--server"}, {"--tls", false}, {"--ca"},          {"--cert"},
    {"--key"},    {"--token-file"}, {"--timeout-ms"}, {"--json", false},
};

const FlagSpec* FindSpec(std::span<const FlagSpec> flags, std::string_view name) {
  for (const FlagSpec& f : flags) {
    if (f.name == name) return &f;
  }
  for (const FlagSpec& f : kGlobalFlags) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

// "--flag" of "--flag=VALUE"; the whole word otherwise.
std::string_view FlagName(std::string_view arg) {
  const size_t eq = arg.find('=');
  return arg.starts_with("--") && eq != std::string_view::npos ? arg.substr(0, eq) : arg;
}

// Reads the flag at argv[*i] ("--flag", "--flag=VALUE" or "--flag VALUE",
// advancing *i past a separate value) into *out. Returns the problem, if any.
std::optional<std::string> ReadFlag(int argc, char** argv, int* i, std::span<const FlagSpec> flags,
                                    FlagValues* out) {
  const std::string_view arg = argv[*i];
  const std::string_view name = FlagName(arg);
  std::optional<std::string> value;
  if (name.size() < arg.size()) value = std::string(arg.substr(name.size() + 1));
  const FlagSpec* spec = FindSpec(flags, name);
  if (spec == nullptr) return "unknown argument '" + std::string(arg) + "'";
  if (!spec->takes_value) {
    if (value) return std::string(name) + " takes no value";
    out->emplace_back(name, "");
    return std::nullopt;
  }
  if (!value) {
    if (*i + 1 >= argc) return std::string(name) + " needs a value";
    value = argv[++*i];
  }
  out->emplace_back(name, std::move(*value));
  return std::nullopt;
}

std::string GlobalFlagNames() {
  std::string names;
  for (const FlagSpec& f : kGlobalFlags) {
    if (!names.empty()) names += ", ";
    names += f.name;
  }
  return names;
}

bool IsSeparator(char c) { return c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::optional<int> ParseLeadingFlags(int argc, char** argv, FlagValues* leading, int* subcommand) {
  int i = 1;
  for (; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (!arg.starts_with("-") || arg == "-" || arg == "--help" || arg == "-h") break;
    std::optional<std::string> problem;
    if (FindSpec({}, FlagName(arg)) == nullptr) {
      problem = "unknown option '" + std::string(arg) + "' before the subcommand (only the connection options " +
                GlobalFlagNames() + " go there)";
    } else {
      problem = ReadFlag(argc, argv, &i, {}, leading);
    }
    if (problem) {
      std::fprintf(stderr, "kvidx: %s\nRun 'kvidx --help' for usage.\n", problem->c_str());
      return kExitUsage;
    }
  }
  *subcommand = i;
  return std::nullopt;
}

std::optional<int> CommandLine::Parse(int argc, char** argv, std::span<const FlagSpec> flags,
                                      size_t max_positional) {
  bool flags_done = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (flags_done || !arg.starts_with("-") || arg == "-") {
      positional_.emplace_back(arg);
      continue;
    }
    if (arg == "--") {
      flags_done = true;
      continue;
    }
    if (arg == "--help" || arg == "-h") {
      std::fputs(usage_, stdout);
      std::fputs(kGlobalOptionsHelp, stdout);
      return kExitOk;
    }
    if (std::optional<std::string> problem = ReadFlag(argc, argv, &i, flags, &values_)) return UsageError(*problem);
  }
  if (positional_.size() > max_positional) {
    return UsageError("unexpected argument '" + positional_[max_positional] + "'");
  }
  return std::nullopt;
}

bool CommandLine::Has(std::string_view flag) const { return Get(flag) != nullptr; }

const std::string* CommandLine::Get(std::string_view flag) const {
  for (auto it = values_.rbegin(); it != values_.rend(); ++it) {
    if (it->first == flag) return &it->second;
  }
  return nullptr;
}

std::vector<std::string> CommandLine::GetAll(std::string_view flag) const {
  std::vector<std::string> out;
  for (const auto& [name, value] : values_) {
    if (name == flag) out.push_back(value);
  }
  return out;
}

std::optional<int> CommandLine::GetUint(std::string_view flag, uint64_t min, uint64_t max, uint64_t* out) const {
  const std::string* v = Get(flag);
  if (v == nullptr) return std::nullopt;
  uint64_t n = 0;
  if (!ParseU64(*v, &n) || n < min || n > max) {
    return UsageError("bad " + std::string(flag) + " '" + *v + "' (expected an integer in [" +
                      std::to_string(min) + ", " + std::to_string(max) + "])");
  }
  *out = n;
  return std::nullopt;
}

std::optional<int> CommandLine::Connect(std::unique_ptr<client::Client>* out) {
  client::ClientOptions opts;
  if (const std::string* s = Get("--server")) {
    opts.target = *s;
  } else if (const char* env = std::getenv("KVIDX_SERVER"); env != nullptr && *env != '\0') {
    opts.target = env;
  }
  if (opts.target.empty()) return UsageError("--server is empty");
  if (const std::string* s = Get("--ca")) opts.ca_file = *s;
  if (const std::string* s = Get("--cert")) opts.cert_file = *s;
  if (const std::string* s = Get("--key")) opts.key_file = *s;
  if (opts.cert_file.empty() != opts.key_file.empty()) return UsageError("--cert and --key go together");
  opts.tls = Has("--tls") || !opts.ca_file.empty() || !opts.cert_file.empty();
  uint64_t timeout_ms = static_cast<uint64_t>(opts.deadline.count());
  if (std::optional<int> rc = GetUint("--timeout-ms", 1, 3'600'000, &timeout_ms)) return rc;
  opts.deadline = std::chrono::milliseconds(timeout_ms);

  // The token is read for every command: a server with
  // grpc.require_auth_for_reads needs it on reads too.
  {
    std::string token_file;
    if (const std::string* s = Get("--token-file")) {
      token_file = *s;
      if (token_file.empty()) return UsageError("--token-file is empty");
    } else if (const char* env = std::getenv("KVIDX_TOKEN_FILE"); env != nullptr) {
      token_file = env;
    }
    if (!token_file.empty()) {
      Result<std::string> token = client::ReadTokenFile(token_file);
      if (!token.ok()) return Fail(token.status().message());
      opts.admin_token = std::move(*token);
    }
  }
  // An operator's token also admits reads on a server that requires it.
  opts.token_on_reads = true;
  has_admin_credentials_ = !opts.admin_token.empty() || !opts.cert_file.empty();

  Result<std::unique_ptr<client::Client>> c = client::Client::Create(opts);
  if (!c.ok()) return Fail(c.status().message());
  *out = std::move(*c);
  return std::nullopt;
}

int CommandLine::UsageError(const std::string& message) const {
  std::fprintf(stderr, "kvidx %s: %s\nRun 'kvidx %s --help' for usage.\n", command_.c_str(), message.c_str(),
               command_.c_str());
  return kExitUsage;
}

int CommandLine::Fail(const std::string& message) const {
  std::fprintf(stderr, "kvidx %s: %s\n", command_.c_str(), message.c_str());
  return kExitError;
}

int CommandLine::RpcError(const grpc::Status& status) const {
  const std::string_view code = GrpcCodeName(status.error_code());
  std::fprintf(stderr, "kvidx: %.*s: %s\n", static_cast<int>(code.size()), code.data(),
               status.error_message().c_str());
  return kExitError;
}

std::string_view GrpcCodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK: return "OK";
    case grpc::StatusCode::CANCELLED: return "CANCELLED";
    case grpc::StatusCode::UNKNOWN: return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND: return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS: return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED: return "PERMISSION_DENIED";
    case grpc::StatusCode::UNAUTHENTICATED: return "UNAUTHENTICATED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED: return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE: return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED: return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL: return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS: return "DATA_LOSS";
    default: return "UNKNOWN";
  }
}

std::string_view StateName(int state) {
  switch (state) {
    case v1::SOURCE_STATE_CONNECTING: return "CONNECTING";
    case v1::SOURCE_STATE_REPLAYING: return "REPLAYING";
    case v1::SOURCE_STATE_EXACT: return "EXACT";
    case v1::SOURCE_STATE_DEGRADED: return "DEGRADED";
    case v1::SOURCE_STATE_DISCONNECTED: return "DISCONNECTED";
    default: return "UNSPECIFIED";
  }
}

std::string Table::Render() const {
  std::vector<size_t> widths;
  for (const auto& row : rows_) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], row[c].size());
  }
  std::string out;
  for (const auto& row : rows_) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      if (c) line += "  ";
      line += row[c];
      if (c + 1 < row.size()) line.append(widths[c] - row[c].size(), ' ');
    }
    out += line;
    out += '\n';
  }
  return out;
}

std::string FormatDouble(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

bool ParseU64(std::string_view text, uint64_t* out) {
  if (text.empty()) return false;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, *out);
  return ec == std::errc() && ptr == end;
}

std::optional<std::string> ParseInt64List(std::string_view text, std::vector<int64_t>* out) {
  size_t i = 0;
  bool expect_value = false;  // after a comma a value must follow
  while (i < text.size()) {
    const char c = text[i];
    if (c == ',') {
      if (expect_value || out->empty()) return "empty value in list";
      expect_value = true;
      ++i;
      continue;
    }
    if (IsSeparator(c)) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < text.size() && !IsSeparator(text[end])) ++end;
    int64_t v = 0;
    auto [ptr, ec] = std::from_chars(text.data() + i, text.data() + end, v);
    if (ec != std::errc() || ptr != text.data() + end) {
      return "bad value '" + std::string(text.substr(i, end - i)) + "' (expected a 64-bit integer)";
    }
    out->push_back(v);
    expect_value = false;
    i = end;
  }
  if (expect_value) return "list ends with a comma";
  return std::nullopt;
}

std::optional<std::string> ParseBlockHash(std::string_view text, v1::BlockHashes* hashes) {
  if (text.starts_with("0x") || text.starts_with("0X")) {
    const std::string_view hex = text.substr(2);
    if (hex.size() != 32 && hex.size() != 64) {
      return "bad hash '" + std::string(text) + "' (0x digests have 32 or 64 hex digits)";
    }
    std::string bytes;
    for (size_t i = 0; i < hex.size(); i += 2) {
      const int hi = HexValue(hex[i]);
      const int lo = HexValue(hex[i + 1]);
      if (hi < 0 || lo < 0) return "bad hash '" + std::string(text) + "' (not hex)";
      bytes.push_back(static_cast<char>(hi * 16 + lo));
    }
    hashes->add_digest(std::move(bytes));
    return std::nullopt;
  }
  uint64_t v = 0;
  if (!ParseU64(text, &v)) {
    return "bad hash '" + std::string(text) + "' (expected a decimal uint64 or a 0x digest)";
  }
  hashes->add_u64(v);
  return std::nullopt;
}

std::optional<std::string> ReadWholeFile(const std::string& path, std::string* error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *error = "cannot read " + path + ": " + std::strerror(errno);
    return std::nullopt;
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string ToHex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) {
    const auto b = static_cast<unsigned char>(c);
    out += kDigits[b >> 4];
    out += kDigits[b & 15];
  }
  return out;
}

}  // namespace kvidx::cli
