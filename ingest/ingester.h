// Ingester: the ingest side of kvidx. Engines in, decoded batches out.
//
// Owns the ZMQ context (unless one is supplied), IngestOptions::num_threads
// IngestThreads, and the MetricsRegistry of every source. Engines are added
// and removed at run time; each engine expands into one source per DP rank
// (see source_config.h), and each source is pinned to one thread chosen by a
// hash of its name, so its batches are always handled in order by the same
// thread. BatchSink callbacks run on those threads (see batch_sink.h).
//
// Thread-safe: every method may be called from any thread except from inside
// a BatchSink callback (control calls wait for the ingest thread). Control
// calls take a mutex for the engine table only, never across socket I/O on
// the data path. Errors are Status values; nothing throws.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <zmq.hpp>

#include "base/status.h"
#include "ingest/batch_sink.h"
#include "ingest/ingest_options.h"
#include "ingest/ingest_thread.h"
#include "ingest/source_config.h"
#include "ingest/source_stats.h"

namespace kvidx::ingest {

// A point-in-time view of one source (admin API, tests).
struct SourceStatus {
  SourceSpec spec;
  std::string endpoint;  // in use (a bound wildcard port resolved)
  SourceState state = SourceState::kConnecting;
  int64_t last_seq = -1;
  size_t thread = 0;
  std::shared_ptr<const SourceStats> stats;
};

class Ingester {
 public:
  // `sink` must outlive the Ingester.
  Ingester(const IngestOptions& options, BatchSink* sink);
  ~Ingester();  // Stop()s
  Ingester(const Ingester&) = delete;
  Ingester& operator=(const Ingester&) = delete;

  Status Start();
  void Stop();

  // Where a restored source resumes: the last seq the index holds and, if
  // known, that batch's BatchFingerprint.
  struct ResumePoint {
    uint64_t last_seq = 0;
    std::optional<uint64_t> fingerprint;
  };
  // Adds an engine: all its DP ranks, or none if one fails. `watermarks`
  // maps a DP rank to the last seq the index already holds for it (restart
  // from a snapshot); ranks without one cold-start (replay from 0).
  Status AddEngine(const EngineConfig& engine, const std::map<uint32_t, ResumePoint>& watermarks = {});
  // Removes every source of the replica (BatchSink::OnSourceRemoved each).
  Status RemoveEngine(std::string_view replica);
  // Operator resync of one source ("<replica>/dp<rank>") or, given a replica
  // name, of all its ranks.
  Status Resync(std::string_view source_or_replica);

  std::vector<SourceStatus> ListSources() const;
  std::optional<SourceStatus> GetSource(std::string_view source_name) const;

  const MetricsRegistry& metrics() const { return registry_; }
  std::vector<MetricSample> RenderMetrics() const { return registry_.Render(); }
  // Messages on bound sockets whose topic no source claims, all threads.
  uint64_t unknown_topic_messages() const;

  const IngestOptions& options() const { return opts_; }

 private:
  struct Entry {
    SourceSpec spec;
    size_t thread;
  };
  size_t ThreadFor(std::string_view source_name) const;

  IngestOptions opts_;
  BatchSink* sink_;
  MetricsRegistry registry_;
  std::unique_ptr<zmq::context_t> own_ctx_;
  zmq::context_t* ctx_ = nullptr;
  std::vector<std::unique_ptr<IngestThread>> threads_;

  mutable std::mutex mu_;  // guards sources_, next_id_, started_
  std::map<std::string, Entry, std::less<>> sources_;  // by source name
  uint64_t next_id_ = 1;
  bool started_ = false;
};

}  // namespace kvidx::ingest
