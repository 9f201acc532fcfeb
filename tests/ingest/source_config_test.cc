#include "ingest/source_config.h"

#include <gtest/gtest.h>

// GCC 12 at -O3 reports a bogus -Wrestrict inside std::string assignment of
// short literals (GCC PR 105329); nothing here overlaps.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wrestrict"
#endif

#include "ingest/testing/fake_engine.h"

namespace kvidx::ingest {
namespace {

std::string Offset(std::string_view ep, uint32_t rank) {
  auto r = OffsetEndpoint(ep, rank);
  return r.ok() ? r.value() : "ERROR: " + r.status().ToString();
}

TEST(SourceConfigTest, OffsetEndpointFollowsVllm) {
  EXPECT_EQ(Offset("tcp://*:5557", 0), "tcp://*:5557");
  EXPECT_EQ(Offset("tcp://*:5557", 3), "tcp://*:5560");
  EXPECT_EQ(Offset("tcp://10.0.0.7:5557", 1), "tcp://10.0.0.7:5558");
  EXPECT_EQ(Offset("tcp://[::1]:5557", 2), "tcp://[::1]:5559");  // last ':'
  EXPECT_EQ(Offset("inproc://kv", 2), "inproc://kv_dp2");
  EXPECT_EQ(Offset("inproc://tcp-ish", 1), "inproc://tcp-ish_dp1");  // "inproc" wins
  EXPECT_EQ(Offset("", 4), "");
  EXPECT_EQ(Offset("ipc:///tmp/kv", 0), "ipc:///tmp/kv");
  EXPECT_FALSE(OffsetEndpoint("ipc:///tmp/kv", 1).ok());  // vLLM raises too
  EXPECT_FALSE(OffsetEndpoint("tcp://*:*", 1).ok());
  EXPECT_FALSE(OffsetEndpoint("tcp://*:65535", 1).ok());
}

TEST(SourceConfigTest, TopicTemplateExpandsAndParses) {
  TopicTemplate t("kv@{replica}@{model}");
  EngineConfig e;
  e.replica = "pod-7";
  e.model = "meta-llama/Llama-3.1-8B";
  EXPECT_EQ(t.TopicFor(e), "kv@pod-7@meta-llama/Llama-3.1-8B");
  e.topic = "explicit";
  EXPECT_EQ(t.TopicFor(e), "explicit");
  EXPECT_EQ(TopicTemplate().TopicFor(EngineConfig{}), "");
  std::string r, m;
  ASSERT_TRUE(t.Parse("kv@pod-7@meta-llama/Llama-3.1-8B", &r, &m));
  EXPECT_EQ(r, "pod-7");
  EXPECT_EQ(m, "meta-llama/Llama-3.1-8B");
  EXPECT_FALSE(t.Parse("kv@@m", &r, &m));
  EXPECT_FALSE(t.Parse("xx@a@b", &r, &m));
  EXPECT_FALSE(t.Parse("kv@a", &r, &m));
}

TEST(SourceConfigTest, ExpandEngineMakesOneSourcePerRank) {
  EngineConfig e;
  e.replica = "r1";
  e.model = "m";
  e.endpoint = "tcp://10.0.0.7:5557";
  e.replay_endpoint = "tcp://10.0.0.7:5600";
  e.data_parallel_size = 3;
  auto r = ExpandEngine(e, TopicTemplate("kv@{replica}@{model}"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ((*r)[2].name, "r1/dp2");
  EXPECT_EQ((*r)[2].endpoint, "tcp://10.0.0.7:5559");
  EXPECT_EQ((*r)[2].replay_endpoint, "tcp://10.0.0.7:5602");
  EXPECT_EQ((*r)[2].topic, "kv@r1@m");
  EXPECT_EQ((*r)[2].dp_rank, 2u);

  EngineConfig bad = e;
  bad.endpoint = "tcp://*:5557";  // kvidx cannot connect to a wildcard
  EXPECT_FALSE(ExpandEngine(bad, {}).ok());
  bad.mode = ConnectMode::kBind;
  EXPECT_TRUE(ExpandEngine(bad, {}).ok());
  bad = e;
  bad.replica = "";
  EXPECT_FALSE(ExpandEngine(bad, {}).ok());
  bad = e;
  bad.replica = "a/b";
  EXPECT_FALSE(ExpandEngine(bad, {}).ok());
  bad = e;
  bad.data_parallel_size = 0;
  EXPECT_FALSE(ExpandEngine(bad, {}).ok());
  bad = e;
  bad.endpoint = "ipc:///tmp/x";
  EXPECT_FALSE(ExpandEngine(bad, {}).ok());  // rank 1 cannot be offset
  bad.data_parallel_size = 1;
  EXPECT_TRUE(ExpandEngine(bad, {}).ok());
  bad.endpoint = "udp://x:1";
  EXPECT_FALSE(ExpandEngine(bad, {}).ok());
}

TEST(SourceConfigTest, VllmPubBindRule) {
  EXPECT_TRUE(VllmPubBinds("tcp://*:5557"));
  EXPECT_TRUE(VllmPubBinds("tcp://[::]:5557"));
  EXPECT_TRUE(VllmPubBinds("ipc:///tmp/kv"));
  EXPECT_TRUE(VllmPubBinds("inproc://kv"));
  EXPECT_FALSE(VllmPubBinds("tcp://0.0.0.0:5557"));  // the known footgun: connects
  EXPECT_FALSE(VllmPubBinds("tcp://kvidx:5557"));
}

}  // namespace
}  // namespace kvidx::ingest
