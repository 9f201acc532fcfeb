// IngestThread: one thread, one poll loop, many sources.
//
// Owns every socket of its sources: a SUB per connect-mode source, a bound
// SUB per bind-mode endpoint (shared by the sources that publish to it,
// routed by exact topic), a DEALER per source while a replay is outstanding,
// and optionally a socket-monitor PAIR per SUB. All of them sit in one
// epoll set through their ZMQ_FDs (no thread per socket), so a round costs
// in proportion to the sockets with news, not to the sockets watched: 999
// idle sources do not slow the one that publishes. Each ready socket is
// drained up to IngestOptions::max_burst messages before the loop moves on,
// so one busy source cannot starve the others, and replay never blocks
// anything.
//
// Connection state is per source even on a shared bound socket: the socket
// monitor reports connections (fds), libzmq tags each message with the fd
// it arrived on (ZMQ_SRCFD), and a source's first message on a connection
// ties the two. A source is DISCONNECTED when its own connection closes
// (ZMTP heartbeats detect a dead peer), not when any engine's does.
//
// Hot path: receive (zmq messages reused) -> split frames -> Sequencer ->
// decode into one reused EventBatch -> BatchSink::OnBatch. No allocation per
// block; none per batch once buffers are warm, except while a replay holds
// live batches.
//
// Control: AddSource / RemoveSource / Resync may be called from any thread;
// they are queued to the ingest thread (woken through an eventfd) and block
// until it has handled them, returning its Status. They must not be called
// from inside a BatchSink callback (that would deadlock).
//
// Errors: socket errors are reported as Status from the control calls, or
// logged and counted in the data path; no exception leaves the thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <zmq.hpp>

#include "base/status.h"
#include "ingest/batch_sink.h"
#include "ingest/ingest_options.h"
#include "ingest/source_config.h"
#include "ingest/source_stats.h"

namespace kvidx::ingest {

class IngestThread {
 public:
  // `context`, `sink` and `registry` (may be null) must outlive the thread.
  IngestThread(const IngestOptions& options, zmq::context_t* context, BatchSink* sink,
               MetricsRegistry* registry, size_t index);
  ~IngestThread();  // Stop()s
  IngestThread(const IngestThread&) = delete;
  IngestThread& operator=(const IngestThread&) = delete;

  Status Start();
  // Stops the loop and closes every socket. Sources are dropped without
  // OnSourceRemoved (a shutdown is not a removal). Idempotent.
  void Stop();

  // Starts ingesting `spec` (its id must be unique). `watermark` = the last
  // seq the index already holds for it (restart from a snapshot).
  Status AddSource(const SourceSpec& spec, std::optional<uint64_t> watermark = std::nullopt,
                   std::optional<uint64_t> watermark_fingerprint = std::nullopt);
  Status RemoveSource(uint64_t source_id);
  // Operator resync: clear the source's blocks and replay what the engine's
  // ring still holds.
  Status Resync(uint64_t source_id);

  // Messages dropped because no source on a bound socket claims their topic.
  uint64_t unknown_topic_messages() const { return unknown_topic_.load(std::memory_order_relaxed); }
  size_t index() const { return index_; }

 private:
  struct Command;
  struct Source;
  struct Listener;
  class Loop;

  Status Submit(std::unique_ptr<Command> cmd);
  void Run();

  IngestOptions opts_;
  zmq::context_t* ctx_;
  BatchSink* sink_;
  MetricsRegistry* registry_;
  size_t index_;
  int wake_fd_ = -1;
  std::atomic<uint64_t> unknown_topic_{0};

  std::mutex mu_;  // guards commands_ and running_
  std::vector<std::unique_ptr<Command>> commands_;
  bool running_ = false;
  std::thread thread_;
};

}  // namespace kvidx::ingest
