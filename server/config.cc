// The YAML configuration parser behind config.h.
//
// Contract: ParseConfig turns one YAML document into a ServerConfig or an
// InvalidArgument Status whose message is
//   <origin>:<line>: <key.path>: <what is wrong>
// (1-based line; errors not about one key, such as a syntax error or a
// top level that is not a map, omit the key path). No exception escapes:
// yaml-cpp throws, and everything it throws is caught here.
//
// Scalars are typed by the YAML 1.2 core schema, not yaml-cpp's lenient
// conversions: only true/false are booleans (YAML 1.1's yes/no/on/off are
// plain text, so `level: off` stays a string and `json: yes` is an error),
// only decimal digits are integers, and a quoted scalar is always a string.
// That keeps "what the operator wrote" and "what kvidx understood" the same.
#include "server/config.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <limits>
#include <map>
#include <memory>
#include <span>
#include <sstream>
#include <unordered_map>
#include <utility>

#include "index/block_hasher.h"
#include "server/kubeconfig.h"

namespace kvidx::server {
namespace {

constexpr uint64_t kInt32Max = std::numeric_limits<int32_t>::max();
constexpr uint64_t kUint64Max = std::numeric_limits<uint64_t>::max();
constexpr uint64_t kOneHourMs = 3'600'000;
// Far beyond any real config; stops a mistaken path (/dev/zero) early.
constexpr size_t kMaxConfigFileBytes = 16 << 20;

// Value lists of the enumerated keys, in the order of the enums they map to.
constexpr std::string_view kLogLevels[] = {"trace", "debug", "info", "warn", "error", "critical", "off"};
constexpr std::string_view kRouteClocks[] = {"wall", "simulated"};
constexpr std::string_view kConnectModes[] = {"connect", "bind"};
constexpr std::string_view kOnCorrupt[] = {"fail", "start-empty"};
constexpr std::string_view kIndexCores[] = {"blocks", "runs"};
constexpr std::string_view kProviderTypes[] = {"dns", "kubernetes"};

// A scalar's type under the YAML 1.2 core schema (see the file comment).
enum class Kind : uint8_t { kNull, kBool, kInt, kFloat, kString, kSequence, kMap, kOther };

bool IsCoreBool(std::string_view s) {
  return s == "true" || s == "True" || s == "TRUE" || s == "false" || s == "False" || s == "FALSE";
}

bool IsDigits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

bool IsCoreInt(std::string_view s) {
  if (!s.empty() && (s.front() == '-' || s.front() == '+')) s.remove_prefix(1);
  return IsDigits(s);
}

// [-+]? ( \. [0-9]+ | [0-9]+ ( \. [0-9]* )? ) ( [eE] [-+]? [0-9]+ )?  | [-+]?.inf | .nan
bool IsCoreFloat(std::string_view s) {
  if (s == ".nan" || s == ".NaN" || s == ".NAN") return true;
  if (!s.empty() && (s.front() == '-' || s.front() == '+')) s.remove_prefix(1);
  if (s == ".inf" || s == ".Inf" || s == ".INF") return true;
  size_t i = 0;
  auto digits = [&] {
    size_t start = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
    return i - start;
  };
  size_t int_digits = digits();
  size_t frac_digits = 0;
  if (i < s.size() && s[i] == '.') {
    ++i;
    frac_digits = digits();
  } else if (int_digits == 0) {
    return false;
  }
  if (int_digits == 0 && frac_digits == 0) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
    if (digits() == 0) return false;
  }
  return i == s.size();
}

Kind KindOf(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Null: return Kind::kNull;
    case YAML::NodeType::Sequence: return Kind::kSequence;
    case YAML::NodeType::Map: return Kind::kMap;
    case YAML::NodeType::Scalar: break;
    case YAML::NodeType::Undefined: return Kind::kOther;
  }
  const std::string& tag = n.Tag();
  const std::string& s = n.Scalar();
  // "!" is yaml-cpp's tag for a quoted scalar.
  if (tag == "!" || tag == "tag:yaml.org,2002:str") return Kind::kString;
  Kind plain = IsCoreBool(s) ? Kind::kBool : IsCoreInt(s) ? Kind::kInt : IsCoreFloat(s) ? Kind::kFloat : Kind::kString;
  if (tag == "?") return plain;
  if (tag == "tag:yaml.org,2002:null") return s.empty() || s == "~" || s == "null" ? Kind::kNull : Kind::kOther;
  if (tag == "tag:yaml.org,2002:bool") return plain == Kind::kBool ? plain : Kind::kOther;
  if (tag == "tag:yaml.org,2002:int") return plain == Kind::kInt ? plain : Kind::kOther;
  if (tag == "tag:yaml.org,2002:float") {
    return plain == Kind::kInt || plain == Kind::kFloat ? Kind::kFloat : Kind::kOther;
  }
  return Kind::kOther;
}

std::string FormatReal(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

// Quotes text for a message: escapes what would garble a log line and
// truncates what would flood it.
std::string Quote(std::string_view s) {
  constexpr size_t kMax = 64;
  std::string out = "\"";
  for (size_t i = 0; i < s.size() && i < kMax; ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > kMax) out += "...";
  out += '"';
  return out;
}

// What a node is, for "expected X, got Y".
std::string Describe(const YAML::Node& n) {
  switch (KindOf(n)) {
    case Kind::kNull: return "null";
    case Kind::kSequence: return "a sequence";
    case Kind::kMap: return "a map";
    case Kind::kBool: return "the boolean " + n.Scalar();
    case Kind::kOther: return Quote(n.Scalar()) + " tagged " + n.Tag();
    case Kind::kInt:
    case Kind::kFloat:
    case Kind::kString: break;
  }
  if (n.Tag() == "!") return "the quoted string " + Quote(n.Scalar());
  return Quote(n.Scalar());
}

std::string JoinPath(std::string_view parent, std::string_view key) {
  if (parent.empty()) return std::string(key);
  std::string out(parent);
  out += '.';
  out += key;
  return out;
}

// Empty when fine, else what is wrong with a host:port listen address.
std::string HostPortProblem(std::string_view s) {
  for (char c : s) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') return "must not contain whitespace";
  }
  size_t colon = s.rfind(':');
  if (colon == std::string_view::npos) return "expected host:port, got " + Quote(s);
  std::string_view host = s.substr(0, colon);
  std::string_view port = s.substr(colon + 1);
  if (host.empty()) return "expected host:port with a non-empty host (e.g. 0.0.0.0:" + std::string(port) + ")";
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') return "bracketed IPv6 host not closed in " + Quote(s);
  } else if (host.find(':') != std::string_view::npos) {
    return "an IPv6 host needs brackets, e.g. [::1]:50051; got " + Quote(s);
  }
  uint32_t value = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (!IsDigits(port) || ec != std::errc() || end != port.data() + port.size() || value > 65535) {
    return "port must be an integer in [0, 65535], got " + Quote(port);
  }
  return "";
}

