#include "client/client.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

namespace kvidx::client {

namespace {

// Large batches and long token prompts (up to the server's own limits) must
// not be refused by the client before the server can judge them.
constexpr int kMaxMessageBytes = 64 << 20;
// Keepalive lets a long-lived router notice a dead connection (e.g. a
// silently dropped NAT entry) without waiting for a call to time out. Pings
// only while calls are in flight: the server's default policy punishes idle
// pings (GOAWAY too_many_pings).
constexpr int kKeepaliveTimeMs = 30'000;
constexpr int kKeepaliveTimeoutMs = 10'000;

Result<std::string> ReadFile(const std::string& what, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    std::string msg = "cannot read " + what + " '" + path + "': " + std::strerror(err);
    return err == ENOENT ? Status::NotFound(std::move(msg)) : Status::Unavailable(std::move(msg));
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Status::Unavailable("cannot read " + what + " '" + path + "'");
  return ss.str();
}

}  // namespace

Result<std::string> ReadTokenFile(const std::string& path) {
  Result<std::string> text = ReadFile("token file", path);
  if (!text.ok()) return text.status();
  std::string_view s = *text;
  if (const size_t nl = s.find('\n'); nl != std::string_view::npos) s = s.substr(0, nl);
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string_view::npos) return Status::InvalidArgument("token file '" + path + "' is empty");
  s = s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
  return std::string(s);
}

Result<std::unique_ptr<Client>> Client::Create(const ClientOptions& options) {
  if (options.target.empty()) return Status::InvalidArgument("target is empty");
  if (!options.tls && (!options.ca_file.empty() || !options.cert_file.empty() || !options.key_file.empty())) {
    return Status::InvalidArgument("ca_file, cert_file and key_file require tls");
  }
  if (options.cert_file.empty() != options.key_file.empty()) {
    return Status::InvalidArgument("cert_file and key_file must be given together");
  }

  std::shared_ptr<grpc::ChannelCredentials> creds;
  grpc::ChannelArguments args;
  if (options.tls) {
    grpc::SslCredentialsOptions ssl;
    if (!options.ca_file.empty()) {
      Result<std::string> ca = ReadFile("ca_file", options.ca_file);
      if (!ca.ok()) return ca.status();
      ssl.pem_root_certs = std::move(*ca);
    }
    if (!options.cert_file.empty()) {
      Result<std::string> cert = ReadFile("cert_file", options.cert_file);
      if (!cert.ok()) return cert.status();
      Result<std::string> key = ReadFile("key_file", options.key_file);
      if (!key.ok()) return key.status();
      ssl.pem_cert_chain = std::move(*cert);
      ssl.pem_private_key = std::move(*key);
    }
    creds = grpc::SslCredentials(ssl);
    if (!options.server_name_override.empty()) {
      args.SetSslTargetNameOverride(options.server_name_override);
    }
  } else {
    creds = grpc::InsecureChannelCredentials();
  }
  if (!creds) return Status::InvalidArgument("cannot create TLS credentials");

  if (!options.lb_policy.empty()) args.SetLoadBalancingPolicyName(options.lb_policy);
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, kKeepaliveTimeMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kKeepaliveTimeoutMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 0);
  // Only the backoff between attempts: GRPC_ARG_MIN_RECONNECT_BACKOFF_MS
  // would also shorten each connection attempt's own timeout (20 s), and a
  // slow handshake would then never complete.
  if (options.reconnect_backoff_initial.count() > 0) {
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, static_cast<int>(options.reconnect_backoff_initial.count()));
  }
  if (options.reconnect_backoff_max.count() > 0) {
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, static_cast<int>(options.reconnect_backoff_max.count()));
  }

  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(options.target, creds, args);
  if (!channel) return Status::InvalidArgument("cannot create a channel to '" + options.target + "'");
  return std::unique_ptr<Client>(new Client(options, std::move(channel)));
}

Client::Client(ClientOptions options, std::shared_ptr<grpc::Channel> channel)
    : options_(std::move(options)),
      channel_(std::move(channel)),
      index_(v1::KvIndex::NewStub(channel_)),
      admin_(v1::KvIndexAdmin::NewStub(channel_)) {}

void Client::Prepare(grpc::ClientContext* context, bool admin) const {
  if (options_.deadline.count() > 0) {
    context->set_deadline(std::chrono::system_clock::now() + options_.deadline);
  }
  if ((admin || options_.token_on_reads) && !options_.admin_token.empty()) {
    context->AddMetadata("authorization", "Bearer " + options_.admin_token);
  }
}

grpc::Status Client::FindPrefix(const v1::FindPrefixRequest& request, v1::FindPrefixResponse* response) const {
  grpc::ClientContext context;
  Prepare(&context, false);
  return index_->FindPrefix(&context, request, response);
}

