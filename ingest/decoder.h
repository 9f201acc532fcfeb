// Decoder: one vLLM KV-event ZMQ message -> a typed EventBatch.
//
// Accepts every wire era vLLM has shipped (see docs/ARCHITECTURE.md and
// ../shared/reference/vllm-kv-events.md): outer batch [ts, events] or
// [ts, events, rank] (an outer map is tolerated), events as tagged arrays of
// any length or tagged maps with unknown keys ignored, non-minimal headers,
// hashes as any msgpack int or bin.
//
// Errors are values, never exceptions: a malformed message yields a
// DecodeError whose `reason` is a stable label (for the metric
// kvidx_decode_errors_total{reason}) and whose `detail` names the field.
// An event with an unknown tag is skipped and counted in
// EventBatch::unknown_events; the rest of the batch is kept.
//
// Allocation is bounded by the payload size: every declared length is
// checked against the bytes that remain before anything is reserved. An
// array/map count that cannot fit in the remaining bytes is kTooLarge; a
// str/bin/ext byte length running past the end is kTruncated.
//
// Leniency, decided once (forward compatibility without guessing):
//   - an outer array longer than 3, event arrays longer than the last array
//     schema (BlockStored 11 fields, BlockRemoved 3), unknown map keys and
//     non-str map keys are skipped; positions past those schemas are ignored
//     even if a later field (locality, origin, ...) would sit there, because
//     no vLLM ever sent those fields in array form;
//   - missing fields (shorter arrays, absent keys) are absent / 0 / empty;
//     `origin` (proposed #51699) is read from map-form BlockStored only;
//   - a duplicate key in an event map: the last one wins (a second outer
//     `events` is kBadEnvelope: it would merge two batches);
//   - strings (tags, keys, medium, ...) must be msgpack str: msgspec always
//     encodes a Python str as str, so a bin there is kWrongType;
//   - nil where vLLM never sends it (block_hashes, token_ids, block_size)
//     is kWrongType; so is an integer outside int64 (except hashes, which
//     take any 64-bit int or bin).
//
// Thread-compatible: a Decoder holds only limits; use one per thread or share
// a const one.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "ingest/event.h"

namespace kvidx::ingest {

enum class DecodeErrorReason : uint8_t {
  kFrameCount,      // not topic/seq/payload
  kSeqLength,       // sequence frame not 8 bytes
  kTruncated,       // msgpack ends early
  kBadEnvelope,     // outer batch shape wrong (not [ts, events(, rank)])
  kBadEvent,        // an event is neither a tagged array nor a tagged map
  kWrongType,       // a field has a msgpack type vLLM never sends there (or byte 0xc1)
  kTooLarge,        // a length beyond the configured limits or the payload, or nesting > max_depth
  kTrailingBytes,   // bytes after the outer object
};

std::string_view DecodeErrorReasonLabel(DecodeErrorReason r);  // "frame_count", ...

struct DecodeError {
  DecodeErrorReason reason;
  std::string detail;  // e.g. "event 2 (BlockStored): field token_ids: expected array, got str"
};

struct DecodeLimits {
  uint32_t max_events_per_batch = 1u << 20;
  uint32_t max_hashes_per_event = 1u << 20;
  uint32_t max_tokens_per_event = 1u << 24;
  uint32_t max_depth = 32;         // nesting bound when skipping unknown values (capped at 256)
};

// The replay stream's end-of-reply sequence number: 8 bytes of 0xff.
inline constexpr uint64_t kReplayEndSeq = ~uint64_t{0};

// One ZMQ message as received: [topic, seq(8 bytes BE), payload].
struct RawMessage {
  std::string_view topic;
  uint64_t seq = 0;
  std::string_view payload;
};

class Decoder {
 public:
  explicit Decoder(DecodeLimits limits = {}) : limits_(limits) {}

  // Checks the sequence width. `frames` views the message's three parts:
  // the receiver counts them (kFrameCount) as it reads them, since it must
  // bound how many it keeps anyway.
  static bool SplitFrames(std::span<const std::string_view, 3> frames, RawMessage* out, DecodeError* err);

  // Decodes `payload` into `out` (cleared first). On failure returns false,
  // fills `err`, and leaves `out` in an unspecified but valid state.
  bool DecodePayload(std::string_view payload, EventBatch* out, DecodeError* err) const;

 private:
  DecodeLimits limits_;
};

}  // namespace kvidx::ingest
