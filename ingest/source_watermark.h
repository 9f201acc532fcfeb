// SourceWatermark: where one source (a (replica, DP rank) engine stream)
// stands, as the index last applied it.
//
// IndexSink reports the stream position of every bound source; a snapshot
// stores one per SourceId (server/snapshot_format.h), adding the index's
// view of the source (state, capacity), and a restore resumes each source
// from it. The source's name is ingest::SourceName(replica, dp_rank).
//
// Engine identity. Sequence numbers alone cannot tell "the same engine went
// on" from "the engine restarted and its new sequence numbers already
// exceed ours": both look like a higher seq. So the watermark also keeps the
// fingerprint of the last applied batch (ingest/batch_fingerprint.h, a hash
// of its payload bytes, which carry the engine's own timestamp). A resumed
// source asks for replay from last_seq itself and compares (sequencer.h):
// the same engine still has that batch and returns it byte for byte; a
// restarted engine has nothing at that seq or a batch with another
// fingerprint.
#pragma once

#include <cstdint>
#include <string>

#include "index/source_registry.h"

namespace kvidx::ingest {

struct SourceWatermark {
  SourceId source_id = 0;
  std::string replica;
  uint32_t dp_rank = 0;
  std::string model;
  std::string endpoint;  // informational (logs): where it was read from
  bool has_seq = false;  // false: no batch applied yet (cold start)
  uint64_t last_seq = 0;                // last applied batch sequence number
  uint64_t last_batch_fingerprint = 0;  // BatchFingerprint of that batch (0 = unknown)
  double last_batch_ts = 0;             // that batch's engine timestamp (seconds)
  // Filled by snapshots only: the index's view of the source.
  uint8_t state = 0;                 // kvidx::SourceState (index/source_state.h), as its stable number
  uint64_t gpu_capacity_blocks = 0;  // BlockIndex::SetSourceCapacity value; 0 = unknown

  friend bool operator==(const SourceWatermark&, const SourceWatermark&) = default;
};

}  // namespace kvidx::ingest
