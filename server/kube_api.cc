#include "server/kube_api.h"

#include <curl/curl.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <utility>

namespace kvidx::server {
namespace {

// The token file's first line; "" if it cannot be read.
std::string ReadToken(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::string token;
  std::getline(in, token);
  while (!token.empty() && (token.back() == '\r' || token.back() == ' ' || token.back() == '\t')) token.pop_back();
  return token;
}

KubeOutcome OutcomeOfHttp(long status) {
  switch (status) {
    case 200: return KubeOutcome::kOk;
    case 401: return KubeOutcome::kUnauthorized;
    case 403: return KubeOutcome::kForbidden;
    case 410: return KubeOutcome::kGone;
    default: return KubeOutcome::kHttpError;
  }
}

KubeOutcome OutcomeOfCurl(CURLcode c) {
  switch (c) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING: return KubeOutcome::kUnreachable;
    case CURLE_OPERATION_TIMEDOUT: return KubeOutcome::kTimeout;
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CERTPROBLEM: return KubeOutcome::kTls;
    default: return KubeOutcome::kError;
  }
}

}  // namespace

std::string_view KubeOutcomeName(KubeOutcome o) {
  switch (o) {
    case KubeOutcome::kOk: return "ok";
    case KubeOutcome::kGone: return "gone";
    case KubeOutcome::kUnauthorized: return "unauthorized";
    case KubeOutcome::kForbidden: return "forbidden";
    case KubeOutcome::kHttpError: return "http_error";
    case KubeOutcome::kUnreachable: return "unreachable";
    case KubeOutcome::kTls: return "tls";
    case KubeOutcome::kTimeout: return "timeout";
    case KubeOutcome::kMalformed: return "malformed";
    case KubeOutcome::kError: return "error";
  }
  return "error";
}

// One request's state, seen by libcurl's write callback.
struct KubeApi::Transfer {
  CURL* easy = nullptr;
  size_t max_bytes = 0;
  const LineHandler* on_lines = nullptr;  // null: a GET, the body is kept whole
  std::string buffer;
  bool too_large = false;
  bool ended_by_handler = false;
  bool opened = false;

  // The end of the header block of a 200 watch answer: the watch is open.
  static size_t Header(char* data, size_t size, size_t n, void* self) {
    auto* t = static_cast<Transfer*>(self);
    const std::string_view line(data, size * n);
    long status = 0;
    curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &status);
    if ((line == "\r\n" || line == "\n") && status == 200 && t->on_lines != nullptr && !t->opened) {
      t->opened = true;
      if (!(*t->on_lines)({})) {
        t->ended_by_handler = true;
        return 0;
      }
    }
    return size * n;
  }

  static size_t Write(char* data, size_t size, size_t n, void* self) {
    return static_cast<Transfer*>(self)->Take(std::string_view(data, size * n)) ? size * n : 0;
  }

  bool Take(std::string_view data) {
    long status = 0;
    curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
    buffer.append(data);
    if (on_lines != nullptr && status == 200) return Split();
    if (buffer.size() > max_bytes) too_large = true;
    return !too_large;
  }

  // Hands over the complete lines; keeps the partial one.
  bool Split() {
    std::vector<std::string_view> lines;
    size_t start = 0;
    for (size_t nl; (nl = buffer.find('\n', start)) != std::string::npos; start = nl + 1) {
      if (nl > start) lines.emplace_back(buffer.data() + start, nl - start);
    }
    bool go_on = lines.empty() || (*on_lines)(lines);
    buffer.erase(0, start);
    if (!go_on) {
      ended_by_handler = true;
      return false;
    }
    if (buffer.size() > max_bytes) too_large = true;
    return !too_large;
  }
};

Result<std::unique_ptr<KubeApi>> KubeApi::Create(Options options) {
  CURLM* multi = curl_multi_init();
  if (multi == nullptr) return Status::Internal("libcurl: curl_multi_init failed");
  return std::unique_ptr<KubeApi>(new KubeApi(std::move(options), multi));
}

KubeApi::KubeApi(Options options, void* multi) : options_(std::move(options)), multi_(multi) {}

KubeApi::~KubeApi() { curl_multi_cleanup(static_cast<CURLM*>(multi_)); }

std::string KubeApi::Escape(std::string_view text) {
  char* e = curl_easy_escape(nullptr, text.data(), static_cast<int>(text.size()));
  if (e == nullptr) return "";
  std::string out = e;
  curl_free(e);
  return out;
}

void KubeApi::Interrupt() {
  interrupted_.store(true);
  curl_multi_wakeup(static_cast<CURLM*>(multi_));
}

KubeResponse KubeApi::Get(const std::string& path) {
  Transfer t;
  t.max_bytes = options_.max_body_bytes;
  return Run(path, &t, options_.timeout, options_.timeout);
}

