// ValidateEngine (server/config.h): the one check of an engine entry the
// config loader, `kvidx-server --check-config` and AddEngine share. Each
// case here was accepted before and failed only at run time (exit 1, or a
// source CONNECTING forever), or polluted every metric label.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "common/run_command.h"
#include "server/config.h"

namespace kvidx::server {
namespace {

using ::testing::HasSubstr;

constexpr std::string_view kModels = "models:\n  - name: qwen\n";

// The loader's error for one engine line, or "OK".
std::string EngineError(const std::string& engine_flow_map) {
  auto r = ParseConfig(std::string(kModels) + "engines:\n  - " + engine_flow_map + "\n", "cfg.yaml");
  if (r.ok()) return "OK";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
  return r.status().message();
}

TEST(EngineValidation, TcpEndpointNeedsHostAndPortInRange) {
  EXPECT_THAT(EngineError(R"({replica: a, model: qwen, endpoint: "tcp://127.0.0.1"})"),
              HasSubstr("engines[0]: engine 'a': endpoint 'tcp://127.0.0.1': expected tcp://HOST:PORT"));
  EXPECT_THAT(EngineError(R"({replica: a, model: qwen, endpoint: "tcp://:5557"})"),
              HasSubstr("expected tcp://HOST:PORT"));
  for (const char* port : {"0", "99999", "65536", "-1", "", "55x", "4294967297"}) {
    EXPECT_THAT(EngineError(std::string(R"({replica: a, model: qwen, endpoint: "tcp://h:)") + port + "\"}"),
                HasSubstr("port must be a number in 1..65535"))
        << port;
  }
  EXPECT_THAT(EngineError(R"({replica: a, model: qwen, endpoint: "tcp://h:1", replay_endpoint: "tcp://h:0"})"),
              HasSubstr("replay_endpoint 'tcp://h:0': port must be a number in 1..65535"));
  // Rank r uses port + r: the last rank must still be a port.
  EXPECT_THAT(EngineError(R"({replica: a, model: qwen, endpoint: "tcp://h:65535", dp_size: 2})"),
              HasSubstr("port + dp_size - 1 = 65536 exceeds 65535"));
  EXPECT_EQ(EngineError(R"({replica: a, model: qwen, endpoint: "tcp://h:65534", dp_size: 2})"), "OK");
  EXPECT_EQ(EngineError(R"({replica: a, model: qwen, endpoint: "tcp://[::1]:5557"})"), "OK");
  // Where kvidx binds, the OS may pick the port.
  EXPECT_EQ(EngineError(R"({replica: a, model: qwen, endpoint: "tcp://127.0.0.1:*", mode: bind})"), "OK");
  EXPECT_THAT(EngineError(R"({replica: a, model: qwen, endpoint: "tcp://h:*"})"), HasSubstr("wildcard"));
  EXPECT_THAT(EngineError(R"({replica: a, model: qwen, endpoint: "ipc://"})"), HasSubstr("empty"));
}

TEST(EngineValidation, ReplicaNameLengthAndCharset) {
  const std::string max(253, 'r');
  EXPECT_EQ(EngineError("{replica: " + max + ", model: qwen, endpoint: \"tcp://h:1\"}"), "OK");
  EXPECT_THAT(EngineError("{replica: " + max + "x, model: qwen, endpoint: \"tcp://h:1\"}"),
              HasSubstr("engines[0].replica: replica name of 254 bytes exceeds 253"));
  EXPECT_EQ(EngineError(R"({replica: "pod-7.ns_1:8000", model: qwen, endpoint: "tcp://h:1"})"), "OK");
  EXPECT_EQ(EngineError(R"({replica: "[fd00::7]:8000", model: qwen, endpoint: "tcp://h:1"})"), "OK");
  for (const char* bad : {"a b", "a@b", "a\\\"b", "a{b}", "a\\nb", "a/b", "\\u00e9"}) {
    EXPECT_THAT(EngineError(std::string("{replica: \"") + bad + R"(", model: qwen, endpoint: "tcp://h:1"})"),
                HasSubstr("is not one of A-Z a-z 0-9 . - _ : [ ]"))
        << bad;
  }
}

TEST(EngineValidation, AgainstClaimsOfOtherEngines) {
  ServerConfig c;
  c.models.push_back(ModelConfig{});
  c.models[0].name = "qwen";
  EngineEntry a;
  a.engine.replica = "a";
  a.engine.model = "qwen";
  a.engine.endpoint = "tcp://h:5557";
  a.engine.data_parallel_size = 2;
  EngineClaims claims;
  ASSERT_TRUE(ValidateEngine(a, c, "engine a", &claims).ok());

  std::string field;
  EngineEntry b = a;
  Status s = ValidateEngine(b, c, "engine b", &claims, &field);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(field, "replica");

  b.engine.replica = "b";
  b.engine.endpoint = "tcp://h:5558";  // a's rank 1
  b.engine.data_parallel_size = 1;
  s = ValidateEngine(b, c, "engine b", &claims, &field);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(field, "");
  EXPECT_THAT(s.message(), HasSubstr("source b/dp0 would read the same stream as a/dp1 (engine a)"));

  b.engine.topic = "other";  // another topic on the same socket is another stream
  EXPECT_TRUE(ValidateEngine(b, c, "engine b", &claims).ok());

  EngineEntry d = a;
  d.engine.replica = "d";
  d.engine.endpoint = "tcp://h:6000";
  d.engine.model = "llama";
  s = ValidateEngine(d, c, "engine d", &claims, &field);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(field, "model");
  // A failed check claims nothing.
  d.engine.model = "qwen";
  EXPECT_TRUE(ValidateEngine(d, c, "engine d", &claims).ok());
}

#ifdef KVIDX_BIN_DIR
// The program operators run: `kvidx-server --check-config` exits 2 with the
// line and the key instead of passing a config the server cannot run.
TEST(EngineValidation, CheckConfigRejectsWhatTheServerCannotRun) {
  const std::string bin = std::string(KVIDX_BIN_DIR) + "/kvidx-server";
  if (!std::filesystem::exists(bin)) GTEST_SKIP() << bin << " not built";
  const std::string path = ::testing::TempDir() + "/kvidx_check_config_" + std::to_string(getpid()) + ".yaml";
  auto check = [&](const std::string& engine) {
    std::ofstream(path) << kModels << "engines:\n  - " << engine << "\n";
    return kvidx::testing::RunCommand(bin + " --check-config --config " + path);
  };
  kvidx::testing::CommandResult r = check(R"({replica: a, model: qwen, endpoint: "tcp://127.0.0.1"})");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr(":4: engines[0]: engine 'a': endpoint 'tcp://127.0.0.1': expected tcp://HOST:PORT"));
  r = check(R"({replica: a, model: qwen, endpoint: "tcp://127.0.0.1:0"})");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("port must be a number in 1..65535"));
  r = check(R"({replica: a, model: qwen, endpoint: "tcp://127.0.0.1:99999"})");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("port must be a number in 1..65535"));
  r = check("{replica: " + std::string(1 << 20, 'r') + ", model: qwen, endpoint: \"tcp://127.0.0.1:5557\"}");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("replica name of 1048576 bytes exceeds 253"));
  EXPECT_LT(r.err.size(), 1024u) << "the error must not echo the name";
  r = check(R"({replica: a, model: qwen, endpoint: "tcp://127.0.0.1:5557"})");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::filesystem::remove(path);
}
#endif

}  // namespace
}  // namespace kvidx::server
