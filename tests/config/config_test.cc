// Tests for the kvidx-server YAML configuration (server/config.h): defaults,
// the documented example, every class of error with its exact line and key
// path, and the helpers the server builds on the parsed config.
#include "server/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace kvidx::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// Raw strings below open with a newline so the YAML starts at line 1 of
// what the parser sees, and line numbers in assertions match the text.
std::string Yaml(std::string_view text) {
  if (!text.empty() && text.front() == '\n') text.remove_prefix(1);
  return std::string(text);
}

ServerConfig MustParse(std::string_view text) {
  auto r = ParseConfig(Yaml(text), "cfg.yaml");
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? r.value() : ServerConfig{};
}

// The error message, or "OK" when the text parsed (so a wrong acceptance
// shows up as a readable assertion failure).
std::string ErrorOf(std::string_view text) {
  auto r = ParseConfig(Yaml(text), "cfg.yaml");
  if (r.ok()) return "OK";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
  return r.status().message();
}

constexpr std::string_view kFullExample = R"(
grpc:
  listen: "127.0.0.1:50051"
  tls: {cert_file: "", key_file: "", client_ca_file: "", require_client_cert: true}
  admin_token_file: ""
  max_message_bytes: 16777216
  max_query_tokens: 1048576
  max_query_hashes: 65536
  max_batch_queries: 1024
  max_concurrent_streams: 1024
  max_connection_age_ms: 0
metrics: {listen: "127.0.0.1:9464"}     # "" disables
data_dir: "./kvidx-data"                # "" = no persistence
on_corrupt: fail                        # fail | start-empty
snapshot: {interval_seconds: 30, every_batches: 0, on_shutdown: true, sync: true}
ingest: {threads: 1, topic_template: "", replay_timeout_ms: 2000, replay_max_retries: 3,
         heartbeat_ivl_ms: 1000, heartbeat_timeout_ms: 5000, sub_rcvhwm: 1000000,
         source_id_reuse_after_s: 900}
log: {level: info, json: false}
models:
  - {name: qwen, hash_algo: sha256, hash_seed: null, block_size: 16, int_block_hashes: true,
     max_query_blocks: 8192, index_all_groups: false}
engines:
  - {replica: vllm-0, model: qwen, endpoint: "tcp://127.0.0.1:5557",
     replay_endpoint: "tcp://127.0.0.1:5558", dp_size: 1, topic: "", mode: connect, gpu_blocks: 0}
)";

// A valid prefix for engine tests: one model, lines 1-2.
constexpr std::string_view kOneModel = "models:\n  - name: qwen\n";

void ExpectDefaults(const ServerConfig& c) {
  const ServerConfig d;
  EXPECT_EQ(c.grpc.listen, "127.0.0.1:50051");
  EXPECT_EQ(c.grpc.listen, d.grpc.listen);
  EXPECT_FALSE(c.grpc.tls.enabled());
  EXPECT_TRUE(c.grpc.tls.require_client_cert);
  EXPECT_EQ(c.grpc.max_message_bytes, 16u << 20);
  EXPECT_EQ(c.grpc.max_query_tokens, 1u << 20);
  EXPECT_EQ(c.grpc.max_query_hashes, 1u << 16);
  EXPECT_EQ(c.grpc.max_batch_queries, 1024u);
  EXPECT_EQ(c.grpc.max_concurrent_streams, 1024u);
  EXPECT_EQ(c.grpc.max_connection_age_ms, 0u);
  EXPECT_EQ(c.metrics.listen, "127.0.0.1:9464");
  EXPECT_EQ(c.data_dir, "./kvidx-data");
  EXPECT_EQ(c.on_corrupt, OnCorruptData::kFail);
  EXPECT_EQ(c.index_core, IndexCore::kRuns);
  EXPECT_EQ(c.snapshot.interval_seconds, 30u);
  EXPECT_EQ(c.snapshot.every_batches, 0u);
  EXPECT_TRUE(c.snapshot.on_shutdown);
  EXPECT_TRUE(c.snapshot.sync);
  EXPECT_EQ(c.ingest.threads, 1u);
  EXPECT_EQ(c.ingest.topic_template, "");
  EXPECT_EQ(c.ingest.replay_timeout_ms, 2000u);
  EXPECT_EQ(c.ingest.replay_max_retries, 3u);
  EXPECT_EQ(c.ingest.heartbeat_ivl_ms, 1000u);
  EXPECT_EQ(c.ingest.heartbeat_timeout_ms, 5000u);
  EXPECT_EQ(c.ingest.sub_rcvhwm, 1'000'000);
  EXPECT_EQ(c.ingest.source_id_reuse_after_s, 900u);
  EXPECT_EQ(c.log.level, "info");
  EXPECT_FALSE(c.log.json);
  EXPECT_TRUE(c.models.empty());
  EXPECT_TRUE(c.engines.empty());
}

TEST(ConfigTest, EmptyDocumentsAreAllDefaults) {
  for (std::string_view text : {"", "\n", "# nothing configured\n", "---\n", "~\n", "null\n"}) {
    SCOPED_TRACE(testing::Message() << "text: '" << text << "'");
    ExpectDefaults(MustParse(text));
  }
}

TEST(ConfigTest, EmptySectionsAreDefaults) {
  ExpectDefaults(MustParse("grpc:\nmetrics:\nsnapshot: {}\ningest:\nlog:\nmodels: []\nengines:\n"));
}

