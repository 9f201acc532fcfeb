// EpochDomain: safe memory reclamation for lock-free readers.
//
// Block-index readers never take a lock; they validate what they read with a
// per-shard sequence counter and retry (see block_index.h). That makes torn
// reads harmless but not reads of freed memory, so the few structures a
// writer replaces wholesale (a shard's hash table when it grows) are retired
// here and freed only once every reader that could have seen them has left.
//
// Readers pin the current epoch in a per-thread slot (one cache line each,
// no shared writes); Retire() stamps garbage with the epoch and Reclaim()
// frees what is older than every pinned reader. Cost per query: one store
// and one fence to pin, one store to unpin.
//
// Up to kMaxThreads threads hold a slot at a time (slots are returned at
// thread exit); further threads fall back to a shared lock. Guards must not
// nest on one thread for the same domain.
//
// Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <shared_mutex>
#include <vector>

#include "base/mutex.h"
#include "base/thread_annotations.h"

// KVIDX_TSAN: set when building under ThreadSanitizer, which rejects
// atomic_thread_fence (GCC -Wtsan); the index then uses RMW operations with
// the same ordering instead.
#if defined(__SANITIZE_THREAD__)
#define KVIDX_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define KVIDX_TSAN 1
#endif
#endif

namespace kvidx::internal {

class EpochDomain {
 public:
  static constexpr uint32_t kMaxThreads = 512;

  EpochDomain();
  ~EpochDomain();  // frees everything still retired
  EpochDomain(const EpochDomain&) = delete;
  EpochDomain& operator=(const EpochDomain&) = delete;

  class ReadGuard {
   public:
    explicit ReadGuard(EpochDomain& d);
    ~ReadGuard();
    ReadGuard(const ReadGuard&) = delete;
    ReadGuard& operator=(const ReadGuard&) = delete;

   private:
    EpochDomain& d_;
    uint32_t slot_;
  };

  // Frees `p` with `deleter` once no reader can hold it. `p` must already
  // be unreachable for new readers.
  void Retire(void* p, void (*deleter)(void*)) KVIDX_EXCLUDES(mu_);
  // Frees what is safe to free now.
  void Reclaim() KVIDX_EXCLUDES(mu_);

 private:
  struct alignas(64) Slot {
    std::atomic<uint64_t> epoch{0};  // 0 = not reading
  };
  struct Retired {
    uint64_t epoch;
    void* p;
    void (*deleter)(void*);
  };

  std::atomic<uint64_t> global_{1};
  Slot* slots_;   // kMaxThreads
  std::shared_mutex fallback_;   // readers without a slot
  Mutex mu_;
  std::vector<Retired> retired_ KVIDX_GUARDED_BY(mu_);
};

}  // namespace kvidx::internal
