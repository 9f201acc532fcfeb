// Tier: where a replica keeps a copy of a block (vLLM's `medium`).
//
// GPU, CPU and STORAGE have fixed ids; any other medium string an engine or
// connector sends ("FS", "OBJ", "SHARED_STORAGE", "CPU_TIER1", ...) is kept
// verbatim and interned to its own id by a TierRegistry. Nothing is guessed:
// "FS" is not folded into STORAGE, because the engine did not say so.
//
// Tier is a plain value; TierRegistry is thread-safe (an internal mutex on
// intern, lock-free Name()/Find() after interning).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"

namespace kvidx {

enum class Tier : uint8_t {
  kGpu = 0,
  kCpu = 1,
  kStorage = 2,
  // Ids 3..kMaxTiers-1 are interned media; see TierRegistry.
};

inline constexpr size_t kMaxTiers = 64;  // ids fit a 64-bit tier mask

class TierRegistry {
 public:
  TierRegistry();
  TierRegistry(const TierRegistry&) = delete;
  TierRegistry& operator=(const TierRegistry&) = delete;

  // Returns the tier for a medium string, interning it on first sight.
  // A missing medium (pre-#19737 engines) means GPU; the caller decides that.
  // OutOfRange once kMaxTiers distinct media have been seen.
  Result<Tier> Intern(std::string_view medium);
  // The tier for `medium` if already known.
  std::optional<Tier> Find(std::string_view medium) const;
  // "GPU", "CPU", "STORAGE" or the interned string; "" for an unused id.
  std::string_view Name(Tier t) const;
  size_t size() const { return count_.load(std::memory_order_acquire); }

 private:
  mutable std::mutex mu_;
  std::array<std::string, kMaxTiers> names_;  // written once per id, before count_ publishes it
  std::atomic<size_t> count_{0};
};

}  // namespace kvidx
