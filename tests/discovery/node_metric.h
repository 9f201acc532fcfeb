// NodeMetric: one sample of a Node's metrics, read in process by the
// discovery tests (test-only).
#pragma once

#include <cmath>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/node.h"

namespace kvidx::testing {

using MetricLabels = std::vector<std::pair<std::string, std::string>>;

// The value of the first sample of `name` carrying all of `labels` (it may
// carry more); NaN if there is none.
inline double NodeMetric(const server::Node& node, std::string_view name, const MetricLabels& labels) {
  for (const MetricSample& s : node.RenderMetrics()) {
    if (s.name() != name) continue;
    bool all = true;
    for (const auto& l : labels) {
      bool found = false;
      for (const auto& have : s.labels) found = found || have == l;
      all = all && found;
    }
    if (all) return s.value;
  }
  return std::nan("");
}

}  // namespace kvidx::testing
