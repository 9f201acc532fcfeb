// The `kvidx` CLI run as a subprocess against a real server: JSON output of
// status / sources / query / engines / snapshot / watch, and the exit codes
// (0 ok, 1 server error with "kvidx: <CODE>: <message>", 2 usage).
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "client_test_util.h"
#include "common/json_lite.h"
#include "common/run_command.h"

namespace kvidx::client_testing {
namespace {

using ingest::testing::StorePayload;
using kvidx::testing::JsonParser;
using kvidx::testing::JsonValue;

using CliResult = kvidx::testing::CommandResult;

// Runs `<env> kvidx <args>` through the shell; arguments must not need quoting.
CliResult RunKvidx(const std::string& args, const std::string& env = "") {
  return kvidx::testing::RunCommand(env + (env.empty() ? "" : " ") + std::string(KVIDX_BIN_DIR) + "/kvidx " + args +
                                    " </dev/null");
}

JsonValue ParseJson(const std::string& text) {
  std::string error;
  std::optional<JsonValue> v = JsonParser::Parse(text, &error);
  EXPECT_TRUE(v.has_value()) << error << " in: " << text;
  return v ? *v : JsonValue{};
}

class CliTest : public ServerFixture {
 protected:
  void SetUp() override {
    ServerFixture::SetUp();
    if (access((std::string(KVIDX_BIN_DIR) + "/kvidx").c_str(), X_OK) != 0) {
      FAIL() << "kvidx binary not built at " << KVIDX_BIN_DIR << "/kvidx";
    }
  }
  // Connection flags for the test server, with the admin token.
  std::string Conn() const { return "--server " + Target() + " --token-file " + token_file_; }
};

TEST_F(CliTest, StatusJson) {
  StartServer(true, {StorePayload(1000, 4)});
  ASSERT_TRUE(WaitMatched({1000, 1001, 1002, 1003}, "r1", 4));
  ASSERT_TRUE(WaitSourceState("r1/dp0", v1::SOURCE_STATE_EXACT));
  // The probe replay that follows a connect (ReplayOptions::probe_delay)
  // can show the source REPLAYING for an instant after it was EXACT: read
  // until it has settled.
  CliResult r;
  JsonValue v;
  ASSERT_TRUE(WaitUntil([&] {
    r = RunKvidx("status --json --server " + Target());
    if (r.exit_code != 0) return false;
    v = ParseJson(r.out);
    return v.is_object() && v["sources_by_state"]["EXACT"].as_int() == 1;
  })) << r.err << r.out;
  for (const char* key : {"version", "uptime_seconds", "serving", "models", "sources_by_state", "applied_batches",
                          "events", "batches_lost", "gaps", "queries", "snapshot_age_seconds"}) {
    EXPECT_TRUE(v.has(key)) << key << " missing in " << r.out;
  }
  ASSERT_TRUE(v["models"].is_array());
  ASSERT_EQ(v["models"].items.size(), 1u);
  EXPECT_EQ(v["models"].items[0]["name"].text, "m");
  EXPECT_EQ(v["models"].items[0]["block_size"].as_int(), 16);
  EXPECT_EQ(v["models"].items[0]["blocks"].as_int(), 4);
  EXPECT_EQ(v["sources_by_state"]["EXACT"].as_int(), 1);
  EXPECT_EQ(v["sources_by_state"]["DEGRADED"].as_int(), 0);
  EXPECT_GE(v["applied_batches"].as_int(), 1);

  // The human form is a table naming the model.
  const CliResult t = RunKvidx("status --server " + Target());
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_NE(t.out.find("serving"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("sha256"), std::string::npos) << t.out;
}

TEST_F(CliTest, SourcesJsonNeedsToken) {
  StartServer(true, {StorePayload(1000, 2)});
  ASSERT_TRUE(WaitSourceState("r1/dp0", v1::SOURCE_STATE_EXACT));
  // As in StatusJson: read until the connect's probe replay is over.
  CliResult r;
  JsonValue v;
  ASSERT_TRUE(WaitUntil([&] {
    r = RunKvidx("sources --json " + Conn());
    if (r.exit_code != 0) return false;
    v = ParseJson(r.out);
    return v.is_array() && v.items.size() == 1 && v.items[0]["state"].text == "EXACT";
  })) << r.err << r.out;
  const JsonValue& s = v.items[0];
  EXPECT_EQ(s["source"].text, "r1/dp0");
  EXPECT_EQ(s["replica"].text, "r1");
  EXPECT_EQ(s["dp_rank"].as_int(), 0);
  EXPECT_EQ(s["state"].text, "EXACT");
  EXPECT_TRUE(s["last_seq"].is_string()) << "seqs are decimal strings: " << r.out;
  EXPECT_EQ(s["last_seq"].text, "0");
  for (const char* key : {"gaps", "batches_lost", "batches_replayed", "restarts"}) {
    EXPECT_TRUE(s[key].is_number()) << key << " in " << r.out;
  }

  // The env var names the token file too.
  const CliResult env = RunKvidx("sources --server " + Target(), "KVIDX_TOKEN_FILE=" + token_file_);
  EXPECT_EQ(env.exit_code, 0) << env.err;
  EXPECT_NE(env.out.find("r1/dp0"), std::string::npos) << env.out;
  EXPECT_NE(env.out.find("decode_errors"), std::string::npos) << env.out;

  const CliResult anon = RunKvidx("sources --server " + Target(), "KVIDX_TOKEN_FILE=");
  EXPECT_EQ(anon.exit_code, 1);
  EXPECT_EQ(anon.err.rfind("kvidx: UNAUTHENTICATED: ", 0), 0u) << anon.err;
}

TEST_F(CliTest, RouteJsonAndTable) {
  StartServer(true, {StorePayload(1000, 3)});
  ASSERT_TRUE(WaitMatched({1000, 1001, 1002}, "r1", 3));
  CliResult r = RunKvidx("route --json --done --model m --hashes 1000,1001,1002 --prompt-tokens 50 --server " +
                         Target());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  JsonValue v = ParseJson(r.out);
  EXPECT_EQ(v["source"].text, "r1/dp0");
  EXPECT_EQ(v["reason"].text, "affinity");
  EXPECT_EQ(v["prompt_tokens"].as_int(), 50);
  EXPECT_TRUE(v["route_id"].is_string()) << r.out;
  ASSERT_EQ(v["candidates"].items.size(), 1u) << r.out;
  EXPECT_EQ(v["candidates"].items[0]["gpu_blocks"].as_int(), 3);

  r = RunKvidx("route --model m --hashes 1000,1001 --server " + Target());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("to r1/dp0 (reason affinity)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("warmup_x"), std::string::npos) << r.out;

  r = RunKvidx("route --model m --hashes 1000 --n 99999 --server " + Target());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("INVALID_ARGUMENT: n: "), std::string::npos) << r.err;
  r = RunKvidx("route --model m --server " + Target());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("missing --tokens"), std::string::npos) << r.err;
}

TEST_F(CliTest, QueryJson) {
  const std::vector<int64_t> prompt = Iota(100, 48);
  StartServer(true, {StorePayload(1000, 3), TokenStorePayload(prompt)});
  ASSERT_TRUE(WaitMatched({1000, 1001, 1002}, "r1", 3));
  ASSERT_TRUE(WaitMatched(TokenHashes(prompt), "r1", 3));

  CliResult r = RunKvidx("query --json --model m --hashes 1000,1001,7 --server " + Target());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  JsonValue v = ParseJson(r.out);
  EXPECT_EQ(v["model"].text, "m");
  EXPECT_EQ(v["blocks_in_query"].as_int(), 3);
  ASSERT_TRUE(v["replicas"].is_array());
  ASSERT_EQ(v["replicas"].items.size(), 1u) << r.out;
  const JsonValue& m = v["replicas"].items[0];
  EXPECT_EQ(m["replica"].text, "r1");
  EXPECT_EQ(m["dp_rank"].as_int(), 0);
  EXPECT_EQ(m["matched_blocks"].as_int(), 2);
  EXPECT_EQ(m["matched_blocks_with_lower_tiers"].as_int(), 2);
  EXPECT_TRUE(m.has("matched_tokens"));
  EXPECT_TRUE(m.has("hits"));
  EXPECT_TRUE(m["state"].is_string());

  std::string tokens;
  for (int64_t t : prompt) tokens += (tokens.empty() ? "" : ",") + std::to_string(t);
  r = RunKvidx("query --json --model m --tokens " + tokens + " --server " + Target());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  v = ParseJson(r.out);
  EXPECT_EQ(v["block_size"].as_int(), 16);
  ASSERT_EQ(v["replicas"].items.size(), 1u) << r.out;
  EXPECT_EQ(v["replicas"].items[0]["matched_blocks"].as_int(), 3);
  EXPECT_EQ(v["replicas"].items[0]["matched_tokens"].as_int(), 48);

  // --tokens-file (whitespace separated), and a replica filter that excludes r1.
  const std::string path = dir_ + "/tokens.txt";
  {
    std::ofstream f(path);
    for (int64_t t : prompt) f << t << "\n";
  }
  r = RunKvidx("query --json --model m --tokens-file " + path + " --server " + Target());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ParseJson(r.out)["replicas"].items.size(), 1u) << r.out;
  r = RunKvidx("query --json --model m --tokens-file " + path + " --replica other --server " + Target());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ParseJson(r.out)["replicas"].items.size(), 0u) << r.out;

