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
  if (attempts_ == 0) {
    if (rss < baseline_) baseline_ = rss;
    if (rss < baseline_ + burst_bytes_) return false;
  } else if (now < next_attempt_) {
    return false;
  }
  trim_();
  ++trims_;
  ++attempts_;
  const uint64_t after = rss_after_trim();
  if (after < baseline_ + burst_bytes_ || attempts_ >= kAttempts) {
    if (after >= baseline_ + burst_bytes_) baseline_ = after;
    attempts_ = 0;
    return true;
  }
  next_attempt_ = now + kFirstRetry * (1 << (attempts_ - 1));
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
