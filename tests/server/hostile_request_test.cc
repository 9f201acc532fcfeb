// Hostile gRPC input against a real Server on loopback: raw bytes sent
// through grpc::GenericStub (malformed, oversized, amplifying shapes), long
// quoted values, and reads with grpc.require_auth_for_reads.
#include <fstream>
#include <future>

#include <grpcpp/generic/generic_stub.h>

#include "common/http_get.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "server/config.h"
#include "server_test_util.h"

namespace kvidx::server::testing {
namespace {

using kvidx::testing::HttpGet;

// The gRPC methods of kvidx.v1, unary ones (the stream is separate).
constexpr const char* kQueryMethods[] = {"FindPrefix", "FindPrefixBatch", "ListReplicas", "GetStats", "GetBlock"};
constexpr const char* kAdminMethods[] = {"AddEngine", "RemoveEngine", "ListSources", "TriggerSnapshot",
                                         "Resync",    "AdvanceClock", "ScrapeLoads"};

grpc::ByteBuffer Bytes(const std::string& s) {
  grpc::Slice slice(s);
  return grpc::ByteBuffer(&slice, 1);
}

std::string String(const grpc::ByteBuffer& b) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(b.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

// One unary call with raw request bytes; the response bytes in `out`.
grpc::Status RawCall(grpc::GenericStub* stub, const std::string& method, const std::string& request,
                     std::string* out = nullptr, const std::string& token = "") {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
  const grpc::ByteBuffer req = Bytes(request);
  grpc::ByteBuffer resp;
  std::promise<grpc::Status> done;
  stub->UnaryCall(&ctx, method, grpc::StubOptions(), &req, &resp, [&](grpc::Status s) { done.set_value(s); });
  grpc::Status s = done.get_future().get();
  if (out != nullptr && s.ok()) *out = String(resp);
  return s;
}

// A bidi call that writes `requests` raw, then reads every response until
// the server finishes; returns the final status.
grpc::Status RawStream(grpc::GenericStub* stub, const std::string& method, const std::vector<std::string>& requests,
                       std::vector<std::string>* responses, const std::string& token = "") {
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call = stub->PrepareCall(&ctx, method, &cq);
  void* tag = nullptr;
  bool ok = false;
  auto step = [&](intptr_t want) {
    EXPECT_TRUE(cq.Next(&tag, &ok));
    EXPECT_EQ(reinterpret_cast<intptr_t>(tag), want);
    return ok;
  };
  call->StartCall(reinterpret_cast<void*>(1));
  bool alive = step(1);
  for (const std::string& r : requests) {
    if (!alive) break;
    call->Write(Bytes(r), reinterpret_cast<void*>(2));
    alive = step(2);
  }
  if (alive) {
    call->WritesDone(reinterpret_cast<void*>(3));
    step(3);
  }
  for (;;) {
    grpc::ByteBuffer b;
    call->Read(&b, reinterpret_cast<void*>(4));
    if (!step(4)) break;
    responses->push_back(String(b));
  }
  grpc::Status st;
  call->Finish(&st, reinterpret_cast<void*>(5));
  step(5);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return st;
}

// Value of the exposition line `series` (name{labels}); 0 when absent
// (a counter that never moved is not exported).
double Metric(const std::string& text, const std::string& series) {
  const size_t p = text.find("\n" + series + " ");
  return p == std::string::npos ? 0 : std::stod(text.substr(p + series.size() + 2));
}

std::string Requests(const std::string& method, const std::string& code) {
  return "kvidx_grpc_requests_total{code=\"" + code + "\",method=\"" + method + "\"}";
}

// A length-delimited field `number` holding `payload`.
std::string Field(int number, const std::string& payload) {
  std::string out(1, static_cast<char>((number << 3) | 2));
  uint64_t n = payload.size();
  while (n >= 0x80) {
    out += static_cast<char>((n & 0x7f) | 0x80);
    n >>= 7;
  }
  out += static_cast<char>(n);
  return out + payload;
}

// The process's peak resident set since the last ResetPeakRss(), in bytes.
uint64_t PeakRss() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}
void ResetPeakRss() { std::ofstream("/proc/self/clear_refs") << "5"; }

TEST(HostileRequest, UnparseableRequestsGetInvalidArgumentAndAreCounted) {
  TempDir dir;
  ServerConfig cfg = TestConfig(dir, false);
  cfg.metrics.listen = "127.0.0.1:0";
  RunningServer s = StartServer(cfg);
  grpc::GenericStub stub(s.stubs.channel);
  // Field 1, length 5, 2 bytes follow: no kvidx message parses from it.
  const std::string garbage = "\x0a\x05" "ab";
  for (const char* m : kQueryMethods) {
    grpc::Status st = RawCall(&stub, std::string("/kvidx.v1.KvIndex/") + m, garbage);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << m << ": " << st.error_message();
    EXPECT_NE(st.error_message().find("not a valid kvidx.v1."), std::string::npos) << st.error_message();
  }
  for (const char* m : kAdminMethods) {
    grpc::Status st = RawCall(&stub, std::string("/kvidx.v1.KvIndexAdmin/") + m, garbage, nullptr, kToken);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << m << ": " << st.error_message();
    // Without the token the bytes are never looked at.
    st = RawCall(&stub, std::string("/kvidx.v1.KvIndexAdmin/") + m, garbage);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED) << m;
  }
  // A malformed message on a stream fails that message, not the stream.
  v1::FindPrefixRequest good;
  good.set_model(kModel);
  good.mutable_hashes()->add_u64(1);
  good.set_request_id(9);
  std::vector<std::string> results;
  ASSERT_TRUE(RawStream(&stub, "/kvidx.v1.KvIndex/FindPrefixStream", {garbage, good.SerializeAsString()}, &results)
                  .ok());
  ASSERT_EQ(results.size(), 2u);
  v1::FindPrefixResult r0, r1;
  ASSERT_TRUE(r0.ParseFromString(results[0]));
  ASSERT_TRUE(r1.ParseFromString(results[1]));
  EXPECT_EQ(r0.code(), static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT)) << r0.message();
  EXPECT_EQ(r1.code(), 0) << r1.message();
  EXPECT_EQ(r1.request_id(), 9u);

