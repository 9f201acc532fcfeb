#include "index/internal/seq_lock.h"

#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace kvidx::internal {

uint64_t SeqLock::ReadBeginSlow() const {
  for (int spins = 0;; ++spins) {
    const uint64_t s = seq_.load(std::memory_order_acquire);
    if ((s & 1) == 0) return s;
    // Sections are short: spin briefly, then yield in case the writer was
    // preempted inside one.
    if (spins < 64) {
#if defined(__x86_64__) || defined(__i386__)
      _mm_pause();
#endif
    } else {
      std::this_thread::yield();
    }
  }
}

}  // namespace kvidx::internal