TEST(ConfigTest, FullExampleRoundTrips) {
  ServerConfig c = MustParse(kFullExample);
  ExpectDefaults(ServerConfig{});  // sanity: the helper agrees with config.h
  EXPECT_EQ(c.grpc.listen, "127.0.0.1:50051");
  EXPECT_EQ(c.grpc.tls.cert_file, "");
  EXPECT_TRUE(c.grpc.tls.require_client_cert);
  EXPECT_EQ(c.grpc.max_message_bytes, 16777216u);
  EXPECT_EQ(c.grpc.max_query_tokens, 1048576u);
  EXPECT_EQ(c.grpc.max_query_hashes, 65536u);
  EXPECT_EQ(c.metrics.listen, "127.0.0.1:9464");
  EXPECT_EQ(c.data_dir, "./kvidx-data");
  EXPECT_EQ(c.on_corrupt, OnCorruptData::kFail);
  EXPECT_EQ(c.snapshot.interval_seconds, 30u);
  EXPECT_EQ(c.ingest.sub_rcvhwm, 1000000);
  EXPECT_EQ(c.log.level, "info");
  ASSERT_EQ(c.models.size(), 1u);
  const ModelConfig& m = c.models[0];
  EXPECT_EQ(m.name, "qwen");
  EXPECT_EQ(m.hash_algo, "sha256");
  EXPECT_EQ(m.hash_seed, std::nullopt);
  EXPECT_EQ(m.block_size, 16u);
  EXPECT_TRUE(m.int_block_hashes);
  EXPECT_EQ(m.max_query_blocks, 8192u);
  EXPECT_FALSE(m.index_all_groups);
  ASSERT_EQ(c.engines.size(), 1u);
  const ingest::EngineConfig& e = c.engines[0].engine;
  EXPECT_EQ(e.replica, "vllm-0");
  EXPECT_EQ(e.model, "qwen");
  EXPECT_EQ(e.endpoint, "tcp://127.0.0.1:5557");
  EXPECT_EQ(e.replay_endpoint, "tcp://127.0.0.1:5558");
  EXPECT_EQ(e.data_parallel_size, 1u);
  EXPECT_EQ(e.topic, std::optional<std::string>(""));
  EXPECT_EQ(e.mode, ingest::ConnectMode::kConnect);
  EXPECT_EQ(c.engines[0].gpu_blocks, 0u);
  EXPECT_EQ(c.FindModel("qwen"), &c.models[0]);
  EXPECT_EQ(c.FindModel("llama"), nullptr);
}

TEST(ConfigTest, NonDefaultValuesLand) {
  ServerConfig c = MustParse(R"(
grpc:
  listen: "[::]:6000"
  tls:
    cert_file: /etc/kvidx/tls.crt
    key_file: /etc/kvidx/tls.key
    client_ca_file: /etc/kvidx/ca.crt
    require_client_cert: false
  admin_token_file: /etc/kvidx/admin-token
  max_message_bytes: 4096
  max_connection_age_ms: 250
metrics:
  listen: ""
data_dir: ""
on_corrupt: start-empty
index_core: blocks
snapshot: {interval_seconds: 0, every_batches: 18446744073709551615, on_shutdown: false, sync: False}
ingest:
  threads: 64
  topic_template: "kv@{replica}@{model}"
  replay_max_retries: 0
  heartbeat_ivl_ms: 0
  sub_rcvhwm: 0
log: {level: off, json: TRUE}
models:
  - {name: llama, hash_algo: xxhash_cbor, hash_seed: 0, block_size: 65536, int_block_hashes: false,
     index_all_groups: true}
engines:
  - {replica: b0, model: llama, endpoint: "tcp://*:7000", mode: bind, dp_size: 256, gpu_blocks: 123456}
)");
  EXPECT_EQ(c.grpc.listen, "[::]:6000");
  EXPECT_TRUE(c.grpc.tls.enabled());
  EXPECT_EQ(c.grpc.tls.key_file, "/etc/kvidx/tls.key");
  EXPECT_EQ(c.grpc.tls.client_ca_file, "/etc/kvidx/ca.crt");
  EXPECT_FALSE(c.grpc.tls.require_client_cert);
  EXPECT_EQ(c.grpc.admin_token_file, "/etc/kvidx/admin-token");
  EXPECT_EQ(c.grpc.max_message_bytes, 4096u);
  EXPECT_EQ(c.grpc.max_connection_age_ms, 250u);
  EXPECT_EQ(c.metrics.listen, "");
  EXPECT_EQ(c.data_dir, "");
  EXPECT_EQ(c.on_corrupt, OnCorruptData::kStartEmpty);
  EXPECT_EQ(c.index_core, IndexCore::kBlocks);
  EXPECT_EQ(c.snapshot.interval_seconds, 0u);
  EXPECT_EQ(c.snapshot.every_batches, UINT64_MAX);
  EXPECT_FALSE(c.snapshot.on_shutdown);
  EXPECT_FALSE(c.snapshot.sync);
  EXPECT_EQ(c.ingest.threads, 64u);
  EXPECT_EQ(c.ingest.topic_template, "kv@{replica}@{model}");
  EXPECT_EQ(c.ingest.replay_max_retries, 0u);
  EXPECT_EQ(c.ingest.heartbeat_ivl_ms, 0u);
  EXPECT_EQ(c.ingest.sub_rcvhwm, 0);
  EXPECT_EQ(c.log.level, "off");  // a string, not YAML 1.1's boolean
  EXPECT_TRUE(c.log.json);
  ASSERT_EQ(c.models.size(), 1u);
  EXPECT_EQ(c.models[0].hash_algo, "xxhash_cbor");
  EXPECT_EQ(c.models[0].block_size, 65536u);
  EXPECT_FALSE(c.models[0].int_block_hashes);
  EXPECT_TRUE(c.models[0].index_all_groups);
  ASSERT_EQ(c.engines.size(), 1u);
  EXPECT_EQ(c.engines[0].engine.mode, ingest::ConnectMode::kBind);
  EXPECT_EQ(c.engines[0].engine.data_parallel_size, 256u);
  EXPECT_EQ(c.engines[0].engine.topic, std::nullopt);
  EXPECT_EQ(c.engines[0].gpu_blocks, 123456u);
}

