// KubeApi: the HTTPS calls discovery makes to a Kubernetes API server, over
// libcurl: a GET (a list) and a watch (a GET whose chunked body is a stream
// of JSON lines, one event each).
//
// Authentication is the bearer token in `token_file`, read again for every
// request, so a rotated service-account token (the kubelet rewrites it) is
// used from the next request on -- or a kubeconfig's inline `token`. The token goes only into the request's
// Authorization header: no error text, log line or metric carries it (libcurl's
// own messages never include request headers). The server's certificate is
// verified against `ca_file` (re-read per connection), or a kubeconfig's
// inline `ca_pem`, unless `insecure` is set explicitly.
//
// Each failure is one named outcome (KubeOutcomeName), the `result` label of
// kvidx_discovery_resolutions_total for Kubernetes providers.
//
// A call blocks the calling thread until it ends; Interrupt() (any thread)
// ends the running call and every later one, within milliseconds
// (curl_multi_wakeup). Otherwise thread-compatible: one thread makes the calls.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace kvidx::server {

enum class KubeOutcome : uint8_t {
  kOk,
  kGone,          // 410: the resourceVersion is too old (a relist follows)
  kUnauthorized,  // 401 (a wrong or expired token), or no token to send
  kForbidden,     // 403 (RBAC)
  kHttpError,     // any other HTTP status but 200
  kUnreachable,   // could not connect
  kTls,           // the TLS handshake or the server's certificate failed
  kTimeout,       // no answer (or a stalled stream) in time
  kMalformed,     // a body that is not the documented object
  kError,         // anything else (interrupted, too large, ...)
};
inline constexpr size_t kNumKubeOutcomes = 10;
std::string_view KubeOutcomeName(KubeOutcome o);

struct KubeResponse {
  KubeOutcome outcome = KubeOutcome::kError;
  long http_status = 0;
  std::string body;    // a GET's body; a failed watch's error body
  std::string detail;  // for a failure: what went wrong, safe to log
};

class KubeApi {
 public:
  struct Options {
    std::string server;  // https://host:port
    std::string token_file;
    std::string token;   // used instead of token_file when set (a kubeconfig's)
    std::string ca_file;
    std::string ca_pem;  // used instead of ca_file when set (a kubeconfig's)
    bool insecure = false;
    std::chrono::milliseconds timeout{10'000};  // connect; a GET's whole transfer
    size_t max_body_bytes = 64u << 20;          // a list body; one watch line
  };
  // Internal if libcurl cannot start.
  static Result<std::unique_ptr<KubeApi>> Create(Options options);
  ~KubeApi();
  KubeApi(const KubeApi&) = delete;
  KubeApi& operator=(const KubeApi&) = delete;

  // GET `path` ("/apis/...?..."): kOk with the body on 200.
  KubeResponse Get(const std::string& path);
  // A watch GET: `on_lines` gets an empty list once the server has answered
  // 200 (the watch is open), then the complete lines of each chunk received
  // (false = end the watch, the result is then kOk). kOk when the server
  // ends the stream, else the failure; `stall` bounds the silence between
  // bytes (a dropped connection that sends nothing).
  using LineHandler = std::function<bool(const std::vector<std::string_view>& lines)>;
  KubeResponse Watch(const std::string& path, std::chrono::milliseconds stall, const LineHandler& on_lines);

  void Interrupt();

  // `text` percent-encoded for a URL's query (libcurl's escaping).
  static std::string Escape(std::string_view text);

 private:
  struct Transfer;
  explicit KubeApi(Options options, void* multi);
  KubeResponse Run(const std::string& path, Transfer* t, std::chrono::milliseconds total,
                   std::chrono::milliseconds stall);

  const Options options_;
  void* multi_;  // CURLM*
  std::atomic<bool> interrupted_{false};
};

}  // namespace kvidx::server
