// Resource readings of this test process from /proc, for tests that bound
// what an attack on the in-process server may cost (test-only).
#pragma once

#include <dirent.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>

namespace kvidx::server::testing {

// Resident set size in bytes (VmRSS), 0 if unreadable.
inline uint64_t RssBytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

// Threads of this process (entries of /proc/self/task) whose name starts
// with `name_prefix` (all of them for "").
inline int ThreadCount(std::string_view name_prefix = "") {
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return -1;
  int n = 0;
  while (const dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::string name;
    if (!name_prefix.empty()) std::getline(std::ifstream(std::string("/proc/self/task/") + e->d_name + "/comm"), name);
    if (name.rfind(name_prefix, 0) == 0) ++n;
  }
  closedir(d);
  return n;
}

// gRPC's synchronous-server threads (one per call in a sync handler).
inline constexpr std::string_view kGrpcSyncThreads = "grpcpp_sync_ser";

inline double Mib(uint64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

}  // namespace kvidx::server::testing