TEST(ConfigTest, UnknownKeys) {
  EXPECT_THAT(ErrorOf(R"(
grpc:
  listen: "127.0.0.1:1"
data_dri: /var/lib/kvidx
)"),
              StartsWith("cfg.yaml:3: data_dri: unknown key (expected one of: grpc, metrics, data_dir,"));
  EXPECT_THAT(ErrorOf(R"(
grpc:
  tls:
    cert_file: a.crt
    keyfile: a.key
)"),
              StartsWith("cfg.yaml:4: grpc.tls.keyfile: unknown key (expected one of: cert_file, key_file,"));
  EXPECT_THAT(ErrorOf(R"(
models:
  - name: qwen
engines:
  - {replica: a, model: qwen, endpoint: "tcp://h:1"}
  - replica: b
    model: qwen
    endpont: "tcp://h:2"
)"),
              StartsWith("cfg.yaml:7: engines[1].endpont: unknown key"));
  EXPECT_THAT(ErrorOf("grpc:\n  \"l\\tisten\": x\n"), StartsWith("cfg.yaml:2: grpc.\"l\\x09isten\": unknown key"));
}

TEST(ConfigTest, DuplicateKeys) {
  EXPECT_EQ(ErrorOf("log:\n  level: info\n  json: true\n  level: debug\n"),
            "cfg.yaml:4: log.level: duplicate key (first set at line 2)");
}

TEST(ConfigTest, WrongTypes) {
  EXPECT_EQ(ErrorOf("log:\n  json: yes\n"), "cfg.yaml:2: log.json: expected true or false, got \"yes\"");
  EXPECT_EQ(ErrorOf("grpc:\n  - listen\n"), "cfg.yaml:1: grpc: expected a map, got a sequence");
  EXPECT_EQ(ErrorOf("ingest:\n  threads: \"4\"\n"),
            "cfg.yaml:2: ingest.threads: expected an integer in [1, 64], got the quoted string \"4\"");
  EXPECT_EQ(ErrorOf("ingest:\n  threads: 2.5\n"),
            "cfg.yaml:2: ingest.threads: expected an integer in [1, 64], got \"2.5\"");
  EXPECT_EQ(ErrorOf("ingest:\n  threads:\n"), "cfg.yaml:2: ingest.threads: expected an integer in [1, 64], got null");
  EXPECT_EQ(ErrorOf("data_dir: true\n"), "cfg.yaml:1: data_dir: expected a string, got the boolean true");
  EXPECT_EQ(ErrorOf("grpc:\n  tls:\n    cert_file:\n"),
            "cfg.yaml:3: grpc.tls.cert_file: expected a string (write \"\" for an empty one), got null");
  EXPECT_EQ(ErrorOf("models: {name: qwen}\n"), "cfg.yaml:1: models: expected a sequence, got a map");
  EXPECT_EQ(ErrorOf("engines:\n  - vllm-0\n"), "cfg.yaml:2: engines[0]: expected a map, got \"vllm-0\"");
  EXPECT_EQ(ErrorOf("models:\n  - name: a\n  - ~\n"), "cfg.yaml:3: models[1]: empty list entry");
  EXPECT_EQ(ErrorOf("index_core: radix\n"), "cfg.yaml:1: index_core: expected one of blocks, runs, got \"radix\"");
  EXPECT_EQ(ErrorOf("on_corrupt: ignore\n"),
            "cfg.yaml:1: on_corrupt: expected one of fail, start-empty, got \"ignore\"");
  EXPECT_EQ(ErrorOf("snapshot: {sync: !!str true}\n"),
            "cfg.yaml:1: snapshot.sync: expected true or false, got \"true\"");
  // A list of key names is no key name.
  EXPECT_THAT(ErrorOf("log:\n  ? [a, b]\n  : 1\n"), StartsWith("cfg.yaml:2: log: expected a key name, got a sequence"));
}

