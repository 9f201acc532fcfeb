#include "server/kubeconfig.h"

#include <openssl/evp.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include <yaml-cpp/yaml.h>

namespace kvidx::server {
namespace {

Status Bad(const std::string& path, const std::string& what) {
  return Status::InvalidArgument("kubeconfig " + path + ": " + what);
}

// The scalar at `key` of a map node, or "" if absent.
std::string Scalar(const YAML::Node& map, const char* key) {
  const YAML::Node n = map[key];
  return n && n.IsScalar() ? n.Scalar() : std::string();
}

// The `inner` map of the entry of list `list` whose `name` is `name`
// (kubeconfig's named lists: clusters, users, contexts); null if none.
YAML::Node Named(const YAML::Node& root, const char* list, const char* inner, const std::string& name) {
  const YAML::Node l = root[list];
  if (!l || !l.IsSequence()) return YAML::Node(YAML::NodeType::Undefined);
  for (const YAML::Node& item : l) {
    if (item.IsMap() && Scalar(item, "name") == name && item[inner] && item[inner].IsMap()) return item[inner];
  }
  return YAML::Node(YAML::NodeType::Undefined);
}

// base64 -> bytes through OpenSSL; false on bad input.
bool DecodeBase64(std::string text, std::string* out) {
  std::erase_if(text, [](char c) { return c == '\n' || c == '\r' || c == ' ' || c == '\t'; });
  if (text.empty() || text.size() % 4 != 0) return false;
  std::vector<unsigned char> buf(text.size() / 4 * 3);
  const int n = EVP_DecodeBlock(buf.data(), reinterpret_cast<const unsigned char*>(text.data()),
                                static_cast<int>(text.size()));
  if (n < 0) return false;
  size_t len = static_cast<size_t>(n);
  // EVP_DecodeBlock counts the padding as zero bytes.
  for (size_t i = text.size(); i > 0 && text[i - 1] == '='; --i) --len;
  out->assign(reinterpret_cast<const char*>(buf.data()), len);
  return true;
}

std::string Resolve(const std::filesystem::path& dir, const std::string& file) {
  if (file.empty()) return file;
  std::filesystem::path p(file);
  return (p.is_absolute() ? p : dir / p).lexically_normal().string();
}

Result<KubeconfigCredentials> Parse(const std::string& path, const YAML::Node& root, std::string_view want) {
  if (!root.IsMap()) return Bad(path, "not a kubeconfig (expected a YAML map)");
  const std::string context = want.empty() ? Scalar(root, "current-context") : std::string(want);
  if (context.empty()) return Bad(path, "current-context is not set");
  const YAML::Node ctx = Named(root, "contexts", "context", context);
  if (!ctx) return Bad(path, "contexts: no context named \"" + context + "\"");
  const std::string cluster_name = Scalar(ctx, "cluster"), user_name = Scalar(ctx, "user");
  const YAML::Node cluster = Named(root, "clusters", "cluster", cluster_name);
  if (!cluster) return Bad(path, "clusters: no cluster named \"" + cluster_name + "\" (context \"" + context + "\")");
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();

  KubeconfigCredentials c;
  c.namespace_name = Scalar(ctx, "namespace");
  c.server = Scalar(cluster, "server");
  if (c.server.rfind("https://", 0) != 0) {
    return Bad(path, "clusters[" + cluster_name + "].server: expected an https:// URL (the token must not travel in "
                     "clear), got \"" + c.server + "\"");
  }
  while (c.server.back() == '/') c.server.pop_back();
  c.insecure_skip_tls_verify = Scalar(cluster, "insecure-skip-tls-verify") == "true";
  c.ca_file = Resolve(dir, Scalar(cluster, "certificate-authority"));
  if (const std::string data = Scalar(cluster, "certificate-authority-data"); !data.empty()) {
    if (!DecodeBase64(data, &c.ca_pem)) {
      return Bad(path, "clusters[" + cluster_name + "].certificate-authority-data: not valid base64");
    }
  }

  const YAML::Node user = Named(root, "users", "user", user_name);
  if (!user) return Bad(path, "users: no user named \"" + user_name + "\" (context \"" + context + "\")");
  c.token = Scalar(user, "token");
  c.token_file = Resolve(dir, Scalar(user, "tokenFile"));
  if (c.token.empty() && c.token_file.empty()) {
    for (const char* other : {"client-certificate", "client-certificate-data", "exec", "auth-provider", "username"}) {
      if (user[other]) {
        return Bad(path, "users[" + user_name + "]: authenticates with " + other +
                             ", which kvidx does not support: give it a token or tokenFile (a service account's)");
      }
    }
    return Bad(path, "users[" + user_name + "]: needs token or tokenFile");
  }
  return c;
}

}  // namespace

Result<KubeconfigCredentials> LoadKubeconfig(const std::string& path, std::string_view context) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("kubeconfig " + path + ": cannot be read");
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return Parse(path, YAML::Load(ss.str()), context);
  } catch (const YAML::Exception& e) {
    // The mark only: the message may quote the file, tokens included.
    return Bad(path, "not valid YAML (line " + std::to_string(e.mark.line + 1) + ")");
  }
}

}  // namespace kvidx::server
