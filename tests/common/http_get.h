// Loopback TCP for tests: a connected socket, and one plain HTTP/1.0 GET
// for tests that read the metrics endpoint (test-only).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdint>
#include <string>

namespace kvidx::testing {

// A TCP socket connected to 127.0.0.1:`port` whose reads give up after
// `timeout_seconds` of silence (0 = never), or -1 if nothing listens.
inline int ConnectLoopback(int port, int timeout_seconds = 10) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  timeval tv{timeout_seconds, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// GET `path` from 127.0.0.1:`port` with `extra_headers` (each line ending
// in "\r\n"): the whole response (status line, headers and body) as the
// server sent it before closing, or "" if nothing listens. Reads give up
// after `timeout_seconds` of silence.
inline std::string HttpGet(int port, const std::string& path, int timeout_seconds = 10,
                           const std::string& extra_headers = "") {
  const int fd = ConnectLoopback(port, timeout_seconds);
  if (fd < 0) return "";
  const std::string req = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n" + extra_headers + "\r\n";
  (void)!write(fd, req.data(), req.size());
  std::string out;
  char buf[65536];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

}  // namespace kvidx::testing