TEST(ConfigTest, OutOfRange) {
  EXPECT_EQ(ErrorOf("ingest: {threads: 65}\n"),
            "cfg.yaml:1: ingest.threads: expected an integer in [1, 64], got \"65\"");
  EXPECT_EQ(ErrorOf("ingest: {threads: 0}\n"), "cfg.yaml:1: ingest.threads: expected an integer in [1, 64], got \"0\"");
  EXPECT_EQ(ErrorOf("ingest: {replay_max_retries: -1}\n"),
            "cfg.yaml:1: ingest.replay_max_retries: expected an integer in [0, 100], got \"-1\"");
  EXPECT_EQ(ErrorOf("ingest: {replay_max_retries: 101}\n"),
            "cfg.yaml:1: ingest.replay_max_retries: expected an integer in [0, 100], got \"101\"");
  EXPECT_EQ(ErrorOf("ingest: {source_id_reuse_after_s: 604801}\n"),
            "cfg.yaml:1: ingest.source_id_reuse_after_s: expected an integer in [0, 604800], got \"604801\"");
  EXPECT_EQ(ErrorOf("snapshot: {every_batches: 18446744073709551616}\n"),
            "cfg.yaml:1: snapshot.every_batches: expected an integer in [0, 18446744073709551615], got "
            "\"18446744073709551616\"");
  EXPECT_EQ(ErrorOf("grpc: {max_message_bytes: 4294967296}\n"),
            "cfg.yaml:1: grpc.max_message_bytes: expected an integer in [1024, 2147483647], got \"4294967296\"");
  EXPECT_EQ(ErrorOf("models:\n  - name: m\n    block_size: 65537\n"),
            "cfg.yaml:3: models[0].block_size: expected an integer in [1, 65536], got \"65537\"");
  // The example from config.h.
  EXPECT_EQ(ErrorOf(std::string(kOneModel) + R"(engines:
  - replica: a
    model: qwen
    endpoint: "tcp://h:1"
  - replica: b
    dp_size: two
)"),
            "cfg.yaml:8: engines[1].dp_size: expected an integer in [1, 256], got \"two\"");
  EXPECT_EQ(ErrorOf(std::string(kOneModel) +
                    "engines:\n  - {replica: a, model: qwen, endpoint: \"tcp://h:1\", dp_size: 257}\n"),
            "cfg.yaml:4: engines[0].dp_size: expected an integer in [1, 256], got \"257\"");
}

TEST(ConfigTest, ListenAddresses) {
  EXPECT_EQ(ErrorOf("grpc: {listen: \"\"}\n"), "cfg.yaml:1: grpc.listen: must not be empty (expected host:port)");
  EXPECT_EQ(ErrorOf("grpc:\n  listen: 50051\n"), "cfg.yaml:2: grpc.listen: expected host:port, got \"50051\"");
  EXPECT_THAT(ErrorOf("grpc:\n  listen: \":50051\"\n"),
              StartsWith("cfg.yaml:2: grpc.listen: expected host:port with a non-empty host"));
  EXPECT_EQ(ErrorOf("metrics: {listen: \"0.0.0.0:http\"}\n"),
            "cfg.yaml:1: metrics.listen: port must be an integer in [0, 65535], got \"http\"");
  EXPECT_EQ(ErrorOf("metrics: {listen: \"0.0.0.0:65536\"}\n"),
            "cfg.yaml:1: metrics.listen: port must be an integer in [0, 65535], got \"65536\"");
  EXPECT_THAT(ErrorOf("grpc: {listen: \"::1:50051\"}\n"),
              StartsWith("cfg.yaml:1: grpc.listen: an IPv6 host needs brackets"));
  EXPECT_EQ(MustParse("grpc: {listen: \"localhost:0\"}\n").grpc.listen, "localhost:0");
  EXPECT_EQ(MustParse("metrics: {listen: \"[::1]:9464\"}\n").metrics.listen, "[::1]:9464");
}

TEST(ConfigTest, ModelChecks) {
  EXPECT_EQ(ErrorOf("models:\n  - name: qwen\n    hash_algo: md5\n"),
            "cfg.yaml:3: models[0].hash_algo: unknown hash algorithm 'md5' (expected sha256, sha256_cbor, "
            "xxhash or xxhash_cbor)");
  EXPECT_EQ(ErrorOf("models:\n  - name: qwen\n  - name: llama\n  - name: qwen\n"),
            "cfg.yaml:4: models[2].name: duplicate model \"qwen\" (also models[0])");
  EXPECT_EQ(ErrorOf("models:\n  - name: qwen\n  - block_size: 32\n"), "cfg.yaml:3: models[1].name: is required");
  EXPECT_EQ(ErrorOf("models:\n  - name: \"\"\n"), "cfg.yaml:2: models[0].name: must not be empty");
  // Without PYTHONHASHSEED, vLLM's xxhash NONE_HASH is random per process.
  EXPECT_THAT(ErrorOf("models:\n  - name: qwen\n    hash_algo: xxhash\n"),
              StartsWith("cfg.yaml:3: models[0].hash_seed: xxhash needs an explicit seed"));
  EXPECT_THAT(ErrorOf("models:\n  - name: qwen\n    hash_algo: xxhash_cbor\n    hash_seed: null\n"),
              StartsWith("cfg.yaml:4: models[0].hash_seed: xxhash_cbor needs an explicit seed"));
  EXPECT_EQ(ErrorOf("models:\n  - {name: qwen, hash_algo: xxhash, hash_seed: \"0\"}\n"), "OK");
}

TEST(ConfigTest, HashSeedIsVerbatimText) {
  auto seed = [](std::string_view value) {
    return MustParse("models:\n  - name: m\n    hash_seed: " + std::string(value) + "\n").models.at(0).hash_seed;
  };
  EXPECT_EQ(MustParse("models:\n  - name: m\n").models[0].hash_seed, std::nullopt);
  EXPECT_EQ(seed("null"), std::nullopt);
  EXPECT_EQ(seed("~"), std::nullopt);
  EXPECT_EQ(seed("\"0\""), std::optional<std::string>("0"));
  EXPECT_EQ(seed("42"), std::optional<std::string>("42"));
  EXPECT_EQ(seed("007"), std::optional<std::string>("007"));  // the engine hashes the text
  EXPECT_EQ(seed("\"\""), std::optional<std::string>(""));
  EXPECT_EQ(seed("random"), std::optional<std::string>("random"));
  EXPECT_EQ(ErrorOf("models:\n  - name: m\n    hash_seed: true\n"),
            "cfg.yaml:3: models[0].hash_seed: expected an integer, a string or null (PYTHONHASHSEED), got the "
            "boolean true");
  EXPECT_THAT(ErrorOf("models:\n  - name: m\n    hash_seed: 1.5\n"),
              StartsWith("cfg.yaml:3: models[0].hash_seed: expected"));
}

