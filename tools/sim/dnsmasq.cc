#include "tools/sim/dnsmasq.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <system_error>
#include <thread>
#include <vector>

#include "base/spawn.h"

namespace kvidx::sim {

namespace {

using Clock = std::chrono::steady_clock;

std::atomic<int> g_counter{0};

std::string Slurp(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Whole file or nothing (rename over the old one): dnsmasq never reads half.
Status WriteAtomically(const std::filesystem::path& path, const std::string& contents) {
  const std::filesystem::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << contents;
    if (!out) return Status::Internal("cannot write " + tmp.string());
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return Status::Internal("cannot rename " + tmp.string() + ": " + ec.message());
  return Status::Ok();
}

// Binds 127.0.0.1:port with this socket type; the errno, or 0 on success.
int TryBind(int type, int port) {
  const int fd = socket(AF_INET, type, 0);
  if (fd < 0) return errno;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const int rc = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 ? 0 : errno;
  close(fd);
  return rc;
}

// A port in [20000, 60000] free for both UDP and TCP right now (0 if none found).
int RandomFreePort() {
  std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<int> dist(20000, 60000);
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int port = dist(rng);
    if (TryBind(SOCK_DGRAM, port) == 0 && TryBind(SOCK_STREAM, port) == 0) return port;
  }
  return 0;
}

}  // namespace

Dnsmasq::Dnsmasq(const std::filesystem::path& parent, int port)
    : dir_(parent / ("dnsmasq_" + std::to_string(getpid()) + "_" + std::to_string(g_counter++))), port_(port) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  (void)WriteAtomically(dir_ / "hosts", "");
}

Dnsmasq::~Dnsmasq() {
  Stop();
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

bool Dnsmasq::Available() { return access(kDnsmasqPath, X_OK) == 0; }

std::string Dnsmasq::log() const { return Slurp(dir_ / "log") + Slurp(dir_ / "err"); }

Status Dnsmasq::Start(const std::string& records, int ttl_seconds) {
  Stop();
  if (!Available()) return Status::FailedPrecondition(std::string(kDnsmasqPath) + " is not installed (dnsmasq-base)");
  if (port_ == 0) port_ = RandomFreePort();
  if (port_ == 0) return Status::Unavailable("no free port for dnsmasq");
  std::string conf = "port=" + std::to_string(port_) +
                     "\nlisten-address=127.0.0.1\nbind-interfaces\nno-resolv\nno-hosts\nlocal=/test/\n"
                     "local-ttl=" + std::to_string(ttl_seconds) + "\npid-file=\nlog-facility=" +
                     (dir_ / "log").string() + "\naddn-hosts=" + hosts() +
                     "\nhost-record=ready.test,127.0.0.1\n" + records + "\n";
  if (geteuid() == 0) conf += "user=root\n";  // else it would switch to nobody, unable to read the files
  if (Status s = WriteAtomically(dir_ / "conf", conf); !s.ok()) return s;
  if (Status s = Spawn(); !s.ok()) return s;
  return WaitListening();
}

Status Dnsmasq::Spawn() {
  const std::vector<std::string> argv = {kDnsmasqPath, "--keep-in-foreground", "--conf-file=" + (dir_ / "conf").string()};
  Result<pid_t> pid = SpawnProcess(argv, (dir_ / "out").string(), (dir_ / "err").string());
  if (!pid.ok()) return pid.status();
  pid_ = *pid;
  return Status::Ok();
}

bool Dnsmasq::Exited() {
  if (pid_ <= 0) return true;
  int st = 0;
  if (waitpid(pid_, &st, WNOHANG) == pid_) {
    pid_ = -1;
    return true;
  }
  return false;
}

// dnsmasq binds its UDP socket before it serves; once the kernel lists it,
// queries reach it (queued until it reads). Read from /proc rather than by
// binding the port ourselves, which could make dnsmasq's own bind fail.
Status Dnsmasq::WaitListening() {
  char needle[32];
  std::snprintf(needle, sizeof needle, " 0100007F:%04X ", static_cast<unsigned>(port_));
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (Clock::now() < deadline) {
    if (Exited()) return Status::Unavailable("dnsmasq exited: " + log());
    if (Slurp("/proc/net/udp").find(needle) != std::string::npos) return Status::Ok();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return Status::Unavailable("dnsmasq did not listen on port " + std::to_string(port_) + " within 30 s: " + log());
}

void Dnsmasq::Stop() {
  if (Exited()) return;
  kill(pid_, SIGTERM);
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (!Exited()) {
    if (Clock::now() >= deadline) {
      kill(pid_, SIGKILL);
      int st = 0;
      waitpid(pid_, &st, 0);
      pid_ = -1;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

Status Dnsmasq::SetHosts(const std::string& lines) {
  if (Status s = WriteAtomically(hosts(), lines); !s.ok()) return s;
  if (!Exited()) kill(pid_, SIGHUP);
  return Status::Ok();
}

}  // namespace kvidx::sim
