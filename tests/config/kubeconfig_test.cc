// LoadKubeconfig (server/kubeconfig.h): the parts of a kubectl kubeconfig a
// Kubernetes provider needs outside the cluster, and every malformed or
// unsupported file refused with the key it is about (never the token).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "server/kubeconfig.h"

namespace kvidx::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kCaPem[] = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
// base64 of kCaPem.
constexpr char kCaData[] =
    "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUIKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo=";

class KubeconfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("kubeconfig_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string Write(const std::string& text) {
    const std::string path = (dir_ / "config").string();
    std::ofstream(path) << text;
    return path;
  }
  Status ErrorOf(const std::string& text) {
    auto r = LoadKubeconfig(Write(text));
    return r.ok() ? Status::Ok() : r.status();
  }

  std::filesystem::path dir_;
};

// A kubeconfig as `kubectl config view --raw` prints one: two clusters, two
// users, two contexts.
std::string TwoContexts() {
  return std::string(
             "apiVersion: v1\n"
             "kind: Config\n"
             "current-context: prod\n"
             "clusters:\n"
             "- name: prod-cluster\n"
             "  cluster:\n"
             "    server: https://10.0.0.1:6443/\n"
             "    certificate-authority-data: ") +
         kCaData +
         "\n"
         "- name: dev-cluster\n"
         "  cluster:\n"
         "    server: https://dev.example:443\n"
         "    certificate-authority: pki/ca.crt\n"
         "users:\n"
         "- name: kvidx-sa\n"
         "  user:\n"
         "    token: s3cret-token\n"
         "- name: dev-user\n"
         "  user:\n"
         "    tokenFile: secrets/token\n"
         "contexts:\n"
         "- name: prod\n"
         "  context: {cluster: prod-cluster, user: kvidx-sa, namespace: inference}\n"
         "- name: dev\n"
         "  context: {cluster: dev-cluster, user: dev-user}\n";
}

TEST_F(KubeconfigTest, CurrentContextWithInlineCaAndToken) {
  auto r = LoadKubeconfig(Write(TwoContexts()));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->server, "https://10.0.0.1:6443");
  EXPECT_EQ(r->ca_pem, kCaPem);
  EXPECT_EQ(r->ca_file, "");
  EXPECT_EQ(r->token, "s3cret-token");
  EXPECT_EQ(r->token_file, "");
  EXPECT_EQ(r->namespace_name, "inference");
  EXPECT_FALSE(r->insecure_skip_tls_verify);
}

TEST_F(KubeconfigTest, NamedContextWithFilesRelativeToTheKubeconfig) {
  auto r = LoadKubeconfig(Write(TwoContexts()), "dev");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->server, "https://dev.example:443");
  EXPECT_EQ(r->ca_file, (dir_ / "pki/ca.crt").string());
  EXPECT_EQ(r->ca_pem, "");
  EXPECT_EQ(r->token, "");
  EXPECT_EQ(r->token_file, (dir_ / "secrets/token").string());
  EXPECT_EQ(r->namespace_name, "");  // the provider falls back to "default"
}

TEST_F(KubeconfigTest, InsecureSkipTlsVerifyAndAbsolutePaths) {
  auto r = LoadKubeconfig(Write("current-context: c\n"
                                "clusters: [{name: k, cluster: {server: 'https://h:1', insecure-skip-tls-verify: true,"
                                " certificate-authority: /etc/ca.crt}}]\n"
                                "users: [{name: u, user: {tokenFile: /var/run/token}}]\n"
                                "contexts: [{name: c, context: {cluster: k, user: u, namespace: ns}}]\n"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->insecure_skip_tls_verify);
  EXPECT_EQ(r->ca_file, "/etc/ca.crt");
  EXPECT_EQ(r->token_file, "/var/run/token");
}

TEST_F(KubeconfigTest, MissingFileIsNotFound) {
  auto r = LoadKubeconfig((dir_ / "nope").string());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(r.status().message(), HasSubstr("cannot be read"));
}

TEST_F(KubeconfigTest, MalformedFilesNameTheProblem) {
  const std::string ok_user = "users: [{name: u, user: {token: t0k3n}}]\n";
  const std::string ok_cluster = "clusters: [{name: k, cluster: {server: 'https://h:1'}}]\n";
  const std::string ok_context = "contexts: [{name: c, context: {cluster: k, user: u}}]\n";
  struct Case {
    std::string text;
    std::string message;
  };
  const Case cases[] = {
      {"key: [unclosed\n", "not valid YAML (line"},
      {"- a list\n", "expected a YAML map"},
      {"", "expected a YAML map"},
      {ok_cluster + ok_user + ok_context, "current-context is not set"},
      {"current-context: other\n" + ok_cluster + ok_user + ok_context, "no context named \"other\""},
      {"current-context: c\n" + ok_user + ok_context, "no cluster named \"k\""},
      {"current-context: c\nclusters: [{name: k, cluster: {}}]\n" + ok_user + ok_context, "expected an https:// URL"},
      {"current-context: c\nclusters: [{name: k, cluster: {server: 'http://h:1'}}]\n" + ok_user + ok_context,
       "expected an https:// URL"},
      {"current-context: c\nclusters: [{name: k, cluster: {server: 'https://h:1', certificate-authority-data: "
       "'not base64!'}}]\n" +
           ok_user + ok_context,
       "certificate-authority-data: not valid base64"},
      {"current-context: c\n" + ok_cluster + ok_context, "no user named \"u\""},
      {"current-context: c\n" + ok_cluster + "users: [{name: u, user: {}}]\n" + ok_context, "needs token or tokenFile"},
      {"current-context: c\n" + ok_cluster +
           "users: [{name: u, user: {client-certificate-data: AAAA, client-key-data: AAAA}}]\n" + ok_context,
       "authenticates with client-certificate-data, which kvidx does not support"},
      {"current-context: c\n" + ok_cluster + "users: [{name: u, user: {exec: {command: aws}}}]\n" + ok_context,
       "authenticates with exec"},
      {"current-context: c\n" + ok_cluster + ok_user + "contexts: {c: 1}\n", "no context named \"c\""},
      {"current-context: c\nclusters: 7\n" + ok_user + ok_context, "no cluster named"},
  };
  for (const Case& c : cases) {
    Status s = ErrorOf(c.text);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(s.message(), HasSubstr(c.message)) << c.text;
    EXPECT_THAT(s.message(), HasSubstr("kubeconfig ")) << c.text;
  }
}

TEST_F(KubeconfigTest, TheTokenIsNeverInAnErrorMessage) {
  // A YAML error on the token's line, and a context error after a token.
  for (const std::string& text :
       {std::string("current-context: c\nusers: [{name: u, user: {token: s3cret-token}}]\nclusters: [oops\n"),
        std::string("current-context: c\nusers: [{name: u, user: {token: s3cret-token}}]\n")}) {
    Status s = ErrorOf(text);
    ASSERT_FALSE(s.ok());
    EXPECT_THAT(s.message(), Not(HasSubstr("s3cret"))) << s.message();
  }
}

}  // namespace
}  // namespace kvidx::server