TEST(ConfigTest, TopicAbsentVersusEmpty) {
  ServerConfig c = MustParse(std::string(kOneModel) + R"(engines:
  - {replica: a, model: qwen, endpoint: "tcp://h:1"}
  - {replica: b, model: qwen, endpoint: "tcp://h:2", topic: ""}
  - {replica: c, model: qwen, endpoint: "tcp://h:3", topic: kv@c}
  - {replica: d, model: qwen, endpoint: "tcp://h:4", topic: null}
)");
  ASSERT_EQ(c.engines.size(), 4u);
  EXPECT_EQ(c.engines[0].engine.topic, std::nullopt);
  EXPECT_EQ(c.engines[1].engine.topic, std::optional<std::string>(""));
  EXPECT_EQ(c.engines[2].engine.topic, std::optional<std::string>("kv@c"));
  EXPECT_EQ(c.engines[3].engine.topic, std::nullopt);
}

TEST(ConfigTest, EngineChecks) {
  const std::string m(kOneModel);
  EXPECT_EQ(ErrorOf(m + R"(engines:
  - {replica: a, model: qwen, endpoint: "tcp://h:1"}
  - {replica: a, model: qwen, endpoint: "tcp://h:2"}
)"),
            "cfg.yaml:5: engines[1].replica: replica \"a\" already exists (engines[0])");
  EXPECT_EQ(ErrorOf(m + "engines:\n  - replica: a\n    model: llama\n    endpoint: \"tcp://h:1\"\n"),
            "cfg.yaml:5: engines[0].model: model \"llama\" is not configured under models");
  EXPECT_EQ(ErrorOf("engines:\n  - {replica: a, model: qwen, endpoint: \"tcp://h:1\"}\n"),
            "cfg.yaml:2: engines[0].model: model \"qwen\" is not configured (there is no models section)");
  EXPECT_EQ(ErrorOf(m + "engines:\n  - {model: qwen, endpoint: \"tcp://h:1\"}\n"),
            "cfg.yaml:4: engines[0].replica: is required");
  EXPECT_EQ(ErrorOf(m + "engines:\n  - {replica: a, model: qwen}\n"), "cfg.yaml:4: engines[0].endpoint: is required");
  EXPECT_EQ(ErrorOf(m + "engines:\n  - {replica: \"\", model: qwen, endpoint: \"tcp://h:1\"}\n"),
            "cfg.yaml:4: engines[0].replica: replica name is empty");
  EXPECT_EQ(ErrorOf(m + "engines:\n  - {replica: a, model: qwen, endpoint: \"tcp://h:1\", mode: listen}\n"),
            "cfg.yaml:4: engines[0].mode: expected one of connect, bind, got \"listen\"");
}

TEST(ConfigTest, BadEndpointsReportExpandEngine) {
  const std::string m(kOneModel);
  EXPECT_EQ(ErrorOf(m + R"(engines:
  - {replica: a, model: qwen, endpoint: "tcp://h:1"}
  - replica: b
    model: qwen
    endpoint: "http://h:2"
)"),
            "cfg.yaml:5: engines[1]: engine 'b': endpoint 'http://h:2': expected tcp://, ipc:// or inproc://");
  EXPECT_THAT(ErrorOf(m + "engines:\n  - {replica: a, model: qwen, endpoint: \"tcp://*:5557\"}\n"),
              StartsWith("cfg.yaml:4: engines[0]: engine 'a': endpoint 'tcp://*:5557': kvidx connects here"));
  EXPECT_THAT(ErrorOf(m + "engines:\n  - {replica: a/b, model: qwen, endpoint: \"tcp://h:1\"}\n"),
              StartsWith("cfg.yaml:4: engines[0].replica: replica name 'a/b': character 1 is not one of"));
  EXPECT_THAT(ErrorOf(m + "engines:\n  - {replica: a, model: qwen, endpoint: \"ipc:///tmp/kv\", dp_size: 2}\n"),
              StartsWith("cfg.yaml:4: engines[0]: endpoint 'ipc:///tmp/kv' must contain 'inproc' or 'tcp'"));
  EXPECT_THAT(ErrorOf(m + "engines:\n  - {replica: a, model: qwen, endpoint: \"tcp://h:1\", replay_endpoint: x}\n"),
              StartsWith("cfg.yaml:4: engines[0]: engine 'a': replay_endpoint 'x'"));
}

