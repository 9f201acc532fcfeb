#include "ingest/load_scraper.h"

#include <curl/curl.h>

#include <memory>
#include <utility>

#include <spdlog/spdlog.h>

#include "base/sampled_log.h"

namespace kvidx::ingest {

namespace {

struct BodySink {
  std::string* body;
  size_t max;
  bool overflow = false;
};

size_t OnBody(char* data, size_t size, size_t n, void* user) {
  auto* sink = static_cast<BodySink*>(user);
  const size_t bytes = size * n;
  if (sink->body->size() + bytes > sink->max) {
    sink->overflow = true;
    return 0;  // aborts the transfer (CURLE_WRITE_ERROR)
  }
  sink->body->append(data, bytes);
  return bytes;
}

void GlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct EasyDeleter {
  void operator()(CURL* e) const { curl_easy_cleanup(e); }
};
using Easy = std::unique_ptr<CURL, EasyDeleter>;

}  // namespace

LoadScraper::LoadScraper(const Options& options) : opts_(options) { GlobalInit(); }

LoadScraper::~LoadScraper() { Stop(); }

void LoadScraper::SetTargets(std::vector<ScrapeTarget> targets) {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, State, std::less<>> next;
  for (ScrapeTarget& t : targets) {
    auto old = targets_.find(t.replica);
    State s = old != targets_.end() && old->second.url == t.url ? std::move(old->second) : State{};
    s.url = std::move(t.url);
    next[std::move(t.replica)] = std::move(s);
  }
  targets_ = std::move(next);
}

void LoadScraper::Start() {
  std::lock_guard<std::mutex> lock(wake_mu_);
  if (thread_.joinable()) return;
  stop_ = false;
  thread_ = std::thread([this] { Loop(); });
}

void LoadScraper::Stop() {
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void LoadScraper::Loop() {
  std::unique_lock<std::mutex> lock(wake_mu_);
  while (!stop_) {
    lock.unlock();
    ScrapeOnce();
    lock.lock();
    wake_.wait_for(lock, opts_.interval, [this] { return stop_; });
  }
}

LoadScraper::Round LoadScraper::ScrapeOnce() {
  std::vector<Fetch> fetches;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [replica, s] : targets_) fetches.push_back(Fetch{replica, s.url, {}, {}});
  }
  Round round;
  if (fetches.empty()) return round;
  fetches = FetchAll(std::move(fetches));
  const Clock::time_point at = Now();
  for (const Fetch& f : fetches) {
    Record(f, at);
    ++round.targets;
    round.failed += !f.error.empty();
  }
  return round;
}

// All fetches of a round in parallel, each bounded by the timeout.
std::vector<LoadScraper::Fetch> LoadScraper::FetchAll(std::vector<Fetch> fetches) const {
  CURLM* multi = curl_multi_init();
  std::vector<Easy> easies;
  std::vector<BodySink> sinks(fetches.size());
  for (size_t i = 0; i < fetches.size(); ++i) {
    sinks[i] = BodySink{&fetches[i].body, opts_.max_body_bytes};
    Easy e(curl_easy_init());
    CURL* h = e.get();
    curl_easy_setopt(h, CURLOPT_URL, fetches[i].url.c_str());
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(opts_.timeout.count()));
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, OnBody);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &sinks[i]);
    curl_easy_setopt(h, CURLOPT_PRIVATE, &fetches[i]);
    curl_multi_add_handle(multi, h);
    easies.push_back(std::move(e));
  }
  int running = 0;
  do {
    if (curl_multi_perform(multi, &running) != CURLM_OK) break;
    if (running > 0) curl_multi_poll(multi, nullptr, 0, 100, nullptr);
  } while (running > 0);
  int left = 0;
  while (CURLMsg* m = curl_multi_info_read(multi, &left)) {
    if (m->msg != CURLMSG_DONE) continue;
    Fetch* f = nullptr;
    curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, &f);
    long code = 0;
    curl_easy_getinfo(m->easy_handle, CURLINFO_RESPONSE_CODE, &code);
    const size_t i = static_cast<size_t>(f - fetches.data());
    if (sinks[i].overflow) {
      f->error = "body over " + std::to_string(opts_.max_body_bytes) + " bytes";
    } else if (m->data.result != CURLE_OK) {
      f->error = curl_easy_strerror(m->data.result);
    } else if (code != 200) {
      f->error = "HTTP " + std::to_string(code);
    }
  }
  for (Easy& e : easies) curl_multi_remove_handle(multi, e.get());
  easies.clear();
  curl_multi_cleanup(multi);
  return fetches;
}

void LoadScraper::Record(const Fetch& f, Clock::time_point at) {
  EngineLoad load;
  if (f.error.empty()) load = ParseEngineLoad(f.body);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = targets_.find(f.replica);
  if (it == targets_.end() || it->second.url != f.url) return;  // retargeted meanwhile
  State& s = it->second;
  if (!f.error.empty()) {
    ++s.stats.scrapes_failed;
    s.stats.last_error = f.error;
    if (ShouldLogSampled(s.stats.scrapes_failed)) {
      spdlog::warn("load scrape of {} ({}) failed: {} [x{}]", f.replica, f.url, f.error, s.stats.scrapes_failed);
    }
    return;
  }
  ++s.stats.scrapes_ok;
  s.stats.invalid_values += load.invalid_values;
  s.stats.bad_lines += load.exposition.bad_lines;
  s.stats.last_error.clear();
  s.stats.last_ok = at;
  s.load = std::move(load);
  s.at = at;
  s.has_load = true;
}

std::optional<LoadScraper::Reading> LoadScraper::Get(std::string_view replica, uint32_t dp_rank,
                                                     Clock::time_point now) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = targets_.find(replica);
  if (it == targets_.end() || !it->second.has_load) return std::nullopt;
  const RankLoad* r = it->second.load.Rank(dp_rank);
  if (r == nullptr) return std::nullopt;
  return Reading{*r, now - it->second.at};
}

std::map<std::string, LoadScraper::TargetStats, std::less<>> LoadScraper::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, TargetStats, std::less<>> out;
  for (const auto& [replica, s] : targets_) out[replica] = s.stats;
  return out;
}

}  // namespace kvidx::ingest
