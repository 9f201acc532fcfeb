// Error texts that quote request fields stay short.
//
// Why: a status message travels in the grpc-message trailer, and clients
// refuse trailers over 8 KiB by default; an error that echoed an 8 KiB
// model name reached the caller as RESOURCE_EXHAUSTED ("metadata size
// exceeds limit") instead of NOT_FOUND. Every quoted value goes through
// Quote(), and every status leaving a handler through BoundedStatus().
//
// Cuts never split a UTF-8 sequence (messages also go into proto3 string
// fields, which must stay valid UTF-8). Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <grpcpp/grpcpp.h>

namespace kvidx::server {

inline constexpr size_t kMaxQuoted = 64;          // bytes of a quoted value kept
inline constexpr size_t kMaxStatusMessage = 1024;  // bytes of a whole message kept

// "\"value\"", or "\"<first 64 bytes>\"...(N bytes)" for a longer value.
std::string Quote(std::string_view value);

// `text` cut to `max` bytes plus "...(N bytes)" when longer.
std::string Clamp(std::string_view text, size_t max = kMaxStatusMessage);

// `s` with its message clamped.
grpc::Status BoundedStatus(const grpc::Status& s);

}  // namespace kvidx::server
