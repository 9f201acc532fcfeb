#include "ingest/sequencer.h"

#include <algorithm>
#include <utility>

namespace kvidx::ingest {

Sequencer::Sequencer(const Options& options, SourceStats* stats, Delegate* delegate)
    : opts_(options), stats_(stats), delegate_(delegate) {
  fingerprints_.resize(std::max<size_t>(opts_.replay.fingerprint_window, 1));
}

std::optional<uint64_t> Sequencer::KnownFingerprint(uint64_t seq) const {
  const Fingerprint& f = fingerprints_[seq % fingerprints_.size()];
  if (f.seq_plus_one != seq + 1) return std::nullopt;
  return f.hash;
}

void Sequencer::Start(Clock::time_point now) {
  last_ = opts_.watermark;
  if (last_) stats_->last_seq.store(static_cast<int64_t>(*last_), std::memory_order_relaxed);
  if (last_ && opts_.watermark_fingerprint) {
    Fingerprint& f = fingerprints_[*last_ % fingerprints_.size()];
    f.seq_plus_one = *last_ + 1;
    f.hash = *opts_.watermark_fingerprint;
  }
  if (opts_.has_replay) {
    // Resuming: verify continuity at the watermark itself (see header).
    StartReplay(NextSeq(), ReplayReason::kStart, last_, now);
  } else {
    // Nothing tells us what the engine published before we connected: the
    // first live seq will (0 = nothing missed).
    pending_unknown_ = true;
  }
}

Sequencer::SyncState Sequencer::sync_state() const {
  if (replaying_) return SyncState::kReplaying;
  if (degraded_ || pending_unknown_) return SyncState::kDegraded;
  return SyncState::kExact;
}

std::optional<Sequencer::Clock::time_point> Sequencer::NextDeadline() const {
  if (!replaying_) {
    if (probe_pending_) return probe_at_;
    return std::nullopt;
  }
  return replay_.waiting_resend ? replay_.resend_at : replay_.deadline;
}

void Sequencer::OnPeerConnected(Clock::time_point now, bool reconnected) {
  // Only a replay can compare; without one the hint has nothing to act on.
  if (reconnected && opts_.has_replay && last_ && KnownFingerprint(*last_)) verify_at_ = *last_;
  if (opts_.has_replay && opts_.replay.probe_delay > Clock::duration::zero()) {
    probe_pending_ = true;
    probe_at_ = now + opts_.replay.probe_delay;
  }
}

void Sequencer::OnLive(uint64_t seq, std::string_view payload, Clock::time_point now) {
  ProcessLive(seq, payload, BatchFingerprint(payload), now, /*from_held=*/false);
}

void Sequencer::Hold(uint64_t seq, std::string_view payload, uint64_t fp) {
  // Beyond the bound the batch is dropped here but not lost: the merge sees
  // the hole and replays it from the engine's ring.
  if (held_.size() >= opts_.replay.max_held_batches) return;
  held_.push_back(Held{seq, fp, std::string(payload)});
}

void Sequencer::MergeHeld(Clock::time_point now) {
  // A new gap among them starts a new replay and re-holds the rest.
  std::deque<Held> held = std::move(held_);
  held_.clear();
  for (Held& h : held) ProcessLive(h.seq, h.payload, h.fingerprint, now, /*from_held=*/true);
}

void Sequencer::ProcessLive(uint64_t seq, std::string_view payload, uint64_t fp, Clock::time_point now,
                            bool from_held) {
  if (replaying_) {
    Hold(seq, payload, fp);
    return;
  }
  if (last_ && seq <= *last_) {
    std::optional<uint64_t> known = KnownFingerprint(seq);
    // A held batch older than the window was almost surely applied by the
    // replay that just ended; a live one that old can only be a new engine.
    bool duplicate = known ? *known == fp : from_held;
    if (duplicate) {
      SourceStats::Inc(stats_->duplicate_batches);
      return;
    }
    HandleRestart(seq, payload, fp, now);
    return;
  }

  uint64_t next = NextSeq();
  if (last_ && Implausible(seq, next)) return;
  if (verify_at_) {
    Hold(seq, payload, fp);
    if (seq > next) SourceStats::Inc(stats_->seq_gaps);
    StartReplay(next, seq > next ? ReplayReason::kGap : ReplayReason::kProbe, std::exchange(verify_at_, std::nullopt),
                now);
    return;
  }
  if (seq == next) {
    pending_unknown_ = false;
    accept_any_base_ = false;
    ApplyOne(seq, payload, fp, /*replayed=*/false);
    return;
  }

  // seq > next: a gap.
  if (accept_any_base_) {
    accept_any_base_ = false;
    pending_unknown_ = false;
    ApplyOne(seq, payload, fp, false);
    return;
  }
  SourceStats::Inc(stats_->seq_gaps);
  if (!opts_.has_replay || pending_unknown_) {
    if (!opts_.has_replay) {
      stats_->replay_requests[static_cast<size_t>(ReplayResult::kUnavailable)].fetch_add(
          1, std::memory_order_relaxed);
    }
    pending_unknown_ = false;
    DeclareLoss(seq - next);
    ApplyOne(seq, payload, fp, false);
    return;
  }
  Hold(seq, payload, fp);
  StartReplay(next, ReplayReason::kGap, std::nullopt, now);
}

void Sequencer::ForgetState() {
  last_.reset();
  stats_->last_seq.store(-1, std::memory_order_relaxed);
  degraded_ = false;
  verify_at_.reset();
  pending_unknown_ = false;
  accept_any_base_ = false;
  for (auto& f : fingerprints_) f = Fingerprint{};
}

void Sequencer::HandleRestart(uint64_t seq, std::string_view payload, uint64_t fp, Clock::time_point now) {
  SourceStats::Inc(stats_->engine_restarts);
  ForgetState();
  delegate_->Reset(ResetReason::kEngineRestart);
  if (seq == 0) {
    ApplyOne(seq, payload, fp, false);
    return;
  }
  // We joined the new engine late: its batches 0..seq-1 are in its ring.
  SourceStats::Inc(stats_->seq_gaps);
  if (opts_.has_replay) {
    Hold(seq, payload, fp);
    StartReplay(0, ReplayReason::kRestart, std::nullopt, now);
    return;
  }
  stats_->replay_requests[static_cast<size_t>(ReplayResult::kUnavailable)].fetch_add(1, std::memory_order_relaxed);
  DeclareLoss(seq);
  ApplyOne(seq, payload, fp, false);
}

void Sequencer::StartReplay(uint64_t start, ReplayReason reason, std::optional<uint64_t> verify,
                            Clock::time_point now) {
  // A replay sent after the subscription settled covers what a probe would.
  if (probe_pending_ && now >= probe_at_) probe_pending_ = false;
  replaying_ = true;
  replay_ = Replay{};
  replay_.reason = reason;
  replay_.start = start;
  replay_.verify = verify;
  SendCurrentRequest(now);
}

void Sequencer::SendCurrentRequest(Clock::time_point now) {
  replay_.first_of_attempt = true;
  replay_.waiting_resend = false;
  replay_.deadline = now + opts_.replay.timeout;
  delegate_->SendReplayRequest(replay_.verify ? *replay_.verify : replay_.start);
}

void Sequencer::OnReplayBatch(uint64_t seq, std::string_view payload, Clock::time_point now) {
  if (!replaying_ || replay_.waiting_resend) return;  // nothing asked: stray frame
  replay_.deadline = now + opts_.replay.timeout;
  const uint64_t fp = BatchFingerprint(payload);

  if (replay_.verify) {
    uint64_t verify = *replay_.verify;
    replay_.verify.reset();
    if (seq == verify) {
      std::optional<uint64_t> known = KnownFingerprint(seq);
      if (known && *known != fp) {
        // The ring's copy of our last batch differs: a new engine wrote it.
        RestartDuringReplay(/*replay_from_zero=*/true, now);
        return;
      }
      replay_.first_of_attempt = false;
      return;  // continuity confirmed; the overlap itself is not a duplicate
    }
    // The ring no longer holds `verify`: continuity cannot be checked, carry on.
  }

  uint64_t next = NextSeq();
  bool first = replay_.first_of_attempt;
  replay_.first_of_attempt = false;
  if (last_ && seq <= *last_) {
    SourceStats::Inc(stats_->duplicate_batches);
    return;
  }
  if (Implausible(seq, next)) return;
  if (seq > next) {
    // First batch of an attempt above the request: the ring was overrun.
    // Later in the stream: a seq vLLM consumed without sending (send error).
    if (first) replay_.partial = true;
    bool resync_base = first && replay_.reason == ReplayReason::kResync && !replay_.progressed;
    if (!resync_base) DeclareLoss(seq - next);
  }
  replay_.progressed = true;
  ApplyOne(seq, payload, fp, /*replayed=*/true);
}

void Sequencer::RestartDuringReplay(bool replay_from_zero, Clock::time_point now) {
  delegate_->CancelReplay();
  replaying_ = false;
  stats_->replay_requests[static_cast<size_t>(ReplayResult::kOk)].fetch_add(1, std::memory_order_relaxed);
  SourceStats::Inc(stats_->engine_restarts);
  ForgetState();
  delegate_->Reset(ResetReason::kEngineRestart);
  if (replay_from_zero) {
    StartReplay(0, ReplayReason::kRestart, std::nullopt, now);  // held batches stay held
    return;
  }
  MergeHeld(now);
}

void Sequencer::OnReplayEnd(Clock::time_point now) {
  if (!replaying_ || replay_.waiting_resend) return;
  if (replay_.verify && replay_.first_of_attempt) {
    // Nothing at or after our last seq: the engine's sequence is behind
    // ours, so it is a new engine. Its ring may still hold seqs below ours
    // (it published while we were away): replay it from 0.
    RestartDuringReplay(/*replay_from_zero=*/true, now);
    return;
  }
  EndReplay(replay_.partial ? ReplayResult::kPartial : ReplayResult::kOk, now);
}

void Sequencer::EndReplay(ReplayResult result, Clock::time_point now) {
  stats_->replay_requests[static_cast<size_t>(result)].fetch_add(1, std::memory_order_relaxed);
  delegate_->CancelReplay();
  replaying_ = false;
  if (result == ReplayResult::kTimeout && replay_.reason != ReplayReason::kProbe) {
    // (A probe is opportunistic: if it times out, the next live batch still
    // reveals any gap it was looking for.)
    if (replay_.reason == ReplayReason::kResync && !replay_.progressed) {
      accept_any_base_ = true;
    } else {
      pending_unknown_ = true;  // the next arrival tells how many were lost
    }
  }
  MergeHeld(now);  // the live batches that arrived meanwhile
}

void Sequencer::Tick(Clock::time_point now) {
  if (!replaying_) {
    if (probe_pending_ && now >= probe_at_) {
      probe_pending_ = false;
      StartReplay(NextSeq(), ReplayReason::kProbe, std::exchange(verify_at_, std::nullopt), now);
    }
    return;
  }
  if (replay_.waiting_resend) {
    if (now >= replay_.resend_at) {
      // Resume where the stream stopped; keep the loss count anchored there.
      if (replay_.progressed) replay_.start = NextSeq();
      SendCurrentRequest(now);
    }
    return;
  }
  if (now < replay_.deadline) return;
  delegate_->CancelReplay();
  if (replay_.attempt < opts_.replay.max_retries) {
    ++replay_.attempt;
    replay_.waiting_resend = true;
    replay_.resend_at = now + opts_.replay.backoff * (1 << std::min(replay_.attempt - 1, 16));
    return;
  }
  EndReplay(ReplayResult::kTimeout, now);
}

void Sequencer::Resync(Clock::time_point now) {
  SourceStats::Inc(stats_->resyncs);
  if (replaying_) {
    delegate_->CancelReplay();
    replaying_ = false;  // superseded; held batches stay and are merged after
  }
  ForgetState();
  delegate_->Reset(ResetReason::kOperatorResync);
  if (opts_.has_replay) {
    StartReplay(0, ReplayReason::kResync, std::nullopt, now);
  } else {
    accept_any_base_ = true;
    MergeHeld(now);
  }
}

bool Sequencer::Implausible(uint64_t seq, uint64_t next) {
  if (seq <= next || seq - next <= opts_.replay.max_seq_jump) return false;
  SourceStats::Inc(stats_->seq_implausible);
  return true;
}

void Sequencer::DeclareLoss(uint64_t n) {
  if (n == 0) return;
  degraded_ = true;
  if (n > opts_.replay.max_seq_jump) {
    SourceStats::Inc(stats_->seq_implausible);
    return;
  }
  SourceStats::Inc(stats_->batches_lost, n);
}

void Sequencer::ApplyOne(uint64_t seq, std::string_view payload, uint64_t fp, bool replayed) {
  ApplyOutcome out = delegate_->Apply(seq, payload, fp, replayed);
  if (replayed) SourceStats::Inc(stats_->batches_replayed);
  Fingerprint& f = fingerprints_[seq % fingerprints_.size()];
  f.seq_plus_one = seq + 1;
  f.hash = fp;
  last_ = seq;
  stats_->last_seq.store(static_cast<int64_t>(seq), std::memory_order_relaxed);
  if (!out.decoded) degraded_ = true;
  if (out.cleared_all && out.decoded) {
    // The engine just told us its whole state: nothing earlier matters.
    degraded_ = false;
    pending_unknown_ = false;
  }
}

}  // namespace kvidx::ingest
