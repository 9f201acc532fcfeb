// RouteClock: the time Route's terms run on — the age of a scraped load
// reading, warm-up since a rank joined, prediction and route TTLs.
//
// Wall mode (the default): the monotonic clock. Simulated mode
// (routing.clock: simulated, for simulators only): time starts when the
// server starts and moves only by Advance(), so a simulator that replays a
// fleet faster than real time, and advances the clock to its own time
// before each call, gets the same decisions on every run whatever the
// machine's load.
//
// Thread-safe: Now() is one relaxed atomic load; Advance() a
// compare-and-swap. Advance is relative, so one simulator drives a clock:
// two driving one server would add their steps up.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include "base/status.h"

namespace kvidx::server {

class RouteClock {
 public:
  using Clock = std::chrono::steady_clock;

  explicit RouteClock(bool simulated) : simulated_(simulated), start_(Clock::now()) {}
  RouteClock(const RouteClock&) = delete;
  RouteClock& operator=(const RouteClock&) = delete;

  bool simulated() const { return simulated_; }

  Clock::time_point Now() const {
    if (!simulated_) return Clock::now();
    return start_ + std::chrono::microseconds(offset_us_.load(std::memory_order_relaxed));
  }

  // Moves simulated time forward by `by_us` (0 reads it) and returns the
  // simulated microseconds since the start. FAILED_PRECONDITION on the wall
  // clock; INVALID_ARGUMENT past ~146 simulated years.
  Result<uint64_t> Advance(uint64_t by_us);

 private:
  const bool simulated_;
  const Clock::time_point start_;
  std::atomic<uint64_t> offset_us_{0};
};

}  // namespace kvidx::server