  // block: the owners of one block.
  r = RunKvidx("block --json --model m 1001 --server " + Target());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  v = ParseJson(r.out);
  EXPECT_EQ(v["hash"].text, "1001");
  ASSERT_EQ(v["owners"].items.size(), 1u) << r.out;
  EXPECT_EQ(v["owners"].items[0]["source"].text, "r1/dp0");
  EXPECT_EQ(v["owners"].items[0]["tier"].text, "GPU");

  r = RunKvidx("query --json --model nope --hashes 1 --server " + Target());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err.rfind("kvidx: NOT_FOUND: ", 0), 0u) << r.err;
}

TEST_F(CliTest, EnginesAddListRemove) {
  StartServer(false);
  auto e = MakeEngine();
  ASSERT_NE(e, nullptr);
  e->Publish(StorePayload(500, 2));
  e->Flush();
  CliResult r = RunKvidx("engines add --json --replica r9 --model m --endpoint " + e->pub_endpoint() +
                         " --replay-endpoint " + e->replay_endpoint() + " --gpu-blocks 64 " + Conn());
  extra_engines_.push_back(std::move(e));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  JsonValue v = ParseJson(r.out);
  EXPECT_EQ(v["replica"].text, "r9");
  ASSERT_EQ(v["sources"].items.size(), 1u) << r.out;
  EXPECT_EQ(v["sources"].items[0].text, "r9/dp0");
  ASSERT_TRUE(WaitMatched({500, 501}, "r9", 2));

  r = RunKvidx("engines list --json --server " + Target());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  v = ParseJson(r.out);
  ASSERT_TRUE(v.is_array()) << r.out;
  ASSERT_EQ(v.items.size(), 1u) << r.out;
  EXPECT_EQ(v.items[0]["replica"].text, "r9");
  EXPECT_EQ(v.items[0]["model"].text, "m");
  EXPECT_EQ(v.items[0]["origin"].text, "admin");
  ASSERT_EQ(v.items[0]["sources"].items.size(), 1u);
  EXPECT_EQ(v.items[0]["sources"].items[0]["gpu_capacity"].as_int(), 64);
  r = RunKvidx("engines list --server " + Target());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("origin"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" admin "), std::string::npos) << r.out;

  r = RunKvidx("engines remove r9 " + Conn());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("r9"), std::string::npos);
  r = RunKvidx("engines list --json --server " + Target());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ParseJson(r.out).items.size(), 0u) << r.out;

  r = RunKvidx("engines remove r9 " + Conn());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err.rfind("kvidx: NOT_FOUND: ", 0), 0u) << r.err;
  r = RunKvidx("engines add --replica r8 --model m --endpoint tcp://127.0.0.1:1 --server " + Target(),
               "KVIDX_TOKEN_FILE=");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err.rfind("kvidx: UNAUTHENTICATED: ", 0), 0u) << r.err;
}

