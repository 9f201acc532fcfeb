// Encoder: a typed EventBatch -> the bytes a given vLLM release would publish.
//
// The inverse of Decoder, for everything that has to *produce* vLLM's wire
// format: the fake engine in tests, kvidx-sim, and the benchmarks. Output is
// byte-identical to msgspec's (see ../shared/reference/vllm-kv-events.md
// §3.1): minimal integer forms (non-negative ints never use the signed
// forms), floats always float64, map keys in declaration order with "type"
// first, and the same header-width quirk msgspec has.
//
// A WireEra selects one shipped schema. Fields the era cannot carry (e.g.
// lora_name in array schema v2, locality in any array schema, BlockStored-only
// fields on a BlockRemoved) are silently dropped, exactly as that vLLM release
// would never have sent them.
//
// Encoding never fails and never throws; it allocates only by growing the
// output string (reuse it across calls to avoid that). Thread-safe: all
// functions are pure.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ingest/decoder.h"
#include "ingest/event.h"

namespace kvidx::ingest {

enum class EventForm : uint8_t {
  kMap,    // tagged map, defaults omitted: vLLM main since #42892 (2026-06-09)
  kArray,  // tagged positional array: everything before that
};

// One wire era. Defaults = what current vLLM sends.
struct WireEra {
  EventForm form = EventForm::kMap;
  // Array form only: the BlockStored/BlockRemoved schema (spec §3.5).
  //   1: 5/1 fields (#16750)     2: +medium 6/2 (#19737)   3: +lora_name 7/2
  //   4: +extra_keys 8/2         5: +group_idx 9/3         6: +kind, +sliding_window 11/3
  // Values outside 1..6 are clamped.
  int array_schema = 6;
  // Outer [ts, events, data_parallel_rank] (since #18925) vs [ts, events].
  bool with_rank = true;
  // Map form only: BlockStored declares the proposed `origin` field (#51699).
  // Its 15 fields make msgspec write a map16 header for every BlockStored.
  // Without it, an event's origin is dropped.
  bool origin_field = false;
  // Integer hashes as signed int64 (pre-#23673 builtin hash()); values with
  // the top bit set go out negative. Bytes-form keys are unaffected.
  bool signed_int_hashes = false;

  static constexpr WireEra Newest() { return WireEra{}; }
  static constexpr WireEra Array(int schema, bool with_rank = true) {
    WireEra e;
    e.form = EventForm::kArray;
    e.array_schema = schema;
    e.with_rank = with_rank;
    return e;
  }
};

// "map", "map-origin", "array-v1" .. "array-v6", each optionally followed by
// "-norank" (2-element outer batch) and/or "-signed" (signed int hashes).
// ParseWireEra returns false on anything else. For CLI flags and logs.
std::string WireEraName(const WireEra& era);
bool ParseWireEra(std::string_view name, WireEra* era);

// Replaces *out with the msgpack payload for `batch` in `era`. Events are
// encoded in order; block hashes and token ids are read through the batch's
// slices; extra_keys raw bytes are copied verbatim.
void EncodePayload(const EventBatch& batch, const WireEra& era, std::string* out);
std::string EncodePayload(const EventBatch& batch, const WireEra& era);

// ---- ZMQ framing (spec §2.3, §2.4) ----------------------------------------

using Frames = std::vector<std::string>;

// 8-byte big-endian sequence frame.
std::string EncodeSeq(uint64_t seq);

// Live PUB message: [topic, seq, payload].
Frames LiveMessageFrames(std::string_view topic, uint64_t seq, std::string_view payload);

// Replay protocol version of the ROUTER side.
enum class ReplayFormat : uint8_t {
  kLegacy,     // before #45177: [id, "", seq, payload], end [id, "", END, ""]
  kWithTopic,  // since #45177 (2026-07-07): [id, "", topic, seq, payload], end [id, "", "", END, ""]
};

// What a DEALER sends to ask for replay from `start_seq`: ["", seq].
Frames ReplayRequestFrames(uint64_t start_seq);
// One replayed batch / the end marker, as handed to the ROUTER socket
// (first frame = the requester's routing identity). A DEALER receives the
// same frames minus the identity.
Frames ReplayReplyFrames(ReplayFormat format, std::string_view identity, std::string_view topic,
                         uint64_t seq, std::string_view payload);
Frames ReplayEndFrames(ReplayFormat format, std::string_view identity);

}  // namespace kvidx::ingest
