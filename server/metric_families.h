// Every metric family kvidx-server exports, from the tables of each area
// (ingest_metrics.h, node_metrics.h, rpc_metrics.h) and the service's own.
// `kvidx-server --print-metric-families` prints this list; the deploy check
// requires it to equal the README's metric table.
#pragma once

#include <vector>

#include "base/metric.h"

namespace kvidx::server {

namespace metric {
inline constexpr MetricFamily kServing{"kvidx_serving", MetricKind::kGauge,
                                       "1 once the first restore and replay pass finished (health SERVING)."};
}  // namespace metric

// In export order; no name twice.
std::vector<const MetricFamily*> AllMetricFamilies();

}  // namespace kvidx::server
