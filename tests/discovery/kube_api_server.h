// KubeApiServer: a test server of the Kubernetes API's list + watch protocol
// for EndpointSlices, as the Kubernetes API documents it ("API Concepts":
// efficient detection of changes, resource versions, watch bookmarks). It is
// NOT a Kubernetes API server -- none can be installed here -- but a real
// HTTPS server speaking that protocol: civetweb on loopback behind a TLS
// proxy (tls_proxy.h) with a test CA's certificate:
//
//   GET /apis/discovery.k8s.io/v1/namespaces/<ns>/endpointslices
//       ?labelSelector=kubernetes.io/service-name=<svc>
//   (or /api/v1/namespaces/<ns>/pods?labelSelector=<key>=<value>)
//     -> 200 EndpointSliceList / PodList {metadata.resourceVersion, items}
//   ... &watch=1&resourceVersion=<rv>&allowWatchBookmarks=true&timeoutSeconds=<t>
//     -> 200, Transfer-Encoding: chunked, one JSON event per line
//        {"type": ADDED|MODIFIED|DELETED|BOOKMARK|ERROR, "object": ...}:
//        every change after <rv>, then live ones; the stream ends after
//        timeoutSeconds (terminating chunk).
//     <rv> older than the last compaction -> an ERROR event whose object is
//        a Status with code 410 (or, with SetGoneAsHttp, an HTTP 410).
//   Authorization: Bearer <token> other than the set one -> 401 Status.
//
// Every object change gets the next resourceVersion (a counter, as etcd's
// revision); objects the selector does not match change it too but are not
// sent to its watches -- which is what bookmarks are for. One kind of object
// per server (a test's). Selectors: one key=value. Test-only.
#pragma once

#include <civetweb.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "discovery/tls_proxy.h"

namespace kvidx::testing {

class KubeApiServer {
 public:
  // The server's certificate and key, PEM files.
  KubeApiServer(const std::string& cert_file, const std::string& key_file, std::string token)
      : token_(std::move(token)) {
    const char* options[] = {"listening_ports", "127.0.0.1:0", "num_threads", "16", "enable_keep_alive", "no",
                             nullptr};
    ctx_ = mg_start(nullptr, nullptr, options);
    if (ctx_ == nullptr) return;
    mg_server_port ports[1];
    const int http_port = mg_get_server_ports(ctx_, 1, ports) == 1 ? ports[0].port : 0;
    mg_set_request_handler(ctx_, "/", &KubeApiServer::Handle, this);
    if (http_port == 0) return;
    tls_ = std::make_unique<TlsProxy>(cert_file, key_file, http_port);
    port_ = tls_->port();
  }
  ~KubeApiServer() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    tls_.reset();
    if (ctx_ != nullptr) mg_stop(ctx_);  // about 2 s once it has served: share a server where it can
  }
  KubeApiServer(const KubeApiServer&) = delete;
  KubeApiServer& operator=(const KubeApiServer&) = delete;

  bool ok() const { return port_ != 0; }
  std::string url() const { return "https://127.0.0.1:" + std::to_string(port_); }

  // Back to no objects, no history and `token`, for the next test (the
  // resourceVersion keeps counting, as a real server's would).
  void Reset(std::string token) {
    std::lock_guard<std::mutex> lock(mu_);
    ++cut_generation_;
    objects_.clear();
    log_.clear();
    compacted_ = 0;
    gone_as_http_ = false;
    list_delay_ = std::chrono::milliseconds(0);
    token_ = std::move(token);
    const int open = counts_.open_watches;
    counts_ = Counts{};
    counts_.open_watches = open;
    cv_.notify_all();
  }

