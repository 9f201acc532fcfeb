// Internal to the block index: lazily committed memory for arenas whose
// readers take no lock.
#pragma once

#include <atomic>
#include <cstddef>

namespace kvidx::internal {

// Anonymous zero pages from mmap directly; calloc would memset them
// whenever glibc serves it from the heap (e.g. after its dynamic mmap
// threshold rose), committing every directory up front.
void* MapZeroed(size_t bytes);
void Unmap(void* p, size_t bytes);

// Zero-initialised, lazily committed array of atomic pointers: a large
// directory costs nothing until used. Get may run concurrently with Set
// (acquire/release: a published pointer's pointee is visible).
template <typename T>
class PtrDir {
 public:
  explicit PtrDir(size_t n) : n_(n), p_(static_cast<std::atomic<T*>*>(MapZeroed(n * sizeof(std::atomic<T*>)))) {}
  ~PtrDir() { Unmap(p_, n_ * sizeof(std::atomic<T*>)); }
  PtrDir(const PtrDir&) = delete;
  PtrDir& operator=(const PtrDir&) = delete;
  [[gnu::always_inline]] T* Get(size_t i) const {
    if (i < kHead) return head_[i].load(std::memory_order_acquire);
    return i < n_ ? p_[i].load(std::memory_order_acquire) : nullptr;
  }
  void Set(size_t i, T* v) {
    if (i < kHead) {
      head_[i].store(v, std::memory_order_release);
    } else {
      p_[i].store(v, std::memory_order_release);
    }
  }
  size_t size() const { return n_; }

 private:
  // The first entries live in the owning object, hot in cache: a lookup
  // in a small index then touches no directory page (one per shard and
  // kind, which otherwise cost a TLB entry each on the query walk).
  static constexpr size_t kHead = 16;
  size_t n_;
  std::atomic<T*>* p_;
  std::atomic<T*> head_[kHead] = {};
};

}  // namespace kvidx::internal
