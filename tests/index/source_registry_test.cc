// SourceRegistry: dense ids, revival of a returning (replica, rank), reuse
// of released ids by new pairs only after reuse_after (fake clock), never
// of retired ones, and readers that keep a reused id's old name alive.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>

#include "index/source_registry.h"

namespace kvidx {
namespace {

// A registry on a clock the test moves.
struct RegistryRig {
  SourceRegistry::Clock::time_point now{};
  SourceRegistry registry;

  explicit RegistryRig(std::chrono::seconds reuse_after)
      : registry(SourceRegistry::Options{reuse_after, [this] { return now; }}) {}
  SourceId Add(const std::string& replica, SourceRegistry::Origin* origin = nullptr) {
    Result<SourceId> id = registry.Register(replica, 0, origin);
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    return id.ok() ? *id : kMaxSources;
  }
  std::string NameOf(SourceId id) const {
    const SourceRegistry::Reader r(registry);
    return r.Get(id) == nullptr ? "<none>" : r.Get(id)->replica;
  }
};

TEST(SourceRegistry, ReleasedIdGoesToANewPairOnlyAfterReuseAfter) {
  RegistryRig rig(std::chrono::seconds(60));
  const SourceId a = rig.Add("a");
  const SourceId b = rig.Add("b");
  EXPECT_EQ(a, 0u);
  EXPECT_EQ(b, 1u);
  rig.registry.Release(a);
  EXPECT_EQ(rig.registry.ids_free(), kMaxSources - 1);

  SourceRegistry::Origin origin;
  EXPECT_EQ(rig.Add("c", &origin), 2u) << "released 0 s ago: a never-used id";
  EXPECT_EQ(origin, SourceRegistry::Origin::kNew);
  rig.now += std::chrono::seconds(59);
  EXPECT_EQ(rig.Add("d"), 3u);
  rig.now += std::chrono::seconds(1);
  EXPECT_EQ(rig.Add("e", &origin), a);
  EXPECT_EQ(origin, SourceRegistry::Origin::kReused);
  EXPECT_EQ(rig.NameOf(a), "e");
  EXPECT_FALSE(rig.registry.Find("a", 0).has_value()) << "the old pair no longer names the id";
  EXPECT_EQ(rig.registry.Find("e", 0), a);
  EXPECT_EQ(rig.registry.size(), 4u);
  EXPECT_EQ(rig.registry.ids_free(), kMaxSources - 4);

  // "a" returning now is a new pair: another id, a never-used one.
  EXPECT_EQ(rig.Add("a", &origin), 4u);
  EXPECT_EQ(origin, SourceRegistry::Origin::kNew);
  EXPECT_EQ(rig.Add("a", &origin), 4u);
  EXPECT_EQ(origin, SourceRegistry::Origin::kOwn) << "registered twice: its own id";
}

TEST(SourceRegistry, TheSamePairComesBackOnItsIdAtOnce) {
  RegistryRig rig(std::chrono::seconds(60));
  const SourceId a = rig.Add("a");
  rig.registry.Release(a);
  rig.registry.Release(a);   // twice: one entry
  EXPECT_FALSE(SourceRegistry::Reader(rig.registry).IsLive(a));
  SourceRegistry::Origin origin = SourceRegistry::Origin::kNew;
  EXPECT_EQ(rig.Add("a", &origin), a);
  EXPECT_EQ(origin, SourceRegistry::Origin::kOwn) << "its own id, not another source's";
  EXPECT_TRUE(SourceRegistry::Reader(rig.registry).IsLive(a));
  // Revived, it is no longer released: nobody else gets it.
  rig.now += std::chrono::hours(1);
  EXPECT_EQ(rig.Add("b"), 1u);
  EXPECT_EQ(rig.registry.ids_free(), kMaxSources - 2);
}

TEST(SourceRegistry, RetiredIdsAreNeverReused) {
  RegistryRig rig(std::chrono::seconds(0));
  const SourceId a = rig.Add("a");
  rig.registry.Retire(a);
  EXPECT_EQ(rig.Add("b"), 1u);
  EXPECT_EQ(rig.NameOf(a), "a");
  EXPECT_EQ(rig.Add("a"), a) << "retired ids stay bound to their pair";
}

TEST(SourceRegistry, OldestReleasedFirstAndAFullRegistryWaitsForReuseAfter) {
  RegistryRig rig(std::chrono::seconds(10));
  for (SourceId i = 0; i < kMaxSources; ++i) ASSERT_EQ(rig.Add("r" + std::to_string(i)), i);
  const Result<SourceId> full = rig.registry.Register("late", 0);
  EXPECT_EQ(full.status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(rig.registry.ids_free(), 0u);

  rig.registry.Release(7);
  rig.now += std::chrono::seconds(1);
  rig.registry.Release(3);
  EXPECT_EQ(rig.registry.ids_free(), 2u);
  const Result<SourceId> early = rig.registry.Register("late", 0);
  ASSERT_FALSE(early.ok());
  EXPECT_NE(early.status().message().find("2 released"), std::string::npos) << early.status().ToString();

  rig.now += std::chrono::seconds(9);
  EXPECT_EQ(rig.Add("late"), 7u) << "released first";
  EXPECT_FALSE(rig.registry.Register("later", 0).ok()) << "3 was released 9 s ago";
  rig.now += std::chrono::seconds(1);
  EXPECT_EQ(rig.Add("later"), 3u);
  EXPECT_EQ(rig.registry.ids_free(), 0u);
}

// A reader holding a reused id's info keeps reading the old name; the old
// info is freed once no reader is left (ASan checks both under CI).
TEST(SourceRegistry, ReadersSeeWholeNamesWhileIdsAreReused) {
  RegistryRig rig(std::chrono::seconds(0));
  const SourceId id = rig.Add(std::string(64, 'a'));
  {
    const SourceRegistry::Reader r(rig.registry);
    const SourceInfo* before = r.Get(id);
    rig.registry.Release(id);
    EXPECT_EQ(rig.Add(std::string(64, 'b')), id);
    EXPECT_EQ(before->replica, std::string(64, 'a'));
  }
  EXPECT_EQ(rig.NameOf(id), std::string(64, 'b'));

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> torn{0}, reads{0};
  std::thread reader([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      const SourceRegistry::Reader r(rig.registry);
      const SourceInfo* info = r.Get(id);
      if (info == nullptr) continue;
      const std::string name = info->replica;
      if (name.size() != 64 || name.find_first_not_of(name[0]) != std::string::npos) ++torn;
      ++reads;
    }
  });
  for (int i = 0; i < 2000; ++i) {
    rig.registry.Release(id);
    ASSERT_EQ(rig.Add(std::string(64, static_cast<char>('c' + i % 20))), id);
  }
  while (reads.load() < 100) std::this_thread::yield();
  stop = true;
  reader.join();
  EXPECT_EQ(torn.load(), 0u);
}

}  // namespace
}  // namespace kvidx
