// Internal to the block index: a sequence lock, the protocol between one
// writer and lock-free readers of a structure (a run of the run store;
// Shard keeps its own copy of the same protocol, inlined by hand into its
// query walk: moving it onto this class cost the walk ~2% more
// instructions in GCC 12's code for it).
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

#include "index/epoch.h"   // KVIDX_TSAN

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
  uint64_t ReadBeginSlow() const;   // a write section is open: wait

  std::atomic<uint64_t> seq_{0};
};

}  // namespace kvidx::internal
