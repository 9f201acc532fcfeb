// AddEngine over real gRPC runs the config loader's engine check
// (ValidateEngine): a bad endpoint, an oversized or odd replica name or a
// second engine on one stream is INVALID_ARGUMENT / FAILED_PRECONDITION with
// a short message naming the field, and leaves nothing behind. Also the
// digest lengths queries accept and the block-size mismatch counter.
#include <string>

#include "common/http_get.h"
#include "server/node.h"
#include "server_test_util.h"

namespace kvidx::server::testing {
namespace {

using kvidx::testing::HttpGet;

grpc::Status Add(const Stubs& stubs, const v1::EngineSpec& spec) {
  v1::AddEngineRequest req;
  *req.mutable_engine() = spec;
  v1::AddEngineResponse resp;
  grpc::ClientContext ctx;
  Admin(&ctx);
  return stubs.admin->AddEngine(&ctx, req, &resp);
}

v1::EngineSpec Spec(const std::string& replica, const std::string& endpoint) {
  v1::EngineSpec s;
  s.set_replica(replica);
  s.set_model(kModel);
  s.set_endpoint(endpoint);
  return s;
}

void ExpectRefused(const Stubs& stubs, const v1::EngineSpec& spec, grpc::StatusCode code, const std::string& text) {
  grpc::Status st = Add(stubs, spec);
  EXPECT_EQ(st.error_code(), code) << spec.endpoint() << ": " << st.error_message();
  EXPECT_NE(st.error_message().find(text), std::string::npos) << st.error_message();
  EXPECT_LT(st.error_message().size(), 600u) << "the message echoes the request";
}

TEST(AddEngineValidation, RefusesWhatTheConfigFileRefuses) {
  TempDir dir;
  auto r0 = MakeRank("r0");
  ServerConfig cfg = TestConfig(dir, false);
  cfg.metrics.listen = "127.0.0.1:0";
  cfg.engines.push_back(EngineFor(*r0));
  RunningServer s = StartServer(cfg);
  ASSERT_NE(s.server, nullptr);
  const std::string r0_endpoint = EngineFor(*r0).engine.endpoint;
  using C = grpc::StatusCode;

  // Was UNAVAILABLE (the ingest thread failed to connect).
  ExpectRefused(s.stubs, Spec("x", "tcp://127.0.0.1"), C::INVALID_ARGUMENT,
                "engine: engine 'x': endpoint 'tcp://127.0.0.1': expected tcp://HOST:PORT");
  // Were accepted: the source stayed CONNECTING forever.
  ExpectRefused(s.stubs, Spec("x", "tcp://127.0.0.1:0"), C::INVALID_ARGUMENT, "port must be a number in 1..65535");
  ExpectRefused(s.stubs, Spec("x", "tcp://127.0.0.1:99999"), C::INVALID_ARGUMENT,
                "port must be a number in 1..65535");
  // Was RESOURCE_EXHAUSTED: rank 1 would be port 65536.
  v1::EngineSpec wide = Spec("x", "tcp://127.0.0.1:65535");
  wide.set_dp_size(2);
  ExpectRefused(s.stubs, wide, C::INVALID_ARGUMENT, "exceeds 65535");
  v1::EngineSpec replay = Spec("x", "tcp://127.0.0.1:5000");
  replay.set_replay_endpoint("tcp://127.0.0.1");
  ExpectRefused(s.stubs, replay, C::INVALID_ARGUMENT, "replay_endpoint");
  // Was accepted and then in every metric label.
  ExpectRefused(s.stubs, Spec(std::string(1 << 20, 'r'), "tcp://127.0.0.1:5000"), C::INVALID_ARGUMENT,
                "engine.replica: replica name of 1048576 bytes exceeds 253");
  ExpectRefused(s.stubs, Spec("a b", "tcp://127.0.0.1:5000"), C::INVALID_ARGUMENT, "engine.replica:");
  // Was accepted: two sources reading one stream (the config refused it).
  ExpectRefused(s.stubs, Spec("twin", r0_endpoint), C::FAILED_PRECONDITION,
                "engine: source twin/dp0 would read the same stream as r0/dp0 (engine r0)");
  ExpectRefused(s.stubs, Spec("r0", "tcp://127.0.0.1:5000"), C::FAILED_PRECONDITION,
                "engine.replica: replica \"r0\" already exists");
  v1::EngineSpec nomodel = Spec("x", "tcp://127.0.0.1:5000");
  nomodel.set_model("nope");
  ExpectRefused(s.stubs, nomodel, C::NOT_FOUND, "engine.model:");
  // A bind that fails in ingest (the port is r0's publisher) leaves no
  // source behind either.
  v1::EngineSpec bind = Spec("binder", r0_endpoint);
  bind.set_mode("bind");
  bind.set_topic("t");
  EXPECT_FALSE(Add(s.stubs, bind).ok());

  EXPECT_EQ(s.server->node().ingester().ListSources().size(), 1u);
  const std::string metrics = HttpGet(s.server->metrics_port(), "/metrics");
  for (const char* name : {"twin", "binder", "x/dp0", "rrrr"}) {
    EXPECT_EQ(metrics.find(name), std::string::npos) << name;
  }
  EXPECT_NE(metrics.find("kvidx_block_size_mismatch_events_total 0"), std::string::npos);

  // The same stream is free again once its engine is gone.
  {
    v1::RemoveEngineRequest rm;
    rm.set_replica("r0");
    v1::RemoveEngineResponse resp;
    grpc::ClientContext ctx;
    Admin(&ctx);
    ASSERT_TRUE(s.stubs.admin->RemoveEngine(&ctx, rm, &resp).ok());
  }
  grpc::Status st = Add(s.stubs, Spec("twin", r0_endpoint));
  EXPECT_TRUE(st.ok()) << st.error_message();
}

TEST(AddEngineValidation, QueryDigestsMustHaveTheModelsDigestLength) {
  TempDir dir;
  RunningServer s = StartServer(TestConfig(dir, false));  // model m: sha256, 32-byte digests
  ASSERT_NE(s.server, nullptr);
  auto find = [&](size_t len) {
    v1::FindPrefixRequest req;
    req.set_model(kModel);
    req.mutable_hashes()->add_digest(std::string(len, 'd'));
    v1::FindPrefixResponse resp;
    grpc::ClientContext ctx;
    return s.stubs.index->FindPrefix(&ctx, req, &resp);
  };
  auto get = [&](size_t len) {
    v1::GetBlockRequest req;
    req.set_model(kModel);
    req.mutable_hash()->add_digest(std::string(len, 'd'));
    v1::GetBlockResponse resp;
    grpc::ClientContext ctx;
    return s.stubs.index->GetBlock(&ctx, req, &resp);
  };
  for (size_t ok : {32u, 64u, 1024u}) {
    EXPECT_TRUE(find(ok).ok()) << ok;
    EXPECT_EQ(get(ok).error_code(), grpc::StatusCode::NOT_FOUND) << ok;  // valid, just not held
  }
  for (size_t bad : {1u, 16u, 31u, 33u, 1056u}) {
    grpc::Status st = find(bad);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << bad;
    EXPECT_NE(st.error_message().find("is not a sha256 digest (32 bytes"), std::string::npos) << st.error_message();
    EXPECT_EQ(get(bad).error_code(), grpc::StatusCode::INVALID_ARGUMENT) << bad;
  }
}

}  // namespace
}  // namespace kvidx::server::testing
