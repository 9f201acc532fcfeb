#include "server/admin_service.h"

#include <algorithm>

#include "base/clock.h"
#include "server/proto_convert.h"
#include "server/request_scan.h"

namespace kvidx::server {

namespace {

// Admin requests are a few names and numbers; this is generous.
constexpr uint64_t kAdminParsedBytes = 4 << 20;

// As the config file's engines[].metrics_url; long enough for any real URL.
Status CheckMetricsUrl(const std::string& u) {
  constexpr size_t kMaxUrlBytes = 2048;
  if (u.empty()) return Status::Ok();
  if (u.size() > kMaxUrlBytes) {
    return Status::InvalidArgument("engine.metrics_url: longer than " + std::to_string(kMaxUrlBytes) + " bytes");
  }
  if (u.rfind("http://", 0) != 0 && u.rfind("https://", 0) != 0) {
    return Status::InvalidArgument("engine.metrics_url: must be an http:// or https:// URL");
  }
  return Status::Ok();
}

// `st` as the call's answer, its code recorded by the call's timer.
grpc::Status Answered(RpcTimer& timer, const Status& st) {
  grpc::Status s = ToGrpc(st);
  timer.set_code(s.error_code());
  return s;
}

}  // namespace

Result<EngineEntry> EngineFromSpec(const v1::EngineSpec& spec) {
  EngineEntry e;
  if (spec.replica().empty()) return Status::InvalidArgument("engine.replica: required");
  if (spec.model().empty()) return Status::InvalidArgument("engine.model: required");
  if (spec.endpoint().empty()) return Status::InvalidArgument("engine.endpoint: required");
  if (spec.dp_size() > 256) return Status::InvalidArgument("engine.dp_size: must be in [1, 256]");
  e.engine.replica = spec.replica();
  e.engine.model = spec.model();
  e.engine.endpoint = spec.endpoint();
  e.engine.replay_endpoint = spec.replay_endpoint();
  e.engine.data_parallel_size = spec.dp_size() == 0 ? 1 : spec.dp_size();
  if (spec.has_topic()) e.engine.topic = spec.topic();
  if (spec.mode().empty() || spec.mode() == "connect") {
    e.engine.mode = ingest::ConnectMode::kConnect;
  } else if (spec.mode() == "bind") {
    e.engine.mode = ingest::ConnectMode::kBind;
  } else {
    return Status::InvalidArgument("engine.mode: \"" + spec.mode() + "\" is not connect or bind");
  }
  e.gpu_blocks = spec.gpu_blocks();
  if (Status s = CheckMetricsUrl(spec.metrics_url()); !s.ok()) return s;
  e.metrics_url = spec.metrics_url();
  return e;
}

AdminService::AdminService(Node* node, AdminAuth auth, RpcMetrics* metrics, SnapshotFn snapshot)
    : node_(node), auth_(std::move(auth)), metrics_(metrics), snapshot_(std::move(snapshot)) {
  // Indexes are the methods' order in kvidx.proto. Streamed unary keeps the
  // synchronous threads (AddEngine and snapshots block) while the handler
  // sees the raw bytes.
  MarkMethodStreamed(0, Scanned(RpcMethod::kAddEngine, &AdminService::AddEngine));
  MarkMethodStreamed(1, Scanned(RpcMethod::kRemoveEngine, &AdminService::RemoveEngine));
  MarkMethodStreamed(2, Scanned(RpcMethod::kListSources, &AdminService::ListSources));
  MarkMethodStreamed(3, Scanned(RpcMethod::kTriggerSnapshot, &AdminService::TriggerSnapshot));
  MarkMethodStreamed(4, Scanned(RpcMethod::kResync, &AdminService::Resync));
  MarkMethodStreamed(5, Scanned(RpcMethod::kAdvanceClock, &AdminService::AdvanceClock));
  MarkMethodStreamed(6, Scanned(RpcMethod::kScrapeLoads, &AdminService::ScrapeLoads));
}

template <class Req, class Resp>
grpc::internal::MethodHandler* AdminService::Scanned(
    RpcMethod method, grpc::Status (AdminService::*fn)(grpc::ServerContext*, const Req*, Resp*)) {
  using Stream = grpc::ServerUnaryStreamer<grpc::ByteBuffer, grpc::ByteBuffer>;
  return new grpc::internal::StreamedUnaryHandler<grpc::ByteBuffer, grpc::ByteBuffer>(
      [this, method, fn](grpc::ServerContext* ctx, Stream* stream) -> grpc::Status {
        Req req;
        grpc::Status s = CheckCredentials(*ctx, auth_);
        if (s.ok()) {
          grpc::ByteBuffer in;
          s = stream->Read(&in) ? ParseRequest(in, {kAdminParsedBytes, {}, nullptr}, &req)
                                : grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "request: no message");
        }
        if (!s.ok()) {
          metrics_->Record(method, s.error_code(), std::chrono::nanoseconds(0));
          return s;
        }
        Resp resp;
        if (s = (this->*fn)(ctx, &req, &resp); !s.ok()) return s;
        grpc::ByteBuffer out;
        if (s = SerializeResponse(resp, &out); !s.ok()) return s;
        stream->Write(out);
        return grpc::Status::OK;
      });
}

#define KVIDX_ADMIN_PROLOGUE(method)                             \
  RpcTimer timer(metrics_, method);                              \
  if (grpc::Status a = CheckCredentials(*ctx, auth_); !a.ok()) { \
    timer.set_code(a.error_code());                              \
    return a;                                                    \
  }

