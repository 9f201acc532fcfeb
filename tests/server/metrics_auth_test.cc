// metrics.basic_auth_file: scrapes without the credentials get 401, with
// them the metrics; a file without "user:password" stops the server start.
#include "common/http_get.h"
#include "server_test_util.h"

namespace kvidx::server::testing {
namespace {

// /metrics with an optional Authorization header; the whole response.
std::string Scrape(int port, const std::string& authorization) {
  return kvidx::testing::HttpGet(port, "/metrics", 10,
                                 authorization.empty() ? "" : "Authorization: " + authorization + "\r\n");
}

std::string StatusLine(const std::string& response) { return response.substr(0, response.find("\r\n")); }

ServerConfig WithScrapeAuth(const TempDir& dir, const std::string& file_contents) {
  ServerConfig cfg = TestConfig(dir, /*persistent=*/false);
  cfg.metrics.listen = "127.0.0.1:0";
  cfg.metrics.basic_auth_file = dir.File("scrape-auth", file_contents);
  return cfg;
}

TEST(MetricsAuthTest, ScrapesNeedTheConfiguredBasicAuth) {
  TempDir dir;
  RunningServer rs = StartServer(WithScrapeAuth(dir, "prometheus:s3cret:with-colon\n"));
  ASSERT_NE(rs.server, nullptr);
  const int port = rs.server->metrics_port();
  EXPECT_NE(StatusLine(Scrape(port, "")).find(" 401"), std::string::npos);
  // "prometheus:wrong" and "prometheus:s3cret:with-colon" in base64.
  EXPECT_NE(StatusLine(Scrape(port, "Basic cHJvbWV0aGV1czp3cm9uZw==")).find(" 401"), std::string::npos);
  const std::string ok = Scrape(port, "Basic cHJvbWV0aGV1czpzM2NyZXQ6d2l0aC1jb2xvbg==");
  EXPECT_NE(StatusLine(ok).find(" 200"), std::string::npos) << StatusLine(ok);
  EXPECT_NE(ok.find("kvidx_serving"), std::string::npos);
}

TEST(MetricsAuthTest, AFileWithoutUserAndPasswordStopsTheStart) {
  for (const char* bad : {"", "no-colon\n", ":password\n", "user:\n"}) {
    TempDir dir;
    Result<std::unique_ptr<Server>> s = Server::Create(WithScrapeAuth(dir, bad));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    const Status st = (*s)->Start();
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << bad << ": " << st.ToString();
    EXPECT_NE(st.message().find("metrics.basic_auth_file"), std::string::npos) << st.message();
  }
  TempDir dir;
  ServerConfig cfg = TestConfig(dir, /*persistent=*/false);
  cfg.metrics.listen = "127.0.0.1:0";
  cfg.metrics.basic_auth_file = dir.path() + "/missing";
  Result<std::unique_ptr<Server>> s = Server::Create(cfg);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)->Start().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace kvidx::server::testing
