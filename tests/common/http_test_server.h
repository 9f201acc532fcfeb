// A real HTTP/1.1 server on 127.0.0.1 for tests (civetweb, the server
// library prometheus-cpp serves /metrics with): each path answers with the
// status and body set for it, and a few paths misbehave on purpose.
//   /slow   answers after 1.5 s        /huge  an 8 MiB body
//   any path without a set answer: 404
#pragma once

#include <civetweb.h>

#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

namespace kvidx::testing {

class HttpTestServer {
 public:
  HttpTestServer() {
    const char* options[] = {"listening_ports", "127.0.0.1:0", "num_threads", "8", nullptr};
    ctx_ = mg_start(nullptr, nullptr, options);
    mg_server_port ports[1];
    port_ = mg_get_server_ports(ctx_, 1, ports) == 1 ? ports[0].port : 0;
    mg_set_request_handler(ctx_, "/", &HttpTestServer::Handle, this);
  }
  ~HttpTestServer() { mg_stop(ctx_); }
  HttpTestServer(const HttpTestServer&) = delete;
  HttpTestServer& operator=(const HttpTestServer&) = delete;

  std::string Url(const std::string& path) const { return "http://127.0.0.1:" + std::to_string(port_) + path; }
  void Set(const std::string& path, int status, std::string body) {
    std::lock_guard<std::mutex> lock(mu_);
    answers_[path] = {status, std::move(body)};
  }

 private:
  static int Handle(mg_connection* c, void* self) {
    auto* s = static_cast<HttpTestServer*>(self);
    const std::string uri = mg_get_request_info(c)->local_uri;
    if (uri == "/slow") std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    if (uri == "/huge") return ReplyHuge(c);
    std::pair<int, std::string> a{404, "no\n"};
    {
      std::lock_guard<std::mutex> lock(s->mu_);
      auto it = s->answers_.find(uri);
      if (it != s->answers_.end()) a = it->second;
    }
    return Reply(c, a.first, a.second);
  }
  static void WriteHead(mg_connection* c, int code, size_t content_length) {
    mg_printf(c, "HTTP/1.1 %d X\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
              code, content_length);
  }
  static int Reply(mg_connection* c, int code, const std::string& body) {
    WriteHead(c, code, body.size());
    mg_write(c, body.data(), body.size());
    return code;
  }

  // 8 MiB in 64 KiB writes: the first bytes leave at once (no 8 MiB
  // buffer to build first, slow under TSan), and a client that stops
  // reading ends the loop.
  static int ReplyHuge(mg_connection* c) {
    static const std::string chunk(64u << 10, '#');
    constexpr size_t kChunks = 128;
    WriteHead(c, 200, chunk.size() * kChunks);
    for (size_t i = 0; i < kChunks; ++i) {
      if (mg_write(c, chunk.data(), chunk.size()) <= 0) break;
    }
    return 200;
  }

  mg_context* ctx_ = nullptr;
  int port_ = 0;
  std::mutex mu_;
  std::map<std::string, std::pair<int, std::string>> answers_;
};

}  // namespace kvidx::testing
