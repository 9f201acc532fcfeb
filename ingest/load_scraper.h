// LoadScraper: polls each engine's Prometheus /metrics over HTTP and keeps
// the latest EngineLoad of each replica (per DP rank), for routing.
//
// One background thread scrapes every target each `interval`, all targets
// of a round in parallel (libcurl multi), each bounded by `timeout` and
// `max_body_bytes`. A failed scrape (connection refused, timeout, HTTP
// status other than 200, an oversized body) keeps the last good reading,
// whose age then grows: Reading::age tells the caller how far to trust it
// (routing decays a stale signal to its own accounting). Nothing an engine
// sends can crash the scraper: bodies go through ParseEngineLoad, which
// counts what it cannot use.
//
// Without Start(), nothing scrapes until ScrapeOnce is called: a server on
// a simulated route clock scrapes that way, at simulated times.
//
// Thread-safety: SetTargets, Get and stats may be called from any thread;
// the readings are guarded by one mutex held for map lookups only (never
// across I/O). ScrapeOnce runs a round on the calling thread, never
// concurrently with another round.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "ingest/engine_load.h"

namespace kvidx::ingest {

struct ScrapeTarget {
  std::string replica;
  std::string url;  // http(s)://host:port/metrics
};

class LoadScraper {
 public:
  using Clock = std::chrono::steady_clock;

  struct Options {
    std::chrono::milliseconds interval{1000};
    std::chrono::milliseconds timeout{500};
    size_t max_body_bytes = 4u << 20;
    // The time a round's readings are stamped with; unset = Clock::now. A
    // simulator's server stamps them with simulated time (server/route_clock.h).
    std::function<Clock::time_point()> now;
  };

  // One DP rank's latest good reading.
  struct Reading {
    RankLoad load;
    Clock::duration age{};  // since that scrape
  };

  struct TargetStats {
    uint64_t scrapes_ok = 0;
    uint64_t scrapes_failed = 0;
    uint64_t invalid_values = 0;   // impossible gauge values (EngineLoad)
    uint64_t bad_lines = 0;        // malformed exposition lines
    std::string last_error;        // of the last failed scrape; "" after a good one
    std::optional<Clock::time_point> last_ok;
  };

  explicit LoadScraper(const Options& options);
  ~LoadScraper();  // Stop()s
  LoadScraper(const LoadScraper&) = delete;
  LoadScraper& operator=(const LoadScraper&) = delete;

  // Replaces the target set; readings of replicas no longer targeted go.
  void SetTargets(std::vector<ScrapeTarget> targets);
  void Start();
  void Stop();
  // One round of scrapes now, on this thread; not while Start()ed. Returns
  // the targets scraped and how many of them failed.
  struct Round {
    uint32_t targets = 0;
    uint32_t failed = 0;
  };
  Round ScrapeOnce();

  // The latest good reading of `replica`'s rank, if any scrape succeeded;
  // its age is measured on the clock the readings are stamped with
  // (Options::now), or at `now`.
  std::optional<Reading> Get(std::string_view replica, uint32_t dp_rank) const {
    return Get(replica, dp_rank, Now());
  }
  std::optional<Reading> Get(std::string_view replica, uint32_t dp_rank, Clock::time_point now) const;
  Clock::time_point Now() const { return opts_.now ? opts_.now() : Clock::now(); }
  std::map<std::string, TargetStats, std::less<>> stats() const;

 private:
  struct State {
    std::string url;
    EngineLoad load;
    Clock::time_point at;
    bool has_load = false;
    TargetStats stats;
  };
  struct Fetch {
    std::string replica;
    std::string url;
    std::string body;
    std::string error;   // "" = fetched
  };
  std::vector<Fetch> FetchAll(std::vector<Fetch> fetches) const;
  void Record(const Fetch& f, Clock::time_point at);
  void Loop();

  const Options opts_;
  mutable std::mutex mu_;
  std::map<std::string, State, std::less<>> targets_;   // by replica
  std::mutex wake_mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace kvidx::ingest
