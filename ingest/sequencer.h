// Sequencer: the per-source sequencing and replay state machine.
//
// Pure logic, no sockets and no clock of its own: the ingest thread feeds it
// arrivals (live batches, replay replies, the replay end marker, timer ticks,
// peer-reconnect hints, operator resyncs) with the current time, and it acts
// through a Delegate (apply this payload, clear this source, send a replay
// request, drop the replay socket). That makes every rule below testable
// without a network.
//
// Rules (issue 3; vllm-kv-events.md §2.3, §2.4, §8.5, §8.6):
//   - live seq == last + 1: apply.
//   - live seq <= last: a duplicate if it repeats an applied batch (same
//     bytes: a window of recent payload fingerprints is kept), otherwise the
//     engine restarted (a new publisher counts from 0 again and sends no
//     AllBlocksCleared): Reset(kEngineRestart), then continue from the new
//     sequence, replaying from 0 if the restart was noticed after seq 0.
//   - live seq > last + 1: a gap. Hold the batch, request replay from
//     last + 1; without a replay endpoint count the missed batches as lost.
//   - after a peer reconnect (a hint that the engine may have restarted) the
//     next live batch above `last`, even seq == last + 1, is held and a
//     replay from `last` (as it was at the reconnect) compares the engine's
//     copy of it with what was applied: a mismatch means a restart. A new
//     engine that published as many batches as the old one while we were
//     away continues the numbering seamlessly; only the bytes tell.
//   - while a replay is outstanding, live batches are held (bounded) and
//     merged in arrival order once it ends; whatever the replay already
//     applied is dropped from them as duplicates.
//   - cold start (no watermark) replays from 0; a restore from a snapshot
//     watermark W asks for replay from W itself and checks the engine's copy
//     of W against the stored fingerprint: equal -> continue with W + 1
//     (same engine); different, or nothing at or after W (the engine's seq
//     is now below ours) -> the engine restarted while we were away: clear
//     and replay from 0; first replayed seq above W -> ring overrun, lost.
//   - a replay whose first batch is above the requested seq (ring overrun),
//     or that times out after all retries, or a gap with no replay endpoint:
//     the missing batches are lost, counted exactly (first received minus
//     expected), and the source is DEGRADED. It is EXACT again once the
//     engine's state is known: an AllBlocksCleared event is applied, the
//     engine restarts at seq 0, or an operator resync completes.
//   - a seq more than ReplayOptions::max_seq_jump past the expected one (live or
//     replayed) is a protocol error: dropped and counted, never a loss of
//     2^63 batches; a loss larger than that bound is counted the same way.
//   - an undecodable payload consumes its seq but leaves the source DEGRADED
//     (replaying the same bytes would not help).
//   - a connection to the PUB peer becomes live only once our subscription
//     has reached it, so batches sent just before are dropped at the PUB and
//     nothing reveals the loss until the engine publishes again (it may stay
//     idle for long). A probe replay from last + 1 shortly after each
//     connect closes that window. After a *re*connect the probe starts at
//     `last` to verify continuity; a reply with nothing at all from `last`
//     means the engine's sequence is now below ours: it restarted (and, idle,
//     would otherwise never tell us).
//
// Counters go straight to the source's SourceStats (seq gaps, lost,
// duplicates, restarts, replay results, replayed batches, last_seq); the
// Delegate counts what only it can see (batches, events, decode errors).
//
// Thread-compatible: one Sequencer per source, driven by one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ingest/batch_fingerprint.h"
#include "ingest/batch_sink.h"
#include "ingest/replay_options.h"
#include "ingest/source_stats.h"

namespace kvidx::ingest {

class Sequencer {
 public:
  using Clock = std::chrono::steady_clock;

  struct Options {
    bool has_replay = false;
    // Restore from a snapshot: the last seq the index already holds.
    std::optional<uint64_t> watermark;
    // BatchFingerprint of the batch at `watermark`, if known.
    std::optional<uint64_t> watermark_fingerprint;
    ReplayOptions replay;
  };

  // What applying one payload revealed.
  struct ApplyOutcome {
    bool decoded = true;       // false: undecodable (the seq is consumed anyway)
    bool cleared_all = false;  // the batch carried AllBlocksCleared: engine state known
  };

  class Delegate {
   public:
    virtual ~Delegate() = default;
    // Decode and deliver one batch, in sequence order. `fingerprint` is
    // BatchFingerprint(payload), computed once per arrival.
    virtual ApplyOutcome Apply(uint64_t seq, std::string_view payload, uint64_t fingerprint, bool replayed) = 0;
    // Drop every block of the source.
    virtual void Reset(ResetReason reason) = 0;
    // Send ["", u64be(start)] on a fresh DEALER (any previous request's
    // socket is discarded first, so stale replies cannot be mistaken for
    // this one's).
    virtual void SendReplayRequest(uint64_t start_seq) = 0;
    // Close the replay socket; replies still in flight are discarded.
    virtual void CancelReplay() = 0;
  };

