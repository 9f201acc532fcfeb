// Sampled logging: a repeated condition (a malformed message, a drift, a
// failed apply) is logged on its 1st, 2nd, 4th, 8th, ... occurrence, so it
// is visible at once and still cannot flood the log; its exact count lives
// in a metric.
#pragma once

#include <bit>
#include <cstdint>

namespace kvidx {

// `occurrences` counts this one (1 for the first).
inline bool ShouldLogSampled(uint64_t occurrences) { return std::has_single_bit(occurrences); }

}  // namespace kvidx
