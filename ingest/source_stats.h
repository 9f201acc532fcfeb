// SourceStats: per-source counters and gauges, and their rendering into
// neutral metric samples.
//
// Written by the source's ingest thread only (relaxed atomics: each value is
// independent, readers want a recent value, not a consistent cut), read from
// any thread (metrics scrape, admin API). Owned by shared_ptr so a scrape that
// races with RemoveSource still reads valid memory.
//
// MetricsRegistry holds the stats of every live source and renders them as
// samples of the families in ingest_metrics.h; the server maps samples to
// its exporter. Ingest never depends on a metrics library.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/metric.h"
#include "index/source_state.h"
#include "ingest/decoder.h"
#include "ingest/event.h"

namespace kvidx::ingest {

// The one SourceState of the service (index/source_state.h): ingest drives
// it, the index reports it with every answer.
using kvidx::SourceState;
using kvidx::kNumSourceStates;
using kvidx::SourceStateName;

enum class ReplayResult : uint8_t {
  kOk,           // everything from the requested seq was replayed
  kPartial,      // the ring no longer held the requested seq (overrun)
  kTimeout,      // no complete reply after all retries
  kUnavailable,  // the source has no replay endpoint
};
inline constexpr size_t kNumReplayResults = 4;
std::string_view ReplayResultName(ReplayResult r);  // "ok", "partial", ...

// Decode-error reasons: the decoder's (DecodeErrorReason, same order) plus
// ingest's own.
enum class IngestErrorReason : uint8_t {
  kTopicMismatch = 8,  // a live message whose topic no source on the socket claims
  kReplayFrame = 9,    // a malformed replay reply (frame count, delimiter, seq width)
};
inline constexpr size_t kNumErrorReasons = 10;
std::string_view ErrorReasonLabel(size_t reason);  // "frame_count", ..., "topic_mismatch", "replay_frame"
inline size_t ErrorIndex(DecodeErrorReason r) { return static_cast<size_t>(r); }
inline size_t ErrorIndex(IngestErrorReason r) { return static_cast<size_t>(r); }

inline constexpr size_t kNumEventTypes = 3;  // EventType values

// A number no other SourceStats of this process has.
inline uint64_t NextSourceIncarnation() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

struct SourceStats {
  // Identity (immutable after construction).
  // A source removed and added again keeps its name and SourceId but is a
  // new engine (an empty cache): this tells the two apart.
  const uint64_t incarnation = NextSourceIncarnation();
  std::string source;  // "<replica>/dp<rank>"
  std::string replica;
  uint32_t dp_rank = 0;
  std::string endpoint;  // the SUB endpoint in use (a bound wildcard port resolved)

  std::atomic<uint64_t> batches{0};               // applied (live + replayed)
  std::array<std::atomic<uint64_t>, kNumEventTypes> events{};
  std::atomic<uint64_t> seq_gaps{0};
  std::atomic<uint64_t> batches_replayed{0};
  std::array<std::atomic<uint64_t>, kNumReplayResults> replay_requests{};
  std::atomic<uint64_t> batches_lost{0};
  std::atomic<uint64_t> seq_implausible{0};       // jumps beyond ReplayOptions::max_seq_jump, dropped
  std::atomic<uint64_t> duplicate_batches{0};
  std::atomic<uint64_t> engine_restarts{0};
  std::array<std::atomic<uint64_t>, kNumErrorReasons> decode_errors{};
  std::atomic<uint64_t> unknown_events{0};
  std::atomic<uint64_t> dp_rank_mismatches{0};    // batch.data_parallel_rank != source rank
  std::atomic<uint64_t> resyncs{0};               // operator resyncs
  std::atomic<uint64_t> peer_connects{0};         // monitor: handshakes with the PUB peer
  std::atomic<uint64_t> peer_disconnects{0};

  std::atomic<uint8_t> state{static_cast<uint8_t>(SourceState::kConnecting)};
  std::atomic<int64_t> last_seq{-1};              // last applied seq; -1 = none yet
  std::atomic<double> last_batch_ts{0};           // engine wall clock of the last applied batch; 0 = none

  SourceState current_state() const { return static_cast<SourceState>(state.load(std::memory_order_relaxed)); }
  uint64_t replay_count(ReplayResult r) const {
    return replay_requests[static_cast<size_t>(r)].load(std::memory_order_relaxed);
  }
  uint64_t decode_error_total() const;

  static void Inc(std::atomic<uint64_t>& c, uint64_t n = 1) { c.fetch_add(n, std::memory_order_relaxed); }
};

using kvidx::MetricSample;

// Appends every sample of one source. `now_wall` (seconds since the epoch)
// drives kvidx_source_lag_seconds, which is omitted before the first batch.
void RenderSourceStats(const SourceStats& s, double now_wall, std::vector<MetricSample>* out);

// The set of live sources' stats. Thread-safe; Add/Remove are control-plane
// calls (a mutex, never held across I/O); Render copies the pointer list under
// the mutex and reads the atomics outside it.
class MetricsRegistry {
 public:
  void Add(std::shared_ptr<const SourceStats> stats);
  void Remove(const SourceStats* stats);
  std::vector<std::shared_ptr<const SourceStats>> Snapshot() const;
  // now_wall <= 0 means "use the system clock".
  std::vector<MetricSample> Render(double now_wall = 0) const;

 private:
  mutable std::mutex mu_;
  std::vector<std::shared_ptr<const SourceStats>> sources_;
};


}  // namespace kvidx::ingest
