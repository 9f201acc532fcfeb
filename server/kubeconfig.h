// Kubeconfig: what a Kubernetes discovery provider needs from a kubeconfig
// file (kubectl's format, `kind: Config`) to run outside the cluster.
//
// From the current context (or the one named): its cluster's `server`
// (https only), `certificate-authority` (a file; relative paths are
// relative to the kubeconfig's folder, as kubectl reads them) or
// `certificate-authority-data` (base64 PEM), `insecure-skip-tls-verify`;
// its user's `token` or `tokenFile`; and its `namespace`. Other ways to
// authenticate (client certificates, exec and auth-provider plugins,
// username/password) are refused with a message saying so: kvidx sends a
// bearer token only.
//
// Errors: NotFound for an unreadable file; InvalidArgument naming the key
// for anything else (not YAML, no such context, no server, bad base64, ...).
// The token is never part of an error message. Parsing is yaml-cpp; no
// exception escapes. Thread-compatible (a pure function).
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"

namespace kvidx::server {

struct KubeconfigCredentials {
  std::string server;          // https://host:port, no trailing '/'
  std::string ca_file;         // certificate-authority (absolute), or ""
  std::string ca_pem;          // certificate-authority-data, decoded, or ""
  bool insecure_skip_tls_verify = false;
  std::string token;           // the user's token, or ""
  std::string token_file;      // the user's tokenFile (absolute), or ""
  std::string namespace_name;  // the context's namespace ("" = not set)
};

// `context` "" = the file's current-context.
Result<KubeconfigCredentials> LoadKubeconfig(const std::string& path, std::string_view context = "");

}  // namespace kvidx::server
