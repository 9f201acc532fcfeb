// Credentials: the check a call passes when it must be authenticated.
//
// Admin calls (kvidx.v1.KvIndexAdmin) always need credentials; query calls
// (kvidx.v1.KvIndex) need them only with grpc.require_auth_for_reads. A
// call is admitted when it carries the configured bearer token
// ("authorization: Bearer <token>", compared in constant time) or when the
// connection is mTLS and the client certificate verified against the
// configured CA. Otherwise UNAUTHENTICATED. With neither a token file nor a
// client CA configured every checked call is refused: an open admin API
// must be a deliberate choice, and there is none here.
//
// Thread-safe: the check reads only its arguments.
#pragma once

#include <string>
#include <string_view>

#include <grpcpp/grpcpp.h>

namespace kvidx::server {

struct AdminAuth {
  std::string token;       // empty = no token accepted
  bool mtls = false;       // a verified client certificate admits
};

grpc::Status CheckCredentials(const grpc::ServerContextBase& ctx, const AdminAuth& auth);

// a == b, in a time that depends on the lengths only (secrets).
bool ConstantTimeEquals(std::string_view a, std::string_view b);

}  // namespace kvidx::server
