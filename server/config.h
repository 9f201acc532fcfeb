// ServerConfig: everything kvidx-server reads from its YAML file.
//
// Every setting has an embedded default, so an empty file (or no file) is a
// valid configuration: a local service on 127.0.0.1 with no engines. The
// schema is documented in docs/CONFIG.md; the defaults are the initialisers
// below.
//
// Parsing is strict: an unknown key, a value of the wrong type or out of
// range is an error whose message names the key path and the line, e.g.
//   config.yaml:7: engines[1].dp_size: expected an integer in [1, 256], got "two"
// so an operator's typo never silently becomes a default.
//
// Value types; thread-compatible. Errors are Status values (InvalidArgument
// for bad contents, NotFound / Unavailable for an unreadable file).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "index/block_index.h"
#include "ingest/ingest_options.h"
#include "ingest/source_config.h"
#include "server/route_policy.h"

namespace kvidx::server {

struct TlsConfig {
  // PEM files. cert+key enable TLS; ca adds client-certificate checking.
  std::string cert_file;
  std::string key_file;
  std::string client_ca_file;
  // With client_ca_file: reject clients without a valid certificate (mTLS).
  // false = request but do not require (admin still needs a cert or token).
  bool require_client_cert = true;
  bool enabled() const { return !cert_file.empty(); }
};

struct GrpcConfig {
  std::string listen = "127.0.0.1:50051";
  TlsConfig tls;
  // File holding the admin bearer token (one line). Empty = admin RPCs only
  // with an mTLS client identity (or refused, without mTLS).
  std::string admin_token_file;
  // Queries (kvidx.v1.KvIndex) need the admin credential too: the token or
  // an mTLS client certificate (so one of them must be configured), and
  // server reflection is off. Health stays public for probes.
  bool require_auth_for_reads = false;
  // Limits. Over a limit: RESOURCE_EXHAUSTED naming the limit.
  uint32_t max_message_bytes = 16 << 20;
  uint32_t max_query_tokens = 1 << 20;     // token ids per query
  uint32_t max_query_hashes = 1 << 16;     // block hashes per query
  uint32_t max_query_text_bytes = 8 << 20; // prompt text or chat request bytes per query
  uint32_t max_batch_queries = 1024;       // queries per FindPrefixBatch
  uint32_t max_concurrent_streams = 1024;  // per connection (HTTP/2 setting)
  // FindPrefixStream calls open at once over all connections.
  uint32_t max_open_streams = 1024;
  // Threads for the synchronous methods (all but the FindPrefix forms), each
  // busy for one call or open reflection stream; over it: RESOURCE_EXHAUSTED.
  uint32_t max_threads = 64;
  // Close each client connection after this long (0 = never), so routers
  // re-resolve DNS and spread over kvidx replicas added by a scale-up.
  uint32_t max_connection_age_ms = 0;
};

struct MetricsConfig {
  // host:port for the Prometheus /metrics endpoint; empty disables it.
  std::string listen = "127.0.0.1:9464";
  // HTTP worker threads: each serves one connection at a time, so this many
  // slow or stalled clients can hold the endpoint until request_timeout_ms.
  uint32_t threads = 8;
  // A client must send its whole request within this long, or is dropped.
  uint32_t request_timeout_ms = 5000;
  // File holding "user:password" (one line): every scrape must send it as
  // HTTP basic auth (Prometheus' basic_auth), else 401. "" = open.
  std::string basic_auth_file;
};

struct SnapshotConfig {
  // Take a snapshot every N seconds (0 = never on a timer).
  uint32_t interval_seconds = 30;
  // ... and/or every M applied batches (0 = never by count).
  uint64_t every_batches = 0;
  // Snapshot on graceful shutdown (SIGTERM/SIGINT).
  bool on_shutdown = true;
  // fsync snapshot files (crash safety needs it; tests may turn it off).
  bool sync = true;
};

enum class OnCorruptData : uint8_t { kFail, kStartEmpty };

struct ModelConfig {
  std::string name;
  std::string hash_algo = "sha256";       // sha256 | sha256_cbor | xxhash | xxhash_cbor
  std::optional<std::string> hash_seed;   // the engines' PYTHONHASHSEED; null = unset
  uint32_t block_size = 16;               // vLLM hash_block_size
  // How the model's engines publish block hashes (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES).
  bool int_block_hashes = true;
  uint32_t max_query_blocks = 8192;
  bool index_all_groups = false;
  // Route's policy for this model (docs/ROUTING.md); SIGHUP reloads it.
  RoutePolicy route;
  // A Hugging Face model directory (tokenizer.json, tokenizer_config.json,
  // optional chat_template.jinja): queries may then carry text or chat
  // messages. "" = token ids and hashes only.
  std::string tokenizer;
  // A Jinja2 file replacing the directory's chat template (vLLM's
  // --chat-template). "" = the directory's own.
  std::string chat_template;
};

struct EngineEntry {
  ingest::EngineConfig engine;
  uint64_t gpu_blocks = 0;  // vLLM num_gpu_blocks per rank; 0 = unknown
  std::string metrics_url;  // the engine's Prometheus /metrics (http or https); "" = not scraped
};

// Route's engine-load signal (docs/ROUTING.md).
struct RoutingConfig {
  uint32_t scrape_interval_ms = 1000;
  uint32_t scrape_timeout_ms = 500;
  // A reading older than this no longer counts; from twice the interval it
  // fades linearly to nothing here.
  uint32_t stale_after_ms = 5000;
  // Route's clock (server/route_clock.h): false = wall time; true = moved
  // only by the AdvanceClock admin call, engines scraped only by
  // ScrapeLoads (simulators).
  bool simulated_clock = false;
};

struct LogConfig {
  std::string level = "info";   // trace | debug | info | warn | error | critical | off
  bool json = false;            // one JSON object per line
};

struct IngestConfig {
  uint32_t threads = 1;
  std::string topic_template;   // e.g. "kv@{replica}@{model}"
  uint32_t replay_timeout_ms = 2000;
  uint32_t replay_max_retries = 3;
  uint32_t heartbeat_ivl_ms = 1000;
  uint32_t heartbeat_timeout_ms = 5000;
  int32_t sub_rcvhwm = 1'000'000;
  // A removed source's id may name a new (replica, DP rank) after this
  // long (SourceRegistry).
  uint32_t source_id_reuse_after_s = 900;
};

// One discovery provider (docs/CONFIG.md "discovery"): engines of one model
// found by re-resolving a DNS name, added and removed while kvidx runs.
struct DnsProviderConfig {
  std::string name;   // the provider, unique; the `provider` metric label
  std::string model;  // every engine it finds serves this model
  // Exactly one of srv / host. SRV: one engine per record, replica = target,
  // PUB port = the record's port. host: one engine per A/AAAA address,
  // replica = the address, PUB port = events_port.
  std::string srv;
  std::string host;
  uint32_t events_port = 0;   // host mode only (required there)
  uint32_t replay_port = 0;   // 0 = the engines have no replay endpoint
  uint32_t metrics_port = 0;  // 0 = their /metrics is not scraped
  uint32_t data_parallel_size = 1;
  // Re-resolve after min(interval, smallest record TTL), never sooner than
  // min_interval (a TTL of 0 must not become a busy loop).
  uint32_t interval_ms = 30'000;
  uint32_t min_interval_ms = 1'000;
  // An engine missing from DNS keeps its sources this long before removal.
  uint32_t grace_ms = 30'000;
  // One query's deadline (c-ares timeout, tried twice).
  uint32_t timeout_ms = 5'000;
  // host:port of the DNS server; "" = the system's (resolv.conf).
  std::string nameserver;
};

// A port of a discovered engine: a port name the EndpointSlice lists (the
// Service's port name, e.g. "kv-events"), or a fixed number. Neither = none.
struct PortRef {
  std::string name;
  uint32_t number = 0;
  bool empty() const { return name.empty() && number == 0; }
};

// A Kubernetes provider (docs/CONFIG.md "discovery"): the engines behind one
// Service, followed by list + watch of its EndpointSlices
// (discovery.k8s.io/v1, label kubernetes.io/service-name=<service>) in one
// namespace -- or the Pods a label selector picks. Replica = the pod's name
// (an endpoint's targetRef, else its hostname).
struct KubernetesProviderConfig {
  std::string name;
  std::string model;  // Pods: the default of the kvidx.io/model annotation
  std::string namespace_name;
  // Exactly one of the two.
  std::string service;
  std::string pod_selector;  // a label selector, e.g. "app.kubernetes.io/name=vllm"
  bool pods() const { return !pod_selector.empty(); }
  PortRef events_port;   // required
  PortRef replay_port;   // empty = no replay endpoint
  PortRef metrics_port;  // empty = /metrics not scraped
  uint32_t data_parallel_size = 1;
  uint32_t grace_ms = 30'000;
  // "" = in cluster: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT.
  std::string api_server;
  // Running outside the cluster: a kubeconfig file (server/kubeconfig.h),
  // read when the config is loaded. Its context gives api_server, the CA,
  // the token (inline into `token`, or its tokenFile into token_file) and,
  // unless `namespace` is set, the namespace ("default" if it has none).
  std::string kubeconfig;
  std::string kubeconfig_context;  // "" = its current-context
  // From a kubeconfig only (never a config key): an inline bearer token,
  // used instead of token_file, and an inline CA (PEM), used instead of ca_file.
  std::string token;
  std::string ca_pem;
  std::string token_file = "/var/run/secrets/kubernetes.io/serviceaccount/token";  // re-read per request
  std::string ca_file = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";
  // Skips verifying the API server's certificate. Only when set explicitly.
  bool insecure_skip_tls_verify = false;
  // A watch asks the server to end after this long (timeoutSeconds); it is
  // then resumed from the last resourceVersion.
  uint32_t watch_timeout_seconds = 300;
  // Connect and list deadline.
  uint32_t timeout_ms = 10'000;
  // After an error: wait backoff_initial_ms, doubling up to backoff_max_ms.
  uint32_t backoff_initial_ms = 500;
  uint32_t backoff_max_ms = 30'000;
};

struct DiscoveryConfig {
  std::vector<DnsProviderConfig> providers;
  std::vector<KubernetesProviderConfig> kubernetes;
};

struct ServerConfig {
  GrpcConfig grpc;
  MetricsConfig metrics;
  std::string data_dir = "./kvidx-data";   // empty = no persistence
  OnCorruptData on_corrupt = OnCorruptData::kFail;
  // Which index core keeps the blocks (block_index.h, docs/RUN_CORE.md).
  IndexCore index_core = IndexCore::kRuns;
  SnapshotConfig snapshot;
  IngestConfig ingest;
  RoutingConfig routing;
  LogConfig log;
  std::vector<ModelConfig> models;
  std::vector<EngineEntry> engines;
  DiscoveryConfig discovery;

