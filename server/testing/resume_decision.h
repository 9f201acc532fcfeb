// The resume rule of ingest/sequencer.h stated over a snapshot watermark,
// as a table tests can check. The server never calls it: the sequencer
// applies the rule on the replayed batches themselves.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "server/snapshot_format.h"

namespace kvidx::snapshot {

enum class ResumeDecision : uint8_t {
  kContinue,         // same engine: skip the replayed batch at last_seq, apply the rest
  kEngineRestarted,  // another engine incarnation: clear the source, cold start
  kOverrun,          // last_seq is no longer in the replay buffer: count lost, DEGRADED
};

inline std::string_view ResumeDecisionName(ResumeDecision d) {
  switch (d) {
    case ResumeDecision::kContinue: return "continue";
    case ResumeDecision::kEngineRestarted: return "engine_restarted";
    case ResumeDecision::kOverrun: return "overrun";
  }
  return "unknown";
}

// Decides how to resume a source after a restore, from the first batch the
// engine's replay returned for a request starting at watermark.last_seq
// (nullopt: nothing at or after that seq). Rules:
//   no watermark (has_seq false)                 -> kEngineRestarted (cold start)
//   nothing replayed                             -> kEngineRestarted (its seq is below ours)
//   first seq <  last_seq                        -> kEngineRestarted (seq went backwards)
//   first seq == last_seq, fingerprint equal     -> kContinue
//   first seq == last_seq, fingerprint differs   -> kEngineRestarted
//   first seq >  last_seq                        -> kOverrun (lost >= first - last_seq - 1;
//                                                   a restart is indistinguishable here)
inline ResumeDecision ClassifyResume(const ingest::SourceWatermark& wm, std::optional<uint64_t> first_seq,
                                     uint64_t first_fingerprint) {
  if (!wm.has_seq || !first_seq) return ResumeDecision::kEngineRestarted;
  if (*first_seq < wm.last_seq) return ResumeDecision::kEngineRestarted;
  if (*first_seq > wm.last_seq) return ResumeDecision::kOverrun;
  return first_fingerprint == wm.last_batch_fingerprint ? ResumeDecision::kContinue
                                                        : ResumeDecision::kEngineRestarted;
}

}  // namespace kvidx::snapshot
