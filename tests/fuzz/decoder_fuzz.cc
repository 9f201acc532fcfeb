// libFuzzer target for the KV-event decoder (scripts/fuzz.sh builds and runs it).
//
// Checks, for any input:
//   - DecodePayload and DecodeExtraKeys never crash, hang, leak or trip UBSan;
//   - a failure always carries a detail;
//   - round trip: whatever decodes re-encodes (newest map form, origin field
//     on, so every decoded field is carried) and decodes to the same batch;
//   - limits are monotonic: tighter limits never accept what defaults reject,
//     and accept the same events when they accept.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "ingest/decoder.h"
#include "ingest/testing/encoder.h"
#include "ingest/testing/extra_keys.h"

namespace {

using kvidx::ingest::BlockExtraKeys;
using kvidx::ingest::DecodeError;
using kvidx::ingest::DecodeLimits;
using kvidx::ingest::Decoder;
using kvidx::ingest::EventBatch;
using kvidx::ingest::KvEvent;
using kvidx::ingest::WireEra;

[[noreturn]] void Die(const char* what) {
  fprintf(stderr, "decoder_fuzz: oracle failed: %s\n", what);
  abort();
}

template <typename T>
bool SpanEq(std::span<const T> a, std::span<const T> b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!(a[i] == b[i])) return false;
  }
  return true;
}

bool EventEq(const EventBatch& ba, const KvEvent& a, const EventBatch& bb, const KvEvent& b) {
  return a.type == b.type && SpanEq(ba.HashesOf(a), bb.HashesOf(b)) && a.medium == b.medium &&
         a.group_idx == b.group_idx && a.locality == b.locality && a.ownership == b.ownership &&
         a.parent_block_hash == b.parent_block_hash && SpanEq(ba.TokensOf(a), bb.TokensOf(b)) &&
         a.block_size == b.block_size && a.lora_id == b.lora_id && a.lora_name == b.lora_name &&
         a.extra_keys == b.extra_keys && a.kv_cache_spec_kind == b.kv_cache_spec_kind &&
         a.kv_cache_spec_sliding_window == b.kv_cache_spec_sliding_window && a.session_id == b.session_id &&
         a.origin == b.origin;
}

bool BatchEq(const EventBatch& a, const EventBatch& b) {
  if (std::memcmp(&a.ts, &b.ts, sizeof a.ts) != 0) return false;  // bitwise: NaN payloads survive
  if (a.data_parallel_rank != b.data_parallel_rank) return false;
  if (a.events.size() != b.events.size()) return false;
  for (size_t i = 0; i < a.events.size(); ++i) {
    if (!EventEq(a, a.events[i], b, b.events[i])) return false;
  }
  return true;
}

DecodeLimits Tight() {
  DecodeLimits l;
  l.max_events_per_batch = 4;
  l.max_hashes_per_event = 8;
  l.max_tokens_per_event = 64;
  l.max_depth = 3;
  return l;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Decoder kDecoder;
  static const Decoder kTight(Tight());
  static EventBatch batch, again, tight;  // reused, as in the ingest loop
  static std::string payload2;
  static std::vector<BlockExtraKeys> extra;

  const std::string_view payload(reinterpret_cast<const char*>(data), size);
  DecodeError err;
  const bool ok = kDecoder.DecodePayload(payload, &batch, &err);
  if (!ok && err.detail.empty()) Die("failure without detail");

  DecodeError terr;
  if (kTight.DecodePayload(payload, &tight, &terr)) {
    if (!ok) Die("tight limits accepted what default limits rejected");
    if (!BatchEq(batch, tight) || batch.unknown_events != tight.unknown_events) Die("tight limits decoded differently");
  }

  if (ok) {
    for (const KvEvent& e : batch.events) {
      if (e.extra_keys) {
        DecodeError eerr;
        if (!kvidx::ingest::DecodeExtraKeys(*e.extra_keys, &extra, &eerr) && eerr.detail.empty()) {
          Die("extra_keys failure without detail");
        }
      }
    }
    WireEra era;
    era.origin_field = true;
    kvidx::ingest::EncodePayload(batch, era, &payload2);
    DecodeError err2;
    if (!kDecoder.DecodePayload(payload2, &again, &err2)) {
      fprintf(stderr, "re-decode failed: %s\n", err2.detail.c_str());
      Die("re-encoded payload does not decode");
    }
    // The rank is always written in this era; a 2-element input had none.
    if (!BatchEq(batch, again)) Die("round trip changed the batch");
    if (again.unknown_events != 0) Die("re-encoded batch has unknown events");
  }

  // The extra-keys decoder on raw input, too.
  DecodeError eerr;
  if (!kvidx::ingest::DecodeExtraKeys(payload, &extra, &eerr) && eerr.detail.empty()) {
    Die("extra_keys failure without detail");
  }
  return 0;
}