TEST_F(CliTest, SnapshotResyncAndWatch) {
  StartServer(true, {StorePayload(1000, 2)});
  ASSERT_TRUE(WaitMatched({1000, 1001}, "r1", 2));
  CliResult r = RunKvidx("snapshot --json " + Conn());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  JsonValue v = ParseJson(r.out);
  EXPECT_GE(v["generation"].as_int(), 1);
  EXPECT_TRUE(v.has("bytes"));
  EXPECT_TRUE(v.has("duration_seconds"));

  r = RunKvidx("resync r1/dp0 " + Conn());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = RunKvidx("resync nobody/dp0 " + Conn());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err.rfind("kvidx: NOT_FOUND: ", 0), 0u) << r.err;

  // watch: one JSON line per refresh; rates from the second refresh on.
  r = RunKvidx("watch --json --count 2 --interval-ms 50 " + Conn());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream lines(r.out);
  std::string first, second, extra;
  ASSERT_TRUE(std::getline(lines, first));
  ASSERT_TRUE(std::getline(lines, second));
  EXPECT_FALSE(std::getline(lines, extra)) << r.out;
  EXPECT_TRUE(ParseJson(first)["events_per_second"].is_null());
  const JsonValue w = ParseJson(second);
  EXPECT_TRUE(w["events_per_second"].is_number()) << second;
  ASSERT_TRUE(w["sources"].is_array());
  ASSERT_EQ(w["sources"].items.size(), 1u);
  EXPECT_EQ(w["sources"].items[0]["source"].text, "r1/dp0");

  // Without a token it falls back to ListReplicas; the human form is tables.
  r = RunKvidx("watch --count 1 --server " + Target(), "KVIDX_TOKEN_FILE=");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("events/s"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("r1/dp0"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("\033["), std::string::npos) << "no screen clearing into a pipe";
}

