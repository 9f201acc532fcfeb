#include "server/route_clock.h"

#include <limits>

namespace kvidx::server {

Result<uint64_t> RouteClock::Advance(uint64_t by_us) {
  if (!simulated_) {
    return Status::FailedPrecondition("the route clock is the wall clock (routing.clock: wall); only a server "
                                      "with routing.clock: simulated takes its time from AdvanceClock");
  }
  // steady_clock counts nanoseconds in an int64: keep start + offset inside it.
  constexpr uint64_t kMaxUs = std::numeric_limits<int64_t>::max() / 1000 / 2;
  uint64_t now = offset_us_.load(std::memory_order_relaxed);
  for (;;) {
    if (by_us > kMaxUs - now) return Status::InvalidArgument("by_us: the simulated clock would overflow");
    if (offset_us_.compare_exchange_weak(now, now + by_us, std::memory_order_relaxed)) return now + by_us;
  }
}

}  // namespace kvidx::server