grpc::Status AdminService::AddEngine(grpc::ServerContext* ctx, const v1::AddEngineRequest* req,
                                     v1::AddEngineResponse* resp) {
  KVIDX_ADMIN_PROLOGUE(RpcMethod::kAddEngine);
  Result<EngineEntry> e = EngineFromSpec(req->engine());
  if (!e.ok()) {
    timer.set_code(grpc::StatusCode::INVALID_ARGUMENT);
    return ToGrpc(e.status());
  }
  Result<std::vector<std::string>> names = node_->AddEngine(e.value());
  if (!names.ok()) return Answered(timer, names.status());
  for (const std::string& n : names.value()) resp->add_sources(n);
  return grpc::Status::OK;
}

grpc::Status AdminService::RemoveEngine(grpc::ServerContext* ctx, const v1::RemoveEngineRequest* req,
                                        v1::RemoveEngineResponse*) {
  KVIDX_ADMIN_PROLOGUE(RpcMethod::kRemoveEngine);
  if (req->replica().empty()) {
    timer.set_code(grpc::StatusCode::INVALID_ARGUMENT);
    return {grpc::StatusCode::INVALID_ARGUMENT, "replica: required"};
  }
  return Answered(timer, node_->RemoveEngine(req->replica()));
}

grpc::Status AdminService::ListSources(grpc::ServerContext* ctx, const v1::ListSourcesRequest*,
                                       v1::ListSourcesResponse* resp) {
  KVIDX_ADMIN_PROLOGUE(RpcMethod::kListSources);
  std::vector<ingest::SourceStatus> sources = node_->ingester().ListSources();
  std::sort(sources.begin(), sources.end(), [](const auto& a, const auto& b) { return a.spec.name < b.spec.name; });
  const double now = WallSeconds();
  for (const ingest::SourceStatus& s : sources) {
    v1::SourceInfo* si = resp->add_sources();
    si->set_source(s.spec.name);
    si->set_replica(s.spec.replica);
    si->set_dp_rank(s.spec.dp_rank);
    si->set_model(s.spec.model);
    si->set_state(ToProto(s.state));
    si->set_has_seq(s.last_seq >= 0);
    si->set_last_seq(s.last_seq >= 0 ? static_cast<uint64_t>(s.last_seq) : 0);
    si->set_endpoint(s.endpoint);
    si->set_replay_endpoint(s.spec.replay_endpoint);
    si->set_lag_seconds(-1);
    if (s.stats) {
      const ingest::SourceStats& st = *s.stats;
      si->set_batches(st.batches.load());
      uint64_t ev = 0;
      for (const auto& e : st.events) ev += e.load();
      si->set_events(ev);
      si->set_gaps(st.seq_gaps.load());
      si->set_batches_replayed(st.batches_replayed.load());
      si->set_batches_lost(st.batches_lost.load());
      si->set_duplicates(st.duplicate_batches.load());
      si->set_restarts(st.engine_restarts.load());
      si->set_decode_errors(st.decode_error_total());
      const double ts = st.last_batch_ts.load();
      if (ts > 0) si->set_lag_seconds(std::max(0.0, now - ts));
    }
  }
  return grpc::Status::OK;
}

grpc::Status AdminService::TriggerSnapshot(grpc::ServerContext* ctx, const v1::TriggerSnapshotRequest*,
                                           v1::TriggerSnapshotResponse* resp) {
  KVIDX_ADMIN_PROLOGUE(RpcMethod::kTriggerSnapshot);
  Result<SnapshotOutcome> out = snapshot_();
  if (!out.ok()) return Answered(timer, out.status());
  resp->set_generation(out->generation);
  resp->set_bytes(out->bytes);
  resp->set_duration_seconds(out->duration_seconds);
  resp->set_owners(out->owners);
  return grpc::Status::OK;
}

grpc::Status AdminService::Resync(grpc::ServerContext* ctx, const v1::ResyncRequest* req, v1::ResyncResponse*) {
  KVIDX_ADMIN_PROLOGUE(RpcMethod::kResync);
  if (req->source().empty()) {
    timer.set_code(grpc::StatusCode::INVALID_ARGUMENT);
    return {grpc::StatusCode::INVALID_ARGUMENT, "source: required"};
  }
  return Answered(timer, node_->Resync(req->source()));
}

grpc::Status AdminService::AdvanceClock(grpc::ServerContext* ctx, const v1::AdvanceClockRequest* req,
                                        v1::AdvanceClockResponse* resp) {
  KVIDX_ADMIN_PROLOGUE(RpcMethod::kAdvanceClock);
  Result<uint64_t> now = node_->route_clock().Advance(req->by_us());
  if (!now.ok()) return Answered(timer, now.status());
  resp->set_now_us(*now);
  return grpc::Status::OK;
}

grpc::Status AdminService::ScrapeLoads(grpc::ServerContext* ctx, const v1::ScrapeLoadsRequest*,
                                       v1::ScrapeLoadsResponse* resp) {
  KVIDX_ADMIN_PROLOGUE(RpcMethod::kScrapeLoads);
  Result<ingest::LoadScraper::Round> round = node_->ScrapeLoads();
  if (!round.ok()) return Answered(timer, round.status());
  resp->set_targets(round->targets);
  resp->set_failed(round->failed);
  return grpc::Status::OK;
}

#undef KVIDX_ADMIN_PROLOGUE

}  // namespace kvidx::server
