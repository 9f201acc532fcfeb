// QueryEngine: the domain FindPrefix and GetBlock, called directly on a Node
// with no RPC in between. Real parts: SimRank engines publishing over ZMQ on
// 127.0.0.1, the Node subscribing to them.
#include "server/query_engine.h"

#include "server/node.h"
#include "server/server_test_util.h"

namespace kvidx::server::testing {
namespace {

class QueryEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerConfig cfg = TwoRankConfig(dir_, &a_, &b_);
    ASSERT_TRUE(a_ && b_);
    Result<std::unique_ptr<Node>> n = Node::Create(cfg);
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    node_ = std::move(n).value();
    ASSERT_TRUE(node_->Start().ok());
    engine_ = std::make_unique<QueryEngine>(node_.get(), QueryLimits{1000, 20});
  }

  // Serves `tokens` on `rank` and waits until the node applied it.
  void Serve(sim::SimRank& rank, const std::vector<int64_t>& tokens) {
    ASSERT_TRUE(rank.Serve(tokens, /*full_report=*/false).ok());
    rank.publisher().Flush();
    const int64_t last = static_cast<int64_t>(rank.publisher().next_seq()) - 1;
    ASSERT_TRUE(WaitFor([&] {
      std::optional<SourceId> id = node_->sink().FindSource(rank.options().replica, 0);
      return id && node_->sink().LastSeq(*id) == last;
    }));
  }

  PrefixQuery Tokens(const std::vector<int64_t>& tokens) {
    PrefixQuery q;
    q.model = kModel;
    q.form = PromptForm::kTokens;
    q.token_ids = tokens;
    return q;
  }

  TempDir dir_;
  std::unique_ptr<sim::SimRank> a_, b_;
  std::unique_ptr<Node> node_;
  std::unique_ptr<QueryEngine> engine_;
};

TEST_F(QueryEngineTest, OrdersReplicasByGpuPrefixAndFillsSourceState) {
  const std::vector<int64_t> prompt = Prompt(1, 16 * 6);
  Serve(*a_, std::vector<int64_t>(prompt.begin(), prompt.begin() + 16 * 2));
  Serve(*b_, prompt);
  PrefixAnswer ans;
  ASSERT_TRUE(engine_->FindPrefix(Tokens(prompt), &ans).ok());
  EXPECT_EQ(ans.query_blocks, 6u);
  EXPECT_EQ(ans.block_size, 16u);
  EXPECT_GE(ans.applied_batches, 2u);
  ASSERT_EQ(ans.replicas.size(), 2u);
  EXPECT_EQ(ans.replicas[0].replica, "b");
  EXPECT_EQ(ans.replicas[0].gpu_blocks, 6u);
  EXPECT_EQ(ans.replicas[1].replica, "a");
  EXPECT_EQ(ans.replicas[1].gpu_blocks, 2u);
  EXPECT_EQ(ans.replicas[0].last_seq, static_cast<int64_t>(b_->publisher().next_seq()) - 1);
  EXPECT_TRUE(ans.block_hashes.empty());
}

TEST_F(QueryEngineTest, HashFormMatchesTokenFormAndFiltersReplicas) {
  const std::vector<int64_t> prompt = Prompt(2, 16 * 4);
  Serve(*a_, prompt);
  Serve(*b_, prompt);
  const std::vector<uint64_t> hashes = U64Of(KeysOf(prompt));
  PrefixQuery q;
  q.model = kModel;
  q.form = PromptForm::kHashes;
  q.hashes = hashes;
  q.replicas = {"b"};
  PrefixAnswer ans;
  ASSERT_TRUE(engine_->FindPrefix(q, &ans).ok());
  ASSERT_EQ(ans.replicas.size(), 1u);
  EXPECT_EQ(ans.replicas[0].replica, "b");
  EXPECT_EQ(ans.replicas[0].gpu_blocks, 4u);

  PrefixQuery t = Tokens(prompt);
  t.include_block_hashes = true;
  ASSERT_TRUE(engine_->FindPrefix(t, &ans).ok());
  ASSERT_EQ(ans.block_hashes.size(), hashes.size());
  EXPECT_TRUE(ans.int_block_hashes);
  for (size_t i = 0; i < hashes.size(); ++i) EXPECT_EQ(ans.block_hashes[i].wire_u64(), hashes[i]);
}

