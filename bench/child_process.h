// Helpers for bench drivers that measure resident memory: each run happens
// in a forked child so that its RSS growth is not flattered (or inflated) by
// pages an earlier run freed or left behind.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <type_traits>
#include <vector>

namespace kvidx::bench {

// Resident set size of this process in bytes (0 if /proc is unreadable).
inline uint64_t ResidentBytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long size = 0, resident = 0;
  int n = std::fscanf(f, "%lu %lu", &size, &resident);
  std::fclose(f);
  return n == 2 ? resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE)) : 0;
}

// Runs `fn` (returning a trivially copyable T) in a forked child and copies
// its result back through a pipe. False if the child failed.
template <typename T, typename Fn>
bool RunInChild(Fn fn, T* out) {
  static_assert(std::is_trivially_copyable_v<T>);
  int fds[2];
  if (pipe(fds) != 0) return false;
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0) {
    close(fds[0]);
    T r = fn();
    ssize_t n = write(fds[1], &r, sizeof(r));
    _exit(n == static_cast<ssize_t>(sizeof(r)) ? 0 : 1);
  }
  close(fds[1]);
  ssize_t n = read(fds[0], out, sizeof(*out));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return n == static_cast<ssize_t>(sizeof(*out)) && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace kvidx::bench
