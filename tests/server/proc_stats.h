// Resource readings of this test process from /proc, for tests that bound
// what an attack on the in-process server may cost (test-only).
#pragma once

#include <dirent.h>

#include <cstdint>
#include <fstream>
#include <string>

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

// Threads of this process (entries of /proc/self/task).
inline int ThreadCount() {
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return -1;
  int n = 0;
  while (const dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(d);
  return n;
}

inline double Mib(uint64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

}  // namespace kvidx::server::testing
