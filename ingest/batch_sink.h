// BatchSink: where ingest delivers what it decoded. The server adapts it to
// the block index; tests and benchmarks count.
//
// Threading contract:
//   - Every call about one source is made on that source's ingest thread, in
//     order: OnSourceAdded, then OnBatch/OnSourceReset/OnSourceStateChanged in
//     sequence order, then OnSourceRemoved. A source never moves threads.
//   - Calls about different sources may come concurrently from different
//     ingest threads (Ingester with num_threads > 1): a sink shared by
//     threads must be thread-safe across sources.
//   - Calls are made on the data plane: do not block (no I/O, no unbounded
//     lock waits). Ingest holds no lock of its own while calling.
//   - Callbacks must not throw; ingest catches and logs as a last resort, but
//     a throw leaves the source's view of the index undefined.
//
// Ordering guarantee: OnBatch sees, per source, strictly increasing sequence
// numbers with no batch twice, except after an OnSourceReset, which starts a
// new sequence (a restarted engine counts from 0 again).
#pragma once

#include <cstdint>
#include <string_view>

#include "ingest/event.h"
#include "ingest/source_config.h"
#include "ingest/source_stats.h"

namespace kvidx::ingest {

enum class ResetReason : uint8_t {
  kEngineRestart,   // the engine's sequence went backwards: a new publisher, empty cache
  kOperatorResync,  // an operator asked to rebuild this source from the replay buffer
};
std::string_view ResetReasonName(ResetReason r);  // "engine_restart", "operator_resync"

class BatchSink {
 public:
  virtual ~BatchSink() = default;

  // A source was added to an ingest thread (before any other call about it).
  virtual void OnSourceAdded(const SourceSpec& /*source*/) {}

  // One decoded batch, applied in sequence order. `batch` and every view in
  // it are valid only during the call (they borrow the received message).
  // `replayed` is true if the batch came from the replay ROUTER.
  virtual void OnBatch(const SourceSpec& source, uint64_t seq, const EventBatch& batch, bool replayed) = 0;

  // Drop every block this source announced: the engine restarted (its cache
  // is empty and it sends no AllBlocksCleared) or an operator resync starts.
  // Affects this source only.
  virtual void OnSourceReset(const SourceSpec& source, ResetReason reason) = 0;

  // The source's state changed (e.g. EXACT -> DEGRADED). Informational.
  virtual void OnSourceStateChanged(const SourceSpec& /*source*/, SourceState /*from*/, SourceState /*to*/) {}

  // The source was removed at run time (RemoveEngine/RemoveSource; not
  // called when the ingester merely stops, so a shutdown snapshot still sees
  // every source). The engine is no longer watched: the index should drop its
  // blocks. No call about it follows.
  virtual void OnSourceRemoved(const SourceSpec& /*source*/) {}
};

inline std::string_view ResetReasonName(ResetReason r) {
  switch (r) {
    case ResetReason::kEngineRestart: return "engine_restart";
    case ResetReason::kOperatorResync: return "operator_resync";
  }
  return "unknown";
}

}  // namespace kvidx::ingest
