// DiscoveryState (server/discovery_state.h) with a fake clock: adds, the
// grace period, redefinitions, providers that claim one replica, and a
// fleet of 1,000 engines x 8 ranks where one answer changes a few.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "server/discovery_state.h"

namespace kvidx::server {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;
using Clock = DiscoveryState::Clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr milliseconds kGrace{30'000};

EngineEntry Engine(const std::string& replica, int port = 5557, uint32_t dp = 1) {
  EngineEntry e;
  e.engine.replica = replica;
  e.engine.model = "qwen";
  e.engine.endpoint = "tcp://" + replica + ":" + std::to_string(port);
  e.engine.data_parallel_size = dp;
  return e;
}

std::vector<std::string> Replicas(const std::vector<DiscoveryRemoval>& v) {
  std::vector<std::string> out;
  for (const DiscoveryRemoval& r : v) out.push_back(r.replica);
  return out;
}

std::vector<std::string> Replicas(const std::vector<EngineEntry>& v) {
  std::vector<std::string> out;
  for (const EngineEntry& e : v) out.push_back(e.engine.replica);
  return out;
}

class DiscoveryStateTest : public ::testing::Test {
 protected:
  DiscoveryActions Answer(const std::vector<EngineEntry>& engines, std::string_view provider = "p") {
    return state_.Update(provider, kGrace, engines, now_);
  }
  DiscoveryState state_;
  Clock::time_point now_ = Clock::time_point{} + seconds(1000);
};

TEST_F(DiscoveryStateTest, NewEnginesAreAddedOnce) {
  DiscoveryActions a = Answer({Engine("a"), Engine("b")});
  EXPECT_THAT(Replicas(a.add), ElementsAre("a", "b"));
  EXPECT_THAT(Replicas(a.remove), IsEmpty());
  EXPECT_TRUE(Answer({Engine("a"), Engine("b")}).empty());
  EXPECT_EQ(state_.Counts("p").active, 2u);
  EXPECT_EQ(state_.Counts("p").added, 2u);
}

TEST_F(DiscoveryStateTest, VanishedEngineIsRemovedOnlyAfterTheGrace) {
  Answer({Engine("a"), Engine("b")});
  EXPECT_TRUE(Answer({Engine("a")}).empty());
  EXPECT_EQ(state_.Counts("p").active, 1u);
  EXPECT_EQ(state_.Counts("p").grace, 1u);
  ASSERT_TRUE(state_.NextDeadline().has_value());
  EXPECT_EQ(*state_.NextDeadline(), now_ + kGrace);
  // A later answer without it does not restart the grace.
  now_ += seconds(20);
  EXPECT_TRUE(Answer({Engine("a")}).empty());
  EXPECT_TRUE(state_.Expire(now_ + seconds(9)).empty());
  DiscoveryActions gone = state_.Expire(now_ + seconds(10));
  EXPECT_THAT(Replicas(gone.remove), ElementsAre("b"));
  EXPECT_EQ(state_.Counts("p").grace, 0u);
  EXPECT_EQ(state_.Counts("p").removed, 1u);
  EXPECT_FALSE(state_.NextDeadline().has_value());
  // Seen again after its removal: a new engine.
  EXPECT_THAT(Replicas(Answer({Engine("a"), Engine("b")}).add), ElementsAre("b"));
}

TEST_F(DiscoveryStateTest, BackWithinTheGraceUnchangedDoesNothing) {
  Answer({Engine("a")});
  Answer({});
  now_ += seconds(29);
  EXPECT_TRUE(Answer({Engine("a")}).empty());
  EXPECT_EQ(state_.Counts("p").active, 1u);
  EXPECT_EQ(state_.Counts("p").grace, 0u);
  EXPECT_TRUE(state_.Expire(now_ + seconds(3600)).empty());
}

TEST_F(DiscoveryStateTest, RedefinedEngineIsReplaced) {
  Answer({Engine("a", 5557)});
  DiscoveryActions a = Answer({Engine("a", 6000)});
  EXPECT_THAT(Replicas(a.remove), ElementsAre("a"));
  EXPECT_THAT(Replicas(a.add), ElementsAre("a"));
  EXPECT_EQ(a.add[0].engine.endpoint, "tcp://a:6000");
  // Also when it comes back redefined from its grace period.
  Answer({});
  a = Answer({Engine("a", 6000, 2)});
  EXPECT_THAT(Replicas(a.remove), ElementsAre("a"));
  EXPECT_EQ(a.add.size(), 1u);
  EXPECT_EQ(state_.Counts("p").active, 1u);
  EXPECT_EQ(state_.Counts("p").grace, 0u);
}

TEST_F(DiscoveryStateTest, ZeroGraceRemovesAtOnce) {
  state_.Update("p", milliseconds(0), {Engine("a")}, now_);
  EXPECT_THAT(Replicas(state_.Update("p", milliseconds(0), {}, now_).remove), ElementsAre("a"));
}

TEST_F(DiscoveryStateTest, AReplicaBelongsToTheFirstProvider) {
  Answer({Engine("a")}, "p");
  DiscoveryActions a = Answer({Engine("a", 9), Engine("b")}, "q");
  EXPECT_THAT(Replicas(a.add), ElementsAre("b"));
  EXPECT_EQ(state_.Counts("q").conflicts, 1u);
  // q losing it changes nothing for p's engine.
  Answer({Engine("b")}, "q");
  EXPECT_TRUE(state_.Expire(now_ + seconds(3600)).empty());
  EXPECT_EQ(state_.Counts("p").active, 1u);
}

TEST_F(DiscoveryStateTest, ForgottenEngineIsTriedAgain) {
  Answer({Engine("a")});
  state_.Forget("a");
  EXPECT_EQ(state_.Counts("p").active, 0u);
  EXPECT_THAT(Replicas(Answer({Engine("a")}).add), ElementsAre("a"));
}

TEST_F(DiscoveryStateTest, DuplicateRecordsInOneAnswerAddOnce) {
  EXPECT_EQ(Answer({Engine("a"), Engine("a")}).add.size(), 1u);
  EXPECT_EQ(state_.Counts("p").active, 1u);
}

// 1,000 engines of 8 ranks: a scale event touching ten of them yields
// exactly those ten actions, and the grace expiry only those five.
TEST_F(DiscoveryStateTest, ThousandEnginesDiffToTheChanges) {
  std::vector<EngineEntry> fleet;
  for (int i = 0; i < 1000; ++i) fleet.push_back(Engine("vllm-" + std::to_string(i), 5557, 8));
  EXPECT_EQ(Answer(fleet).add.size(), 1000u);
  EXPECT_TRUE(Answer(fleet).empty());
  std::vector<EngineEntry> next(fleet.begin() + 5, fleet.end());
  for (int i = 1000; i < 1005; ++i) next.push_back(Engine("vllm-" + std::to_string(i), 5557, 8));
  DiscoveryActions a = Answer(next);
  EXPECT_EQ(a.add.size(), 5u);
  EXPECT_THAT(Replicas(a.remove), IsEmpty());
  EXPECT_EQ(state_.Counts("p").active, 1000u);
  EXPECT_EQ(state_.Counts("p").grace, 5u);
  now_ += kGrace;
  a = Answer(next);
  EXPECT_THAT(Replicas(a.remove), UnorderedElementsAre("vllm-0", "vllm-1", "vllm-2", "vllm-3", "vllm-4"));
  EXPECT_THAT(a.add, IsEmpty());
  EXPECT_EQ(state_.Counts("p").removed, 5u);
  EXPECT_EQ(state_.Counts("p").added, 1005u);
}

// The cost rule, counted: on a set of 1,000 engines x 8 DP ranks, an answer
// is 1,000 lookups, and one engine gone, back, new or expired costs a
// handful of other operations -- not a walk of the set.
TEST_F(DiscoveryStateTest, OneEngineChangeOnAThousandTouchesOnlyThatEngine) {
  std::vector<EngineEntry> fleet;
  for (int i = 0; i < 1000; ++i) fleet.push_back(Engine("vllm-" + std::to_string(i), 5557, 8));
  ASSERT_EQ(Answer(fleet).add.size(), 1000u);
  auto delta = [&](const std::vector<EngineEntry>& answer, DiscoveryActions* actions) {
    const DiscoveryState::Work before = state_.work();
    *actions = Answer(answer);
    return DiscoveryState::Work{state_.work().lookups - before.lookups, state_.work().other - before.other};
  };
  DiscoveryActions a;

  DiscoveryState::Work w = delta(fleet, &a);  // unchanged
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(w.lookups, 1000u);
  EXPECT_EQ(w.other, 0u);

  std::vector<EngineEntry> without = fleet;
  without.erase(without.begin() + 500);  // vllm-500 vanishes: its grace starts
  w = delta(without, &a);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(w.lookups, 999u);
  EXPECT_EQ(w.other, 2u);  // visited, grace started
  EXPECT_EQ(state_.Counts("p").grace, 1u);

  w = delta(without, &a);  // still gone: the walk stops at it
  EXPECT_EQ(w.other, 1u);

  w = delta(fleet, &a);  // back within the grace: nothing to do but end it
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(w.other, 1u);
  EXPECT_EQ(state_.Counts("p").grace, 0u);

  std::vector<EngineEntry> grown = fleet;
  grown.push_back(Engine("vllm-1000", 5557, 8));  // a new replica
  w = delta(grown, &a);
  EXPECT_THAT(Replicas(a.add), ElementsAre("vllm-1000"));
  EXPECT_THAT(a.remove, IsEmpty());
  EXPECT_EQ(w.lookups, 1001u);
  EXPECT_EQ(w.other, 1u);

  w = delta(fleet, &a);  // vllm-1000 gone again ...
  EXPECT_EQ(w.other, 2u);
  now_ += kGrace;
  const uint64_t other = state_.work().other;
  a = state_.Expire(now_);  // ... and its grace over
  EXPECT_THAT(Replicas(a.remove), ElementsAre("vllm-1000"));
  EXPECT_LE(state_.work().other - other, 2u);  // grace ended, removed
  EXPECT_EQ(state_.Counts("p").active, 1000u);
}

}  // namespace
}  // namespace kvidx::server
