// client::Client against a real kvidx server fed by a FakeEngine: queries by
// hashes and tokens, the other KvIndex calls, admin calls with and without
// the token, and the error paths a router sees (unknown model, bad request,
// server down, deadline).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "client_test_util.h"

namespace kvidx::client_testing {
namespace {

using namespace std::chrono_literals;
using ingest::testing::StorePayload;

class ClientTest : public ServerFixture {};

const v1::ReplicaMatch* FindReplica(const v1::FindPrefixResponse& r, const std::string& replica) {
  for (const v1::ReplicaMatch& m : r.replicas()) {
    if (m.replica() == replica) return &m;
  }
  return nullptr;
}

TEST_F(ClientTest, FindPrefixByHashes) {
  StartServer(true, {StorePayload(1000, 4)});
  ASSERT_TRUE(WaitMatched({1000, 1001, 1002, 1003}, "r1", 4));

  v1::FindPrefixResponse r;
  const std::vector<uint64_t> partial = {1000, 1001, 9999, 1003};
  ASSERT_TRUE(client_->FindPrefixHashes(kModel, partial, &r).ok());
  EXPECT_EQ(r.model(), kModel);
  EXPECT_EQ(r.blocks_in_query(), 4u);
  ASSERT_EQ(r.replicas_size(), 1);
  EXPECT_EQ(r.replicas(0).replica(), "r1");
  EXPECT_EQ(r.replicas(0).dp_rank(), 0u);
  EXPECT_EQ(r.replicas(0).source(), "r1/dp0");
  EXPECT_EQ(r.replicas(0).matched_blocks(), 2u);  // the prefix stops at the unknown block
  EXPECT_EQ(r.replicas(0).matched_blocks_with_lower_tiers(), 2u);

  const std::vector<uint64_t> miss = {5, 1000};
  ASSERT_TRUE(client_->FindPrefixHashes(kModel, miss, &r).ok());
  EXPECT_EQ(r.replicas_size(), 0) << "nobody holds block 0";

  // The generic call with a replica filter.
  v1::FindPrefixRequest req;
  req.set_model(kModel);
  req.mutable_hashes()->add_u64(1000);
  req.add_replicas("someone-else");
  req.set_request_id(77);
  ASSERT_TRUE(client_->FindPrefix(req, &r).ok());
  EXPECT_EQ(r.replicas_size(), 0);
  EXPECT_EQ(r.request_id(), 77u);
}

TEST_F(ClientTest, RouteAndRouteDone) {
  StartServer(true, {StorePayload(1000, 4)});
  ASSERT_TRUE(WaitMatched({1000, 1001, 1002, 1003}, "r1", 4));
  v1::RouteRequest req;
  req.set_model(kModel);
  for (uint64_t h : {1000, 1001, 1002, 1003}) req.mutable_hashes()->add_u64(h);
  v1::RouteResponse r;
  ASSERT_TRUE(client_->Route(req, &r).ok());
  EXPECT_EQ(r.source(), "r1/dp0");
  EXPECT_EQ(r.reason(), v1::ROUTE_REASON_AFFINITY);
  v1::RouteDoneRequest done;
  done.set_route_id(r.route_id());
  v1::RouteDoneResponse dr;
  EXPECT_TRUE(client_->RouteDone(done, &dr).ok());
  EXPECT_EQ(client_->RouteDone(done, &dr).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(ClientTest, FindPrefixByTokens) {
  const std::vector<int64_t> prompt = Iota(100, 48);  // 3 full blocks of 16
  StartServer(true, {TokenStorePayload(prompt)});
  const std::vector<uint64_t> hashes = TokenHashes(prompt);
  ASSERT_EQ(hashes.size(), 3u);
  ASSERT_TRUE(WaitMatched(hashes, "r1", 3));
  ASSERT_TRUE(WaitSourceState("r1/dp0", v1::SOURCE_STATE_EXACT));

  // The server hashes the prompt exactly as this test (and vLLM) did.
  v1::FindPrefixRequest req;
  req.set_model(kModel);
  req.mutable_tokens()->mutable_token_ids()->Add(prompt.begin(), prompt.end());
  req.set_include_block_hashes(true);
  v1::FindPrefixResponse r;
  ASSERT_TRUE(client_->FindPrefix(req, &r).ok());
  ASSERT_EQ(r.block_hashes().u64_size(), 3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(r.block_hashes().u64(i), hashes[static_cast<size_t>(i)]) << i;

  // Read until the connect's probe replay is over: it can show the source
  // REPLAYING for an instant after the wait above saw EXACT.
  ASSERT_TRUE(WaitUntil([&] {
    if (!client_->FindPrefixTokens(kModel, prompt, {}, &r).ok()) return false;
    const v1::ReplicaMatch* x = FindReplica(r, "r1");
    return x != nullptr && x->state() == v1::SOURCE_STATE_EXACT;
  }));
  EXPECT_EQ(r.blocks_in_query(), 3u);
  EXPECT_EQ(r.block_size(), 16u);
  const v1::ReplicaMatch* m = FindReplica(r, "r1");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->matched_blocks(), 3u);
  EXPECT_EQ(m->matched_tokens(), 48u);
  EXPECT_EQ(m->state(), v1::SOURCE_STATE_EXACT);
  EXPECT_TRUE(m->has_seq());
  EXPECT_EQ(m->last_seq(), 0u);

  // A longer prompt sharing the first 2 blocks, with a partial last block.
  std::vector<int64_t> longer(prompt.begin(), prompt.begin() + 32);
  for (int64_t t = 0; t < 40; ++t) longer.push_back(9000 + t);
  ASSERT_TRUE(client_->FindPrefixTokens(kModel, longer, {}, &r).ok());
  EXPECT_EQ(r.blocks_in_query(), 4u);  // 72 tokens: 4 full blocks
  m = FindReplica(r, "r1");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->matched_blocks(), 2u);

  // A LoRA changes every block's hash, a salt block 0's: no match.
  client::TokenOptions lora;
  lora.lora_name = "adapter";
  ASSERT_TRUE(client_->FindPrefixTokens(kModel, prompt, lora, &r).ok());
  EXPECT_EQ(r.replicas_size(), 0);
  client::TokenOptions salt;
  salt.cache_salt = "tenant-a";
  ASSERT_TRUE(client_->FindPrefixTokens(kModel, prompt, salt, &r).ok());
  EXPECT_EQ(r.replicas_size(), 0);
}

TEST_F(ClientTest, BatchStatsReplicasAndBlock) {
  StartServer(true, {StorePayload(1000, 4)});
  ASSERT_TRUE(WaitMatched({1000, 1001, 1002, 1003}, "r1", 4));

  v1::FindPrefixBatchRequest batch;
  v1::FindPrefixRequest* q = batch.add_queries();
  q->set_model(kModel);
  q->mutable_hashes()->add_u64(1000);
  q->set_request_id(1);
  q = batch.add_queries();
  q->set_model("no-such-model");
  q->mutable_hashes()->add_u64(1000);
  q->set_request_id(2);
  v1::FindPrefixBatchResponse br;
  ASSERT_TRUE(client_->FindPrefixBatch(batch, &br).ok());
  ASSERT_EQ(br.results_size(), 2);
  EXPECT_EQ(br.results(0).code(), 0);
  EXPECT_EQ(br.results(0).response().replicas_size(), 1);
  EXPECT_EQ(br.results(1).code(), static_cast<int>(grpc::StatusCode::NOT_FOUND));

  v1::GetStatsResponse stats;
  ASSERT_TRUE(client_->GetStats(&stats).ok());
  EXPECT_FALSE(stats.version().empty());
  ASSERT_EQ(stats.models_size(), 1);
  EXPECT_EQ(stats.models(0).name(), kModel);
  EXPECT_EQ(stats.models(0).block_size(), 16u);
  EXPECT_EQ(stats.models(0).blocks(), 4u);
  EXPECT_GE(stats.applied_batches(), 1u);
  EXPECT_GE(stats.events(), 1u);
  EXPECT_TRUE(WaitUntil([&] { return client_->GetStats(&stats).ok() && stats.serving(); }));

  v1::ListReplicasResponse lr;
  ASSERT_TRUE(client_->ListReplicas(v1::ListReplicasRequest(), &lr).ok());
  ASSERT_EQ(lr.replicas_size(), 1);
  EXPECT_EQ(lr.replicas(0).replica(), "r1");
  EXPECT_EQ(lr.replicas(0).model(), kModel);
  ASSERT_EQ(lr.replicas(0).sources_size(), 1);
  EXPECT_EQ(lr.replicas(0).sources(0).source(), "r1/dp0");
  EXPECT_EQ(lr.replicas(0).sources(0).gpu_capacity(), 1000u);

  v1::GetBlockRequest gb;
  gb.set_model(kModel);
  gb.mutable_hash()->add_u64(1001);
  v1::GetBlockResponse owners;
  ASSERT_TRUE(client_->GetBlock(gb, &owners).ok());
  ASSERT_EQ(owners.owners_size(), 1);
  EXPECT_EQ(owners.owners(0).source(), "r1/dp0");
  EXPECT_EQ(owners.owners(0).replica(), "r1");
  EXPECT_EQ(owners.owners(0).tier(), "GPU");
  EXPECT_GE(owners.owners(0).refcount(), 1u);
}

TEST_F(ClientTest, ErrorCodes) {
  StartServer(false);
  v1::FindPrefixResponse r;
  const std::vector<uint64_t> h = {1};
  grpc::Status s = client_->FindPrefixHashes("no-such-model", h, &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
  EXPECT_NE(s.error_message().find("no-such-model"), std::string::npos) << s.error_message();

  s = client_->FindPrefixHashes("", h, &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();

  v1::FindPrefixRequest both_forms;
  both_forms.set_model(kModel);
  both_forms.mutable_hashes()->add_u64(1);
  both_forms.mutable_hashes()->add_digest(std::string(32, 'x'));
  s = client_->FindPrefix(both_forms, &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();

  v1::GetBlockRequest gb;
  gb.set_model(kModel);
  gb.mutable_hash()->add_u64(12345);
  v1::GetBlockResponse owners;
  s = client_->GetBlock(gb, &owners);
  EXPECT_TRUE(s.error_code() == grpc::StatusCode::NOT_FOUND || (s.ok() && owners.owners_size() == 0))
      << s.error_code() << " " << s.error_message();

  EXPECT_EQ(client_->RemoveEngine("nobody").error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(client_->Resync("nobody/dp0").error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(ClientTest, AdminNeedsTheToken) {
  StartServer(true, {StorePayload(1000, 2)});
  v1::ListSourcesResponse sources;

  auto anonymous = MakeClient("");
  grpc::Status s = anonymous->ListSources(&sources);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
  v1::TriggerSnapshotResponse snap;
  EXPECT_EQ(anonymous->TriggerSnapshot(&snap).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(anonymous->RemoveEngine("r1").error_code(), grpc::StatusCode::UNAUTHENTICATED);

  auto wrong = MakeClient("not-the-token");
  EXPECT_EQ(wrong->ListSources(&sources).error_code(), grpc::StatusCode::UNAUTHENTICATED);

  // Queries need no credentials.
  v1::GetStatsResponse stats;
  EXPECT_TRUE(anonymous->GetStats(&stats).ok());

  ASSERT_TRUE(client_->ListSources(&sources).ok());
  ASSERT_EQ(sources.sources_size(), 1);
  EXPECT_EQ(sources.sources(0).source(), "r1/dp0");
  EXPECT_EQ(sources.sources(0).replica(), "r1");
  EXPECT_EQ(sources.sources(0).model(), kModel);
  ASSERT_TRUE(WaitSourceState("r1/dp0", v1::SOURCE_STATE_EXACT));
}

TEST_F(ClientTest, TokenOnReadsForAServerThatRequiresIt) {
  require_auth_for_reads_ = true;
  StartServer(false);
  v1::GetStatsResponse stats;
  // client_ holds the token but sends it on admin calls only.
  EXPECT_EQ(client_->GetStats(&stats).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  auto reader = MakeClient(kToken, std::chrono::milliseconds(5000), /*token_on_reads=*/true);
  EXPECT_TRUE(reader->GetStats(&stats).ok());
  v1::ListSourcesResponse sources;
  EXPECT_TRUE(reader->ListSources(&sources).ok());
}

TEST_F(ClientTest, AddRemoveEngineSnapshotResync) {
  StartServer(true, {StorePayload(1000, 2)});
  ASSERT_TRUE(WaitMatched({1000, 1001}, "r1", 2));

  auto r2 = MakeEngine();
  ASSERT_NE(r2, nullptr);
  r2->Publish(StorePayload(1000, 3));
  r2->Flush();
  v1::AddEngineRequest add;
  add.mutable_engine()->set_replica("r2");
  add.mutable_engine()->set_model(kModel);
  add.mutable_engine()->set_endpoint(r2->pub_endpoint());
  add.mutable_engine()->set_replay_endpoint(r2->replay_endpoint());
  v1::AddEngineResponse added;
  grpc::Status s = client_->AddEngine(add, &added);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(added.sources_size(), 1);
  EXPECT_EQ(added.sources(0), "r2/dp0");
  extra_engines_.push_back(std::move(r2));
  ASSERT_TRUE(WaitMatched({1000, 1001, 1002}, "r2", 3));

  // Ordered by matched_blocks descending.
  v1::FindPrefixResponse r;
  const std::vector<uint64_t> h = {1000, 1001, 1002};
  ASSERT_TRUE(client_->FindPrefixHashes(kModel, h, &r).ok());
  ASSERT_EQ(r.replicas_size(), 2);
  EXPECT_EQ(r.replicas(0).replica(), "r2");
  EXPECT_EQ(r.replicas(1).replica(), "r1");

  // A second engine under a taken name is refused.
  s = client_->AddEngine(add, &added);
  EXPECT_FALSE(s.ok());

  v1::TriggerSnapshotResponse snap;
  s = client_->TriggerSnapshot(&snap);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_GE(snap.generation(), 1u);
  EXPECT_GT(snap.bytes(), 0u);

  EXPECT_TRUE(client_->Resync("r1/dp0").ok());
  EXPECT_TRUE(client_->Resync("r1").ok());

  ASSERT_TRUE(client_->RemoveEngine("r2").ok());
  v1::ListReplicasResponse lr;
  ASSERT_TRUE(client_->ListReplicas(v1::ListReplicasRequest(), &lr).ok());
  for (const v1::ReplicaSummary& rs : lr.replicas()) EXPECT_NE(rs.replica(), "r2");
  ASSERT_TRUE(client_->FindPrefixHashes(kModel, h, &r).ok());
  EXPECT_EQ(FindReplica(r, "r2"), nullptr) << "a removed engine's blocks are gone";
}

TEST_F(ClientTest, OneClientSharedByThreads) {
  StartServer(true, {StorePayload(1000, 4)});
  ASSERT_TRUE(WaitMatched({1000, 1001, 1002, 1003}, "r1", 4));
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      const std::vector<uint64_t> h = {1000, 1001, 1002, 1003};
      for (int i = 0; i < 100; ++i) {
        v1::FindPrefixResponse r;
        if (!client_->FindPrefixHashes(kModel, h, &r).ok() || r.replicas_size() != 1 ||
            r.replicas(0).matched_blocks() != 4) {
          ++failures;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
}

// No server fixture needed below.

TEST(ClientNoServerTest, ConnectionRefusedIsUnavailable) {
  client::ClientOptions o;
  o.target = "127.0.0.1:" + std::to_string(DeadPort());
  auto c = client::Client::Create(o);  // does not connect
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  v1::GetStatsResponse stats;
  const auto start = std::chrono::steady_clock::now();
  grpc::Status s = (*c)->GetStats(&stats);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1900ms) << "fails fast, not at the deadline";
}

TEST(ClientNoServerTest, SilentServerHitsTheDeadline) {
  SilentListener silent;
  ASSERT_GT(silent.port(), 0);
  client::ClientOptions o;
  o.target = "127.0.0.1:" + std::to_string(silent.port());
  o.deadline = 200ms;
  auto c = client::Client::Create(o);
  ASSERT_TRUE(c.ok());
  v1::FindPrefixResponse r;
  const std::vector<uint64_t> h = {1};
  const auto start = std::chrono::steady_clock::now();
  grpc::Status s = (*c)->FindPrefixHashes(kModel, h, &r);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s.error_message();
  EXPECT_GE(took, 150ms);
  EXPECT_LT(took, 5s);
}

TEST(ClientNoServerTest, CreateValidatesOptions) {
  client::ClientOptions o;
  o.ca_file = "/some/ca.pem";
  EXPECT_EQ(client::Client::Create(o).status().code(), StatusCode::kInvalidArgument) << "PEM files need tls";
  o.tls = true;
  o.ca_file = "/nonexistent/ca.pem";
  EXPECT_EQ(client::Client::Create(o).status().code(), StatusCode::kNotFound);
  o.ca_file.clear();
  o.cert_file = "/some/cert.pem";
  EXPECT_EQ(client::Client::Create(o).status().code(), StatusCode::kInvalidArgument) << "cert without key";
  o.target.clear();
  EXPECT_EQ(client::Client::Create(o).status().code(), StatusCode::kInvalidArgument);
  client::ClientOptions tls;
  tls.tls = true;  // system roots; nothing to read
  EXPECT_TRUE(client::Client::Create(tls).ok());
}

TEST(ClientNoServerTest, ReadTokenFile) {
  const std::string path = ::testing::TempDir() + "/kvidx_client_token_test";
  std::ofstream(path) << "  tok-123 \r\nsecond line\n";
  Result<std::string> t = client::ReadTokenFile(path);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(*t, "tok-123");
  std::ofstream(path) << "\n";
  EXPECT_EQ(client::ReadTokenFile(path).status().code(), StatusCode::kInvalidArgument);
  std::remove(path.c_str());
  EXPECT_EQ(client::ReadTokenFile(path).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace kvidx::client_testing