  // Creates or replaces an object (metadata.name set; labels are what the
  // selector matches): ADDED or MODIFIED.
  void Put(nlohmann::json slice) {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string name = slice["metadata"]["name"];
    const bool existed = objects_.contains(name);
    slice["metadata"]["resourceVersion"] = std::to_string(++rv_);
    objects_[name] = slice;
    Log(existed ? "MODIFIED" : "ADDED", slice);
  }
  void Delete(const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = objects_.find(name);
    if (it == objects_.end()) return;
    nlohmann::json slice = it->second;
    objects_.erase(it);
    slice["metadata"]["resourceVersion"] = std::to_string(++rv_);
    Log("DELETED", slice);
  }
  // A BOOKMARK at the current resourceVersion to every open watch.
  void Bookmark() {
    std::lock_guard<std::mutex> lock(mu_);
    nlohmann::json e = {{"type", "BOOKMARK"},
                        {"object",
                         {{"kind", "EndpointSlice"},
                          {"apiVersion", "discovery.k8s.io/v1"},
                          {"metadata", {{"resourceVersion", std::to_string(rv_)}}}}}};
    log_.push_back({rv_, nullptr, e.dump(), false});
    cv_.notify_all();
  }
  // A raw line (anything, e.g. broken JSON) to every open watch.
  void SendRaw(const std::string& line) {
    std::lock_guard<std::mutex> lock(mu_);
    log_.push_back({rv_, nullptr, line, false});
    cv_.notify_all();
  }
  // Forgets the history: a watch from an older resourceVersion is 410 Gone.
  void Compact() {
    std::lock_guard<std::mutex> lock(mu_);
    compacted_ = rv_;
  }
  // Drops every open watch connection without ending its chunked stream.
  void CutWatches() {
    std::lock_guard<std::mutex> lock(mu_);
    ++cut_generation_;
    cv_.notify_all();
  }
  void SetToken(std::string token) {
    std::lock_guard<std::mutex> lock(mu_);
    token_ = std::move(token);
  }
  // Lists answer only after this long (a slow or overloaded server).
  void SetListDelay(std::chrono::milliseconds delay) {
    std::lock_guard<std::mutex> lock(mu_);
    list_delay_ = delay;
  }
  void SetGoneAsHttp(bool http) {
    std::lock_guard<std::mutex> lock(mu_);
    gone_as_http_ = http;
  }

  struct Counts {
    int lists = 0;
    int watches = 0;
    int unauthorized = 0;
    int gone = 0;
    int open_watches = 0;
    std::vector<uint64_t> watch_versions;  // the resourceVersion each watch asked for
    std::string last_selector;
  };
  Counts counts() const {
    std::lock_guard<std::mutex> lock(mu_);
    return counts_;
  }
  uint64_t resource_version() const {
    std::lock_guard<std::mutex> lock(mu_);
    return rv_;
  }

 private:
  static constexpr const char* kPathPrefix = "/apis/discovery.k8s.io/v1/namespaces/";

  struct Entry {
    uint64_t rv;
    nlohmann::json labels;  // null = to every watch (bookmarks, raw lines)
    std::string line;
    bool replayable;      // an object change: replayed to a watch from an older rv
  };

  static nlohmann::json LabelsOf(const nlohmann::json& o) {
    return o["metadata"].value("labels", nlohmann::json::object());
  }
  // `selector` is "key=value".
  static bool Matches(const nlohmann::json& labels, const std::string& selector) {
    const size_t eq = selector.find('=');
    if (eq == std::string::npos || !labels.is_object()) return false;
    return labels.value(selector.substr(0, eq), std::string("\x01")) == selector.substr(eq + 1);
  }
  void Log(const char* type, const nlohmann::json& object) {
    log_.push_back({rv_, LabelsOf(object), nlohmann::json{{"type", type}, {"object", object}}.dump(), true});
    cv_.notify_all();
  }

  static std::map<std::string, std::string> Query(const char* q) {
    std::map<std::string, std::string> out;
    if (q == nullptr) return out;
    std::string s = q;
    size_t start = 0;
    while (start <= s.size()) {
      size_t end = s.find('&', start);
      if (end == std::string::npos) end = s.size();
      const std::string kv = s.substr(start, end - start);
      const size_t eq = kv.find('=');
      std::string key = kv.substr(0, eq), value = eq == std::string::npos ? "" : kv.substr(eq + 1);
      std::vector<char> buf(value.size() + 1);
      const int n = mg_url_decode(value.c_str(), static_cast<int>(value.size()), buf.data(),
                                  static_cast<int>(buf.size()), 1);
      out[key] = n >= 0 ? std::string(buf.data(), static_cast<size_t>(n)) : value;
      start = end + 1;
    }
    return out;
  }

  static nlohmann::json StatusObject(int code, const std::string& reason, const std::string& message) {
    return {{"kind", "Status"}, {"apiVersion", "v1"}, {"metadata", nlohmann::json::object()},
            {"status", "Failure"}, {"message", message}, {"reason", reason}, {"code", code}};
  }
  static int Reply(mg_connection* c, int code, const std::string& body) {
    mg_printf(c,
              "HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
              code, body.size());
    mg_write(c, body.data(), body.size());
    return code;
  }

  static int Handle(mg_connection* c, void* self) { return static_cast<KubeApiServer*>(self)->Serve(c); }