KubeResponse KubeApi::Watch(const std::string& path, std::chrono::milliseconds stall, const LineHandler& on_lines) {
  Transfer t;
  t.max_bytes = options_.max_body_bytes;
  t.on_lines = &on_lines;
  return Run(path, &t, std::chrono::milliseconds(0), stall);
}

KubeResponse KubeApi::Run(const std::string& path, Transfer* t, std::chrono::milliseconds total,
                          std::chrono::milliseconds stall) {
  KubeResponse r;
  if (interrupted_.load()) {
    r.detail = "interrupted";
    return r;
  }
  const std::string token = options_.token.empty() ? ReadToken(options_.token_file) : options_.token;
  if (token.empty()) {
    r.outcome = KubeOutcome::kUnauthorized;
    r.detail = "no token: " + options_.token_file + " is missing, unreadable or empty";
    return r;
  }
  CURL* easy = curl_easy_init();
  if (easy == nullptr) {
    r.detail = "curl_easy_init failed";
    return r;
  }
  t->easy = easy;
  const std::string url = options_.server + path;
  std::string auth = "Authorization: Bearer " + token;
  curl_slist* headers = curl_slist_append(nullptr, auth.c_str());
  std::fill(auth.begin(), auth.end(), '\0');
  headers = curl_slist_append(headers, "Accept: application/json");
  curl_easy_setopt(easy, CURLOPT_URL, url.c_str());
  curl_easy_setopt(easy, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, &Transfer::Write);
  curl_easy_setopt(easy, CURLOPT_WRITEDATA, t);
  curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, &Transfer::Header);
  curl_easy_setopt(easy, CURLOPT_HEADERDATA, t);
  curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "https");
  curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(options_.timeout.count()));
  if (total.count() > 0) curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, static_cast<long>(total.count()));
  curl_easy_setopt(easy, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(easy, CURLOPT_LOW_SPEED_TIME, std::max<long>(1, static_cast<long>(stall.count() / 1000)));
  if (!options_.ca_pem.empty()) {
    curl_blob ca{const_cast<char*>(options_.ca_pem.data()), options_.ca_pem.size(), CURL_BLOB_COPY};
    curl_easy_setopt(easy, CURLOPT_CAINFO_BLOB, &ca);
  } else if (!options_.ca_file.empty()) {
    curl_easy_setopt(easy, CURLOPT_CAINFO, options_.ca_file.c_str());
  }
  curl_easy_setopt(easy, CURLOPT_SSL_VERIFYPEER, options_.insecure ? 0L : 1L);
  curl_easy_setopt(easy, CURLOPT_SSL_VERIFYHOST, options_.insecure ? 0L : 2L);
  char error[CURL_ERROR_SIZE] = {};
  curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, error);

  CURLM* multi = static_cast<CURLM*>(multi_);
  curl_multi_add_handle(multi, easy);
  CURLcode code = CURLE_OK;
  bool interrupted = false;
  for (;;) {
    int running = 0;
    curl_multi_perform(multi, &running);
    if (running == 0) break;
    if (interrupted_.load()) {
      interrupted = true;
      break;
    }
    curl_multi_poll(multi, nullptr, 0, 1000, nullptr);
  }
  int left = 0;
  while (CURLMsg* m = curl_multi_info_read(multi, &left)) {
    if (m->msg == CURLMSG_DONE && m->easy_handle == easy) code = m->data.result;
  }
  curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &r.http_status);
  curl_multi_remove_handle(multi, easy);
  curl_easy_cleanup(easy);
  curl_slist_free_all(headers);  // holds the token: freed at once

  if (interrupted) {
    r.detail = "interrupted";
  } else if (t->ended_by_handler) {
    r.outcome = KubeOutcome::kOk;
  } else if (t->too_large) {
    r.detail = "response over " + std::to_string(t->max_bytes) + " bytes";
  } else if (code != CURLE_OK && r.http_status == 0) {
    r.outcome = OutcomeOfCurl(code);
    r.detail = error[0] != '\0' ? error : curl_easy_strerror(code);
  } else if (r.http_status != 200) {
    r.outcome = OutcomeOfHttp(r.http_status);
    r.detail = "HTTP " + std::to_string(r.http_status);
  } else if (code != CURLE_OK) {
    // A 200 stream that broke off (connection cut, stalled).
    r.outcome = OutcomeOfCurl(code);
    r.detail = error[0] != '\0' ? error : curl_easy_strerror(code);
  } else {
    r.outcome = KubeOutcome::kOk;
  }
  r.body = std::move(t->buffer);
  return r;
}

}  // namespace kvidx::server
