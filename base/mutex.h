// Mutex: std::mutex as a clang thread-safety capability, so fields can be
// KVIDX_GUARDED_BY it and functions can KVIDX_REQUIRES it
// (base/thread_annotations.h).
// MutexLock holds one for a scope. Same cost as std::mutex and
// std::unique_lock.
//
// Thread-safe.
#pragma once

#include <mutex>

#include "base/thread_annotations.h"

namespace kvidx {

class KVIDX_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() KVIDX_ACQUIRE() { mu_.lock(); }
  void Unlock() KVIDX_RELEASE() { mu_.unlock(); }
  // For code the analysis cannot follow (a lambda run under the lock):
  // declares the mutex held. Checks nothing at run time.
  void AssertHeld() const KVIDX_ASSERT_CAPABILITY(this) {}

 private:
  std::mutex mu_;
};

// Holds `mu` from construction to destruction, or to an earlier Unlock().
class KVIDX_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) KVIDX_ACQUIRE(mu) : mu_(&mu) { mu.Lock(); }
  ~MutexLock() KVIDX_RELEASE() {
    if (mu_ != nullptr) mu_->Unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Unlock() KVIDX_RELEASE() {
    mu_->Unlock();
    mu_ = nullptr;
  }

 private:
  Mutex* mu_;
};

}  // namespace kvidx
