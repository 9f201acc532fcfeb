// HeapTrimmer: gives memory the process freed after a burst back to the OS.
//
// glibc keeps freed memory in its arenas for reuse and returns it only from
// the top of a heap. After a burst that allocated much and freed it all --
// e.g. the backlog of gRPC calls an HTTP/2 rapid-reset flood leaves behind,
// ~20 KB per reset stream -- RSS would stay at the burst's peak for the
// life of the process. malloc_trim() returns such free pages, but it walks
// every free chunk under the arena locks (about a second for a heap with
// millions of free chunks), so it must not run on a timer. And glibc's own
// count of free bytes (mallinfo2) walks the same lists, so RSS is the cue.
//
// Policy, fed the RSS every poll (cheap: /proc/self/statm): RSS at least
// `burst_bytes` above the baseline (the lowest RSS since the last burst)
// starts an episode of trims. It ends when a trim brings RSS back under
// baseline + burst_bytes. While trims keep returning memory (at least
// kProgressBytes each: a backlog is still draining and freeing) they come
// every kFirstRetry; after a trim that returned little the gap doubles, and
// after kAttempts such trims in a row the memory is really in use (the
// index grew): the RSS then becomes the baseline. So a burst's memory is
// returned at most kFirstRetry after it has been freed, and memory in use
// costs four trims at 0, 4, 12 and 28 s.
//
// Thread-compatible: one caller (the server's background thread).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>

namespace kvidx::server {

class HeapTrimmer {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr int kAttempts = 4;
  static constexpr std::chrono::seconds kFirstRetry{4};
  static constexpr uint64_t kProgressBytes = uint64_t{16} << 20;

  // `trim` releases free memory (malloc_trim by default; tests pass a fake).
  explicit HeapTrimmer(uint64_t burst_bytes, std::function<void()> trim = nullptr);

  // One poll with the current RSS; `rss_after_trim` is read again only if
  // this poll trimmed. Returns true if it trimmed.
  bool Poll(Clock::time_point now, uint64_t rss, const std::function<uint64_t()>& rss_after_trim);
  // Polls with this process's RSS.
  bool Poll(Clock::time_point now);

  uint64_t trims() const { return trims_; }
  uint64_t baseline() const { return baseline_; }

 private:
  uint64_t burst_bytes_;
  std::function<void()> trim_;
  uint64_t baseline_ = UINT64_MAX;
  bool episode_ = false;
  int fruitless_ = 0;  // trims in a row that returned little
  Clock::time_point next_attempt_{};
  uint64_t trims_ = 0;
};

// This process's resident set size in bytes (0 if unreadable).
uint64_t ProcessRssBytes();

}  // namespace kvidx::server
