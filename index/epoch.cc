#include "index/epoch.h"

#include <new>

namespace kvidx::internal {

namespace {

// Process-wide thread slot numbers, shared by every domain: a thread uses the
// same slot index in all domains, returned to the pool when it exits.
class ThreadSlots {
 public:
  static ThreadSlots& Get() {
    static ThreadSlots* s = new ThreadSlots();  // never destroyed: threads may exit late
    return *s;
  }
  uint32_t Acquire() KVIDX_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    if (!free_.empty()) {
      uint32_t s = free_.back();
      free_.pop_back();
      return s;
    }
    if (next_ < EpochDomain::kMaxThreads) {
      // Counted before the thread can pin with it (see HandedOut).
      handed_out_.store(next_ + 1, std::memory_order_seq_cst);
      return next_++;
    }
    return EpochDomain::kMaxThreads;  // none left: fallback
  }
  // Slots below this have been handed out; the others were never pinned.
  // Reclaim scans only these: a slot handed out after its scan belongs to
  // a reader that pins after the scan, which (as a reader that pins late
  // on a scanned slot) cannot reach what was retired before.
  uint32_t HandedOut() const { return handed_out_.load(std::memory_order_seq_cst); }
  void Release(uint32_t s) KVIDX_EXCLUDES(mu_) {
    if (s >= EpochDomain::kMaxThreads) return;
    MutexLock lock(mu_);
    free_.push_back(s);
  }

 private:
  Mutex mu_;
  std::vector<uint32_t> free_ KVIDX_GUARDED_BY(mu_);
  uint32_t next_ KVIDX_GUARDED_BY(mu_) = 0;
  std::atomic<uint32_t> handed_out_{0};
};

struct ThreadSlot {
  uint32_t index;
  ThreadSlot() : index(ThreadSlots::Get().Acquire()) {}
  ~ThreadSlot() { ThreadSlots::Get().Release(index); }
};

uint32_t MySlot() {
  thread_local ThreadSlot slot;
  return slot.index;
}

}  // namespace

EpochDomain::EpochDomain() : slots_(new Slot[kMaxThreads]) {}

EpochDomain::~EpochDomain() {
  for (const Retired& r : retired_) r.deleter(r.p);
  delete[] slots_;
}

EpochDomain::ReadGuard::ReadGuard(EpochDomain& d) : d_(d), slot_(MySlot()) {
  if (slot_ >= kMaxThreads) {
    d_.fallback_.lock_shared();
    return;
  }
  uint64_t e = d_.global_.load(std::memory_order_seq_cst);
  // Dekker pairing with Reclaim(): either it sees our pin, or we see the
  // unlink that preceded its epoch bump.
#ifdef KVIDX_TSAN
  d_.slots_[slot_].epoch.exchange(e, std::memory_order_seq_cst);
#else
  d_.slots_[slot_].epoch.store(e, std::memory_order_seq_cst);
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

EpochDomain::ReadGuard::~ReadGuard() {
  if (slot_ >= kMaxThreads) {
    d_.fallback_.unlock_shared();
    return;
  }
  d_.slots_[slot_].epoch.store(0, std::memory_order_release);
}

void EpochDomain::Retire(void* p, void (*deleter)(void*)) {
  {
    MutexLock lock(mu_);
    retired_.push_back({global_.fetch_add(1, std::memory_order_seq_cst), p, deleter});
  }
  Reclaim();
}

void EpochDomain::Reclaim() {
#ifdef KVIDX_TSAN
  global_.fetch_add(0, std::memory_order_seq_cst);
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
  // Only what was retired before this point may go: an item another
  // writer retires after the scan below may be in use by a reader that
  // pinned after its slot was read.
  uint64_t min_active = global_.load(std::memory_order_seq_cst);
  const uint32_t slots = ThreadSlots::Get().HandedOut();
  for (uint32_t i = 0; i < slots; ++i) {
    uint64_t e = slots_[i].epoch.load(std::memory_order_seq_cst);
    if (e != 0 && e < min_active) min_active = e;
  }
  std::vector<Retired> to_free;
  {
    MutexLock lock(mu_);
    if (retired_.empty()) return;
    // Fallback readers are not tracked per epoch: free only when none runs.
    std::unique_lock<std::shared_mutex> fb(fallback_, std::try_to_lock);
    if (!fb.owns_lock()) return;
    size_t keep = 0;
    for (Retired& r : retired_) {
      if (r.epoch < min_active) {
        to_free.push_back(r);
      } else {
        retired_[keep++] = r;
      }
    }
    retired_.resize(keep);
  }
  for (const Retired& r : to_free) r.deleter(r.p);
}

}  // namespace kvidx::internal
