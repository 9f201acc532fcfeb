// The configuration keys that bound what clients can hold: open
// FindPrefixStream calls and synchronous-method threads (grpc), and the
// /metrics endpoint's threads and request timeout: defaults, values that
// land, and out-of-range values named with their range.
#include <gtest/gtest.h>

#include "server/config.h"

namespace kvidx::server {
namespace {

std::string ErrorOf(std::string_view yaml) {
  auto r = ParseConfig(yaml, "cfg.yaml");
  return r.ok() ? "OK" : r.status().message();
}

TEST(TransportLimitsConfigTest, Defaults) {
  auto r = ParseConfig("{}\n", "cfg.yaml");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r.value().grpc.max_open_streams, 1024u);
  EXPECT_EQ(r.value().grpc.max_threads, 64u);
  EXPECT_EQ(r.value().metrics.threads, 8u);
  EXPECT_EQ(r.value().metrics.request_timeout_ms, 5000u);
}

TEST(TransportLimitsConfigTest, ValuesLand) {
  auto r = ParseConfig(
      "grpc: {max_open_streams: 10, max_threads: 4}\n"
      "metrics: {listen: \"127.0.0.1:0\", threads: 3, request_timeout_ms: 250}\n",
      "cfg.yaml");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r.value().grpc.max_open_streams, 10u);
  EXPECT_EQ(r.value().grpc.max_threads, 4u);
  EXPECT_EQ(r.value().metrics.threads, 3u);
  EXPECT_EQ(r.value().metrics.request_timeout_ms, 250u);
}

TEST(TransportLimitsConfigTest, OutOfRange) {
  EXPECT_EQ(ErrorOf("grpc: {max_open_streams: 0}\n"),
            "cfg.yaml:1: grpc.max_open_streams: expected an integer in [1, 2147483647], got \"0\"");
  EXPECT_EQ(ErrorOf("grpc: {max_threads: 3}\n"),
            "cfg.yaml:1: grpc.max_threads: expected an integer in [4, 4096], got \"3\"");
  EXPECT_EQ(ErrorOf("grpc: {max_threads: 4097}\n"),
            "cfg.yaml:1: grpc.max_threads: expected an integer in [4, 4096], got \"4097\"");
  EXPECT_EQ(ErrorOf("metrics: {threads: 0}\n"),
            "cfg.yaml:1: metrics.threads: expected an integer in [1, 256], got \"0\"");
  EXPECT_EQ(ErrorOf("metrics: {request_timeout_ms: 99}\n"),
            "cfg.yaml:1: metrics.request_timeout_ms: expected an integer in [100, 600000], got \"99\"");
  EXPECT_EQ(ErrorOf("metrics: {threads: many}\n"),
            "cfg.yaml:1: metrics.threads: expected an integer in [1, 256], got \"many\"");
}

}  // namespace
}  // namespace kvidx::server
