// Crash safety: a child process writes snapshots in a loop and is SIGKILLed
// at random moments (during start-up, mid-Write, between Writes); after
// every kill the directory must open and load a complete snapshot equal to
// one that was written, never older than the last one the child saw
// committed, and never silently empty.
//
// The child is this test binary itself, re-executed (fork + execve of
// /proc/self/exe) with --gtest_filter=SnapshotCrashChild.WriteLoop and the
// directory in KVIDX_SNAPSHOT_CRASH_DIR: a fresh process, because RocksDB's
// background threads do not survive a bare fork(). The child reports each
// committed snapshot number over a pipe (KVIDX_SNAPSHOT_CRASH_FD).
// KVIDX_SNAPSHOT_CRASH_TRIALS overrides the number of kills (default 60).
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "persist/persist_test_util.h"
#include "server/snapshot_store.h"

extern char** environ;

namespace kvidx::snapshot {
namespace {

using testing::SyntheticSnapshot;
using testing::TempDir;

// Snapshot k's size varies so that Writes take different times (2K..40K owners).
size_t OwnersFor(uint64_t k) { return 2000 + testing::Mix(k) % 38000; }
constexpr uint32_t kOwnersPerChunk = 4096;

TEST(SnapshotCrashChild, WriteLoop) {
  const char* dir = getenv("KVIDX_SNAPSHOT_CRASH_DIR");
  const char* fd_env = getenv("KVIDX_SNAPSHOT_CRASH_FD");
  if (dir == nullptr || fd_env == nullptr) GTEST_SKIP() << "child of SnapshotCrash.KillWriterAtRandomMoments";
  int fd = std::atoi(fd_env);
  StoreOptions o;
  o.owners_per_chunk = kOwnersPerChunk;
  auto r = SnapshotStore::Open(dir, o);
  if (!r.ok()) {
    std::fprintf(stderr, "crash child: %s\n", r.status().ToString().c_str());
    std::_Exit(3);
  }
  auto l = r.value()->LoadLatest();
  if (!l.ok()) {
    std::fprintf(stderr, "crash child: %s\n", l.status().ToString().c_str());
    std::_Exit(4);
  }
  uint64_t k = l.value() ? l.value()->created_unix_ms : 0;
  uint64_t ready = ~0ull;
  if (write(fd, &ready, 8) != 8) std::_Exit(5);
  for (;;) {
    ++k;
    Status st = r.value()->Write(SyntheticSnapshot(k, OwnersFor(k)));
    if (!st.ok()) {
      std::fprintf(stderr, "crash child: %s\n", st.ToString().c_str());
      std::_Exit(6);
    }
    if (write(fd, &k, 8) != 8) std::_Exit(5);
  }
}

TEST(SnapshotCrash, KillWriterAtRandomMoments) {
  int trials = 60;
  if (const char* t = getenv("KVIDX_SNAPSHOT_CRASH_TRIALS")) trials = std::atoi(t);
  TempDir tmp;
  const std::string db = tmp.db();
  std::mt19937_64 rng(std::random_device{}());
  const uint64_t seed = rng();
  rng.seed(seed);
  SCOPED_TRACE("seed " + std::to_string(seed));

  uint64_t last_loaded = 0;
  int dry = 0;  // consecutive trials in which the child committed nothing
  int killed_before_ready = 0, lost_in_flight = 0, kept_in_flight = 0;
  auto start = std::chrono::steady_clock::now();
  for (int trial = 0; trial < trials; ++trial) {
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    ASSERT_EQ(fcntl(fds[0], F_SETFD, FD_CLOEXEC), 0);
    // Everything the child needs is prepared before fork(): after it, only
    // async-signal-safe calls.
    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e) {
      if (std::strncmp(*e, "KVIDX_SNAPSHOT_CRASH_", 21) != 0 && std::strncmp(*e, "GTEST_", 6) != 0) {
        env_strings.emplace_back(*e);
      }
    }
    env_strings.push_back("KVIDX_SNAPSHOT_CRASH_DIR=" + db);
    env_strings.push_back("KVIDX_SNAPSHOT_CRASH_FD=" + std::to_string(fds[1]));
    std::vector<char*> envp;
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::string a0 = "kvidx_persist_test", a1 = "--gtest_filter=SnapshotCrashChild.WriteLoop";
    char* argv[] = {a0.data(), a1.data(), nullptr};
    int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);

    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      dup2(devnull, 1);
      execve("/proc/self/exe", argv, envp.data());
      _exit(127);
    }
    close(fds[1]);
    close(devnull);

    // 1 in 8: kill while it starts up (opening, cleaning up); otherwise wait
    // until it is ready and kill it 0..40 ms into its Write loop.
    bool early = rng() % 8 == 0;
    uint64_t committed = 0;
    if (early) {
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 30000));
      ++killed_before_ready;
    } else {
      uint64_t v = 0;
      ASSERT_EQ(read(fds[0], &v, 8), 8) << "child died before it was ready (trial " << trial << ")";
      // Writes take ~10 ms here but fsync latency varies with machine load:
      // widen the window while kills keep landing before any commit.
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % (40000 + 20000 * std::min(dry, 10))));
    }
    if (getenv("KVIDX_SNAPSHOT_CRASH_DEBUG")) std::fprintf(stderr, "trial %d early %d\n", trial, early);
    kill(pid, SIGKILL);
    int wstatus = 0;
    ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(wstatus)) << "child exited on its own with " << WEXITSTATUS(wstatus) << " (trial "
                                      << trial << ")";
    for (uint64_t v = 0; read(fds[0], &v, 8) == 8;) {
      if (v != ~0ull) committed = v;
    }
    close(fds[0]);
    dry = committed != 0 ? 0 : dry + 1;

    auto r = SnapshotStore::Open(db);
    ASSERT_TRUE(r.ok()) << "trial " << trial << ": " << r.status().ToString();
    auto l = r.value()->LoadLatest();
    ASSERT_TRUE(l.ok()) << "trial " << trial << ": " << l.status().ToString();
    if (!l.value()) {
      ASSERT_EQ(last_loaded, 0u) << "trial " << trial << ": a snapshot existed and none loads";
      ASSERT_EQ(committed, 0u) << "trial " << trial << ": committed snapshot lost";
      continue;
    }
    const SnapshotData& got = *l.value();
    uint64_t k = got.created_unix_ms;
    ASSERT_GE(k, std::max(last_loaded, committed)) << "trial " << trial << ": went back in time";
    if (committed != 0 || !early) {
      // At most the one Write in flight when the kill came.
      ASSERT_LE(k, std::max(last_loaded, committed) + 1) << "trial " << trial;
      if (k == committed + 1) ++kept_in_flight; else ++lost_in_flight;
    }
    ASSERT_TRUE(SameSnapshot(got, SyntheticSnapshot(k, OwnersFor(k)))) << "trial " << trial << ": snapshot " << k
                                                                         << " differs from what was written";
    if (getenv("KVIDX_SNAPSHOT_CRASH_DEBUG")) std::fprintf(stderr, "  committed %llu loaded %llu\n", (unsigned long long)committed, (unsigned long long)k);
    last_loaded = k;
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%d kills (%d during start-up), last snapshot %llu, loaded the Write in flight %d times, the last acknowledged one %d times, %.1f s\n",
              trials, killed_before_ready, static_cast<unsigned long long>(last_loaded), kept_in_flight,
              lost_in_flight, secs);
  EXPECT_GT(last_loaded, 0u);
}

}  // namespace
}  // namespace kvidx::snapshot