// Empty when fine, else what is wrong with an ingest topic template. A '{'
// that does not start a placeholder would also break TopicTemplate::Parse,
// which treats '{' as the start of the next placeholder.
std::string TopicTemplateProblem(std::string_view t) {
  for (size_t i = t.find('{'); i != std::string_view::npos; i = t.find('{', i + 1)) {
    std::string_view rest = t.substr(i);
    if (rest.starts_with("{replica}") || rest.starts_with("{model}")) continue;
    size_t close = rest.find('}');
    std::string_view bad = close == std::string_view::npos ? rest : rest.substr(0, close + 1);
    return "unknown placeholder " + Quote(bad) + " (only {replica} and {model} are supported)";
  }
  return "";
}


// Sees only where each document starts. Used to count documents without
// YAML::LoadAll, which in yaml-cpp 0.7 never returns on a token that cannot
// start a node (a stray ',' at the top level, for one): the parser leaves
// the token unconsumed and reports one null document after another, growing
// memory until the process dies (yaml-cpp issues #1040, #1319).
class DocumentStarts : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark& mark) override { start = mark; }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}

  YAML::Mark start;
};

// One parse. Walks the document in order (so the first error reported is
// the first in the file), then runs the checks that need the whole config.
class ConfigParser {
 public:
  explicit ConfigParser(std::string_view origin) : origin_(origin) {}

  // May throw YAML::Exception; ParseConfig catches it.
  Result<ServerConfig> Parse(std::string_view yaml);

  // "<origin>:<line>: " or "<origin>: " when yaml-cpp has no position.
  std::string Where(const YAML::Mark& mark) const {
    if (mark.is_null() || mark.line < 0) return origin_ + ": ";
    return origin_ + ":" + std::to_string(mark.line + 1) + ": ";
  }

 private:
  // A value and where it sits: its key path and the line of its key (the
  // value's own mark is misleading for an empty value, which yaml-cpp marks
  // at the next token), or of the item for a sequence element.
  struct Value {
    YAML::Node node;
    std::string path;
    YAML::Mark mark;
  };
  using Reader = std::function<Status(const Value&)>;
  struct Field {
    std::string_view key;
    Reader read;
  };

  Status Error(const YAML::Mark& mark, std::string_view path, std::string_view what) const {
    std::string msg = Where(mark);
    if (!path.empty()) {
      msg += path;
      msg += ": ";
    }
    msg += what;
    return Status::InvalidArgument(std::move(msg));
  }
  Status Error(const Value& v, std::string_view what) const { return Error(v.mark, v.path, what); }
  Status Mismatch(const Value& v, std::string_view expected) const {
    return Error(v, "expected " + std::string(expected) + ", got " + Describe(v.node));
  }
  // The mark recorded for the first of `paths` that the document set, else
  // `fallback`: cross checks point at the key that is there.
  YAML::Mark MarkOf(std::initializer_list<std::string_view> paths, const YAML::Mark& fallback) const {
    for (std::string_view p : paths) {
      auto it = marks_.find(std::string(p));
      if (it != marks_.end()) return it->second;
    }
    return fallback;
  }
  bool Present(const std::string& path) const { return marks_.contains(path); }

  Status ReadMap(const Value& v, std::initializer_list<Field> fields);
  Status ReadList(const Value& v, const std::function<Status(const Value&, size_t)>& read_item);

  Status ReadString(const Value& v, std::string* out) const;
  Status ReadOptionalString(const Value& v, std::optional<std::string>* out) const;
  Status ReadHashSeed(const Value& v, std::optional<std::string>* out) const;
  Status ReadBool(const Value& v, bool* out) const;
  Status ReadUint(const Value& v, uint64_t lo, uint64_t hi, uint64_t* out) const;
  Status ReadReal(const Value& v, double lo, double hi, double* out) const;
  Status ReadChoice(const Value& v, std::span<const std::string_view> choices, size_t* index) const;
  Status ReadListen(const Value& v, bool allow_empty, std::string* out) const;

  Reader Str(std::string* out) const {
    return [this, out](const Value& v) { return ReadString(v, out); };
  }
  Reader Bool(bool* out) const {
    return [this, out](const Value& v) { return ReadBool(v, out); };
  }
  template <typename T>
  Reader Int(uint64_t lo, uint64_t hi, T* out) const {
    return [this, lo, hi, out](const Value& v) {
      uint64_t n = 0;
      if (Status s = ReadUint(v, lo, hi, &n); !s.ok()) return s;
      *out = static_cast<T>(n);  // hi fits T: every call site passes T's range or less
      return Status::Ok();
    };
  }

  // A discovery provider's `type`: checked here, dispatched on by ReadProvider.
  Reader ProviderType() const {
    return [this](const Value& v) {
      size_t i = 0;
      return ReadChoice(v, kProviderTypes, &i);
    };
  }
  Reader Real(double lo, double hi, double* out) const {
    return [this, lo, hi, out](const Value& v) { return ReadReal(v, lo, hi, out); };
  }

  Status ReadTop(const Value& v, ServerConfig* c);
  Status ReadRoutePolicy(const Value& v, RoutePolicy* p);
  Status ReadGrpc(const Value& v, GrpcConfig* g);
  Status ReadTls(const Value& v, TlsConfig* t);
  Status ReadModel(const Value& v, ModelConfig* m);
  Status ReadEngine(const Value& v, EngineEntry* e);
  Status ReadProvider(const Value& v, size_t item, DiscoveryConfig* d);
  Status ReadDnsProvider(const Value& v, DnsProviderConfig* p);
  Status ReadKubernetesProvider(const Value& v, KubernetesProviderConfig* p);
  Status ReadPortRef(const Value& v, PortRef* out) const;
  Status ReadNameserver(const Value& v, std::string* out) const;

  Status CheckSingleDocument(const std::string& text) const;
  Status CheckTls(const TlsConfig& t, const YAML::Mark& top) const;
  Status CheckModels(const ServerConfig& c) const;
  Status CheckEngines(const ServerConfig& c) const;
  Status CheckDiscovery(const ServerConfig& c) const;
  Status CheckDnsProvider(const ServerConfig& c, size_t i) const;
  Status CheckKubernetesProvider(const ServerConfig& c, size_t i) const;
  // Reads each Kubernetes provider's kubeconfig into its fields.
  Status ResolveKubeconfigs(ServerConfig* c) const;

  std::string origin_;
  // The providers[] position of each DNS and Kubernetes provider, for errors.
  std::vector<size_t> dns_items_;
  std::vector<size_t> k8s_items_;
  // Where each key path the document set was written (key line, or item
  // line for sequence elements).
  std::unordered_map<std::string, YAML::Mark> marks_;
};

