// Internal to the block index: a sequence lock, the protocol between one
// writer and lock-free readers of a structure (a shard, a run).
//
// The writer wraps each change in BeginWrite/EndWrite (the count is odd
// inside); a reader takes the count with ReadBegin, loads what it needs
// with relaxed atomic loads, and keeps the result only if ReadValid says
// no write section overlapped. A reader may so see torn values and must
// survive them (bounds-checked handles, bounded loops), discarding what it
// computed from them; memory it reaches must stay allocated while it reads
// (arenas never unmapped, or an epoch domain).
//
// Writer: one thread at a time (the caller excludes others). Readers: any
// thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>

#include "index/epoch.h"   // KVIDX_TSAN

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace kvidx::internal {

class SeqLock {
 public:
  // --- Readers
  // The count to validate against; waits while a write section is open.
  [[gnu::always_inline]] uint64_t ReadBegin() const {
    const uint64_t s = seq_.load(std::memory_order_acquire);
    return (s & 1) == 0 ? s : ReadBeginSlow();
  }
  // Whether no write section overlapped the reads since ReadBegin() == s.
  [[gnu::always_inline]] bool ReadValid(uint64_t s) const {
#ifdef KVIDX_TSAN
    // TSan does not model fences (GCC -Wtsan): a read-dont-modify-write
    // orders the data loads before it as the fence does.
    return const_cast<std::atomic<uint64_t>&>(seq_).fetch_add(0, std::memory_order_acq_rel) == s;
#else
    std::atomic_thread_fence(std::memory_order_acquire);
    return seq_.load(std::memory_order_relaxed) == s;
#endif
  }

  // --- The writer
  void BeginWrite() {
#ifdef KVIDX_TSAN
    seq_.fetch_add(1, std::memory_order_acq_rel);
#else
    seq_.store(seq_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
#endif
  }
  void EndWrite() { seq_.store(seq_.load(std::memory_order_relaxed) + 1, std::memory_order_release); }

 private:
  [[gnu::noinline]] uint64_t ReadBeginSlow() const {
    for (int spins = 0;; ++spins) {
      const uint64_t s = seq_.load(std::memory_order_acquire);
      if ((s & 1) == 0) return s;
      // Sections are short: spin briefly, then yield in case the writer
      // was preempted inside one.
      if (spins < 64) {
#if defined(__x86_64__) || defined(__i386__)
        _mm_pause();
#endif
      } else {
        std::this_thread::yield();
      }
    }
  }

  std::atomic<uint64_t> seq_{0};
};

}  // namespace kvidx::internal
