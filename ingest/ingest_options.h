// IngestOptions: tuning knobs shared by every ingest thread.
//
// Defaults suit production: a generous receive HWM (a drop at our side is
// the worst kind — silent, and only replay can repair it), ZMTP heartbeats so
// a dead engine is told from an idle one (an idle engine publishes nothing),
// exponential reconnect backoff, bounded replay retries.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

#include <zmq.hpp>

#include "ingest/decoder.h"
#include "ingest/replay_options.h"
#include "ingest/source_config.h"

namespace kvidx::ingest {

struct IngestOptions {
  // Ingest threads; sources are sharded over them by name (a source always
  // stays on one thread, so its batches stay in order).
  size_t num_threads = 1;

  // SUB receive high-water mark, in messages (0 = unlimited).
  int sub_rcvhwm = 1'000'000;
  // ZMTP heartbeats (ZMQ_HEARTBEAT_IVL / _TIMEOUT / _TTL). 0 disables.
  std::chrono::milliseconds heartbeat_ivl{1000};
  std::chrono::milliseconds heartbeat_timeout{5000};
  // Reconnect backoff: starts at reconnect_ivl, doubles up to reconnect_ivl_max.
  std::chrono::milliseconds reconnect_ivl{100};
  std::chrono::milliseconds reconnect_ivl_max{5000};

  // Every source's sequencer recovers missed batches with these.
  ReplayOptions replay;

  // Messages read from one socket before the poll loop moves on (fairness
  // between sources).
  size_t max_burst = 256;
  // Watch the PUB connection with a socket monitor (DISCONNECTED state and
  // the restart hint). Costs two inproc sockets per source.
  bool monitor_peers = true;

  DecodeLimits decode_limits;
  // Topic for engines configured without one (llm-d: "kv@{replica}@{model}").
  TopicTemplate topic_template;

  // ZMQ context to use (not owned; needed for inproc:// endpoints shared
  // with publishers in the same process). Null = the Ingester owns one.
  zmq::context_t* context = nullptr;
  int io_threads = 1;
  // ZMQ_MAX_SOCKETS for an owned context: ~2-4 sockets per source.
  int max_sockets = 65536;
};

}  // namespace kvidx::ingest
