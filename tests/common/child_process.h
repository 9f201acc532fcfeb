// Child processes and loopback ports for tests that run kvidx programs as
// real processes (test-only).
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "base/spawn.h"

namespace kvidx::testing {

inline std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Writes a file whole (rename over the old one, so a reader never sees half).
inline void WriteAtomically(const std::string& path, const std::string& contents) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << contents;
  }
  std::filesystem::rename(tmp, path);
}

// A child process; killed (SIGKILL) and reaped at destruction if still running.
class Child {
 public:
  // Runs `argv` (argv[0] is the program path) with stdin from /dev/null and
  // stdout / stderr into files.
  static std::unique_ptr<Child> Spawn(const std::vector<std::string>& argv, const std::string& out_path,
                                      const std::string& err_path) {
    Result<pid_t> pid = SpawnProcess(argv, out_path, err_path);
    EXPECT_TRUE(pid.ok()) << pid.status().ToString();
    if (!pid.ok()) return nullptr;
    return std::unique_ptr<Child>(new Child(*pid));
  }

  ~Child() {
    if (!exit_code_) {
      kill(pid_, SIGKILL);
      int st = 0;
      waitpid(pid_, &st, 0);
    }
  }

  pid_t pid() const { return pid_; }
  void Signal(int sig) {
    ASSERT_FALSE(Poll().has_value()) << "signal to an exited child (exit " << *exit_code_ << ")";
    kill(pid_, sig);
  }

  // The exit code (128 + signal if killed), or nullopt while running.
  std::optional<int> Poll() {
    if (exit_code_) return exit_code_;
    int st = 0;
    const pid_t r = waitpid(pid_, &st, WNOHANG);
    if (r == pid_) exit_code_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return exit_code_;
  }
  std::optional<int> WaitExit(std::chrono::milliseconds timeout) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (!Poll() && std::chrono::steady_clock::now() < end) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return Poll();
  }

 private:
  explicit Child(pid_t pid) : pid_(pid) {}
  pid_t pid_;
  std::optional<int> exit_code_;
};

// Resident set size and thread count of a live process, from
// /proc/<pid>/status; zeros if it is gone.
struct ProcessUsage {
  uint64_t rss_bytes = 0;
  uint64_t threads = 0;
};

inline ProcessUsage UsageOf(pid_t pid) {
  ProcessUsage u;
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) u.rss_bytes = std::stoull(line.substr(6)) * 1024;
    if (line.rfind("Threads:", 0) == 0) u.threads = std::stoull(line.substr(8));
  }
  return u;
}

// A random port in [20000, 60000] that nothing listens on right now (the
// server may still lose a race for it; callers retry).
inline int RandomFreePort() {
  static std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<int> dist(20000, 60000);
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int port = dist(rng);
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    close(fd);
    if (ok) return port;
  }
  return 0;
}

}  // namespace kvidx::testing