grpc::Status Client::FindPrefixTokens(const std::string& model, std::span<const int64_t> tokens,
                                      const TokenOptions& token_options,
                                      v1::FindPrefixResponse* response) const {
  v1::FindPrefixRequest request;
  request.set_model(model);
  v1::TokenPrompt* prompt = request.mutable_tokens();
  prompt->mutable_token_ids()->Add(tokens.begin(), tokens.end());
  if (token_options.lora_name) prompt->set_lora_name(*token_options.lora_name);
  prompt->set_cache_salt(token_options.cache_salt);
  return FindPrefix(request, response);
}

grpc::Status Client::FindPrefixHashes(const std::string& model, std::span<const uint64_t> hashes,
                                      v1::FindPrefixResponse* response) const {
  v1::FindPrefixRequest request;
  request.set_model(model);
  request.mutable_hashes()->mutable_u64()->Add(hashes.begin(), hashes.end());
  return FindPrefix(request, response);
}

grpc::Status Client::Route(const v1::RouteRequest& request, v1::RouteResponse* response) const {
  grpc::ClientContext context;
  Prepare(&context, false);
  return index_->Route(&context, request, response);
}

grpc::Status Client::Tokenize(const v1::TokenizeRequest& request, v1::TokenizeResponse* response) const {
  grpc::ClientContext context;
  Prepare(&context, false);
  return index_->Tokenize(&context, request, response);
}

grpc::Status Client::RouteDone(const v1::RouteDoneRequest& request, v1::RouteDoneResponse* response) const {
  grpc::ClientContext context;
  Prepare(&context, false);
  return index_->RouteDone(&context, request, response);
}

grpc::Status Client::FindPrefixBatch(const v1::FindPrefixBatchRequest& request,
                                     v1::FindPrefixBatchResponse* response) const {
  grpc::ClientContext context;
  Prepare(&context, false);
  return index_->FindPrefixBatch(&context, request, response);
}

grpc::Status Client::ListReplicas(const v1::ListReplicasRequest& request,
                                  v1::ListReplicasResponse* response) const {
  grpc::ClientContext context;
  Prepare(&context, false);
  return index_->ListReplicas(&context, request, response);
}

grpc::Status Client::GetStats(v1::GetStatsResponse* response) const {
  grpc::ClientContext context;
  Prepare(&context, false);
  return index_->GetStats(&context, v1::GetStatsRequest(), response);
}

grpc::Status Client::GetBlock(const v1::GetBlockRequest& request, v1::GetBlockResponse* response) const {
  grpc::ClientContext context;
  Prepare(&context, false);
  return index_->GetBlock(&context, request, response);
}

grpc::Status Client::AddEngine(const v1::AddEngineRequest& request, v1::AddEngineResponse* response) const {
  grpc::ClientContext context;
  Prepare(&context, true);
  return admin_->AddEngine(&context, request, response);
}

grpc::Status Client::RemoveEngine(const std::string& replica) const {
  grpc::ClientContext context;
  Prepare(&context, true);
  v1::RemoveEngineRequest request;
  request.set_replica(replica);
  v1::RemoveEngineResponse response;
  return admin_->RemoveEngine(&context, request, &response);
}

grpc::Status Client::ListSources(v1::ListSourcesResponse* response) const {
  grpc::ClientContext context;
  Prepare(&context, true);
  return admin_->ListSources(&context, v1::ListSourcesRequest(), response);
}

grpc::Status Client::TriggerSnapshot(v1::TriggerSnapshotResponse* response) const {
  grpc::ClientContext context;
  Prepare(&context, true);
  return admin_->TriggerSnapshot(&context, v1::TriggerSnapshotRequest(), response);
}

grpc::Status Client::Resync(const std::string& source) const {
  grpc::ClientContext context;
  Prepare(&context, true);
  v1::ResyncRequest request;
  request.set_source(source);
  v1::ResyncResponse response;
  return admin_->Resync(&context, request, &response);
}

grpc::Status Client::AdvanceClock(uint64_t by_us, uint64_t* now_us) const {
  grpc::ClientContext context;
  Prepare(&context, true);
  v1::AdvanceClockRequest request;
  request.set_by_us(by_us);
  v1::AdvanceClockResponse response;
  grpc::Status s = admin_->AdvanceClock(&context, request, &response);
  if (s.ok() && now_us != nullptr) *now_us = response.now_us();
  return s;
}

grpc::Status Client::ScrapeLoads(v1::ScrapeLoadsResponse* response) const {
  grpc::ClientContext context;
  Prepare(&context, true);
  return admin_->ScrapeLoads(&context, v1::ScrapeLoadsRequest(), response);
}

}  // namespace kvidx::client
