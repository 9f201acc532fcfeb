// FakeEngine: a vLLM KV-event publisher (ZmqEventPublisher), for tests, the
// simulator (kvidx-sim) and benchmarks.
//
// Speaks the exact protocol of vllm-kv-events.md §2: a PUB socket sending
// [topic, u64be seq, payload] with seq counting from 0, bound or connected by
// vLLM's rule (bind iff the endpoint has '*' or '::' or is ipc:// or
// inproc://), endpoints offset per data-parallel rank, and an optional ROUTER
// replay socket (always bound) holding the last `buffer_steps` batches and
// answering ["", u64be start] with every buffered batch >= start and an end
// marker, in either reply format (before / since vLLM #45177).
//
// Like vLLM, a publisher thread owns both sockets: Publish() enqueues, the
// thread assigns nothing (seqs are assigned at enqueue, in call order),
// sends, buffers, and serves replay requests between sends, so no live batch
// goes out while a replay streams.
//
// Fault switches (for tests): drop chosen seqs (consumed and buffered but not
// sent, like a PUB HWM drop; or not even buffered, like a send error), restart
// (seq back to 0, empty ring, optionally re-created sockets so subscribers see
// a disconnect), disable replay (requests are ignored), shrink the ring,
// switch the reply format, send garbage frames.
//
// Payloads are already-encoded msgpack bytes (see encoder.h). Thread-safe:
// every public method may be called from any thread. Errors are Status
// values; nothing throws.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include <zmq.hpp>

#include "base/status.h"
#include "ingest/testing/encoder.h"

namespace kvidx::ingest {

struct FakeEngineOptions {
  // vLLM's KVEventsConfig.endpoint, before the DP offset. The default binds an
  // ephemeral port; read the real one from pub_endpoint(). Empty = open the
  // PUB later with OpenPub() (e.g. once a kvidx in bind mode has a port).
  std::string endpoint = "tcp://127.0.0.1:*";
  // nullopt = vLLM's rule (VllmPubBinds); true/false forces bind/connect, e.g.
  // to bind 127.0.0.1:<port + rank> in tests where vLLM would need "*".
  std::optional<bool> pub_bind;
  // KVEventsConfig.replay_endpoint; empty = no replay socket.
  std::string replay_endpoint;
  std::string topic;
  uint32_t data_parallel_rank = 0;
  size_t buffer_steps = 10000;
  int sndhwm = 100000;
  ReplayFormat replay_format = ReplayFormat::kWithTopic;
  // Share a context (required for inproc:// with a subscriber in-process).
  // Not owned; must outlive the engine. Null = the engine owns one.
  zmq::context_t* context = nullptr;
};

enum class GarbageKind : uint8_t {
  kWrongFrameCount,  // [topic, payload]: no seq frame (consumes no seq)
  kShortSeq,         // [topic, 3-byte seq, payload] (consumes no seq)
  kBadPayload,       // [topic, next seq, non-msgpack bytes]: consumes a seq, buffered
};

enum class DropMode : uint8_t {
  kNotSent,      // buffered for replay but not sent live (PUB HWM drop)
  kNotBuffered,  // neither sent nor buffered (vLLM send error: permanent gap)
};

class FakeEngine {
 public:
  // Creates the sockets and starts the publisher thread. Fails if an
  // endpoint cannot be bound/connected.
  static Result<std::unique_ptr<FakeEngine>> Create(const FakeEngineOptions& options);
  ~FakeEngine();
  FakeEngine(const FakeEngine&) = delete;
  FakeEngine& operator=(const FakeEngine&) = delete;

  // The PUB / ROUTER endpoints actually in use (bound ports resolved, DP
  // offset applied; a bound "tcp://*:P" is reported as tcp://127.0.0.1:P).
  const std::string& pub_endpoint() const { return pub_endpoint_; }
  const std::string& replay_endpoint() const { return replay_endpoint_; }
  bool pub_binds() const { return pub_binds_; }

