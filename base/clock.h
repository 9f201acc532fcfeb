// The service's two clocks, named once: wall time (Unix epoch; what engines
// stamp batches with and snapshots record) and a monotonic clock for
// durations and timeouts. Logic that must be tested with a fake clock takes
// its time from the caller (the Sequencer's delegate, HeapTrim's `now`)
// rather than calling these.
#pragma once

#include <chrono>
#include <cstdint>

namespace kvidx {

using MonoClock = std::chrono::steady_clock;

// Seconds since the Unix epoch, with sub-second precision.
inline double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Milliseconds since the Unix epoch.
inline uint64_t WallMillis() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
}

}  // namespace kvidx
