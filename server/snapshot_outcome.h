// What one snapshot of a node wrote (Node::Snapshot, the admin RPC, the
// shutdown snapshot).
#pragma once

#include <cstdint>

namespace kvidx::server {

struct SnapshotOutcome {
  uint64_t generation = 0;
  uint64_t bytes = 0;
  uint64_t owners = 0;
  double duration_seconds = 0;
};

}  // namespace kvidx::server
