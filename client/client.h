// Client: the C++ client of the kvidx.v1 API, for routers and the CLI.
//
// One Client owns one gRPC channel, created once and reused by every call, so
// the TCP/TLS connection and its HTTP/2 streams are shared; the channel
// reconnects by itself when the server comes back. Create() does not connect:
// an unreachable server shows up on the first call as UNAVAILABLE (calls do
// not wait for the channel to become ready, so a router fails fast and can
// route without the index).
//
// Every call carries the configured deadline (now + options.deadline). Admin
// calls (KvIndexAdmin) carry "authorization: Bearer <admin_token>" when a
// token is set; with mTLS the client certificate authenticates them instead.
//
// Errors: each call returns the grpc::Status the server (or the channel)
// produced, with the server's code and message unchanged; the response is
// only meaningful when the status is OK. The codes are listed in
// proto/kvidx/v1/kvidx.proto. Create() returns a kvidx::Status for bad options
// or unreadable PEM files. Nothing throws.
//
// Thread-safety: a Client is immutable after Create(); all methods are const
// and may be called concurrently from any number of threads (gRPC channels and
// stubs are thread-safe). Share one Client per process rather than creating
// one per request. Output messages are owned by the caller and must not be
// shared between concurrent calls.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include <grpcpp/grpcpp.h>

#include "base/status.h"
#include "kvidx/v1/kvidx.grpc.pb.h"

namespace kvidx::client {

struct ClientOptions {
  // gRPC target: "host:port", "dns:///host:port", "unix:/path", ...
  std::string target = "127.0.0.1:50051";
  bool tls = false;
  // PEM files, read once by Create(). All require tls. ca_file: roots to
  // verify the server (empty = the system roots). cert_file + key_file: the
  // client certificate for mTLS (give both or neither).
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
  // Expected server name in its certificate, when it differs from the
  // target's host (tests with self-signed certificates).
  std::string server_name_override;
  // Sent as "authorization: Bearer <admin_token>" on admin calls only, so the
  // token never travels with routine queries. Empty = none.
  std::string admin_token;
  // Send the token on query calls too: for a server with
  // grpc.require_auth_for_reads, whose reads need the admin credential.
  bool token_on_reads = false;
  // Per-call deadline; zero or negative = no deadline (not recommended for
  // routers: a stuck server would stall the request path).
  std::chrono::milliseconds deadline{2000};
  // gRPC load-balancing policy. "round_robin" with a "dns:///" target that
  // resolves to several kvidx replicas (a headless Service) spreads calls
  // over all of them; "" = gRPC's default (pick_first: one replica).
  std::string lb_policy;
  // Reconnect backoff after a lost connection: starts at the initial value,
  // grows to the maximum. gRPC's defaults (1 s .. 120 s) leave a router
  // without answers for seconds after a kvidx restart; a router that falls
  // back to load-only routing meanwhile wants to be back quickly.
  std::chrono::milliseconds reconnect_backoff_initial{100};
  std::chrono::milliseconds reconnect_backoff_max{2000};
};

// Optional parts of a token prompt (TokenPrompt in the proto).
struct TokenOptions {
  std::optional<std::string> lora_name;
  std::string cache_salt;
};

// Reads an admin token file: its first line, surrounding whitespace removed.
// NotFound / Unavailable if unreadable, InvalidArgument if empty.
Result<std::string> ReadTokenFile(const std::string& path);

class Client {
 public:
  static Result<std::unique_ptr<Client>> Create(const ClientOptions& options);
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const ClientOptions& options() const { return options_; }
  // The shared channel (e.g. for grpc.health.v1 checks or connectivity state).
  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }

  // --- KvIndex ---
  grpc::Status FindPrefix(const v1::FindPrefixRequest& request, v1::FindPrefixResponse* response) const;
  // A token prompt of `model` (the server hashes it with the model's hasher).
  grpc::Status FindPrefixTokens(const std::string& model, std::span<const int64_t> tokens,
                                const TokenOptions& token_options, v1::FindPrefixResponse* response) const;
  // Block hashes in the integer form engines publish by default.
  grpc::Status FindPrefixHashes(const std::string& model, std::span<const uint64_t> hashes,
                                v1::FindPrefixResponse* response) const;
  grpc::Status FindPrefixBatch(const v1::FindPrefixBatchRequest& request,
                               v1::FindPrefixBatchResponse* response) const;
  grpc::Status ListReplicas(const v1::ListReplicasRequest& request, v1::ListReplicasResponse* response) const;
  grpc::Status GetStats(v1::GetStatsResponse* response) const;
  grpc::Status GetBlock(const v1::GetBlockRequest& request, v1::GetBlockResponse* response) const;
  // Where to send a request (docs/ROUTING.md); report its end with RouteDone.
  grpc::Status Route(const v1::RouteRequest& request, v1::RouteResponse* response) const;
  grpc::Status RouteDone(const v1::RouteDoneRequest& request, v1::RouteDoneResponse* response) const;
  // A text prompt's token ids as the server computes them (the model needs
  // a tokenizer).
  grpc::Status Tokenize(const v1::TokenizeRequest& request, v1::TokenizeResponse* response) const;

  // --- KvIndexAdmin (credentials required: token or mTLS) ---
  grpc::Status AddEngine(const v1::AddEngineRequest& request, v1::AddEngineResponse* response) const;
  grpc::Status RemoveEngine(const std::string& replica) const;
  grpc::Status ListSources(v1::ListSourcesResponse* response) const;
  grpc::Status TriggerSnapshot(v1::TriggerSnapshotResponse* response) const;
  // `source` is "<replica>/dp<rank>" or a replica name (all its ranks).
  grpc::Status Resync(const std::string& source) const;
  // A server with routing.clock: simulated (simulators): moves Route's clock
  // forward by `by_us` (0 reads it); `now_us` gets the simulated
  // microseconds since the server started. ScrapeLoads scrapes every
  // engine's /metrics now. FAILED_PRECONDITION on a wall-clock server.
  grpc::Status AdvanceClock(uint64_t by_us, uint64_t* now_us) const;
  grpc::Status ScrapeLoads(v1::ScrapeLoadsResponse* response) const;

 private:
  Client(ClientOptions options, std::shared_ptr<grpc::Channel> channel);
  // A context with the deadline and, for admin calls, the bearer token.
  void Prepare(grpc::ClientContext* context, bool admin) const;

  const ClientOptions options_;
  const std::shared_ptr<grpc::Channel> channel_;
  const std::unique_ptr<v1::KvIndex::Stub> index_;
  const std::unique_ptr<v1::KvIndexAdmin::Stub> admin_;
};

}  // namespace kvidx::client