Status ConfigParser::ReadMap(const Value& v, std::initializer_list<Field> fields) {
  // A section written with nothing under it ("grpc:") means all defaults,
  // like an empty file does.
  if (v.node.IsNull()) return Status::Ok();
  if (!v.node.IsMap()) return Mismatch(v, "a map");
  // yaml-cpp keeps duplicate keys; a later one silently winning is exactly
  // the kind of surprise strict parsing exists to prevent.
  std::map<std::string, YAML::Mark, std::less<>> seen;
  for (auto it = v.node.begin(); it != v.node.end(); ++it) {
    // Copies: `it->` yields a temporary pair, so a reference would dangle.
    YAML::Node key = it->first;
    YAML::Node value = it->second;
    if (KindOf(key) == Kind::kSequence || KindOf(key) == Kind::kMap || KindOf(key) == Kind::kNull) {
      return Error(key.Mark(), v.path, "expected a key name, got " + Describe(key));
    }
    const std::string& name = key.Scalar();
    std::string path = JoinPath(v.path, name);
    const Field* field = nullptr;
    for (const Field& f : fields) {
      if (f.key == name) field = &f;
    }
    if (field == nullptr) {
      // A typo may hold a tab or stray byte; show it rather than print it.
      bool printable = std::all_of(name.begin(), name.end(), [](char ch) { return ch > 0x20 && ch < 0x7f; });
      if (!printable) path = JoinPath(v.path, Quote(name));
      std::string known;
      for (const Field& f : fields) {
        if (!known.empty()) known += ", ";
        known += f.key;
      }
      return Error(key.Mark(), path, "unknown key (expected one of: " + known + ")");
    }
    if (auto prev = seen.find(name); prev != seen.end()) {
      return Error(key.Mark(), path, "duplicate key (first set at line " + std::to_string(prev->second.line + 1) + ")");
    }
    seen.emplace(name, key.Mark());
    marks_[path] = key.Mark();
    if (Status s = field->read(Value{value, path, key.Mark()}); !s.ok()) return s;
  }
  return Status::Ok();
}

Status ConfigParser::ReadList(const Value& v, const std::function<Status(const Value&, size_t)>& read_item) {
  if (v.node.IsNull()) return Status::Ok();
  if (!v.node.IsSequence()) return Mismatch(v, "a sequence");
  for (size_t i = 0; i < v.node.size(); ++i) {
    YAML::Node item = v.node[i];
    std::string path = v.path + "[" + std::to_string(i) + "]";
    marks_[path] = item.Mark();
    // A bare "-" is a half-written entry, not an entry with all defaults.
    if (item.IsNull()) return Error(item.Mark(), path, "empty list entry");
    if (Status s = read_item(Value{item, path, item.Mark()}, i); !s.ok()) return s;
  }
  return Status::Ok();
}

Status ConfigParser::ReadString(const Value& v, std::string* out) const {
  // Numbers are accepted as text (a replica may well be called 0); booleans
  // and null are not, since `cert_file: true` or `cert_file:` is a mistake.
  switch (KindOf(v.node)) {
    case Kind::kString:
    case Kind::kInt:
    case Kind::kFloat: *out = v.node.Scalar(); return Status::Ok();
    case Kind::kNull: return Error(v, "expected a string (write \"\" for an empty one), got null");
    default: return Mismatch(v, "a string");
  }
}

Status ConfigParser::ReadOptionalString(const Value& v, std::optional<std::string>* out) const {
  if (KindOf(v.node) == Kind::kNull) {
    out->reset();
    return Status::Ok();
  }
  std::string s;
  if (Status st = ReadString(v, &s); !st.ok()) return st;
  *out = std::move(s);
  return Status::Ok();
}

Status ConfigParser::ReadHashSeed(const Value& v, std::optional<std::string>* out) const {
  // The engines hash PYTHONHASHSEED's text, so "0" and "00" differ: keep the
  // scalar verbatim. A float or boolean is no PYTHONHASHSEED at all.
  switch (KindOf(v.node)) {
    case Kind::kNull: out->reset(); return Status::Ok();
    case Kind::kString:
    case Kind::kInt: *out = v.node.Scalar(); return Status::Ok();
    default: return Mismatch(v, "an integer, a string or null (PYTHONHASHSEED)");
  }
}

Status ConfigParser::ReadBool(const Value& v, bool* out) const {
  if (KindOf(v.node) != Kind::kBool) return Mismatch(v, "true or false");
  *out = v.node.Scalar().front() != 'f' && v.node.Scalar().front() != 'F';
  return Status::Ok();
}

Status ConfigParser::ReadReal(const Value& v, double lo, double hi, double* out) const {
  auto bad = [&] { return Mismatch(v, "a number in [" + FormatReal(lo) + ", " + FormatReal(hi) + "]"); };
  const Kind k = KindOf(v.node);
  if (k != Kind::kInt && k != Kind::kFloat) return bad();
  char* end = nullptr;
  const std::string& text = v.node.Scalar();
  const double x = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || !(x >= lo && x <= hi)) return bad();
  *out = x;
  return Status::Ok();
}