  const std::string m = HttpGet(s.server->metrics_port(), "/metrics");
  for (const char* method : kQueryMethods) EXPECT_EQ(Metric(m, Requests(method, "INVALID_ARGUMENT")), 1) << method;
  for (const char* method : kAdminMethods) {
    EXPECT_EQ(Metric(m, Requests(method, "INVALID_ARGUMENT")), 1) << method;
    EXPECT_EQ(Metric(m, Requests(method, "UNAUTHENTICATED")), 1) << method;
  }
  EXPECT_EQ(Metric(m, Requests("FindPrefixStream", "INVALID_ARGUMENT")), 1);
  EXPECT_EQ(Metric(m, Requests("FindPrefixStream", "OK")), 1);
  for (const char* code : {"UNIMPLEMENTED", "INTERNAL", "UNKNOWN"}) {
    EXPECT_EQ(m.find(std::string("code=\"") + code + "\""), std::string::npos) << code;
  }
}

TEST(HostileRequest, SixteenMiBBatchOfEmptyQueriesIsRefusedBeforeItIsParsed) {
  TempDir dir;
  RunningServer s = StartServer(TestConfig(dir, false));
  grpc::GenericStub stub(s.stubs.channel);
  // 8M empty queries: 16 MiB on the wire, ~1 GB once parsed.
  std::string batch;
  batch.reserve(16 << 20);
  for (int i = 0; i < (8 << 20); ++i) batch.append("\x0a\x00", 2);
  ResetPeakRss();
  const uint64_t before = PeakRss();
  grpc::Status st = RawCall(&stub, "/kvidx.v1.KvIndex/FindPrefixBatch", batch);
  const uint64_t grew = PeakRss() - before;
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  EXPECT_NE(st.error_message().find("more than 1024 queries exceed the limit of 1024 (grpc.max_batch_queries)"),
            std::string::npos)
      << st.error_message();
  // Client and server share this process: the request string, its slices on
  // both sides and one contiguous copy are ~64 MiB; parsing would be ~1 GB.
  EXPECT_LT(grew, uint64_t{160} << 20) << "peak RSS grew " << (grew >> 20) << " MiB";
  std::printf("16 MiB batch of empty queries: peak RSS grew %llu MiB\n",
              static_cast<unsigned long long>(grew >> 20));
}