TEST_F(CliTest, EnvServer) {
  StartServer(false);
  const CliResult r = RunKvidx("status --json", "KVIDX_SERVER=" + Target());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(ParseJson(r.out).has("version"));
}

// Connection options go before or after the subcommand, as with git and
// kubectl; given on both sides, the one after the subcommand wins.
TEST_F(CliTest, ConnectionOptionsBeforeOrAfterTheSubcommand) {
  StartServer(true, {StorePayload(1000, 2)});
  ASSERT_TRUE(WaitSourceState("r1/dp0", v1::SOURCE_STATE_EXACT));
  const std::string env = "KVIDX_SERVER= KVIDX_TOKEN_FILE=";
  for (const std::string& args : {"--server " + Target() + " status --json", "status --json --server " + Target(),
                                  "--server=" + Target() + " --json status", "--json status --server " + Target()}) {
    const CliResult r = RunKvidx(args, env);
    ASSERT_EQ(r.exit_code, 0) << args << ": " << r.err;
    EXPECT_TRUE(ParseJson(r.out).has("version")) << args << ": " << r.out;
  }
  // Admin commands get their token and an action after the subcommand.
  for (const std::string& args : {Conn() + " sources --json", Conn() + " engines list --json"}) {
    const CliResult r = RunKvidx(args, env);
    ASSERT_EQ(r.exit_code, 0) << args << ": " << r.err;
    EXPECT_NE(r.out.find("r1"), std::string::npos) << args << ": " << r.out;
  }
  const std::string dead = "127.0.0.1:" + std::to_string(DeadPort());
  CliResult r = RunKvidx("--server " + dead + " status --json --server " + Target(), env);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = RunKvidx("--server " + Target() + " status --json --server " + dead, env);
  EXPECT_EQ(r.exit_code, 1) << r.err;
}

TEST_F(CliTest, RouterExampleRoutesThroughKvidxAndReportsTheEnd) {
  const std::vector<int64_t> prompt = Iota(100, 48);
  StartServer(true, {TokenStorePayload(prompt)});
  ASSERT_TRUE(WaitMatched(TokenHashes(prompt), "r1", 3));
  const std::string bin = std::string(KVIDX_BIN_DIR) + "/kvidx-router-example";
  ASSERT_EQ(access(bin.c_str(), X_OK), 0) << bin << " not built";
  std::string tokens;
  for (int64_t t : prompt) tokens += std::to_string(t) + " ";
  auto run = [&](const std::string& server, const std::string& flags) {
    return kvidx::testing::RunCommand(
        "echo '" + tokens + "' | " + bin + " --server " + server + " --timeout-ms 2000 --model m " + flags,
        kvidx::testing::Stderr::kDiscard);
  };
  // r1 holds 3 of the prompt's blocks; vLLM reuses at most prompt-1 tokens: 32.
  CliResult r = run(Target(), "--replica r1 --cached-tokens 32");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("pick: r1 dp0 (ROUTE_REASON_AFFINITY)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("done: kvidx expected 32 cached tokens, the engine reported 32"), std::string::npos) << r.out;
  // kvidx down (or the replica unknown to it): route without it.
  r = run("127.0.0.1:" + std::to_string(DeadPort()), "--replica r1 --timeout-ms 300");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("pick: r1 (without kvidx)"), std::string::npos) << r.out;
  r = run(Target(), "--replica nobody");
  EXPECT_NE(r.out.find("pick: nobody (without kvidx)"), std::string::npos) << r.out;
  EXPECT_EQ(run(Target(), "--n x").exit_code, 2);
}

// Exit codes without a server.