  // Opens the PUB socket if the options had no endpoint (DP offset and bind
  // rule applied as at creation). FailedPrecondition if one is open.
  Status OpenPub(const std::string& endpoint);

  // Publishes one batch; returns its seq. Without a PUB it is only buffered.
  uint64_t Publish(std::string payload);
  // Encodes `batch` in `era` and publishes it.
  uint64_t Publish(const EventBatch& batch, const WireEra& era);
  // The seq the next Publish will get.
  uint64_t next_seq() const;
  // Blocks until everything enqueued so far was sent (or dropped).
  void Flush();

  // --- fault switches ---
  void DropSeqs(const std::set<uint64_t>& seqs, DropMode mode = DropMode::kNotSent);
  // A new publisher: seq restarts at 0 and the ring empties. With
  // `recreate_sockets`, PUB and ROUTER are closed and opened again on the
  // same endpoints (subscribers see a disconnect/reconnect).
  Status Restart(bool recreate_sockets = false);
  void SetReplayEnabled(bool enabled);
  void SetBufferSteps(size_t steps);
  void SetReplayFormat(ReplayFormat format);
  // Garbage of the given kind; kBadPayload returns the seq it consumed.
  std::optional<uint64_t> SendGarbage(GarbageKind kind);

  // Observations.
  uint64_t replay_requests_served() const { return replay_requests_.load(std::memory_order_relaxed); }
  uint64_t last_replay_start() const { return last_replay_start_.load(std::memory_order_relaxed); }
  uint64_t live_sent() const { return live_sent_.load(std::memory_order_relaxed); }

 private:
  struct Op {
    enum class Kind : uint8_t { kPublish, kGarbage, kRestart, kBarrier, kOpenPub } kind = Kind::kPublish;
    uint64_t seq = 0;
    std::string payload;
    GarbageKind garbage = GarbageKind::kWrongFrameCount;
    bool send = true;      // kPublish: false = dropped before the PUB
    bool buffer = true;    // kPublish: false = not even buffered
    bool recreate = false; // kRestart
    std::shared_ptr<std::promise<Status>> done;  // kBarrier / kRestart
  };

  explicit FakeEngine(const FakeEngineOptions& options);
  Status OpenSockets(bool reopen);
  Status OpenPubSocket(bool reopen);
  void Run();
  void Enqueue(Op op);
  void ServeReplay();
  void Execute(Op& op);
  void SendLive(const std::string& topic, uint64_t seq, const std::string& payload);
  void TrimRing();

  FakeEngineOptions opts_;
  std::unique_ptr<zmq::context_t> own_ctx_;
  zmq::context_t* ctx_ = nullptr;
  std::string pub_config_;      // offset endpoint as configured
  std::string replay_config_;
  std::string pub_endpoint_;    // resolved
  std::string replay_endpoint_;
  bool pub_binds_ = true;
  int wake_fd_ = -1;

  // Publisher-thread state.
  std::unique_ptr<zmq::socket_t> pub_;
  std::unique_ptr<zmq::socket_t> router_;
  std::deque<std::pair<uint64_t, std::string>> ring_;

  mutable std::mutex mu_;          // guards the fields below
  std::deque<Op> queue_;
  uint64_t next_seq_ = 0;
  std::set<uint64_t> drop_;
  DropMode drop_mode_ = DropMode::kNotSent;
  bool replay_enabled_ = true;
  size_t buffer_steps_;
  ReplayFormat replay_format_;
  bool stop_ = false;

  std::atomic<uint64_t> replay_requests_{0};
  std::atomic<uint64_t> last_replay_start_{0};
  std::atomic<uint64_t> live_sent_{0};
  std::thread thread_;
};

// vLLM's PUB rule: bind iff the endpoint contains '*' or '::' or starts with
// ipc:// or inproc:// (so "tcp://0.0.0.0:5557" connects — a known footgun).
bool VllmPubBinds(std::string_view endpoint);

}  // namespace kvidx::ingest