TEST(HostileRequest, AmplifyingShapesAreRefusedByCountOrParsedSize) {
  TempDir dir;
  ServerConfig cfg = TestConfig(dir, false);
  cfg.grpc.max_message_bytes = 2 << 20;  // parsed-size budget: 4 MiB
  cfg.grpc.max_query_tokens = 1000;
  RunningServer s = StartServer(cfg);
  grpc::GenericStub stub(s.stubs.channel);
  const std::string model = Field(1, kModel);

  // 1M empty multimodal items (2 bytes each, ~150 parsed).
  std::string items;
  for (int i = 0; i < (1 << 20) - 16; ++i) items.append("\x22\x00", 2);
  grpc::Status st = RawCall(&stub, "/kvidx.v1.KvIndex/FindPrefix", model + Field(2, items));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  EXPECT_NE(st.error_message().find("once parsed"), std::string::npos) << st.error_message();

  // 1M empty replica names, and 1M unknown fields.
  std::string names, unknown;
  for (int i = 0; i < (1 << 20) - 16; ++i) {
    names.append("\x22\x00", 2);
    unknown.append("\x78\x01", 2);  // field 15, varint 1
  }
  for (const std::string& req : {model + names, model + unknown}) {
    st = RawCall(&stub, "/kvidx.v1.KvIndex/FindPrefix", req);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  }
  st = RawCall(&stub, "/kvidx.v1.KvIndex/GetStats", unknown);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();

  // Token ids are counted before they are stored, named by their limit.
  std::string ids;
  for (int i = 0; i < 1001; ++i) ids += '\x01';
  st = RawCall(&stub, "/kvidx.v1.KvIndex/FindPrefix", model + Field(2, Field(1, ids)));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  EXPECT_NE(st.error_message().find("tokens.token_ids"), std::string::npos) << st.error_message();
  EXPECT_NE(st.error_message().find("grpc.max_query_tokens"), std::string::npos) << st.error_message();

  // A few unknown fields are fine (a newer client's field).
  v1::FindPrefixRequest ok;
  ok.set_model(kModel);
  ok.mutable_hashes()->add_u64(7);
  std::string out;
  st = RawCall(&stub, "/kvidx.v1.KvIndex/FindPrefix", ok.SerializeAsString() + "\x78\x01" + Field(14, "x"), &out);
  EXPECT_TRUE(st.ok()) << st.error_message();
  v1::FindPrefixResponse resp;
  EXPECT_TRUE(resp.ParseFromString(out));
  EXPECT_EQ(resp.model(), kModel);
}

TEST(HostileRequest, BatchParsesOneQueryAtATimeAndFailsOnlyTheBadOnes) {
  TempDir dir;
  ServerConfig cfg = TestConfig(dir, false);
  cfg.grpc.max_query_tokens = 100;
  RunningServer s = StartServer(cfg);
  grpc::GenericStub stub(s.stubs.channel);
  v1::FindPrefixRequest good;
  good.set_model(kModel);
  good.mutable_hashes()->add_u64(1);
  good.set_request_id(1);
  v1::FindPrefixRequest big = good;
  big.clear_hashes();
  for (int i = 0; i < 101; ++i) big.mutable_tokens()->add_token_ids(i);
  big.set_request_id(3);
  // request_id first, then a truncated field: the id is still echoed.
  const std::string broken = std::string("\x38\x02") + "\x0a\x05" "ab";
  const std::string batch = Field(1, good.SerializeAsString()) + Field(1, broken) + Field(1, big.SerializeAsString()) +
                            "\x78\x01" + Field(1, good.SerializeAsString());
  std::string out;
  grpc::Status st = RawCall(&stub, "/kvidx.v1.KvIndex/FindPrefixBatch", batch, &out);
  ASSERT_TRUE(st.ok()) << st.error_message();
  v1::FindPrefixBatchResponse r;
  ASSERT_TRUE(r.ParseFromString(out));
  ASSERT_EQ(r.results_size(), 4);
  EXPECT_EQ(r.results(0).code(), 0);
  EXPECT_EQ(r.results(1).code(), static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
  EXPECT_EQ(r.results(1).request_id(), 2u);
  EXPECT_EQ(r.results(2).code(), static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED));
  EXPECT_NE(r.results(2).message().find("grpc.max_query_tokens"), std::string::npos) << r.results(2).message();
  EXPECT_EQ(r.results(2).request_id(), 3u);
  EXPECT_EQ(r.results(3).code(), 0);
  EXPECT_EQ(r.results(3).response().request_id(), 1u);

  // A batch whose own framing is broken fails as a whole.
  st = RawCall(&stub, "/kvidx.v1.KvIndex/FindPrefixBatch", Field(1, good.SerializeAsString()) + "\x0a\x09");
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
}

