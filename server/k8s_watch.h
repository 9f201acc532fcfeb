// KubernetesWatcher: follows one Kubernetes provider's EndpointSlices by
// list + watch, as the Kubernetes API documents it, and hands every change
// of its engine set to a Sink (Discovery).
//
//   list   GET .../namespaces/<ns>/endpointslices?labelSelector=
//          kubernetes.io/service-name=<service>: the whole set and the
//          list's resourceVersion.
//   watch  the same with watch=1&resourceVersion=<rv>&allowWatchBookmarks=true
//          &timeoutSeconds=<watch_timeout_seconds>: one JSON event per line.
//          ADDED / MODIFIED / DELETED change the set (published after each
//          received chunk of events, not per event); BOOKMARK and every
//          event advance the resourceVersion the next watch resumes from, so
//          a cut stream resumes without losing or repeating a change.
//   410    an HTTP 410 Gone, or an ERROR event with code 410 (the version
//          was compacted away): list again.
//   errors (connection, TLS, 401, 403, a stalled stream, ...): reported,
//          then the watch (or list) is retried after a backoff doubling from
//          backoff_initial_ms to backoff_max_ms. The Sink keeps the last
//          published set meanwhile: an outage never clears the index.
//   bad    an event line that is not the documented JSON is reported as
//          skipped (malformed) and the stream goes on.
//
// Owns one thread. Stop() interrupts a running request and joins. The Sink
// is called from that thread only.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "server/config.h"
#include "server/k8s_endpoints.h"
#include "server/kube_api.h"

namespace kvidx::server {

class KubernetesWatcher {
 public:
  struct Sink {
    // The provider's whole engine set now.
    std::function<void(const std::vector<DiscoveredEngine>&)> publish;
    // How a list ended; how a watch failed; kOk also when a watch opens
    // after a failure (the provider is healthy again).
    std::function<void(KubeOutcome, const std::string& detail)> result;
    std::function<void(const SkipCounts&)> skipped;
  };

  KubernetesWatcher(KubernetesProviderConfig config, Sink sink);
  ~KubernetesWatcher();  // Stop()s
  KubernetesWatcher(const KubernetesWatcher&) = delete;
  KubernetesWatcher& operator=(const KubernetesWatcher&) = delete;

  // Works out the API server (the in-cluster one from KUBERNETES_SERVICE_HOST
  // / _PORT when api_server is ""; FailedPrecondition if they are unset) and
  // starts the thread.
  Status Start();
  void Stop();

  // The list and watch paths (tests, logs).
  std::string ListPath() const;
  std::string WatchPath(const std::string& resource_version) const;

 private:
  enum class WatchEnd { kResume, kRelist, kFailed };

  void Run();
  bool List();
  WatchEnd WatchOnce();
  bool OnLines(const std::vector<std::string_view>& lines, bool* relist, bool* failed);
  void Publish();
  void Fail(KubeOutcome outcome, const std::string& detail);
  // Waits `d` or until stopped; false if stopped.
  bool Sleep(std::chrono::milliseconds d);

  const KubernetesProviderConfig config_;
  const Sink sink_;
  std::unique_ptr<KubeApi> api_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::mutex sleep_mu_;
  std::condition_variable sleep_cv_;

  // The watch thread's state.
  std::map<std::string, EndpointSlice> slices_;  // by name
  std::string resource_version_;
  bool healthy_ = true;
  KubeOutcome last_failure_ = KubeOutcome::kOk;
};

}  // namespace kvidx::server