TEST(ConfigTest, TwoSourcesOnOneStreamAreRejected) {
  const std::string m(kOneModel);
  // Bind mode: one socket, told apart by topic only.
  EXPECT_THAT(ErrorOf(m + R"(engines:
  - {replica: a, model: qwen, endpoint: "tcp://*:5557", mode: bind}
  - {replica: b, model: qwen, endpoint: "tcp://*:5557", mode: bind}
)"),
              StartsWith("cfg.yaml:5: engines[1]: source b/dp0 would read the same stream as a/dp0 (engines[0])"));
  // Rank 1 of a lands on b's port.
  EXPECT_THAT(ErrorOf(m + R"(engines:
  - {replica: a, model: qwen, endpoint: "tcp://h:5557", dp_size: 2}
  - {replica: b, model: qwen, endpoint: "tcp://h:5558"}
)"),
              StartsWith("cfg.yaml:5: engines[1]: source b/dp0 would read the same stream as a/dp1 (engines[0])"));
  // Distinct topics (explicit or from the template) share a bound socket fine.
  EXPECT_EQ(ErrorOf(m + R"(ingest: {topic_template: "kv@{replica}@{model}"}
engines:
  - {replica: a, model: qwen, endpoint: "tcp://*:5557", mode: bind}
  - {replica: b, model: qwen, endpoint: "tcp://*:5557", mode: bind}
  - {replica: c, model: qwen, endpoint: "tcp://*:5557", mode: bind, topic: ""}
)"),
            "OK");
}

TEST(ConfigTest, TopicTemplatePlaceholders) {
  EXPECT_EQ(ErrorOf("ingest:\n  topic_template: \"kv@{pod}\"\n"),
            "cfg.yaml:2: ingest.topic_template: unknown placeholder \"{pod}\" "
            "(only {replica} and {model} are supported)");
}

TEST(ConfigTest, LogLevel) {
  EXPECT_EQ(ErrorOf("log:\n  level: verbose\n"),
            "cfg.yaml:2: log.level: expected one of trace, debug, info, warn, error, critical, off, got \"verbose\"");
  EXPECT_EQ(MustParse("log: {level: critical}\n").log.level, "critical");
}

TEST(ConfigTest, TlsMustBeCompleteAndCoherent) {
  EXPECT_EQ(ErrorOf("grpc:\n  tls:\n    cert_file: a.crt\n"),
            "cfg.yaml:3: grpc.tls.key_file: must be set when grpc.tls.cert_file is (TLS needs both)");
  EXPECT_EQ(ErrorOf("grpc:\n  tls:\n    cert_file: a.crt\n    key_file: \"\"\n"),
            "cfg.yaml:4: grpc.tls.key_file: must be set when grpc.tls.cert_file is (TLS needs both)");
  EXPECT_EQ(ErrorOf("grpc:\n  listen: \"h:1\"\n  tls: {key_file: a.key}\n"),
            "cfg.yaml:3: grpc.tls.cert_file: must be set when grpc.tls.key_file is (TLS needs both)");
  EXPECT_THAT(ErrorOf("grpc:\n  tls:\n    client_ca_file: ca.crt\n"),
              StartsWith("cfg.yaml:3: grpc.tls.client_ca_file: needs grpc.tls.cert_file and key_file"));
}

TEST(ConfigTest, SyntaxErrorsUseTheParserMark) {
  EXPECT_EQ(ErrorOf("grpc:\n  listen: [1\nmetrics: {}\n"),
            "cfg.yaml:3: YAML syntax error: end of sequence flow not found");
  EXPECT_THAT(ErrorOf("log:\n  level: info\n   json: true\n"), StartsWith("cfg.yaml:3: YAML syntax error: "));
  EXPECT_THAT(ErrorOf("models:\n  - *undefined\n"), StartsWith("cfg.yaml:2: YAML syntax error: "));
  // Far deeper than any config: yaml-cpp's depth guard throws; we report it.
  EXPECT_THAT(ErrorOf(std::string(100000, '[')), HasSubstr("YAML syntax error"));
}

TEST(ConfigTest, TopLevelMustBeOneMap) {
  EXPECT_EQ(ErrorOf("- grpc\n- log\n"), "cfg.yaml:1: the top level must be a map of settings, got a sequence");
  EXPECT_EQ(ErrorOf("# comment\n\nhello\n"), "cfg.yaml:3: the top level must be a map of settings, got \"hello\"");
  // The line of the second document's "---".
  EXPECT_EQ(ErrorOf("log: {level: info}\n---\nlog: {level: debug}\n"),
            "cfg.yaml:2: expected one YAML document, found more");
  // yaml-cpp 0.7's LoadAll never returns on these (a stray token that cannot
  // start a node); they must be syntax errors, promptly.
  EXPECT_EQ(ErrorOf(","), "cfg.yaml:1: YAML syntax error: unexpected \",\"");
  EXPECT_EQ(ErrorOf(",rpc:\n  listen: \"h:1\"\n"), "cfg.yaml:1: YAML syntax error: unexpected \",\"");
  EXPECT_EQ(ErrorOf("---\n,\n"), "cfg.yaml:2: YAML syntax error: unexpected \",\"");
  EXPECT_EQ(ErrorOf("log: {level: info}\n,\n"), "cfg.yaml:2: YAML syntax error: end of map not found");
  EXPECT_EQ(ErrorOf("log: {level: info}\n]\n"), "cfg.yaml:2: YAML syntax error: illegal flow end");
  EXPECT_EQ(ErrorOf("log: {level: info}\n---\n,\n"), "cfg.yaml:2: expected one YAML document, found more");
}

TEST(ConfigTest, OriginNamesTheText) {
  auto r = ParseConfig("bogus: 1\n");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), StartsWith("<config>:1: bogus: unknown key"));
  auto named = ParseConfig("bogus: 1\n", "/etc/kvidx/kvidx.yaml");
  ASSERT_FALSE(named.ok());
  EXPECT_THAT(named.status().message(), StartsWith("/etc/kvidx/kvidx.yaml:1: bogus: unknown key"));
}

