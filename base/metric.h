// The metric model every library exports through, independent of any
// metrics library: a MetricFamily (name, kind, help) is declared once, as a
// constant next to the code that fills it, and listed in its area's family
// table; samples point at their family instead of repeating its name. The
// server maps families and samples to its exporter, prints every table
// (kvidx-server --print-metric-families) and the deploy check compares that
// list with the documented one in both directions.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvidx {

enum class MetricKind : uint8_t { kCounter, kGauge, kHistogram };

inline std::string_view MetricKindName(MetricKind k) {
  switch (k) {
    case MetricKind::kCounter: return "counter";
    case MetricKind::kGauge: return "gauge";
    case MetricKind::kHistogram: return "histogram";
  }
  return "untyped";
}

struct MetricFamily {
  std::string_view name;
  MetricKind kind;
  std::string_view help;
};

// An area's families, in export order.
using MetricFamilyTable = std::span<const MetricFamily* const>;

// One counter or gauge value of a family. (Histograms are rendered by the
// code that owns their buckets.)
struct MetricSample {
  const MetricFamily* family = nullptr;
  std::vector<std::pair<std::string, std::string>> labels;
  double value = 0;

  std::string_view name() const { return family->name; }
};

}  // namespace kvidx
