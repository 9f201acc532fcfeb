// ReplayOptions: how a source's sequencer recovers missed batches through
// the engine's replay socket (rules in ingest/sequencer.h).
//
// Defined once: IngestOptions carries one for every source, and each
// source's Sequencer::Options embeds it unchanged.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace kvidx::ingest {

struct ReplayOptions {
  // An attempt fails if no reply frame arrives for this long.
  std::chrono::milliseconds timeout{2000};
  // Retries after the first attempt; the n-th waits backoff * 2^(n-1).
  int max_retries = 3;
  std::chrono::milliseconds backoff{100};
  // Delay between a PUB (re)connect and its probe replay (0 = no probes):
  // long enough for our subscription to reach the PUB, whose batches sent
  // before that are dropped there.
  std::chrono::milliseconds probe_delay{250};
  // Live batches held during a replay beyond this are dropped (the merge
  // then sees a gap and asks again: they are still in the engine's ring).
  size_t max_held_batches = 100000;
  // Recent payload fingerprints kept to tell a duplicate from a restart.
  size_t fingerprint_window = 64;
  // A batch whose seq is further than this past the next expected one is
  // a corrupt or hostile sequence number, not a loss: no engine publishes
  // 2^32 batches between two we receive. It is dropped and counted in
  // seq_implausible; if it was a real batch with a damaged seq, the next
  // one reveals the gap and the replay recovers it.
  uint64_t max_seq_jump = uint64_t{1} << 32;
};

}  // namespace kvidx::ingest