  const ModelConfig* FindModel(std::string_view name) const;
};

// The replicas and streams the engines present already use, for
// ValidateEngine: two engines with one replica name would share source
// names; two sources with one stream (mode, endpoint, topic) would read the
// same events, the second indexing another engine's blocks under its name.
// Values are how errors name the owner (e.g. "engines[0]").
struct EngineClaims {
  std::unordered_map<std::string, std::string> replicas;
  std::unordered_map<std::string, std::string> streams;  // key -> "<source> (<owner>)"
};

// The one check of an engine entry, for the config loader and AddEngine
// alike: its fields and endpoints (ingest::ExpandEngine: replica name
// charset and length, tcp host and port 1..65535, DP size), its model among
// `config.models`, and no replica or stream clash with `claims`. On success
// the engine's claims are added to `claims` under `owner`. Errors:
// InvalidArgument for a malformed entry, NotFound for an unknown model,
// FailedPrecondition for a clash. `field` (may be null) receives the key the
// error is about ("replica", "model", or "" for the entry as a whole).
Status ValidateEngine(const EngineEntry& engine, const ServerConfig& config, std::string_view owner,
                      EngineClaims* claims, std::string* field = nullptr);

// Parses YAML text. `origin` names the text in errors (usually the path).
// Checks cross references too: engine models exist, replica names unique,
// hash algorithms known, endpoints valid (ExpandEngine).
Result<ServerConfig> ParseConfig(std::string_view yaml, std::string_view origin = "<config>");
// Reads and parses a file.
Result<ServerConfig> LoadConfigFile(const std::string& path);

// The IngestOptions the config implies (threads, timeouts, topic template).
ingest::IngestOptions ToIngestOptions(const ServerConfig& config);

// Whether two entries define the same engine (every field equal).
bool SameEngine(const EngineEntry& a, const EngineEntry& b);

// Engines whose definition differs between two configs, for a reload:
// removed = replicas in `before` not in `after` or changed; added = replicas
// in `after` not in `before` or changed. A changed engine is removed and
// re-added (its sources cold-start).
struct EngineDiff {
  std::vector<std::string> removed;
  std::vector<EngineEntry> added;
};
EngineDiff DiffEngines(const ServerConfig& before, const ServerConfig& after);

}  // namespace kvidx::server