TEST(HostileRequest, LongUnknownNamesGetNotFoundWithAShortMessage) {
  TempDir dir;
  RunningServer s = StartServer(TestConfig(dir, false));
  const std::string name(8192, 'x');
  auto short_not_found = [&](const grpc::Status& st, const char* what) {
    EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND) << what << ": " << st.error_message().substr(0, 200);
    EXPECT_LT(st.error_message().size(), 256u) << what;
    EXPECT_NE(st.error_message().find("(8192 bytes)"), std::string::npos) << what << ": " << st.error_message();
  };
  v1::FindPrefixRequest q;
  q.set_model(name);
  q.mutable_hashes()->add_u64(1);
  v1::FindPrefixResponse r;
  grpc::ClientContext c1;
  short_not_found(s.stubs.index->FindPrefix(&c1, q, &r), "FindPrefix");

  v1::ListReplicasRequest lq;
  lq.set_model(name);
  v1::ListReplicasResponse lr;
  grpc::ClientContext c2;
  short_not_found(s.stubs.index->ListReplicas(&c2, lq, &lr), "ListReplicas");

  v1::GetBlockRequest gq;
  gq.set_model(name);
  gq.mutable_hash()->add_u64(1);
  v1::GetBlockResponse gr;
  grpc::ClientContext c3;
  short_not_found(s.stubs.index->GetBlock(&c3, gq, &gr), "GetBlock");

  v1::RemoveEngineRequest rq;
  rq.set_replica(name);
  v1::RemoveEngineResponse rr;
  grpc::ClientContext c4;
  Admin(&c4);
  grpc::Status st = s.stubs.admin->RemoveEngine(&c4, rq, &rr);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND) << st.error_message().substr(0, 200);
  EXPECT_LT(st.error_message().size(), 1200u);

  v1::FindPrefixBatchRequest b;
  *b.add_queries() = q;
  v1::FindPrefixBatchResponse br;
  grpc::ClientContext c5;
  ASSERT_TRUE(s.stubs.index->FindPrefixBatch(&c5, b, &br).ok());
  ASSERT_EQ(br.results_size(), 1);
  EXPECT_EQ(br.results(0).code(), static_cast<int>(grpc::StatusCode::NOT_FOUND));
  EXPECT_LT(br.results(0).message().size(), 256u);
}