TEST(CliNoServerTest, ServerDownExits1) {
  const std::string server = "--server 127.0.0.1:" + std::to_string(DeadPort());
  for (const char* cmd : {"status", "status --json", "query --model m --hashes 1", "engines list", "snapshot"}) {
    const CliResult r = RunKvidx(std::string(cmd) + " " + server);
    EXPECT_EQ(r.exit_code, 1) << cmd << ": " << r.err;
    EXPECT_EQ(r.err.rfind("kvidx: UNAVAILABLE: ", 0), 0u) << cmd << ": " << r.err;
    EXPECT_TRUE(r.out.empty()) << cmd;
  }
}

TEST(CliNoServerTest, BadUsageExits2NamingTheFlag) {
  struct Case {
    const char* args;
    const char* names;
  };
  const Case cases[] = {
      {"query --hashes 1", "--model"},
      {"query --model m", "--tokens"},
      {"query --model m --hashes 1 --tokens 1", "only one"},
      {"query --model m --hashes 0xzz", "--hashes"},
      {"query --model m --hashes 1,0x000102030405060708090a0b0c0d0e0f", "mixes"},
      {"query --model m --tokens 1,,2", "--tokens"},
      {"query --model m --hashes 1 --lora x", "--lora"},
      {"status --timeout-ms zero", "--timeout-ms"},
      {"status --bogus", "--bogus"},
      {"status extra", "extra"},
      {"sources --server", "--server needs a value"},
      {"status --json=yes", "--json takes no value"},
      {"engines add --model m --endpoint tcp://h:1", "--replica"},
      {"engines add --replica r --model m --endpoint tcp://h:1 --mode both", "--mode"},
      {"engines add --replica r --model m --endpoint tcp://h:1 --dp-size 0", "--dp-size"},
      {"engines", "add, remove or list"},
      {"engines frob", "frob"},
      {"engines remove", "REPLICA"},
      {"resync", "SOURCE"},
      {"block --model m", "HASH"},
      {"block 5", "--model"},
      {"watch --count 0", "--count"},
      {"watch --interval-ms x", "--interval-ms"},
      {"status --cert c.pem", "--key"},
      {"nosuchcommand", "nosuchcommand"},
  };
  for (const Case& c : cases) {
    const CliResult r = RunKvidx(c.args, "KVIDX_SERVER=127.0.0.1:1 KVIDX_TOKEN_FILE=");
    EXPECT_EQ(r.exit_code, 2) << c.args << ": " << r.err;
    EXPECT_NE(r.err.find(c.names), std::string::npos) << c.args << ": " << r.err;
  }
}

TEST(CliNoServerTest, OnlyConnectionOptionsGoBeforeTheSubcommand) {
  struct Case {
    const char* args;
    const char* names;
  };
  const Case cases[] = {
      {"--bogus status", "unknown option '--bogus' before the subcommand"},
      {"--model m query --hashes 1", "unknown option '--model' before the subcommand"},
      {"--server", "--server needs a value"},
      {"--json=yes status", "--json takes no value"},
      {"--server 127.0.0.1:1", "missing subcommand"},
      {"--server 127.0.0.1:1 nosuchcommand", "nosuchcommand"},
      {"--server 127.0.0.1:1 hash --tokens 1", "--server"},
  };
  for (const Case& c : cases) {
    const CliResult r = RunKvidx(c.args, "KVIDX_SERVER=127.0.0.1:1 KVIDX_TOKEN_FILE=");
    EXPECT_EQ(r.exit_code, 2) << c.args << ": " << r.err;
    EXPECT_NE(r.err.find(c.names), std::string::npos) << c.args << ": " << r.err;
    EXPECT_TRUE(r.out.empty()) << c.args << ": " << r.out;
  }
  // The unknown-option message names the options that do go there.
  const CliResult r = RunKvidx("--bogus status");
  EXPECT_NE(r.err.find("--server"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--token-file"), std::string::npos) << r.err;
}

TEST(CliNoServerTest, HelpExits0) {
  for (const char* cmd : {"status --help", "sources -h", "query --help", "block --help", "engines --help",
                          "engines add --help", "snapshot --help", "resync --help", "watch --help", "--help",
                          "--server 127.0.0.1:1 --help", "--server 127.0.0.1:1 status --help"}) {
    const CliResult r = RunKvidx(cmd);
    EXPECT_EQ(r.exit_code, 0) << cmd << ": " << r.err;
    EXPECT_NE(r.out.find("usage"), std::string::npos) << cmd;
  }
}

TEST(CliNoServerTest, UnreadableTokenFileExits1) {
  const CliResult r = RunKvidx("sources --server 127.0.0.1:1 --token-file /nonexistent/token");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("/nonexistent/token"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kvidx::client_testing
