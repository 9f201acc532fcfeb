// Runs the built `kvidx` binary: `kvidx hash` output for the default vector
// and exit codes for bad command lines.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "common/run_command.h"

namespace {

using CliResult = kvidx::testing::CommandResult;
using kvidx::testing::Stderr;

// `kvidx <args>`: stdout only; stderr goes to /dev/null unless merged.
CliResult RunKvidx(const std::string& args, bool merge_stderr = false) {
  return kvidx::testing::RunCommand(std::string(KVIDX_BIN_DIR) + "/kvidx " + args,
                                    merge_stderr ? Stderr::kMerge : Stderr::kDiscard);
}

std::string Tokens0To47() {
  std::string s;
  for (int i = 0; i < 48; ++i) {
    if (i) s += ',';
    s += std::to_string(i);
  }
  return s;
}

class KvidxCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (access((std::string(KVIDX_BIN_DIR) + "/kvidx").c_str(), X_OK) != 0) {
      FAIL() << "kvidx binary not built at " << KVIDX_BIN_DIR << "/kvidx";
    }
  }
};

TEST_F(KvidxCli, HashTableForDefaultVector) {
  const CliResult r = RunKvidx("hash --algo sha256 --block-size 16 --tokens " + Tokens0To47());
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out,
            "index  wire_u64              hash_hex\n"
            "0      3262291359910021016   fe8fa5dda3210d0ca2031e37cbe3b001186773cd1c710beb2d45fcb51d434798\n"
            "1      7142137847444424233   8be7aaa33831156d316f1f463ae57e643deb63f42e633e2d631df88815cc4629\n"
            "2      11309060389865205804  9d537f74907f6ada2b6cccb46b9845df2ebdbaf60c73d8679cf1da81b15b302c\n");
}

TEST_F(KvidxCli, HashJsonWithLoraSaltAndXxhashSeed) {
  const CliResult r = RunKvidx("hash --algo=xxhash --seed 0 --lora my-lora --salt salt1 --json --tokens " + Tokens0To47());
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out,
            "{\"none_hash\": \"6fb31cc38bba6066183f7f2104b9c051\", \"blocks\": ["
            "{\"index\": 0, \"wire_u64\": \"7801810282856725214\", \"hash_hex\": \"43ae2786562977406c45991dd2aa3ade\"}, "
            "{\"index\": 1, \"wire_u64\": \"15868163716347753889\", \"hash_hex\": \"b3219d40964cef79dc370ad3aea675a1\"}, "
            "{\"index\": 2, \"wire_u64\": \"18139292458704106104\", \"hash_hex\": \"7817c3372fc1988efbbbb66295faf278\"}]}\n");
}

TEST_F(KvidxCli, TokensFile) {
  const std::string path = ::testing::TempDir() + "/kvidx_cli_tokens.txt";
  {
    std::ofstream f(path);
    for (int i = 0; i < 48; ++i) f << i << (i == 47 ? "\n" : i % 10 == 9 ? ",\n" : ", ");
  }
  const CliResult r = RunKvidx("hash --tokens-file " + path + " --json");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("\"wire_u64\": \"11309060389865205804\""), std::string::npos) << r.out;
  std::remove(path.c_str());
  EXPECT_EQ(RunKvidx("hash --tokens-file " + path).exit_code, 1);  // unreadable file: runtime error
}

TEST_F(KvidxCli, UsageErrorsExitTwo) {
  EXPECT_EQ(RunKvidx("").exit_code, 2);
  EXPECT_EQ(RunKvidx("no-such-subcommand").exit_code, 2);
  EXPECT_EQ(RunKvidx("hash --tokens 1,2 --bogus").exit_code, 2);
  EXPECT_EQ(RunKvidx("hash --tokens 1,x,3").exit_code, 2);
  EXPECT_EQ(RunKvidx("hash --tokens 1,,3").exit_code, 2);
  EXPECT_EQ(RunKvidx("hash --block-size 0 --tokens 1").exit_code, 2);
  EXPECT_EQ(RunKvidx("hash --block-size 1x --tokens 1").exit_code, 2);
  EXPECT_EQ(RunKvidx("hash --algo md5 --tokens 1").exit_code, 2);
  EXPECT_EQ(RunKvidx("hash").exit_code, 2);
  EXPECT_EQ(RunKvidx("hash --tokens").exit_code, 2);

  const CliResult r = RunKvidx("hash --algo xxhash --tokens 1,2,3", /*merge_stderr=*/true);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("PYTHONHASHSEED"), std::string::npos) << r.out;
}

TEST_F(KvidxCli, JsonBeforeTheSubcommand) {
  const CliResult before = RunKvidx("--json hash --tokens " + Tokens0To47());
  EXPECT_EQ(before.exit_code, 0);
  EXPECT_EQ(before.out, RunKvidx("hash --json --tokens " + Tokens0To47()).out);
}

TEST_F(KvidxCli, HelpExitsZero) {
  EXPECT_EQ(RunKvidx("--help").exit_code, 0);
  const CliResult r = RunKvidx("hash --help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("--tokens-file"), std::string::npos);
}

}  // namespace