  int Serve(mg_connection* c) {
    const mg_request_info* ri = mg_get_request_info(c);
    const std::string uri = ri->local_uri;
    const char* auth = mg_get_header(c, "Authorization");
    std::map<std::string, std::string> q = Query(ri->query_string);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (auth == nullptr || std::string(auth) != "Bearer " + token_) {
        ++counts_.unauthorized;
        return Reply(c, 401, StatusObject(401, "Unauthorized", "Unauthorized").dump());
      }
    }
    auto ends = [&](const std::string& tail) {
      return uri.size() > tail.size() && uri.compare(uri.size() - tail.size(), tail.size(), tail) == 0;
    };
    const bool slices = uri.rfind(kPathPrefix, 0) == 0 && ends("/endpointslices");
    const bool pods = uri.rfind("/api/v1/namespaces/", 0) == 0 && ends("/pods");
    if (!slices && !pods) {
      return Reply(c, 404, StatusObject(404, "NotFound", "the server could not find the requested resource").dump());
    }
    const std::string selector = q["labelSelector"];
    if (selector.find('=') == std::string::npos) {
      return Reply(c, 400, StatusObject(400, "BadRequest", "selector").dump());
    }
    if (q["watch"] == "1" || q["watch"] == "true") return Watch(c, selector, q);
    return List(c, selector, pods);
  }

  int List(mg_connection* c, const std::string& selector, bool pods) {
    nlohmann::json list = {{"kind", pods ? "PodList" : "EndpointSliceList"},
                           {"apiVersion", pods ? "v1" : "discovery.k8s.io/v1"}};
    std::chrono::milliseconds delay{0};
    {
      std::lock_guard<std::mutex> lock(mu_);
      delay = list_delay_;
    }
    if (delay.count() > 0) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, delay, [&] { return stopping_; });
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++counts_.lists;
      counts_.last_selector = selector;
      list["metadata"] = {{"resourceVersion", std::to_string(rv_)}};
      list["items"] = nlohmann::json::array();
      for (const auto& [name, o] : objects_) {
        if (Matches(LabelsOf(o), selector)) list["items"].push_back(o);
      }
    }
    return Reply(c, 200, list.dump());
  }

  int Watch(mg_connection* c, const std::string& selector, std::map<std::string, std::string>& q) {
    const uint64_t from = std::stoull(q["resourceVersion"].empty() ? "0" : q["resourceVersion"]);
    const auto timeout = std::chrono::seconds(std::stoi(q["timeoutSeconds"].empty() ? "300" : q["timeoutSeconds"]));
    std::unique_lock<std::mutex> lock(mu_);
    ++counts_.watches;
    counts_.watch_versions.push_back(from);
    if (from < compacted_) {
      ++counts_.gone;
      const std::string msg = "too old resource version: " + std::to_string(from) + " (" +
                              std::to_string(compacted_) + ")";
      if (gone_as_http_) {
        lock.unlock();
        return Reply(c, 410, StatusObject(410, "Gone", msg).dump());
      }
      const std::string line =
          nlohmann::json{{"type", "ERROR"}, {"object", StatusObject(410, "Expired", msg)}}.dump() + "\n";
      lock.unlock();
      StartChunked(c);
      mg_send_chunk(c, line.data(), static_cast<unsigned>(line.size()));
      mg_send_chunk(c, "", 0);
      return 200;
    }
    ++counts_.open_watches;
    const int generation = cut_generation_;
    size_t next = 0;  // the next log entry to consider
    const size_t live_from = log_.size();
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    lock.unlock();
    StartChunked(c);
    lock.lock();
    bool cut = false;
    for (;;) {
      if (stopping_ || cut_generation_ != generation) {
        cut = true;
        break;
      }
      std::string out;
      for (; next < log_.size(); ++next) {
        const Entry& e = log_[next];
        const bool wanted = e.replayable ? e.rv > from && Matches(e.labels, selector)
                                         : next >= live_from && (e.labels.is_null() || Matches(e.labels, selector));
        if (wanted) out += e.line + "\n";
      }
      if (!out.empty()) {
        lock.unlock();
        const int sent = mg_send_chunk(c, out.data(), static_cast<unsigned>(out.size()));
        lock.lock();
        if (sent <= 0) break;
        continue;  // re-checks the cut before waiting
      }
      if (!cv_.wait_until(lock, deadline, [&] {
            return stopping_ || cut_generation_ != generation || next < log_.size();
          })) {
        break;  // timeoutSeconds: the server ends the watch
      }
    }
    --counts_.open_watches;
    lock.unlock();
    if (!cut) mg_send_chunk(c, "", 0);
    // Cut: no terminating chunk; Connection: close drops the connection.
    return 200;
  }

  static void StartChunked(mg_connection* c) {
    mg_printf(c,
              "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
              "Connection: close\r\n\r\n");
  }

  mg_context* ctx_ = nullptr;
  std::unique_ptr<TlsProxy> tls_;
  int port_ = 0;  // the TLS port
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::string token_;
  bool stopping_ = false;
  bool gone_as_http_ = false;
  std::chrono::milliseconds list_delay_{0};
  uint64_t rv_ = 1000;
  uint64_t compacted_ = 0;
  int cut_generation_ = 0;
  std::map<std::string, nlohmann::json> objects_;
  std::vector<Entry> log_;
  Counts counts_;
};

}  // namespace kvidx::testing
