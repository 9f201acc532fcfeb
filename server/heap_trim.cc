#include "server/heap_trim.h"

#include <unistd.h>

#include <cstdio>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace kvidx::server {

namespace {

void TrimGlibcHeap() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

}  // namespace

HeapTrimmer::HeapTrimmer(uint64_t burst_bytes, std::function<void()> trim)
    : burst_bytes_(burst_bytes), trim_(trim ? std::move(trim) : TrimGlibcHeap) {}

bool HeapTrimmer::Poll(Clock::time_point now, uint64_t rss, const std::function<uint64_t()>& rss_after_trim) {
  if (!episode_) {
    if (rss < baseline_) baseline_ = rss;
    if (rss < baseline_ + burst_bytes_) return false;
    episode_ = true;
    fruitless_ = 0;
  } else if (now < next_attempt_) {
    return false;
  }
  trim_();
  ++trims_;
  const uint64_t after = rss_after_trim();
  if (after < baseline_ + burst_bytes_) {
    episode_ = false;
    return true;
  }
  fruitless_ = after + kProgressBytes <= rss ? 0 : fruitless_ + 1;
  if (fruitless_ >= kAttempts) {
    baseline_ = after;
    episode_ = false;
    return true;
  }
  const int doublings = fruitless_ > 0 ? fruitless_ - 1 : 0;
  next_attempt_ = now + kFirstRetry * (1 << doublings);
  return true;
}

bool HeapTrimmer::Poll(Clock::time_point now) { return Poll(now, ProcessRssBytes(), ProcessRssBytes); }

uint64_t ProcessRssBytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long long size = 0, resident = 0;
  const int n = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  if (n != 2) return 0;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

}  // namespace kvidx::server