TEST_F(QueryEngineTest, RefusesBadQueriesNamingTheField) {
  PrefixAnswer ans;
  auto code_of = [&](const PrefixQuery& q) { return engine_->FindPrefix(q, &ans); };
  PrefixQuery q;
  EXPECT_EQ(code_of(q).message(), "model: required");
  q.model = "nope";
  EXPECT_EQ(code_of(q).code(), StatusCode::kNotFound);
  q.model = kModel;
  EXPECT_EQ(code_of(q).message(), "query: set tokens, hashes or text");

  const std::vector<int64_t> long_prompt(1001, 7);
  Status s = code_of(Tokens(long_prompt));
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  EXPECT_EQ(s.message(), "tokens.token_ids: 1001 tokens exceed the limit of 1000 (grpc.max_query_tokens)");

  const std::vector<uint64_t> u64 = {1, 2};
  q.form = PromptForm::kHashes;
  q.hashes = u64;
  q.digests = {"x"};
  EXPECT_EQ(code_of(q).message(), "hashes: set u64 or digest, not both");
  q.hashes = {};
  EXPECT_EQ(code_of(q).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(code_of(q).message().rfind("hashes.digest[0]: ", 0), 0u);

  const std::vector<int64_t> prompt = Prompt(3, 32);
  PrefixQuery mm = Tokens(prompt);
  const std::vector<MultiModalItem> items = {{"x", 8, 4}, {"y", 2, 4}};
  mm.extras.mm_items = items;
  EXPECT_EQ(code_of(mm).message(), "tokens.mm_items[1].offset: items must be sorted by offset");
}

TEST_F(QueryEngineTest, GetBlockListsHoldersOrNotFound) {
  const std::vector<int64_t> prompt = Prompt(4, 16 * 2);
  Serve(*a_, prompt);
  const uint64_t first = U64Of(KeysOf(prompt))[0];
  std::vector<BlockHolder> holders;
  ASSERT_TRUE(engine_->GetBlock(kModel, &first, nullptr, &holders).ok());
  ASSERT_EQ(holders.size(), 1u);
  EXPECT_TRUE(holders[0].registered);
  EXPECT_EQ(holders[0].replica, "a");
  EXPECT_EQ(holders[0].tier, "GPU");
  const uint64_t absent = first + 1;
  EXPECT_EQ(engine_->GetBlock(kModel, &absent, nullptr, &holders).code(), StatusCode::kNotFound);
  EXPECT_EQ(engine_->GetBlock(kModel, nullptr, nullptr, &holders).code(), StatusCode::kInvalidArgument);
}

TEST_F(QueryEngineTest, ListsReplicasAndCountsWithoutRpc) {
  Serve(*a_, Prompt(5, 16 * 3));
  std::vector<ReplicaStatus> replicas;
  ASSERT_TRUE(engine_->ListReplicas("", &replicas).ok());
  ASSERT_EQ(replicas.size(), 2u);
  EXPECT_EQ(replicas[0].replica, "a");
  EXPECT_EQ(replicas[0].model, kModel);
  EXPECT_EQ(replicas[0].origin, "config");
  ASSERT_EQ(replicas[0].sources.size(), 1u);
  EXPECT_EQ(replicas[0].sources[0].name, "a/dp0");
  ASSERT_EQ(replicas[0].sources[0].blocks_per_tier.size(), 1u);
  EXPECT_EQ(replicas[0].sources[0].blocks_per_tier[0], (std::pair<std::string, uint64_t>("GPU", 3)));
  EXPECT_EQ(replicas[1].replica, "b");
  EXPECT_EQ(engine_->ListReplicas("nope", &replicas).code(), StatusCode::kNotFound);

  const NodeStats st = engine_->Stats();
  ASSERT_EQ(st.models.size(), 1u);
  EXPECT_EQ(st.models[0].blocks, 3u);
  uint64_t sources = 0;
  for (uint64_t n : st.sources_by_state) sources += n;
  EXPECT_EQ(sources, 2u);  // in whatever state their first replay left them
  EXPECT_GE(st.applied_batches, 1u);
  EXPECT_EQ(st.snapshot_age_seconds, -1);  // no data directory
}

}  // namespace
}  // namespace kvidx::server::testing
