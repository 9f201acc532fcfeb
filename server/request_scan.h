// RequestScan: reads a request's protobuf wire bytes without building the
// message, so a request that would be malformed, over a count limit or too
// large once parsed is refused before any of it is materialised.
//
// Why: a parsed message can take far more memory than its wire form (an
// empty repeated submessage is 2 bytes on the wire and ~200 in memory; an
// empty string 2 and ~40; a packed token id 1 and 8). A 16 MiB request of
// 8M empty queries used to cost ~1 GB before max_batch_queries was looked
// at. The scan walks the bytes once, charging each element what parsing it
// would cost, and stops as soon as a limit is crossed.
//
// Contract:
//   * INVALID_ARGUMENT for bytes protobuf would not parse as `type`
//     (truncated, bad varint, bad tag, misaligned packed field, nesting
//     deeper than 64) and for groups (no kvidx message has one);
//   * RESOURCE_EXHAUSTED when a capped field has more elements than its cap
//     inside one message (the cap's own message names the config key), or
//     when the estimated parsed size passes `max_parsed_bytes`;
//   * OK otherwise; parsing can still fail afterwards (invalid UTF-8 in a
//     string field), which ParseRequest reports as INVALID_ARGUMENT too.
// Unknown fields are accepted (forward compatibility) and charged like the
// unknown-field records protobuf keeps for them.
//
// Thread-safe: pure functions of their arguments.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <grpcpp/grpcpp.h>

namespace kvidx::server {

// At most this many elements of `field` per message instance.
struct FieldCap {
  const google::protobuf::FieldDescriptor* field = nullptr;
  uint64_t limit = 0;
  std::string message;  // RESOURCE_EXHAUSTED text, e.g. "tokens.token_ids: ... (grpc.max_query_tokens)"
};

struct ScanLimits {
  uint64_t max_parsed_bytes = 0;
  std::vector<FieldCap> caps;
  // When set, the value of this top-level varint field is reported, also
  // for a refused request (a request_id: a refused query of a batch still
  // carries its id).
  const google::protobuf::FieldDescriptor* echo = nullptr;
};

struct ScanResult {
  uint64_t parsed_bytes = 0;  // estimate, stops growing at the first refusal
  uint64_t echo = 0;
};

// The request's bytes, contiguous or as gRPC received them (read in
// place, never copied).
grpc::Status ScanRequest(std::string_view wire, const google::protobuf::Descriptor* type, const ScanLimits& limits,
                         ScanResult* result = nullptr);
grpc::Status ScanRequest(const grpc::ByteBuffer& wire, const google::protobuf::Descriptor* type,
                         const ScanLimits& limits, ScanResult* result = nullptr);

// ScanRequest, then parses into `out` (cleared first).
grpc::Status ParseRequest(std::string_view wire, const ScanLimits& limits, google::protobuf::Message* out,
                          ScanResult* result = nullptr);
grpc::Status ParseRequest(const grpc::ByteBuffer& wire, const ScanLimits& limits, google::protobuf::Message* out,
                          ScanResult* result = nullptr);

// Serialises a response for a raw method.
grpc::Status SerializeResponse(const google::protobuf::Message& msg, grpc::ByteBuffer* out);

}  // namespace kvidx::server
