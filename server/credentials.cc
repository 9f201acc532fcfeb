#include "server/credentials.h"

#include <string_view>

#include <grpcpp/security/auth_context.h>

namespace kvidx::server {

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char d = 0;
  for (size_t i = 0; i < a.size(); ++i) d |= static_cast<unsigned char>(a[i] ^ b[i]);
  return d == 0;
}

grpc::Status CheckCredentials(const grpc::ServerContextBase& ctx, const AdminAuth& auth) {
  if (!auth.token.empty()) {
    const auto& md = ctx.client_metadata();
    auto it = md.find("authorization");
    if (it != md.end()) {
      std::string_view v(it->second.data(), it->second.size());
      constexpr std::string_view kBearer = "Bearer ";
      if (v.substr(0, kBearer.size()) == kBearer && ConstantTimeEquals(v.substr(kBearer.size()), auth.token)) {
        return grpc::Status::OK;
      }
      return {grpc::StatusCode::UNAUTHENTICATED, "authorization: invalid bearer token"};
    }
  }
  if (auth.mtls) {
    std::shared_ptr<const grpc::AuthContext> ac = ctx.auth_context();
    if (ac && ac->IsPeerAuthenticated()) return grpc::Status::OK;
  }
  if (auth.token.empty() && !auth.mtls) {
    return {grpc::StatusCode::UNAUTHENTICATED,
            "admin API disabled: configure grpc.admin_token_file or an mTLS client CA"};
  }
  return {grpc::StatusCode::UNAUTHENTICATED, "this call needs a bearer token or an mTLS client certificate"};
}

}  // namespace kvidx::server