TEST(ConfigTest, AnchorsAndAliasesWork) {
  ServerConfig c = MustParse(R"(
models:
  - name: &m qwen
engines:
  - {replica: a, model: *m, endpoint: "tcp://h:1"}
)");
  ASSERT_EQ(c.engines.size(), 1u);
  EXPECT_EQ(c.engines[0].engine.model, "qwen");
}

class ConfigFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("kvidx_config_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string Write(const std::string& name, std::string_view text) {
    std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  std::filesystem::path dir_;
};

TEST_F(ConfigFileTest, MissingFileIsNotFound) {
  std::string path = (dir_ / "absent.yaml").string();
  auto r = LoadConfigFile(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(r.status().message(), HasSubstr(path));
}

TEST_F(ConfigFileTest, ReadsAndNamesTheFile) {
  std::string path = Write("kvidx.yaml", Yaml(kFullExample));
  auto r = LoadConfigFile(path);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->engines.size(), 1u);

  std::string bad = Write("bad.yaml", "log:\n  level: loud\n");
  auto e = LoadConfigFile(bad);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(e.status().message(), StartsWith(bad + ":2: log.level: "));

  auto empty = LoadConfigFile(Write("empty.yaml", ""));
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->engines.empty());
}

TEST_F(ConfigFileTest, DirectoryIsAnError) {
  auto r = LoadConfigFile(dir_.string());
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr(dir_.string()));
}

TEST(ConfigTest, ToIngestOptions) {
  ServerConfig c = MustParse(R"(
ingest:
  threads: 4
  topic_template: "kv@{replica}@{model}"
  replay_timeout_ms: 750
  replay_max_retries: 7
  heartbeat_ivl_ms: 200
  heartbeat_timeout_ms: 900
  sub_rcvhwm: 5000
)");
  ingest::IngestOptions o = ToIngestOptions(c);
  EXPECT_EQ(o.num_threads, 4u);
  EXPECT_EQ(o.topic_template.pattern(), "kv@{replica}@{model}");
  EXPECT_EQ(o.replay.timeout, std::chrono::milliseconds(750));
  EXPECT_EQ(o.replay.max_retries, 7);
  EXPECT_EQ(o.heartbeat_ivl, std::chrono::milliseconds(200));
  EXPECT_EQ(o.heartbeat_timeout, std::chrono::milliseconds(900));
  EXPECT_EQ(o.sub_rcvhwm, 5000);

  ingest::IngestOptions d = ToIngestOptions(ServerConfig{});
  ingest::IngestOptions plain;
  EXPECT_EQ(d.num_threads, plain.num_threads);
  EXPECT_TRUE(d.topic_template.empty());
  EXPECT_EQ(d.replay.timeout, plain.replay.timeout);
  EXPECT_EQ(d.replay.max_retries, plain.replay.max_retries);
  EXPECT_EQ(d.heartbeat_ivl, plain.heartbeat_ivl);
  EXPECT_EQ(d.heartbeat_timeout, plain.heartbeat_timeout);
  EXPECT_EQ(d.sub_rcvhwm, plain.sub_rcvhwm);
}

std::vector<std::string> Replicas(const std::vector<EngineEntry>& entries) {
  std::vector<std::string> out;
  for (const EngineEntry& e : entries) out.push_back(e.engine.replica);
  return out;
}

TEST(ConfigTest, DiffEngines) {
  ServerConfig before = MustParse(R"(
models: [{name: qwen}, {name: llama}]
engines:
  - {replica: same, model: qwen, endpoint: "tcp://h:1"}
  - {replica: gone, model: qwen, endpoint: "tcp://h:2"}
  - {replica: moved, model: qwen, endpoint: "tcp://h:3"}
  - {replica: retopic, model: qwen, endpoint: "tcp://h:4"}
  - {replica: resized, model: qwen, endpoint: "tcp://h:5", gpu_blocks: 10}
)");
  ServerConfig after = MustParse(R"(
models: [{name: qwen}, {name: llama}]
engines:
  - {replica: new, model: llama, endpoint: "tcp://h:6"}
  - {replica: resized, model: qwen, endpoint: "tcp://h:5", gpu_blocks: 20}
  - {replica: retopic, model: qwen, endpoint: "tcp://h:4", topic: ""}
  - {replica: moved, model: qwen, endpoint: "tcp://h:7"}
  - {replica: same, model: qwen, endpoint: "tcp://h:1"}
)");
  EngineDiff d = DiffEngines(before, after);
  // Config order of the respective side.
  EXPECT_THAT(d.removed, ElementsAre("gone", "moved", "retopic", "resized"));
  EXPECT_THAT(Replicas(d.added), ElementsAre("new", "resized", "retopic", "moved"));
  EXPECT_EQ(d.added[1].gpu_blocks, 20u);
  EXPECT_EQ(d.added[3].engine.endpoint, "tcp://h:7");

  EngineDiff none = DiffEngines(before, before);
  EXPECT_TRUE(none.removed.empty());
  EXPECT_TRUE(none.added.empty());

  EngineDiff from_empty = DiffEngines(ServerConfig{}, before);
  EXPECT_TRUE(from_empty.removed.empty());
  EXPECT_EQ(from_empty.added.size(), 5u);
  EngineDiff to_empty = DiffEngines(before, ServerConfig{});
  EXPECT_EQ(to_empty.removed.size(), 5u);
  EXPECT_TRUE(to_empty.added.empty());
}