Status ConfigParser::ReadUint(const Value& v, uint64_t lo, uint64_t hi, uint64_t* out) const {
  auto bad = [&] {
    return Mismatch(v, "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  };
  if (KindOf(v.node) != Kind::kInt) return bad();
  std::string_view text = v.node.Scalar();
  bool negative = text.front() == '-';
  if (text.front() == '-' || text.front() == '+') text.remove_prefix(1);
  uint64_t n = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || end != text.data() + text.size()) return bad();  // beyond uint64
  if (negative && n != 0) return bad();
  if (n < lo || n > hi) return bad();
  *out = n;
  return Status::Ok();
}

Status ConfigParser::ReadChoice(const Value& v, std::span<const std::string_view> choices,
                                size_t* index) const {
  std::string list;
  for (std::string_view c : choices) {
    if (!list.empty()) list += ", ";
    list += c;
  }
  Kind kind = KindOf(v.node);
  if (kind == Kind::kString || kind == Kind::kInt || kind == Kind::kFloat) {
    size_t i = 0;
    for (std::string_view c : choices) {
      if (v.node.Scalar() == c) {
        *index = i;
        return Status::Ok();
      }
      ++i;
    }
  }
  return Mismatch(v, "one of " + list);
}

Status ConfigParser::ReadListen(const Value& v, bool allow_empty, std::string* out) const {
  std::string s;
  if (Status st = ReadString(v, &s); !st.ok()) return st;
  if (s.empty()) {
    if (allow_empty) {
      out->clear();
      return Status::Ok();
    }
    return Error(v, "must not be empty (expected host:port)");
  }
  if (std::string problem = HostPortProblem(s); !problem.empty()) return Error(v, problem);
  *out = std::move(s);
  return Status::Ok();
}

Status ConfigParser::ReadTls(const Value& v, TlsConfig* t) {
  return ReadMap(v, {
      {"cert_file", Str(&t->cert_file)},
      {"key_file", Str(&t->key_file)},
      {"client_ca_file", Str(&t->client_ca_file)},
      {"require_client_cert", Bool(&t->require_client_cert)},
  });
}

Status ConfigParser::ReadGrpc(const Value& v, GrpcConfig* g) {
  return ReadMap(v, {
      {"listen", [this, g](const Value& f) { return ReadListen(f, /*allow_empty=*/false, &g->listen); }},
      {"tls", [this, g](const Value& f) { return ReadTls(f, &g->tls); }},
      {"admin_token_file", Str(&g->admin_token_file)},
      {"require_auth_for_reads", Bool(&g->require_auth_for_reads)},
      // gRPC takes these as int.
      {"max_message_bytes", Int(1024, kInt32Max, &g->max_message_bytes)},
      {"max_query_tokens", Int(1, kInt32Max, &g->max_query_tokens)},
      {"max_query_hashes", Int(1, kInt32Max, &g->max_query_hashes)},
      {"max_query_text_bytes", Int(1, kInt32Max, &g->max_query_text_bytes)},
      {"max_batch_queries", Int(1, kInt32Max, &g->max_batch_queries)},
      {"max_concurrent_streams", Int(1, kInt32Max, &g->max_concurrent_streams)},
      {"max_open_streams", Int(1, kInt32Max, &g->max_open_streams)},
      {"max_threads", Int(4, 4096, &g->max_threads)},
      {"max_connection_age_ms", Int(0, kInt32Max, &g->max_connection_age_ms)},
  });
}

Status ConfigParser::ReadModel(const Value& v, ModelConfig* m) {
  return ReadMap(v, {
      {"name", Str(&m->name)},
      {"hash_algo",
       [this, m](const Value& f) {
         std::string name;
         if (Status s = ReadString(f, &name); !s.ok()) return s;
         if (auto algo = ParseHashAlgo(name); !algo.ok()) return Error(f, algo.status().message());
         m->hash_algo = std::move(name);
         return Status::Ok();
       }},
      {"hash_seed", [this, m](const Value& f) { return ReadHashSeed(f, &m->hash_seed); }},
      {"block_size", Int(1, 65536, &m->block_size)},
      {"int_block_hashes", Bool(&m->int_block_hashes)},
      {"max_query_blocks", Int(1, kInt32Max, &m->max_query_blocks)},
      {"index_all_groups", Bool(&m->index_all_groups)},
      {"route", [this, m](const Value& f) { return ReadRoutePolicy(f, &m->route); }},
      {"tokenizer", Str(&m->tokenizer)},
      {"chat_template", Str(&m->chat_template)},
  });
}

// docs/ROUTING.md explains each term; the ranges keep every cost finite.
Status ConfigParser::ReadRoutePolicy(const Value& v, RoutePolicy* p) {
  return ReadMap(v, {
      {"cpu_credit", Real(0, 1, &p->cpu_credit)},
      {"storage_credit", Real(0, 1, &p->storage_credit)},
      {"predicted_credit", Real(0, 1, &p->predicted_credit)},
      {"decode_weight", Real(0, 10, &p->decode_weight)},
      {"kv_pressure_start", Real(0, 1, &p->kv_pressure_start)},
      {"kv_pressure_max_factor", Real(1, 100, &p->kv_pressure_max_factor)},
      {"warmup_seconds", Real(0, 86400, &p->warmup_seconds)},
      {"warmup_credit", Real(0, 0.99, &p->warmup_credit)},
      {"mean_prompt_tokens", Real(0, 1e7, &p->mean_prompt_tokens)},
  });
}

Status ConfigParser::ReadEngine(const Value& v, EngineEntry* e) {
  ingest::EngineConfig& c = e->engine;
  return ReadMap(v, {
      {"replica", Str(&c.replica)},
      {"model", Str(&c.model)},
      {"endpoint", Str(&c.endpoint)},
      {"replay_endpoint", Str(&c.replay_endpoint)},
      {"dp_size", Int(1, 256, &c.data_parallel_size)},
      // Absent or null: derive from ingest.topic_template; "" is a real topic.
      {"topic", [this, &c](const Value& f) { return ReadOptionalString(f, &c.topic); }},
      {"mode",
       [this, &c](const Value& f) {
         size_t i = 0;
         if (Status s = ReadChoice(f, kConnectModes, &i); !s.ok()) return s;
         c.mode = i == 0 ? ingest::ConnectMode::kConnect : ingest::ConnectMode::kBind;
         return Status::Ok();
       }},
      {"gpu_blocks", Int(0, kUint64Max, &e->gpu_blocks)},
      {"metrics_url",
       [this, e](const Value& f) {
         if (Status s = ReadString(f, &e->metrics_url); !s.ok()) return s;
         const std::string& u = e->metrics_url;
         if (!u.empty() && u.rfind("http://", 0) != 0 && u.rfind("https://", 0) != 0) {
           return Error(f, "must be an http:// or https:// URL, got " + Quote(u));
         }
         return Status::Ok();
       }},
  });
}

Status ConfigParser::ReadNameserver(const Value& v, std::string* out) const {
  std::string s;
  if (Status st = ReadString(v, &s); !st.ok()) return st;
  if (s.empty()) {
    out->clear();
    return Status::Ok();
  }
  if (std::string problem = HostPortProblem(s); !problem.empty()) return Error(v, problem);
  // c-ares takes an address, not a name it would first have to resolve.
  std::string_view host = std::string_view(s).substr(0, s.rfind(':'));
  bool numeric = std::all_of(host.begin(), host.end(), [](char ch) {
    return (ch >= '0' && ch <= '9') || ch == '.' || ch == ':' || ch == '[' || ch == ']' ||
           (ch >= 'a' && ch <= 'f') || (ch >= 'A' && ch <= 'F');
  });
  if (!numeric || host.find_first_of(".:") == std::string_view::npos) {
    return Error(v, "expected an IP address and port (e.g. 10.96.0.10:53), got " + Quote(s));
  }
  *out = std::move(s);
  return Status::Ok();
}

Status ConfigParser::ReadDnsProvider(const Value& v, DnsProviderConfig* p) {
  return ReadMap(v, {
      {"type", ProviderType()},
      {"name", Str(&p->name)},
      {"model", Str(&p->model)},
      {"srv", Str(&p->srv)},
      {"host", Str(&p->host)},
      {"ports",
       [this, p](const Value& f) {
         return ReadMap(f, {
             {"events", Int(1, 65535, &p->events_port)},
             {"replay", Int(0, 65535, &p->replay_port)},
             {"metrics", Int(0, 65535, &p->metrics_port)},
         });
       }},
      {"dp_size", Int(1, 256, &p->data_parallel_size)},
      {"interval_ms", Int(100, kOneHourMs * 24, &p->interval_ms)},
      {"min_interval_ms", Int(100, kOneHourMs, &p->min_interval_ms)},
      {"grace_ms", Int(0, kOneHourMs * 24, &p->grace_ms)},
      {"timeout_ms", Int(100, 60'000, &p->timeout_ms)},
      {"nameserver", [this, p](const Value& f) { return ReadNameserver(f, &p->nameserver); }},
  });
}

Status ConfigParser::ReadPortRef(const Value& v, PortRef* out) const {
  const Kind kind = KindOf(v.node);
  if (kind == Kind::kInt) {
    uint64_t n = 0;
    if (Status s = ReadUint(v, 1, 65535, &n); !s.ok()) return s;
    out->number = static_cast<uint32_t>(n);
    return Status::Ok();
  }
  if (kind != Kind::kString) return Mismatch(v, "a port number or a port name");
  // A Service port name is an IANA_SVC_NAME: 1-15 of [a-z0-9-].
  const std::string& s = v.node.Scalar();
  const bool ok = !s.empty() && s.size() <= 15 && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
  });
  if (!ok) return Error(v, "expected a port number or a port name (1-15 of a-z, 0-9, -), got " + Quote(s));
  out->name = s;
  return Status::Ok();
}

Status ConfigParser::ReadKubernetesProvider(const Value& v, KubernetesProviderConfig* p) {
  return ReadMap(v, {
      {"type", ProviderType()},
      {"name", Str(&p->name)},
      {"model", Str(&p->model)},
      {"namespace", Str(&p->namespace_name)},
      {"service", Str(&p->service)},
      {"pod_selector", Str(&p->pod_selector)},
      {"ports",
       [this, p](const Value& f) {
         return ReadMap(f, {
             {"events", [this, p](const Value& x) { return ReadPortRef(x, &p->events_port); }},
             {"replay", [this, p](const Value& x) { return ReadPortRef(x, &p->replay_port); }},
             {"metrics", [this, p](const Value& x) { return ReadPortRef(x, &p->metrics_port); }},
         });
       }},
      {"dp_size", Int(1, 256, &p->data_parallel_size)},
      {"grace_ms", Int(0, kOneHourMs * 24, &p->grace_ms)},
      {"api_server", Str(&p->api_server)},
      {"kubeconfig", Str(&p->kubeconfig)},
      {"kubeconfig_context", Str(&p->kubeconfig_context)},
      {"token_file", Str(&p->token_file)},
      {"ca_file", Str(&p->ca_file)},
      {"insecure_skip_tls_verify", Bool(&p->insecure_skip_tls_verify)},
      {"watch_timeout_seconds", Int(1, 3600, &p->watch_timeout_seconds)},
      {"timeout_ms", Int(100, 300'000, &p->timeout_ms)},
      {"backoff_initial_ms", Int(10, kOneHourMs, &p->backoff_initial_ms)},
      {"backoff_max_ms", Int(10, kOneHourMs, &p->backoff_max_ms)},
  });
}

// The provider's type picks its reader; a missing or unknown type is
// reported by the DNS reader (and the required-key check) as before.
Status ConfigParser::ReadProvider(const Value& v, size_t item, DiscoveryConfig* d) {
  if (v.node.IsMap() && v.node["type"] && v.node["type"].IsScalar() && v.node["type"].Scalar() == "kubernetes") {
    k8s_items_.push_back(item);
    d->kubernetes.emplace_back();
    return ReadKubernetesProvider(v, &d->kubernetes.back());
  }
  dns_items_.push_back(item);
  d->providers.emplace_back();
  return ReadDnsProvider(v, &d->providers.back());
}

Status ConfigParser::ReadTop(const Value& v, ServerConfig* c) {
  return ReadMap(v, {
      {"grpc", [this, c](const Value& f) { return ReadGrpc(f, &c->grpc); }},
      {"metrics",
       [this, c](const Value& f) {
         return ReadMap(f, {
             {"listen",
              [this, c](const Value& l) { return ReadListen(l, /*allow_empty=*/true, &c->metrics.listen); }},
             {"threads", Int(1, 256, &c->metrics.threads)},
             {"request_timeout_ms", Int(100, 600000, &c->metrics.request_timeout_ms)},
             {"basic_auth_file", Str(&c->metrics.basic_auth_file)},
         });
       }},
      {"data_dir", Str(&c->data_dir)},
      {"on_corrupt",
       [this, c](const Value& f) {
         size_t i = 0;
         if (Status s = ReadChoice(f, kOnCorrupt, &i); !s.ok()) return s;
         c->on_corrupt = i == 0 ? OnCorruptData::kFail : OnCorruptData::kStartEmpty;
         return Status::Ok();
       }},
      {"index_core",
       [this, c](const Value& f) {
         size_t i = 0;
         if (Status s = ReadChoice(f, kIndexCores, &i); !s.ok()) return s;
         c->index_core = i == 0 ? IndexCore::kBlocks : IndexCore::kRuns;
         return Status::Ok();
       }},
      {"snapshot",
       [this, c](const Value& f) {
         SnapshotConfig& s = c->snapshot;
         return ReadMap(f, {
             {"interval_seconds", Int(0, kInt32Max, &s.interval_seconds)},
             {"every_batches", Int(0, kUint64Max, &s.every_batches)},
             {"on_shutdown", Bool(&s.on_shutdown)},
             {"sync", Bool(&s.sync)},
         });
       }},
      {"routing",
       [this, c](const Value& f) {
         RoutingConfig& r = c->routing;
         return ReadMap(f, {
             {"scrape_interval_ms", Int(10, kOneHourMs, &r.scrape_interval_ms)},
             {"scrape_timeout_ms", Int(10, kOneHourMs, &r.scrape_timeout_ms)},
             {"stale_after_ms", Int(10, kOneHourMs, &r.stale_after_ms)},
             {"clock",
              [this, &r](const Value& v) {
                size_t i = 0;
                if (Status s = ReadChoice(v, kRouteClocks, &i); !s.ok()) return s;
                r.simulated_clock = i == 1;
                return Status::Ok();
              }},
         });
       }},
      {"ingest",
       [this, c](const Value& f) {
         IngestConfig& in = c->ingest;
         return ReadMap(f, {
             {"threads", Int(1, 64, &in.threads)},
             {"topic_template",
              [this, &in](const Value& t) {
                std::string s;
                if (Status st = ReadString(t, &s); !st.ok()) return st;
                if (std::string problem = TopicTemplateProblem(s); !problem.empty()) return Error(t, problem);
                in.topic_template = std::move(s);
                return Status::Ok();
              }},
             {"replay_timeout_ms", Int(1, kOneHourMs, &in.replay_timeout_ms)},
             {"replay_max_retries", Int(0, 100, &in.replay_max_retries)},
             // 0 disables ZMTP heartbeats.
             {"heartbeat_ivl_ms", Int(0, kOneHourMs, &in.heartbeat_ivl_ms)},
             {"heartbeat_timeout_ms", Int(0, kOneHourMs, &in.heartbeat_timeout_ms)},
             // 0 = unlimited (ZMQ_RCVHWM).
             {"sub_rcvhwm", Int(0, kInt32Max, &in.sub_rcvhwm)},
             {"source_id_reuse_after_s", Int(0, 7 * 86400, &in.source_id_reuse_after_s)},
         });
       }},
      {"log",
       [this, c](const Value& f) {
         return ReadMap(f, {
             {"level",
              [this, c](const Value& l) {
                size_t i = 0;
                if (Status s = ReadChoice(l, kLogLevels, &i); !s.ok()) return s;
                c->log.level = std::string(kLogLevels[i]);
                return Status::Ok();
              }},
             {"json", Bool(&c->log.json)},
         });
       }},
      {"models",
       [this, c](const Value& f) {
         return ReadList(f, [this, c](const Value& item, size_t) {
           c->models.emplace_back();
           return ReadModel(item, &c->models.back());
         });
       }},
      {"engines",
       [this, c](const Value& f) {
         return ReadList(f, [this, c](const Value& item, size_t) {
           c->engines.emplace_back();
           return ReadEngine(item, &c->engines.back());
         });
       }},
      {"discovery",
       [this, c](const Value& f) {
         return ReadMap(f, {
             {"providers",
              [this, c](const Value& l) {
                return ReadList(l, [this, c](const Value& item, size_t i) {
                  return ReadProvider(item, i, &c->discovery);
                });
              }},
         });
       }},
  });
}

Status ConfigParser::CheckTls(const TlsConfig& t, const YAML::Mark& top) const {
  if (!t.cert_file.empty() && t.key_file.empty()) {
    return Error(MarkOf({"grpc.tls.key_file", "grpc.tls.cert_file"}, top), "grpc.tls.key_file",
                 "must be set when grpc.tls.cert_file is (TLS needs both)");
  }
  if (t.cert_file.empty() && !t.key_file.empty()) {
    return Error(MarkOf({"grpc.tls.cert_file", "grpc.tls.key_file"}, top), "grpc.tls.cert_file",
                 "must be set when grpc.tls.key_file is (TLS needs both)");
  }
  if (!t.client_ca_file.empty() && t.cert_file.empty()) {
    return Error(MarkOf({"grpc.tls.client_ca_file"}, top), "grpc.tls.client_ca_file",
                 "needs grpc.tls.cert_file and key_file (client certificates are only checked over TLS)");
  }
  return Status::Ok();
}

Status ConfigParser::CheckModels(const ServerConfig& c) const {
  std::unordered_map<std::string_view, size_t> first;
  for (size_t i = 0; i < c.models.size(); ++i) {
    std::string item = "models[" + std::to_string(i) + "]";
    YAML::Mark item_mark = MarkOf({item}, YAML::Mark::null_mark());
    std::string name_path = item + ".name";
    if (!Present(name_path)) return Error(item_mark, name_path, "is required");
    YAML::Mark name_mark = MarkOf({name_path}, item_mark);
    const std::string& name = c.models[i].name;
    if (name.empty()) return Error(name_mark, name_path, "must not be empty");
    auto [it, inserted] = first.emplace(name, i);
    if (!inserted) {
      return Error(name_mark, name_path,
                   "duplicate model " + Quote(name) + " (also models[" + std::to_string(it->second) + "])");
    }
    if (!c.models[i].chat_template.empty() && c.models[i].tokenizer.empty()) {
      std::string path = item + ".chat_template";
      return Error(MarkOf({path}, item_mark), path, "needs " + item + ".tokenizer (the template's special tokens)");
    }
    // The server builds this hasher at start; failing here instead puts the
    // line on the message. Algorithm and block size are already range
    // checked, so what remains is xxhash without a seed.
    BlockHasherOptions ho;
    ho.algo = ParseHashAlgo(c.models[i].hash_algo).value();
    ho.seed = c.models[i].hash_seed;
    ho.block_size = c.models[i].block_size;
    if (auto hasher = BlockHasher::Create(ho); !hasher.ok()) {
      std::string seed_path = item + ".hash_seed";
      bool unset = !ho.seed.has_value();
      return Error(MarkOf({seed_path, item + ".hash_algo"}, item_mark), unset ? seed_path : item,
                   hasher.status().message());
    }
  }
  return Status::Ok();
}

Status ConfigParser::CheckEngines(const ServerConfig& c) const {
  EngineClaims claims;
  for (size_t i = 0; i < c.engines.size(); ++i) {
    const ingest::EngineConfig& e = c.engines[i].engine;
    std::string item = "engines[" + std::to_string(i) + "]";
    YAML::Mark item_mark = MarkOf({item}, YAML::Mark::null_mark());
    for (std::string_view key : {"replica", "model", "endpoint"}) {
      std::string path = JoinPath(item, key);
      if (!Present(path)) return Error(item_mark, path, "is required");
    }
    std::string field;
    if (Status s = ValidateEngine(c.engines[i], c, item, &claims, &field); !s.ok()) {
      std::string path = field.empty() ? item : JoinPath(item, field);
      if (field == "model" && c.models.empty()) {
        return Error(MarkOf({path}, item_mark), path,
                     "model " + Quote(e.model) + " is not configured (there is no models section)");
      }
      return Error(MarkOf({path}, item_mark), path, s.message());
    }
  }
  return Status::Ok();
}

Status ConfigParser::CheckDnsProvider(const ServerConfig& c, size_t i) const {
  const DnsProviderConfig& p = c.discovery.providers[i];
  const std::string item = "discovery.providers[" + std::to_string(dns_items_[i]) + "]";
  const YAML::Mark item_mark = MarkOf({item}, YAML::Mark::null_mark());
  auto at = [&](std::string_view key) { return MarkOf({JoinPath(item, key)}, item_mark); };
  for (std::string_view key : {"type", "name", "model"}) {
    if (!Present(JoinPath(item, key))) return Error(item_mark, JoinPath(item, key), "is required");
  }
  if (p.name.empty()) return Error(at("name"), JoinPath(item, "name"), "must not be empty");
  if (c.FindModel(p.model) == nullptr) {
    return Error(at("model"), JoinPath(item, "model"), "model " + Quote(p.model) + " is not configured under models");
  }
  const bool srv = Present(JoinPath(item, "srv"));
  const bool host = Present(JoinPath(item, "host"));
  if (srv == host) {
    return Error(at(srv ? "host" : "name"), item,
                 srv ? "set srv or host, not both" : "needs srv (an SRV name) or host (an A/AAAA name)");
  }
  if ((srv ? p.srv : p.host).empty()) return Error(at(srv ? "srv" : "host"), JoinPath(item, srv ? "srv" : "host"),
                                                   "must not be empty");
  const std::string events = item + ".ports.events";
  if (srv && Present(events)) {
    return Error(at("ports.events"), events, "not with srv: the SRV record's port is the events port");
  }
  if (host && !Present(events)) return Error(at("ports"), events, "is required with host");
  for (uint32_t port : {p.events_port, p.replay_port, p.metrics_port}) {
    if (port != 0 && port + p.data_parallel_size - 1 > 65535) {
      return Error(at("dp_size"), JoinPath(item, "dp_size"),
                   "port " + std::to_string(port) + " + dp_size - 1 exceeds 65535");
    }
  }
  if (p.min_interval_ms > p.interval_ms) {
    return Error(at("min_interval_ms"), JoinPath(item, "min_interval_ms"),
                 "must not exceed interval_ms (" + std::to_string(p.interval_ms) + ")");
  }
  return Status::Ok();
}

Status ConfigParser::CheckKubernetesProvider(const ServerConfig& c, size_t i) const {
  const KubernetesProviderConfig& p = c.discovery.kubernetes[i];
  const std::string item = "discovery.providers[" + std::to_string(k8s_items_[i]) + "]";
  const YAML::Mark item_mark = MarkOf({item}, YAML::Mark::null_mark());
  auto at = [&](std::string_view key) { return MarkOf({JoinPath(item, key)}, item_mark); };
  const bool service = Present(JoinPath(item, "service"));
  if (service == Present(JoinPath(item, "pod_selector"))) {
    return Error(at(service ? "pod_selector" : "name"), item,
                 service ? "set service or pod_selector, not both"
                         : "needs service (its EndpointSlices) or pod_selector (a label selector of Pods)");
  }
  const bool kubeconfig = Present(JoinPath(item, "kubeconfig"));
  for (std::string_view key : {"name", "model", "namespace"}) {
    if (key == "namespace" && kubeconfig) continue;  // the kubeconfig's context may give it
    if (!Present(JoinPath(item, key))) return Error(item_mark, JoinPath(item, key), "is required");
  }
  for (std::string_view key : {"api_server", "token_file", "ca_file"}) {
    if (kubeconfig && Present(JoinPath(item, key))) {
      return Error(at(key), JoinPath(item, key), "set kubeconfig or " + std::string(key) + ", not both");
    }
  }
  if (kubeconfig && p.kubeconfig.empty()) return Error(at("kubeconfig"), JoinPath(item, "kubeconfig"), "must not be empty");
  if (!kubeconfig && Present(JoinPath(item, "kubeconfig_context"))) {
    return Error(at("kubeconfig_context"), JoinPath(item, "kubeconfig_context"), "needs kubeconfig");
  }
  // Pods may name their ports by annotation.
  if (service && !Present(JoinPath(item, "ports.events"))) {
    return Error(item_mark, JoinPath(item, "ports.events"), "is required");
  }
  for (std::string_view key : {"name", "namespace", service ? "service" : "pod_selector"}) {
    const std::string& value = key == "name"        ? p.name
                               : key == "namespace" ? p.namespace_name
                               : service            ? p.service
                                                    : p.pod_selector;
    if (key == "namespace" && !Present(JoinPath(item, key))) continue;
    if (value.empty()) return Error(at(key), JoinPath(item, key), "must not be empty");
  }
  if (c.FindModel(p.model) == nullptr) {
    return Error(at("model"), JoinPath(item, "model"), "model " + Quote(p.model) + " is not configured under models");
  }
  if (!p.api_server.empty() && p.api_server.rfind("https://", 0) != 0) {
    return Error(at("api_server"), JoinPath(item, "api_server"),
                 "expected an https:// URL (the token must not travel in clear), got " + Quote(p.api_server));
  }
  for (uint32_t port : {p.events_port.number, p.replay_port.number, p.metrics_port.number}) {
    if (port != 0 && port + p.data_parallel_size - 1 > 65535) {
      return Error(at("dp_size"), JoinPath(item, "dp_size"),
                   "port " + std::to_string(port) + " + dp_size - 1 exceeds 65535");
    }
  }
  if (p.backoff_initial_ms > p.backoff_max_ms) {
    return Error(at("backoff_initial_ms"), JoinPath(item, "backoff_initial_ms"),
                 "must not exceed backoff_max_ms (" + std::to_string(p.backoff_max_ms) + ")");
  }
  return Status::Ok();
}

Status ConfigParser::CheckDiscovery(const ServerConfig& c) const {
  // Provider name -> its providers[] position.
  std::unordered_map<std::string_view, size_t> first;
  auto unique = [&](std::string_view name, size_t item) {
    const std::string path = "discovery.providers[" + std::to_string(item) + "].name";
    auto [it, inserted] = first.emplace(name, item);
    if (inserted) return Status::Ok();
    return Error(MarkOf({path}, YAML::Mark::null_mark()), path,
                 "duplicate provider " + Quote(it->first) + " (also discovery.providers[" +
                     std::to_string(it->second) + "])");
  };
  for (size_t i = 0; i < c.discovery.providers.size(); ++i) {
    if (Status s = CheckDnsProvider(c, i); !s.ok()) return s;
    if (Status s = unique(c.discovery.providers[i].name, dns_items_[i]); !s.ok()) return s;
  }
  for (size_t i = 0; i < c.discovery.kubernetes.size(); ++i) {
    if (Status s = CheckKubernetesProvider(c, i); !s.ok()) return s;
    if (Status s = unique(c.discovery.kubernetes[i].name, k8s_items_[i]); !s.ok()) return s;
  }
  return Status::Ok();
}

Status ConfigParser::ResolveKubeconfigs(ServerConfig* c) const {
  for (size_t i = 0; i < c->discovery.kubernetes.size(); ++i) {
    KubernetesProviderConfig& p = c->discovery.kubernetes[i];
    if (p.kubeconfig.empty()) continue;
    const std::string path = JoinPath("discovery.providers[" + std::to_string(k8s_items_[i]) + "]", "kubeconfig");
    Result<KubeconfigCredentials> k = LoadKubeconfig(p.kubeconfig, p.kubeconfig_context);
    if (!k.ok()) return Error(MarkOf({path}, YAML::Mark::null_mark()), path, k.status().message());
    p.api_server = k->server;
    p.token = k->token;
    p.token_file = k->token.empty() ? k->token_file : "";
    p.ca_file = k->ca_file;
    p.ca_pem = k->ca_pem;
    p.insecure_skip_tls_verify = p.insecure_skip_tls_verify || k->insecure_skip_tls_verify;
    if (p.namespace_name.empty()) p.namespace_name = k->namespace_name.empty() ? "default" : k->namespace_name;
  }
  return Status::Ok();
}

Status ConfigParser::CheckSingleDocument(const std::string& text) const {
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentStarts doc;
  if (!parser.HandleNextDocument(doc)) return Status::Ok();  // no document at all
  YAML::Mark first = doc.start;
  if (!parser.HandleNextDocument(doc)) return Status::Ok();
  YAML::Mark second = doc.start;
  // A document that starts where the previous one did consumed nothing:
  // that is the stuck token of the yaml-cpp bug above.
  bool stuck = second.pos == first.pos || (parser.HandleNextDocument(doc) && doc.start.pos == second.pos);
  if (stuck) {
    size_t pos = static_cast<size_t>(second.pos);
    std::string what = pos < text.size() ? Quote(text.substr(pos, 1)) : "end of input";
    return Status::InvalidArgument(Where(second) + "YAML syntax error: unexpected " + what);
  }
  // Anything after the first document would otherwise be dropped silently;
  // an operator who concatenated files should find out.
  return Status::InvalidArgument(Where(second) + "expected one YAML document, found more");
}

Result<ServerConfig> ConfigParser::Parse(std::string_view yaml) {
  std::string text(yaml);
  if (Status s = CheckSingleDocument(text); !s.ok()) return s;
  // One HandleNextDocument call: safe from the LoadAll loop.
  YAML::Node root = YAML::Load(text);
  ServerConfig config;
  if (root.IsNull()) return config;  // empty file, only comments, or null
  if (!root.IsMap()) {
    return Error(root.Mark(), "", "the top level must be a map of settings, got " + Describe(root));
  }
  YAML::Mark top = root.Mark();
  if (Status s = ReadTop(Value{root, "", top}, &config); !s.ok()) return s;
  if (Status s = CheckTls(config.grpc.tls, top); !s.ok()) return s;
  if (config.grpc.require_auth_for_reads && config.grpc.admin_token_file.empty() &&
      config.grpc.tls.client_ca_file.empty()) {
    return Error(MarkOf({"grpc.require_auth_for_reads"}, top), "grpc.require_auth_for_reads",
                 "needs grpc.admin_token_file or grpc.tls.client_ca_file (the credential reads must carry)");
  }
  if (Status s = CheckModels(config); !s.ok()) return s;
  if (Status s = CheckEngines(config); !s.ok()) return s;
  if (Status s = CheckDiscovery(config); !s.ok()) return s;
  if (Status s = ResolveKubeconfigs(&config); !s.ok()) return s;
  return config;
}

}  // namespace

const ModelConfig* ServerConfig::FindModel(std::string_view name) const {
  for (const ModelConfig& m : models) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

Result<ServerConfig> ParseConfig(std::string_view yaml, std::string_view origin) {
  ConfigParser parser(origin);
  try {
    return parser.Parse(yaml);
  } catch (const YAML::ParserException& e) {
    return Status::InvalidArgument(parser.Where(e.mark) + "YAML syntax error: " + e.msg);
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(parser.Where(e.mark) + "YAML error: " + e.msg);
  } catch (const std::bad_alloc&) {
    return Status::Internal(std::string(origin) + ": out of memory while parsing the configuration");
  } catch (const std::exception& e) {
    return Status::Internal(std::string(origin) + ": " + e.what());
  }
}

Result<ServerConfig> LoadConfigFile(const std::string& path) {
  struct Closer {
    void operator()(FILE* f) const { std::fclose(f); }
  };
  std::unique_ptr<FILE, Closer> file(std::fopen(path.c_str(), "rb"));
  if (!file) {
    int err = errno;
    if (err == ENOENT) return Status::NotFound("config file " + path + ": no such file");
    return Status::Unavailable("config file " + path + ": " + std::strerror(err));
  }
  std::string text;
  char buf[64 * 1024];
  while (true) {
    size_t n = std::fread(buf, 1, sizeof buf, file.get());
    text.append(buf, n);
    if (text.size() > kMaxConfigFileBytes) {
      return Status::InvalidArgument("config file " + path + ": larger than " +
                                     std::to_string(kMaxConfigFileBytes) + " bytes");
    }
    if (n < sizeof buf) break;
  }
  if (std::ferror(file.get())) {
    // e.g. EISDIR: fopen succeeds on a directory, reading fails.
    return Status::Unavailable("config file " + path + ": " + std::strerror(errno));
  }
  return ParseConfig(text, path);
}

ingest::IngestOptions ToIngestOptions(const ServerConfig& config) {
  const IngestConfig& in = config.ingest;
  ingest::IngestOptions o;
  o.num_threads = in.threads;
  o.topic_template = ingest::TopicTemplate(in.topic_template);
  o.replay.timeout = std::chrono::milliseconds(in.replay_timeout_ms);
  o.replay.max_retries = static_cast<int>(in.replay_max_retries);
  o.heartbeat_ivl = std::chrono::milliseconds(in.heartbeat_ivl_ms);
  o.heartbeat_timeout = std::chrono::milliseconds(in.heartbeat_timeout_ms);
  o.sub_rcvhwm = in.sub_rcvhwm;
  return o;
}

Status ValidateEngine(const EngineEntry& entry, const ServerConfig& config, std::string_view owner,
                      EngineClaims* claims, std::string* field) {
  std::string unused;
  std::string& where = field != nullptr ? *field : unused;
  const ingest::EngineConfig& e = entry.engine;
  where = "replica";
  if (Status s = ingest::CheckReplicaName(e.replica); !s.ok()) return s;
  if (auto it = claims->replicas.find(e.replica); it != claims->replicas.end()) {
    return Status::FailedPrecondition("replica " + Quote(e.replica) + " already exists (" + it->second + ")");
  }
  where = "model";
  if (config.FindModel(e.model) == nullptr) {
    return Status::NotFound("model " + Quote(e.model) + " is not configured under models");
  }
  where = "";
  auto sources = ingest::ExpandEngine(e, ingest::TopicTemplate(config.ingest.topic_template));
  if (!sources.ok()) return sources.status();
  std::vector<std::pair<std::string, std::string>> streams;
  for (const ingest::SourceSpec& s : sources.value()) {
    std::string key = std::string(ingest::ConnectModeName(s.mode)) + '\n' + s.endpoint + '\n' + s.topic;
    if (auto prev = claims->streams.find(key); prev != claims->streams.end()) {
      return Status::FailedPrecondition("source " + s.name + " would read the same stream as " + prev->second +
                                        ": both " + std::string(ingest::ConnectModeName(s.mode)) + " " +
                                        s.endpoint + " with topic " + Quote(s.topic) +
                                        " (give each engine its own endpoint or topic)");
    }
    streams.emplace_back(std::move(key), s.name + " (" + std::string(owner) + ")");
  }
  claims->replicas.emplace(e.replica, std::string(owner));
  for (auto& [key, who] : streams) claims->streams.emplace(std::move(key), std::move(who));
  return Status::Ok();
}

bool SameEngine(const EngineEntry& a, const EngineEntry& b) {
  const ingest::EngineConfig& x = a.engine;
  const ingest::EngineConfig& y = b.engine;
  return x.replica == y.replica && x.model == y.model && x.endpoint == y.endpoint &&
         x.replay_endpoint == y.replay_endpoint && x.data_parallel_size == y.data_parallel_size &&
         x.topic == y.topic && x.mode == y.mode && a.gpu_blocks == b.gpu_blocks && a.metrics_url == b.metrics_url;
}

EngineDiff DiffEngines(const ServerConfig& before, const ServerConfig& after) {
  auto find = [](const ServerConfig& c, const std::string& replica) -> const EngineEntry* {
    for (const EngineEntry& e : c.engines) {
      if (e.engine.replica == replica) return &e;
    }
    return nullptr;
  };
  EngineDiff diff;
  for (const EngineEntry& old_entry : before.engines) {
    const EngineEntry* now = find(after, old_entry.engine.replica);
    if (now == nullptr || !SameEngine(old_entry, *now)) diff.removed.push_back(old_entry.engine.replica);
  }
  for (const EngineEntry& new_entry : after.engines) {
    const EngineEntry* was = find(before, new_entry.engine.replica);
    if (was == nullptr || !SameEngine(*was, new_entry)) diff.added.push_back(new_entry);
  }
  return diff;
}

}  // namespace kvidx::server
