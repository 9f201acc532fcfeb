// TlsProxy: TLS in front of a plain HTTP test server (test-only).
//
// Debian 12's civetweb loads OpenSSL by name at run time and calls
// SSL_get_peer_certificate, which OpenSSL 3 no longer exports: its HTTPS
// crashes on the first connection. So the test API server speaks HTTP on
// loopback and this proxy terminates TLS for it with OpenSSL itself:
// accept on 127.0.0.1, handshake with the given certificate, connect to the
// upstream port, and copy bytes both ways until either side closes (an
// upstream that drops a connection drops the client's too).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace kvidx::testing {

class TlsProxy {
 public:
  TlsProxy(const std::string& cert_file, const std::string& key_file, int upstream_port)
      : upstream_port_(upstream_port) {
    ctx_ = SSL_CTX_new(TLS_server_method());
    if (ctx_ == nullptr || SSL_CTX_use_certificate_chain_file(ctx_, cert_file.c_str()) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx_, key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
      return;
    }
    listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(listen_fd_, 64) != 0 ||
        getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      return;
    }
    port_ = ntohs(a.sin_port);
    acceptor_ = std::thread([this] { Accept(); });
  }
  ~TlsProxy() {
    stop_.store(true);
    if (acceptor_.joinable()) acceptor_.join();
    for (std::thread& t : connections_) t.join();
    if (listen_fd_ >= 0) close(listen_fd_);
    SSL_CTX_free(ctx_);
  }
  TlsProxy(const TlsProxy&) = delete;
  TlsProxy& operator=(const TlsProxy&) = delete;

  int port() const { return port_; }

 private:
  void Accept() {
    while (!stop_.load()) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      const int fd = accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) continue;
      connections_.emplace_back([this, fd] { Serve(fd); });
    }
  }

  int ConnectUpstream() const {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(upstream_port_));
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      close(fd);
      return -1;
    }
    return fd;
  }

  void Serve(int fd) {
    SSL* ssl = SSL_new(ctx_);
    SSL_set_fd(ssl, fd);
    const int up = SSL_accept(ssl) == 1 ? ConnectUpstream() : -1;
    char buf[16384];
    while (up >= 0 && !stop_.load()) {
      pollfd p[2] = {{fd, POLLIN, 0}, {up, POLLIN, 0}};
      if (SSL_pending(ssl) == 0 && poll(p, 2, 50) <= 0) continue;
      if (SSL_pending(ssl) > 0 || (p[0].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
        const int n = SSL_read(ssl, buf, sizeof(buf));
        if (n <= 0 || !WriteAll(up, buf, static_cast<size_t>(n))) break;
      }
      if ((p[1].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
        const ssize_t n = read(up, buf, sizeof(buf));
        if (n <= 0 || SSL_write(ssl, buf, static_cast<int>(n)) <= 0) break;
      }
    }
    if (up >= 0) close(up);
    SSL_free(ssl);  // no close_notify: a cut looks like a dropped connection
    close(fd);
  }

  static bool WriteAll(int fd, const char* data, size_t n) {
    while (n > 0) {
      const ssize_t w = write(fd, data, n);
      if (w <= 0) return false;
      data += w;
      n -= static_cast<size_t>(w);
    }
    return true;
  }

  SSL_CTX* ctx_ = nullptr;
  int listen_fd_ = -1;
  int port_ = 0;
  const int upstream_port_;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  std::vector<std::thread> connections_;  // the acceptor's; joined at the end
};

}  // namespace kvidx::testing