TEST(ConfigTest, EachEngineFieldCountsAsAChange) {
  const std::string base = "models: [{name: qwen}, {name: llama}]\nengines:\n  - {replica: a, ";
  const std::string orig = "model: qwen, endpoint: \"tcp://h:1\"}\n";
  ServerConfig before = MustParse(base + orig);
  for (std::string_view changed : {
           "model: llama, endpoint: \"tcp://h:1\"}\n",
           "model: qwen, endpoint: \"tcp://h:9\"}\n",
           "model: qwen, endpoint: \"tcp://h:1\", replay_endpoint: \"tcp://h:2\"}\n",
           "model: qwen, endpoint: \"tcp://h:1\", dp_size: 2}\n",
           "model: qwen, endpoint: \"tcp://h:1\", topic: t}\n",
           "model: qwen, endpoint: \"tcp://h:1\", mode: bind}\n",
           "model: qwen, endpoint: \"tcp://h:1\", gpu_blocks: 5}\n",
       }) {
    SCOPED_TRACE(std::string(changed));
    EngineDiff d = DiffEngines(before, MustParse(base + std::string(changed)));
    EXPECT_THAT(d.removed, ElementsAre("a"));
    EXPECT_THAT(Replicas(d.added), ElementsAre("a"));
  }
}

}  // namespace
}  // namespace kvidx::server

namespace kvidx::server {
namespace {

TEST(RoutingConfig, MetricsUrlAndScrapeSettings) {
  const ServerConfig c = MustParse(R"(
routing: {scrape_interval_ms: 250, scrape_timeout_ms: 100, stale_after_ms: 2000}
models: [{name: m}]
engines:
  - {replica: a, model: m, endpoint: "tcp://h:5", metrics_url: "http://vllm-a:8000/metrics"}
  - {replica: b, model: m, endpoint: "tcp://h:6"}
)");
  EXPECT_EQ(c.routing.scrape_interval_ms, 250u);
  EXPECT_EQ(c.routing.scrape_timeout_ms, 100u);
  EXPECT_EQ(c.routing.stale_after_ms, 2000u);
  EXPECT_EQ(c.engines[0].metrics_url, "http://vllm-a:8000/metrics");
  EXPECT_EQ(c.engines[1].metrics_url, "");
  EXPECT_EQ(ServerConfig{}.routing.scrape_interval_ms, 1000u);
  EXPECT_FALSE(c.routing.simulated_clock);
}

TEST(RoutingConfig, ClockIsWallOrSimulated) {
  EXPECT_TRUE(MustParse("routing: {clock: simulated}\n").routing.simulated_clock);
  EXPECT_FALSE(MustParse("routing: {clock: wall}\n").routing.simulated_clock);
  EXPECT_THAT(ErrorOf("routing: {clock: fake}\n"), ::testing::HasSubstr("routing.clock"));
  EXPECT_THAT(ErrorOf("routing: {clock: 1}\n"), ::testing::HasSubstr("routing.clock"));
}

TEST(RoutingConfig, BadValuesNameTheField) {
  EXPECT_THAT(ErrorOf("models: [{name: m}]\nengines:\n  - {replica: a, model: m, endpoint: \"tcp://h:5\", "
                       "metrics_url: \"ftp://x/metrics\"}\n"),
              ::testing::HasSubstr("metrics_url"));
  EXPECT_THAT(ErrorOf("routing: {scrape_interval_ms: 0}\n"), ::testing::HasSubstr("scrape_interval_ms"));
  EXPECT_THAT(ErrorOf("routing: {bogus: 1}\n"), ::testing::HasSubstr("bogus"));
}

TEST(RoutingConfig, PerModelPolicy) {
  const ServerConfig c = MustParse(R"(
models:
  - {name: a, route: {cpu_credit: 0.5, storage_credit: 0, warmup_seconds: 120, warmup_credit: 0.25,
                      decode_weight: 0.05, kv_pressure_start: 0.8, kv_pressure_max_factor: 4,
                      predicted_credit: 0.9, mean_prompt_tokens: 3072}}
  - {name: b}
)");
  const RoutePolicy& a = c.models[0].route;
  EXPECT_EQ(a.cpu_credit, 0.5);
  EXPECT_EQ(a.storage_credit, 0.0);
  EXPECT_EQ(a.warmup_seconds, 120.0);
  EXPECT_EQ(a.warmup_credit, 0.25);
  EXPECT_EQ(a.decode_weight, 0.05);
  EXPECT_EQ(a.kv_pressure_start, 0.8);
  EXPECT_EQ(a.kv_pressure_max_factor, 4.0);
  EXPECT_EQ(a.predicted_credit, 0.9);
  EXPECT_EQ(a.mean_prompt_tokens, 3072.0);
  EXPECT_EQ(c.models[1].route.cpu_credit, RoutePolicy{}.cpu_credit);  // documented defaults
  for (const char* bad : {"cpu_credit: 1.5", "warmup_credit: 1", "kv_pressure_max_factor: 0.5", "decode_weight: -1",
                          "mean_prompt_tokens: x", "bogus: 1"}) {
    const std::string doc = std::string("models: [{name: m, route: {") + bad + "}}]\n";
    const std::string key = std::string(bad).substr(0, std::string(bad).find(':'));
    EXPECT_THAT(ErrorOf(doc), ::testing::HasSubstr(key)) << doc;
  }
}

}  // namespace
}  // namespace kvidx::server
