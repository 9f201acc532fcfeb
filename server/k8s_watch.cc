#include "server/k8s_watch.h"

#include <algorithm>
#include <cstdlib>
#include <unordered_map>
#include <utility>

#include <spdlog/spdlog.h>

namespace kvidx::server {
namespace {

using std::chrono::milliseconds;

// The in-cluster API server, from the variables the kubelet sets.
Result<std::string> InClusterServer() {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (host == nullptr || port == nullptr || *host == '\0' || *port == '\0') {
    return Status::FailedPrecondition(
        "api_server is not set and KUBERNETES_SERVICE_HOST / KUBERNETES_SERVICE_PORT are not (not in a pod)");
  }
  const std::string h = host;
  const bool v6 = h.find(':') != std::string::npos;
  return "https://" + (v6 ? "[" + h + "]" : h) + ":" + port;
}

void Add(SkipCounts* to, const SkipCounts& from) {
  for (size_t i = 0; i < to->size(); ++i) (*to)[i] += from[i];
}

bool Any(const SkipCounts& c) {
  return std::any_of(c.begin(), c.end(), [](uint64_t n) { return n != 0; });
}

}  // namespace

KubernetesWatcher::KubernetesWatcher(KubernetesProviderConfig config, Sink sink)
    : config_(std::move(config)), sink_(std::move(sink)) {}

KubernetesWatcher::~KubernetesWatcher() { Stop(); }

Status KubernetesWatcher::Start() {
  KubeApi::Options o;
  o.server = config_.api_server;
  if (o.server.empty()) {
    Result<std::string> s = InClusterServer();
    if (!s.ok()) return s.status().WithPrefix("discovery provider " + config_.name + ": ");
    o.server = s.value();
  }
  while (!o.server.empty() && o.server.back() == '/') o.server.pop_back();
  o.token_file = config_.token_file;
  o.token = config_.token;
  o.ca_file = config_.ca_file;
  o.ca_pem = config_.ca_pem;
  o.insecure = config_.insecure_skip_tls_verify;
  o.timeout = milliseconds(config_.timeout_ms);
  Result<std::unique_ptr<KubeApi>> api = KubeApi::Create(o);
  if (!api.ok()) return api.status();
  api_ = std::move(api.value());
  if (config_.insecure_skip_tls_verify) {
    spdlog::warn("discovery {}: the API server's certificate is not verified (insecure_skip_tls_verify)",
                 config_.name);
  }
  if (config_.pods()) {
    spdlog::info("discovery {}: following Pods {} in namespace {} at {}", config_.name, config_.pod_selector,
                 config_.namespace_name, o.server);
  } else {
    spdlog::info("discovery {}: following EndpointSlices of service {}/{} at {}", config_.name,
                 config_.namespace_name, config_.service, o.server);
  }
  thread_ = std::thread([this] { Run(); });
  return Status::Ok();
}

void KubernetesWatcher::Stop() {
  {
    std::lock_guard<std::mutex> lock(sleep_mu_);
    stop_.store(true);
  }
  sleep_cv_.notify_all();
  if (api_ != nullptr) api_->Interrupt();
  if (thread_.joinable()) thread_.join();
}

std::string KubernetesWatcher::ListPath() const {
  // Namespace and Service names are DNS labels: nothing to escape.
  if (config_.pods()) {
    return "/api/v1/namespaces/" + config_.namespace_name +
           "/pods?labelSelector=" + KubeApi::Escape(config_.pod_selector);
  }
  return "/apis/discovery.k8s.io/v1/namespaces/" + config_.namespace_name +
         "/endpointslices?labelSelector=kubernetes.io%2Fservice-name%3D" + config_.service;
}

std::string KubernetesWatcher::WatchPath(const std::string& rv) const {
  return ListPath() + "&watch=1&resourceVersion=" + rv + "&allowWatchBookmarks=true&timeoutSeconds=" +
         std::to_string(config_.watch_timeout_seconds);
}

bool KubernetesWatcher::Sleep(milliseconds d) {
  std::unique_lock<std::mutex> lock(sleep_mu_);
  sleep_cv_.wait_for(lock, d, [this] { return stop_.load(); });
  return !stop_.load();
}

void KubernetesWatcher::Fail(KubeOutcome outcome, const std::string& detail) {
  // Once per outage, and again when its cause changes (a cut stream, then 401s).
  if (healthy_ || outcome != last_failure_) {
    spdlog::warn("discovery {}: {} ({}); keeping the last engine set, retrying", config_.name,
                 KubeOutcomeName(outcome), detail);
  }
  healthy_ = false;
  last_failure_ = outcome;
  sink_.result(outcome, detail);
}

void KubernetesWatcher::Run() {
  const milliseconds initial(config_.backoff_initial_ms), most(config_.backoff_max_ms);
  milliseconds backoff = initial;
  auto wait = [&] {
    const bool go_on = Sleep(backoff);
    backoff = std::min(backoff * 2, most);
    return go_on;
  };
  while (!stop_.load()) {
    if (!List()) {
      if (!wait()) return;
      continue;
    }
    backoff = initial;
    for (WatchEnd end = WatchEnd::kResume; end != WatchEnd::kRelist && !stop_.load();) {
      const auto started = std::chrono::steady_clock::now();
      end = WatchOnce();
      if (end == WatchEnd::kFailed && !wait()) return;
      if (end != WatchEnd::kResume) continue;
      backoff = initial;
      // A server (or proxy) that ends every watch at once must not make a busy loop.
      if (std::chrono::steady_clock::now() - started < std::chrono::seconds(1) && !Sleep(initial)) return;
    }
  }
}

bool KubernetesWatcher::List() {
  KubeResponse r = api_->Get(ListPath());
  if (stop_.load()) return false;
  if (r.outcome != KubeOutcome::kOk) {
    const std::string why = StatusMessage(r.body);
    Fail(r.outcome, why.empty() ? r.detail : r.detail + ": " + why);
    return false;
  }
  Result<EndpointSliceList> list = ParseEndpointSliceList(r.body, config_);
  if (!list.ok()) {
    Fail(KubeOutcome::kMalformed, "list: " + list.status().message());
    return false;
  }
  slices_.clear();
  SkipCounts skipped{};
  for (EndpointSlice& s : list.value().items) {
    Add(&skipped, s.skipped);
    std::string name = s.name;
    slices_[std::move(name)] = std::move(s);
  }
  resource_version_ = list.value().resource_version;
  if (!healthy_) spdlog::info("discovery {}: listing again", config_.name);
  healthy_ = true;
  sink_.result(KubeOutcome::kOk, "");
  if (Any(skipped)) sink_.skipped(skipped);
  Publish();
  return true;
}

KubernetesWatcher::WatchEnd KubernetesWatcher::WatchOnce() {
  bool relist = false, failed = false;
  const milliseconds stall(config_.watch_timeout_seconds * 1000LL + 30'000);
  KubeResponse r = api_->Watch(WatchPath(resource_version_), stall, [&](const std::vector<std::string_view>& lines) {
    return OnLines(lines, &relist, &failed);
  });
  if (stop_.load()) return WatchEnd::kFailed;
  if (relist || r.outcome == KubeOutcome::kGone) {
    // Not a failure: the API's way of saying "list again".
    sink_.result(KubeOutcome::kGone, "resourceVersion " + resource_version_ + " is too old");
    return WatchEnd::kRelist;
  }
  if (failed) return WatchEnd::kFailed;  // an ERROR event, reported
  if (r.outcome != KubeOutcome::kOk) {
    const std::string why = StatusMessage(r.body);
    Fail(r.outcome, "watch: " + (why.empty() ? r.detail : r.detail + ": " + why));
    return WatchEnd::kFailed;
  }
  return WatchEnd::kResume;
}

bool KubernetesWatcher::OnLines(const std::vector<std::string_view>& lines, bool* relist, bool* failed) {
  if (lines.empty() && !healthy_) {  // the watch opened after a failure
    spdlog::info("discovery {}: watching again", config_.name);
    healthy_ = true;
    sink_.result(KubeOutcome::kOk, "");
  }
  bool changed = false;
  SkipCounts skipped{};
  bool go_on = true;
  for (std::string_view line : lines) {
    Result<WatchEvent> e = ParseWatchEvent(line, config_);
    if (!e.ok()) {
      ++skipped[static_cast<size_t>(SkipReason::kMalformed)];
      spdlog::debug("discovery {}: watch event skipped: {}", config_.name, e.status().message());
      continue;
    }
    WatchEvent& ev = e.value();
    if (ev.type == WatchEventType::kError) {
      if (ev.error_code == 410) {
        *relist = true;
      } else {
        *failed = true;
        Fail(ev.error_code == 401 ? KubeOutcome::kUnauthorized
                                  : ev.error_code == 403 ? KubeOutcome::kForbidden : KubeOutcome::kHttpError,
             "watch ERROR event " + std::to_string(ev.error_code) + ": " + ev.error_message.substr(0, 256));
      }
      go_on = false;
      break;
    }
    if (!ev.slice.resource_version.empty()) resource_version_ = ev.slice.resource_version;
    if (ev.type == WatchEventType::kBookmark) continue;
    changed = true;
    if (ev.type == WatchEventType::kDeleted) {
      slices_.erase(ev.slice.name);
      continue;
    }
    Add(&skipped, ev.slice.skipped);
    std::string name = ev.slice.name;
    slices_[std::move(name)] = std::move(ev.slice);
  }
  if (Any(skipped)) sink_.skipped(skipped);
  if (changed) Publish();
  return go_on && !stop_.load();
}

void KubernetesWatcher::Publish() {
  // One engine per replica over all slices (an endpoint moving between
  // slices is briefly in two): a ready listing wins.
  std::vector<DiscoveredEngine> all;
  std::unordered_map<std::string, size_t> at;
  for (const auto& [name, slice] : slices_) {
    for (const DiscoveredEngine& e : slice.engines) {
      auto [it, fresh] = at.emplace(e.entry.engine.replica, all.size());
      if (fresh) {
        all.push_back(e);
      } else if (e.ready && !all[it->second].ready) {
        all[it->second] = e;
      }
    }
  }
  sink_.publish(all);
}

}  // namespace kvidx::server
