// Slow HTTP clients on /metrics: clients that connect, send part of a
// request and hold the socket (or trickle a byte now and then) must not
// block a scrape: fewer of them than metrics.threads cost nothing, more are
// dropped after metrics.request_timeout_ms.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <future>

#include "common/http_get.h"
#include "server_test_util.h"

namespace kvidx::server::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using kvidx::testing::HttpGet;

// A connection that sent the start of a request and never its end.
class SlowClient {
 public:
  explicit SlowClient(int port) : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    EXPECT_EQ(connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    const std::string partial = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n";
    EXPECT_EQ(send(fd_, partial.data(), partial.size(), MSG_NOSIGNAL), static_cast<ssize_t>(partial.size()));
  }
  ~SlowClient() { close(fd_); }
  SlowClient(const SlowClient&) = delete;
  SlowClient& operator=(const SlowClient&) = delete;

  // One more header byte, as a slowloris client sends them.
  void Trickle() { (void)send(fd_, "X", 1, MSG_NOSIGNAL | MSG_DONTWAIT); }

  // True if the server closed the connection within `timeout`.
  bool ClosedByServerWithin(std::chrono::milliseconds timeout) {
    timeval tv{static_cast<time_t>(timeout.count() / 1000), static_cast<suseconds_t>(timeout.count() % 1000 * 1000)};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char buf[4096];
    for (;;) {
      const ssize_t n = recv(fd_, buf, sizeof buf, 0);
      if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
      if (n < 0) return false;  // timed out
    }
  }

 private:
  int fd_;
};

RunningServer StartWithMetrics(const TempDir& dir, const MetricsConfig& metrics) {
  ServerConfig cfg = TestConfig(dir, /*persistent=*/false);
  cfg.metrics = metrics;
  cfg.metrics.listen = "127.0.0.1:0";
  return StartServer(std::move(cfg));
}

std::vector<std::unique_ptr<SlowClient>> OpenSlowClients(int port, uint32_t n) {
  std::vector<std::unique_ptr<SlowClient>> out;
  for (uint32_t i = 0; i < n; ++i) out.push_back(std::make_unique<SlowClient>(port));
  // Let the server accept them and hand each to a thread before the scrape.
  std::this_thread::sleep_for(200ms);
  return out;
}

TEST(MetricsSlowClientTest, ScrapeIsServedBesideFewerStalledClientsThanThreads) {
  TempDir dir;
  const MetricsConfig defaults;
  ASSERT_GE(defaults.threads, 4u);
  RunningServer rs = StartWithMetrics(dir, defaults);
  ASSERT_NE(rs.server, nullptr);
  auto slow = OpenSlowClients(rs.server->metrics_port(), defaults.threads - 1);
  const Clock::time_point t0 = Clock::now();
  const std::string body = HttpGet(rs.server->metrics_port(), "/metrics");
  EXPECT_LT(Clock::now() - t0, 2s);
  EXPECT_NE(body.find("kvidx_serving"), std::string::npos) << body.substr(0, 200);
}

TEST(MetricsSlowClientTest, StalledAndTricklingClientsAreDroppedAfterTheRequestTimeout) {
  TempDir dir;
  MetricsConfig m;
  m.threads = 2;
  m.request_timeout_ms = 500;
  RunningServer rs = StartWithMetrics(dir, m);
  ASSERT_NE(rs.server, nullptr);
  const int port = rs.server->metrics_port();
  // Three times as many as there are threads: the scrape queues behind
  // them and is served once they have been dropped, in rounds of two.
  auto slow = OpenSlowClients(port, 3 * m.threads);
  const Clock::time_point t0 = Clock::now();
  std::future<std::string> scrape = std::async(std::launch::async, [port] { return HttpGet(port, "/metrics"); });
  while (scrape.wait_for(100ms) != std::future_status::ready) {
    for (auto& c : slow) c->Trickle();
  }
  const std::string body = scrape.get();
  EXPECT_LT(Clock::now() - t0, 4s);
  EXPECT_NE(body.find("kvidx_serving"), std::string::npos) << body.substr(0, 200);
  for (auto& c : slow) EXPECT_TRUE(c->ClosedByServerWithin(3s));
}

}  // namespace
}  // namespace kvidx::server::testing
