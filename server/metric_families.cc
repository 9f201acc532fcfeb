#include "server/metric_families.h"

#include "ingest/ingest_metrics.h"
#include "server/node_metrics.h"
#include "server/rpc_metrics.h"

namespace kvidx::server {

std::vector<const MetricFamily*> AllMetricFamilies() {
  std::vector<const MetricFamily*> out;
  for (MetricFamilyTable t : {ingest::IngestMetricFamilies(), NodeMetricFamilies(), RpcMetricFamilies()}) {
    out.insert(out.end(), t.begin(), t.end());
  }
  out.push_back(&metric::kServing);
  return out;
}

}  // namespace kvidx::server