// Lists services through server reflection (raw ServerReflectionInfo):
// the response bytes, or the failed status.
grpc::Status ListServices(grpc::GenericStub* stub, std::string* listing) {
  std::vector<std::string> out;
  // ServerReflectionRequest{list_services: "*"} (field 7).
  grpc::Status st =
      RawStream(stub, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", {Field(7, "*")}, &out);
  for (const std::string& o : out) *listing += o;
  return st;
}

TEST(ReadAuth, ReadsArePublicByDefaultWithReflection) {
  TempDir dir;
  RunningServer s = StartServer(TestConfig(dir, false));
  grpc::GenericStub stub(s.stubs.channel);
  v1::GetStatsRequest req;
  v1::GetStatsResponse resp;
  grpc::ClientContext ctx;
  EXPECT_TRUE(s.stubs.index->GetStats(&ctx, req, &resp).ok());
  std::string listing;
  ASSERT_TRUE(ListServices(&stub, &listing).ok());
  // Reflection shows the schema, admin included; admin calls still need
  // credentials.
  EXPECT_NE(listing.find("kvidx.v1.KvIndex"), std::string::npos);
  EXPECT_NE(listing.find("kvidx.v1.KvIndexAdmin"), std::string::npos);
}

TEST(ReadAuth, RequireAuthForReadsRefusesAnonymousReadsAndHidesReflection) {
  TempDir dir;
  ServerConfig cfg = TestConfig(dir, false);
  cfg.grpc.require_auth_for_reads = true;
  cfg.metrics.listen = "127.0.0.1:0";
  RunningServer s = StartServer(cfg);
  grpc::GenericStub stub(s.stubs.channel);
  v1::FindPrefixRequest q;
  q.set_model(kModel);
  q.mutable_hashes()->add_u64(1);
  v1::FindPrefixBatchRequest b;
  *b.add_queries() = q;
  v1::GetBlockRequest g;
  g.set_model(kModel);
  g.mutable_hash()->add_u64(1);
  const std::vector<std::pair<std::string, std::string>> calls = {
      {"FindPrefix", q.SerializeAsString()},
      {"FindPrefixBatch", b.SerializeAsString()},
      {"ListReplicas", ""},
      {"GetStats", ""},
      {"GetBlock", g.SerializeAsString()}};
  for (const auto& [method, body] : calls) {
    const std::string path = "/kvidx.v1.KvIndex/" + method;
    EXPECT_EQ(RawCall(&stub, path, body).error_code(), grpc::StatusCode::UNAUTHENTICATED) << method;
    EXPECT_EQ(RawCall(&stub, path, body, nullptr, "wrong").error_code(), grpc::StatusCode::UNAUTHENTICATED)
        << method;
    grpc::Status st = RawCall(&stub, path, body, nullptr, kToken);
    // The block is unknown: NOT_FOUND, past the credential check.
    EXPECT_TRUE(st.ok() || (method == "GetBlock" && st.error_code() == grpc::StatusCode::NOT_FOUND))
        << method << ": " << st.error_message();
  }
  std::vector<std::string> results;
  EXPECT_EQ(RawStream(&stub, "/kvidx.v1.KvIndex/FindPrefixStream", {q.SerializeAsString()}, &results).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(results.empty());
  EXPECT_TRUE(RawStream(&stub, "/kvidx.v1.KvIndex/FindPrefixStream", {q.SerializeAsString()}, &results, kToken).ok());
  EXPECT_EQ(results.size(), 1u);

  // Reflection is off; health stays public for probes.
  std::string listing;
  EXPECT_EQ(ListServices(&stub, &listing).error_code(), grpc::StatusCode::UNIMPLEMENTED);
  auto health = grpc::health::v1::Health::NewStub(s.stubs.channel);
  grpc::health::v1::HealthCheckResponse hr;
  grpc::ClientContext hctx;
  EXPECT_TRUE(health->Check(&hctx, grpc::health::v1::HealthCheckRequest(), &hr).ok());

  const std::string m = HttpGet(s.server->metrics_port(), "/metrics");
  EXPECT_EQ(Metric(m, Requests("FindPrefix", "UNAUTHENTICATED")), 2);
  EXPECT_EQ(Metric(m, Requests("FindPrefixStream", "UNAUTHENTICATED")), 1);
  EXPECT_EQ(Metric(m, Requests("GetStats", "OK")), 1);
}

TEST(ReadAuth, RequireAuthForReadsNeedsACredentialToRequire) {
  TempDir dir;
  ServerConfig cfg = TestConfig(dir, false);
  cfg.grpc.require_auth_for_reads = true;
  cfg.grpc.admin_token_file = "";
  auto server = Server::Create(cfg);
  ASSERT_TRUE(server.ok());
  Status st = server.value()->Start();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("grpc.require_auth_for_reads"), std::string::npos) << st.ToString();

  auto parsed = ParseConfig("grpc:\n  require_auth_for_reads: true\n", "c.yaml");
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.status().message().find("grpc.require_auth_for_reads"), std::string::npos)
      << parsed.status().ToString();
  parsed = ParseConfig("grpc:\n  require_auth_for_reads: true\n  admin_token_file: /t\n", "c.yaml");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_TRUE(parsed->grpc.require_auth_for_reads);
}

}  // namespace
}  // namespace kvidx::server::testing