  enum class SyncState : uint8_t { kReplaying, kExact, kDegraded };

  // `stats` and `delegate` must outlive the Sequencer.
  Sequencer(const Options& options, SourceStats* stats, Delegate* delegate);

  // Begins sequencing: requests the cold-start / restore replay if possible.
  void Start(Clock::time_point now);

  // One live batch from the SUB socket. The payload is copied only if held.
  void OnLive(uint64_t seq, std::string_view payload, Clock::time_point now);
  // One replayed batch / the end marker, from the DEALER socket.
  void OnReplayBatch(uint64_t seq, std::string_view payload, Clock::time_point now);
  void OnReplayEnd(Clock::time_point now);
  // Timers: replay timeout and retry backoff.
  void Tick(Clock::time_point now);
  // The PUB peer connected (socket monitor). `reconnected`: it had been
  // connected before, so the engine may have restarted. Schedules a probe.
  void OnPeerConnected(Clock::time_point now, bool reconnected);
  // Operator resync: Reset(kOperatorResync), then replay what the ring holds
  // from 0 and trust it (a ring overrun is not counted as loss here: the
  // operator accepts that blocks older than the ring stay unknown).
  void Resync(Clock::time_point now);

  // When Tick must next be called; nullopt if no timer is armed.
  std::optional<Clock::time_point> NextDeadline() const;

  SyncState sync_state() const;
  bool replaying() const { return replaying_; }
  std::optional<uint64_t> last_applied() const { return last_; }
  size_t held_batches() const { return held_.size(); }

 private:
  enum class ReplayReason : uint8_t { kStart, kGap, kRestart, kResync, kProbe };
  struct Held {
    uint64_t seq;
    uint64_t fingerprint;
    std::string payload;
  };
  struct Fingerprint {
    uint64_t seq_plus_one = 0;  // 0 = empty slot
    uint64_t hash = 0;
  };

  void ProcessLive(uint64_t seq, std::string_view payload, uint64_t fp, Clock::time_point now, bool from_held);
  void HandleRestart(uint64_t seq, std::string_view payload, uint64_t fp, Clock::time_point now);
  void StartReplay(uint64_t start, ReplayReason reason, std::optional<uint64_t> verify, Clock::time_point now);
  void SendCurrentRequest(Clock::time_point now);
  void EndReplay(ReplayResult result, Clock::time_point now);
  void RestartDuringReplay(bool replay_from_zero, Clock::time_point now);
  void ApplyOne(uint64_t seq, std::string_view payload, uint64_t fp, bool replayed);
  void DeclareLoss(uint64_t n);
  void ForgetState();
  void Hold(uint64_t seq, std::string_view payload, uint64_t fp);
  // Feeds the held batches back through ProcessLive, in arrival order.
  void MergeHeld(Clock::time_point now);
  uint64_t NextSeq() const { return last_ ? *last_ + 1 : 0; }
  // True (and counted) if `seq` jumps implausibly far past `next`.
  bool Implausible(uint64_t seq, uint64_t next);
  std::optional<uint64_t> KnownFingerprint(uint64_t seq) const;

  Options opts_;
  SourceStats* stats_;
  Delegate* delegate_;

  std::optional<uint64_t> last_;
  bool degraded_ = false;
  // The next arrival decides whether (and how many) batches were lost: after
  // a cold start without replay, or a replay that timed out.
  bool pending_unknown_ = false;
  // After a resync that could not replay: the next batch is the new base.
  bool accept_any_base_ = false;
  // Set by a reconnect: the applied seq whose engine copy must be compared
  // before anything newer is trusted. Pinned then, not read later, because
  // batches of a new engine may be applied before the check runs.
  std::optional<uint64_t> verify_at_;
  bool probe_pending_ = false;
  Clock::time_point probe_at_;
  std::vector<Fingerprint> fingerprints_;

  bool replaying_ = false;
  struct Replay {
    ReplayReason reason = ReplayReason::kStart;
    uint64_t start = 0;                // the seq the loss count is measured from
    std::optional<uint64_t> verify;    // seq requested on purpose to check continuity
    bool first_of_attempt = true;
    bool progressed = false;           // any batch applied by this replay
    bool partial = false;
    int attempt = 0;
    bool waiting_resend = false;
    Clock::time_point deadline;
    Clock::time_point resend_at;
  } replay_;
  std::deque<Held> held_;
};

}  // namespace kvidx::ingest
