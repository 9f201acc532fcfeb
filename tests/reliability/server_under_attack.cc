#include "reliability/server_under_attack.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <sstream>

namespace kvidx::reliability {

namespace {

const std::string kServerBin = std::string(KVIDX_BIN_DIR) + "/kvidx-server";

// RSS counts as returned once it is this close to idle again: the server
// gives freed heap back once it is 64 MiB above its baseline (HeapTrimmer),
// and pages still partly in use stay. The point is that no peak is kept.
constexpr uint64_t kReturnedSlack = 96ull << 20;

std::string MiB(uint64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

}  // namespace

void ServerUnderAttack::SetUp() {
  ASSERT_EQ(access(kServerBin.c_str(), X_OK), 0) << kServerBin << " not built";
  std::string tmpl = (std::filesystem::temp_directory_path() / "kvidx-reliability-XXXXXX").string();
  ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
  dir_ = tmpl;
  err_path_ = dir_ + "/server.err";
}

void ServerUnderAttack::TearDown() {
  if (HasFailure()) std::cerr << "--- kvidx-server stderr (tail) ---\n" << testing::Slurp(err_path_).substr(0, 8192);
  child_.reset();  // SIGKILL if still running
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

void ServerUnderAttack::Launch(const std::string& engines_yaml, const std::string& extra_yaml) {
  for (int attempt = 0; attempt < 8; ++attempt) {
    grpc_port_ = testing::RandomFreePort();
    metrics_port_ = testing::RandomFreePort();
    ASSERT_GT(grpc_port_, 0);
    if (grpc_port_ == metrics_port_) continue;
    std::string y;
    testing::WriteAtomically(dir_ + "/token", std::string(kAdminToken) + "\n");
    y += "grpc: {listen: \"127.0.0.1:" + std::to_string(grpc_port_) + "\", admin_token_file: \"" + dir_ + "/token\"}\n";
    y += "metrics: {listen: \"127.0.0.1:" + std::to_string(metrics_port_) + "\"}\n";
    y += "data_dir: \"" + dir_ + "/data\"\n";
    y += "snapshot: {interval_seconds: 0, sync: false}\n";
    y += "ingest: {replay_timeout_ms: 300, heartbeat_ivl_ms: 200, heartbeat_timeout_ms: 1000" + ingest_yaml_ + "}\n";
    y += "log: {level: info}\n";
    y += "models:\n  - {name: m}\n";
    if (!engines_yaml.empty()) y += "engines:\n" + engines_yaml;
    y += extra_yaml;
    const std::string config = dir_ + "/kvidx.yaml";
    testing::WriteAtomically(config, y);
    child_ = testing::Child::Spawn({kServerBin, "--config", config}, dir_ + "/server.out",
                                   err_path_);
    ASSERT_NE(child_, nullptr);
    std::optional<int> exited;
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    bool listening = false;
    while (!listening && !exited && std::chrono::steady_clock::now() < end) {
      exited = child_->Poll();
      listening = testing::Slurp(err_path_).find("kvidx-server listening") != std::string::npos;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (listening && !exited) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // let start-up allocations settle
      idle_ = testing::UsageOf(child_->pid());
      return;
    }
    ASSERT_TRUE(exited.has_value()) << "kvidx-server neither listened nor exited within 20 s";
    if (*exited == 1 && testing::Slurp(err_path_).find("cannot listen") != std::string::npos) continue;
    FAIL() << "kvidx-server exited with " << *exited << " at start:\n" << testing::Slurp(err_path_);
  }
  FAIL() << "kvidx-server could not bind after 8 attempts";
}

double ServerUnderAttack::MetricSum(const std::string& text, const std::string& name) {
  double sum = 0;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name, 0) != 0) continue;
    const char next = line.size() > name.size() ? line[name.size()] : '\0';
    if (next != ' ' && next != '{') continue;
    const size_t sp = line.rfind(' ');
    if (sp != std::string::npos) sum += std::strtod(line.c_str() + sp + 1, nullptr);
  }
  return sum;
}

void ServerUnderAttack::ExpectBounded(const std::string& what, const std::function<void()>& attack) {
  uint64_t peak_rss = 0, peak_threads = 0;
  {
    UsageSampler sampler(pid());
    attack();
    peak_rss = sampler.peak_rss();
    peak_threads = sampler.peak_threads();
  }
  ASSERT_TRUE(alive()) << what << ": kvidx-server died:\n" << testing::Slurp(err_path_);
  const uint64_t growth = peak_rss > idle_.rss_bytes ? peak_rss - idle_.rss_bytes : 0;
  std::cerr << "[reliability] " << what << ": idle " << MiB(idle_.rss_bytes) << ", peak " << MiB(peak_rss)
            << " (+" << MiB(growth) << "), threads " << idle_.threads << " -> peak " << peak_threads << "\n";
  EXPECT_LE(peak_threads, idle_.threads + kMaxThreadGrowth) << what;
  if (!kMemoryBoundsAsserted) return;
  EXPECT_LE(growth, kMaxRssGrowth) << what << ": peak RSS " << MiB(peak_rss) << " over idle " << MiB(idle_.rss_bytes);
  const auto end = std::chrono::steady_clock::now() + kRssReturn;
  uint64_t rss = testing::UsageOf(pid()).rss_bytes;
  while (rss > idle_.rss_bytes + kReturnedSlack && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    rss = testing::UsageOf(pid()).rss_bytes;
  }
  EXPECT_LE(rss, idle_.rss_bytes + kReturnedSlack)
      << what << ": RSS " << MiB(rss) << " not back near idle " << MiB(idle_.rss_bytes) << " after " << kRssReturn.count()
      << " s";
}

}  // namespace kvidx::reliability
