// Sequencer rules, without sockets: a recording delegate and a fake clock.
#include "ingest/sequencer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kvidx::ingest {
namespace {

using Clock = Sequencer::Clock;
using namespace std::chrono_literals;

std::string P(uint64_t seq, int gen = 0) { return "batch-" + std::to_string(seq) + "-gen" + std::to_string(gen); }

class Recorder : public Sequencer::Delegate {
 public:
  struct Applied {
    uint64_t seq;
    std::string payload;
    bool replayed;
  };
  Sequencer::ApplyOutcome Apply(uint64_t seq, std::string_view payload, uint64_t fingerprint,
                                bool replayed) override {
    EXPECT_EQ(fingerprint, BatchFingerprint(payload)) << "seq " << seq;
    applied.push_back({seq, std::string(payload), replayed});
    Sequencer::ApplyOutcome out;
    out.decoded = payload != "garbage";
    out.cleared_all = payload.starts_with("clear");
    return out;
  }
  void Reset(ResetReason r) override { resets.push_back(r); }
  void SendReplayRequest(uint64_t start) override {
    requests.push_back(start);
    open = true;
  }
  void CancelReplay() override { open = false; }

  std::vector<uint64_t> Seqs() const {
    std::vector<uint64_t> v;
    for (const auto& a : applied) v.push_back(a.seq);
    return v;
  }

  std::vector<Applied> applied;
  std::vector<ResetReason> resets;
  std::vector<uint64_t> requests;
  bool open = false;
};

class SequencerTest : public ::testing::Test {
 protected:
  void Make(bool replay, std::optional<uint64_t> watermark = std::nullopt,
            std::optional<uint64_t> watermark_fingerprint = std::nullopt) {
    Sequencer::Options o;
    o.has_replay = replay;
    o.watermark = watermark;
    o.watermark_fingerprint = watermark_fingerprint;
    o.replay.timeout = 1s;
    o.replay.max_retries = 2;
    o.replay.backoff = 100ms;
    o.replay.max_held_batches = 8;
    seq_ = std::make_unique<Sequencer>(o, &stats_, &rec_);
    seq_->Start(now_);
  }
  // Serves a replay from the test's "ring" [first, last].
  void Serve(uint64_t first, uint64_t last, int gen = 0) {
    for (uint64_t s = first; s <= last; ++s) seq_->OnReplayBatch(s, P(s, gen), now_);
    seq_->OnReplayEnd(now_);
  }
  uint64_t Result(ReplayResult r) const { return stats_.replay_count(r); }

  Clock::time_point now_ = Clock::time_point() + 1000s;
  SourceStats stats_;
  Recorder rec_;
  std::unique_ptr<Sequencer> seq_;
};

std::vector<uint64_t> Range(uint64_t a, uint64_t b) {
  std::vector<uint64_t> v;
  for (uint64_t s = a; s <= b; ++s) v.push_back(s);
  return v;
}

TEST_F(SequencerTest, ColdStartWithReplayAsksFromZeroAndHoldsLive) {
  Make(true);
  ASSERT_EQ(rec_.requests, std::vector<uint64_t>{0});
  EXPECT_EQ(seq_->sync_state(), Sequencer::SyncState::kReplaying);
  seq_->OnLive(3, P(3), now_);  // arrives while the replay streams: held
  seq_->OnLive(4, P(4), now_);
  EXPECT_TRUE(rec_.applied.empty());
  Serve(0, 3);
  EXPECT_EQ(rec_.Seqs(), Range(0, 4));
  EXPECT_EQ(stats_.duplicate_batches.load(), 1u);  // held 3 was already replayed
  EXPECT_EQ(stats_.batches_replayed.load(), 4u);
  EXPECT_EQ(Result(ReplayResult::kOk), 1u);
  EXPECT_EQ(seq_->sync_state(), Sequencer::SyncState::kExact);
  EXPECT_FALSE(rec_.open);
}

TEST_F(SequencerTest, EmptyColdStartReplayIsExact) {
  Make(true);
  seq_->OnReplayEnd(now_);
  EXPECT_EQ(seq_->sync_state(), Sequencer::SyncState::kExact);
  seq_->OnLive(0, P(0), now_);
  EXPECT_EQ(rec_.Seqs(), Range(0, 0));
}

TEST_F(SequencerTest, ColdStartOverrunCountsExactLossAndDegrades) {
  Make(true);
  Serve(5, 9);  // the ring no longer holds 0..4
  EXPECT_EQ(stats_.batches_lost.load(), 5u);
  EXPECT_EQ(Result(ReplayResult::kPartial), 1u);
  EXPECT_EQ(seq_->sync_state(), Sequencer::SyncState::kDegraded);
  EXPECT_EQ(rec_.Seqs(), Range(5, 9));
  // The engine's state becomes known again with AllBlocksCleared.
  seq_->OnLive(10, "clear", now_);
  EXPECT_EQ(seq_->sync_state(), Sequencer::SyncState::kExact);
}

TEST_F(SequencerTest, RestoreFromWatermarkVerifiesTheWatermarkBatchThenContinues) {
  Make(true, 41, BatchFingerprint(P(41)));
  EXPECT_EQ(rec_.requests, std::vector<uint64_t>{41});  // from the watermark itself
  Serve(41, 43);
  EXPECT_EQ(rec_.Seqs(), Range(42, 43));
  EXPECT_EQ(stats_.last_seq.load(), 43);
  EXPECT_EQ(stats_.duplicate_batches.load(), 0u);
  EXPECT_EQ(stats_.engine_restarts.load(), 0u);
  EXPECT_EQ(seq_->sync_state(), Sequencer::SyncState::kExact);
}

// Live batches that arrive while the restore replay streams are also in its
// reply: each batch is applied exactly once (a second application would
// count copies twice: stores are not idempotent), including held batches
// that the replay applied longer ago than the fingerprint window reaches.
TEST_F(SequencerTest, RestoreReplayOverlappingHeldLiveBatchesAppliesEachOnce) {
  Make(true, 41, BatchFingerprint(P(41)));
  for (uint64_t s = 43; s <= 45; ++s) seq_->OnLive(s, P(s), now_);
  Serve(41, 44);
  EXPECT_EQ(rec_.Seqs(), Range(42, 45));
  EXPECT_EQ(stats_.duplicate_batches.load(), 2u);
  EXPECT_EQ(seq_->sync_state(), Sequencer::SyncState::kExact);

  rec_.applied.clear();
  seq_->OnLive(47, P(47), now_);  // a gap: replay from 46, 47 held
  for (uint64_t s = 48; s <= 52; ++s) seq_->OnLive(s, P(s), now_);
  Serve(46, 46 + 100);            // far past the 64-entry window
  seq_->OnLive(147, P(147), now_);
  EXPECT_EQ(rec_.Seqs(), Range(46, 147));
  EXPECT_EQ(stats_.batches_lost.load(), 0u);
  EXPECT_EQ(stats_.engine_restarts.load(), 0u);
}

TEST_F(SequencerTest, RestoreFromWatermarkWithoutFingerprintChecksPositionOnly) {
  Make(true, 41);
  EXPECT_EQ(rec_.requests, std::vector<uint64_t>{41});
  Serve(41, 43, /*gen=*/1);
  EXPECT_EQ(rec_.Seqs(), Range(42, 43));
  EXPECT_EQ(stats_.engine_restarts.load(), 0u);
}

TEST_F(SequencerTest, RestoreFindsAnotherBatchAtTheWatermarkTheEngineRestarted) {
  Make(true, 41, BatchFingerprint(P(41)));
  // A new engine has published past our watermark: its batch 41 differs.
  // (The rest of that reply never arrives: the request's socket is dropped.)
  seq_->OnReplayBatch(41, P(41, 1), now_);
  EXPECT_EQ(stats_.engine_restarts.load(), 1u);
  ASSERT_EQ(rec_.resets.size(), 1u);
  EXPECT_EQ(rec_.requests.back(), 0u);  // replays the new engine from 0
  Serve(0, 50, 1);
  EXPECT_EQ(rec_.Seqs(), Range(0, 50));
  EXPECT_EQ(stats_.batches_lost.load(), 0u);
  EXPECT_EQ(seq_->sync_state(), Sequencer::SyncState::kExact);
}

TEST_F(SequencerTest, RestoreFindsNothingAtTheWatermarkTheEngineRestartedBehindUs) {
  Make(true, 41, BatchFingerprint(P(41)));
  seq_->OnReplayEnd(now_);  // the new engine's ring holds only 0..1
  EXPECT_EQ(stats_.engine_restarts.load(), 1u);
  EXPECT_EQ(rec_.requests.back(), 0u);
  Serve(0, 1, 1);
  EXPECT_EQ(rec_.Seqs(), Range(0, 1));
  EXPECT_EQ(stats_.batches_lost.load(), 0u);
  EXPECT_EQ(seq_->sync_state(), Sequencer::SyncState::kExact);
}

TEST_F(SequencerTest, RestoreFindsTheRingOverrunCountsExactlyWhatWasLost) {
  Make(true, 41, BatchFingerprint(P(41)));
  Serve(45, 47);  // 42..44 are gone
  EXPECT_EQ(stats_.batches_lost.load(), 3u);
  EXPECT_EQ(rec_.Seqs(), Range(45, 47));
  EXPECT_EQ(seq_->sync_state(), Sequencer::SyncState::kDegraded);
}

TEST_F(SequencerTest, InOrderLiveAppliesAndTrueDuplicateIsDropped) {
  Make(false);
  EXPECT_EQ(seq_->sync_state(), Sequencer::SyncState::kDegraded);  // unknown until the first batch
  for (uint64_t s = 0; s < 5; ++s) seq_->OnLive(s, P(s), now_);
  EXPECT_EQ(seq_->sync_state(), Sequencer::SyncState::kExact);
  seq_->OnLive(3, P(3), now_);  // same bytes: a duplicate
  seq_->OnLive(4, P(4), now_);
  EXPECT_EQ(stats_.duplicate_batches.load(), 2u);
  EXPECT_EQ(stats_.engine_restarts.load(), 0u);
  EXPECT_EQ(rec_.Seqs(), Range(0, 4));
}

TEST_F(SequencerTest, GapRequestsReplayFromLastPlusOneAndMergesWithoutDuplicates) {
  Make(true);
  Serve(0, 1);
  seq_->OnLive(2, P(2), now_);
  seq_->OnLive(5, P(5), now_);  // 3, 4 missing
  EXPECT_EQ(stats_.seq_gaps.load(), 1u);
  ASSERT_EQ(rec_.requests.back(), 3u);
  seq_->OnLive(6, P(6), now_);  // held
  seq_->OnReplayBatch(3, P(3), now_);
  seq_->OnReplayBatch(4, P(4), now_);
  seq_->OnReplayBatch(5, P(5), now_);
  seq_->OnReplayEnd(now_);
  EXPECT_EQ(rec_.Seqs(), Range(0, 6));
  EXPECT_EQ(stats_.batches_lost.load(), 0u);
  EXPECT_EQ(stats_.duplicate_batches.load(), 1u);  // held 5
  EXPECT_EQ(seq_->sync_state(), Sequencer::SyncState::kExact);
}

TEST_F(SequencerTest, GapBeyondRingIsCountedExactly) {
  Make(true);
  Serve(0, 2);
  seq_->OnLive(20, P(20), now_);
  ASSERT_EQ(rec_.requests.back(), 3u);
  Serve(15, 20);  // ring holds 15..20: 3..14 lost
  EXPECT_EQ(stats_.batches_lost.load(), 12u);
  EXPECT_EQ(Result(ReplayResult::kPartial), 1u);
  EXPECT_EQ(seq_->sync_state(), Sequencer::SyncState::kDegraded);
  seq_->OnLive(21, P(21), now_);
  EXPECT_EQ(rec_.applied.back().seq, 21u);
}

TEST_F(SequencerTest, HoleInsideRingIsALoss) {
  // vLLM consumes a seq when a send fails; that seq is never buffered.
  Make(true);
  seq_->OnReplayBatch(0, P(0), now_);
  seq_->OnReplayBatch(2, P(2), now_);
  seq_->OnReplayEnd(now_);
  EXPECT_EQ(stats_.batches_lost.load(), 1u);
  EXPECT_EQ(Result(ReplayResult::kOk), 1u);
  EXPECT_EQ(seq_->sync_state(), Sequencer::SyncState::kDegraded);
}

TEST_F(SequencerTest, NoReplayEndpointCountsLossAndUnavailable) {
  Make(false);
  seq_->OnLive(7, P(7), now_);  // joined late: 0..6 missed
  EXPECT_EQ(stats_.batches_lost.load(), 7u);
  seq_->OnLive(8, P(8), now_);
  seq_->OnLive(11, P(11), now_);
  EXPECT_EQ(stats_.batches_lost.load(), 9u);
  EXPECT_EQ(Result(ReplayResult::kUnavailable), 2u);
  EXPECT_EQ(rec_.Seqs(), (std::vector<uint64_t>{7, 8, 11}));
  EXPECT_EQ(seq_->sync_state(), Sequencer::SyncState::kDegraded);
  EXPECT_TRUE(rec_.requests.empty());
}

TEST_F(SequencerTest, AbsurdSeqJumpIsAProtocolErrorNotALoss) {
  Make(false);
  seq_->OnLive(0, P(0), now_);
  seq_->OnLive(uint64_t{1} << 63, P(1), now_);         // a damaged or hostile seq: dropped
  seq_->OnLive(~uint64_t{0}, P(2), now_);              // again, near the wrap
  EXPECT_EQ(stats_.seq_implausible.load(), 2u);
  EXPECT_EQ(stats_.batches_lost.load(), 0u);
  seq_->OnLive(1, P(1), now_);                         // the stream carries on as if nothing came
  EXPECT_EQ(rec_.Seqs(), Range(0, 1));
  EXPECT_EQ(seq_->sync_state(), Sequencer::SyncState::kExact);
  seq_->OnLive(3, P(3), now_);                         // a real gap is still counted exactly
  EXPECT_EQ(stats_.batches_lost.load(), 1u);
}

TEST_F(SequencerTest, AbsurdSeqJumpDuringAReplayIsDroppedAndTheGapRecovered) {
  Make(true);
  Serve(0, 1);
  seq_->OnLive(uint64_t{1} << 62, P(9), now_);
  EXPECT_TRUE(rec_.requests.size() == 1u);             // no replay asked for 2^62 batches
  seq_->OnLive(3, P(3), now_);                         // 2 missing: replay from 2
  ASSERT_EQ(rec_.requests.back(), 2u);
  seq_->OnReplayBatch(2, P(2), now_);
  seq_->OnReplayBatch(uint64_t{1} << 62, P(9), now_);  // a damaged ring entry
  seq_->OnReplayBatch(3, P(3), now_);
  seq_->OnReplayEnd(now_);
  EXPECT_EQ(rec_.Seqs(), Range(0, 3));
  EXPECT_EQ(stats_.seq_implausible.load(), 2u);
  EXPECT_EQ(stats_.batches_lost.load(), 0u);
  EXPECT_EQ(seq_->sync_state(), Sequencer::SyncState::kExact);
}

TEST_F(SequencerTest, ColdStartWithoutReplayFromZeroIsExact) {
  Make(false);
  seq_->OnLive(0, P(0), now_);
  EXPECT_EQ(stats_.batches_lost.load(), 0u);
  EXPECT_EQ(seq_->sync_state(), Sequencer::SyncState::kExact);
}

TEST_F(SequencerTest, RestartToZeroResetsAndContinuesExact) {
  Make(false);
  for (uint64_t s = 0; s < 5; ++s) seq_->OnLive(s, P(s), now_);
  seq_->OnLive(0, P(0, 1), now_);  // same seq, different batch: new engine
  ASSERT_EQ(rec_.resets.size(), 1u);
  EXPECT_EQ(rec_.resets[0], ResetReason::kEngineRestart);
  EXPECT_EQ(stats_.engine_restarts.load(), 1u);
  seq_->OnLive(1, P(1, 1), now_);
  EXPECT_EQ(rec_.Seqs(), (std::vector<uint64_t>{0, 1, 2, 3, 4, 0, 1}));
  EXPECT_EQ(seq_->sync_state(), Sequencer::SyncState::kExact);
}

TEST_F(SequencerTest, RestartEqualToLastSeqIsNotADuplicate) {
  Make(false);
  seq_->OnLive(0, P(0), now_);
  seq_->OnLive(0, P(0, 1), now_);  // the edge: new seq equals the last applied one
  EXPECT_EQ(stats_.engine_restarts.load(), 1u);
  EXPECT_EQ(stats_.duplicate_batches.load(), 0u);
}

TEST_F(SequencerTest, RestartNoticedLateReplaysNewEngineFromZero) {
  Make(true);
  Serve(0, 9);
  seq_->OnLive(3, P(3, 1), now_);  // new engine, its 0..2 missed
  ASSERT_EQ(rec_.resets.size(), 1u);
  ASSERT_EQ(rec_.requests.back(), 0u);
  seq_->OnLive(4, P(4, 1), now_);  // held
  Serve(0, 3, 1);
  EXPECT_EQ(rec_.Seqs(), (std::vector<uint64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2, 3, 4}));
  EXPECT_EQ(stats_.batches_lost.load(), 0u);
  EXPECT_EQ(seq_->sync_state(), Sequencer::SyncState::kExact);
}

TEST_F(SequencerTest, ReconnectHintVerifiesContinuityThroughOverlap) {
  Make(true);
  Serve(0, 5);
  seq_->OnPeerConnected(now_, /*reconnected=*/true);
  seq_->OnLive(9, P(9), now_);
  ASSERT_EQ(rec_.requests.back(), 5u);  // one batch of overlap, to compare
  Serve(5, 9);                          // same engine: 5 matches
  EXPECT_EQ(rec_.Seqs(), Range(0, 9));
  EXPECT_EQ(stats_.engine_restarts.load(), 0u);
  EXPECT_EQ(stats_.duplicate_batches.load(), 1u);  // held 9
}

TEST_F(SequencerTest, ReconnectHintDetectsRestartAboveLastSeq) {
  Make(true);
  Serve(0, 5);
  seq_->OnPeerConnected(now_, /*reconnected=*/true);
  seq_->OnLive(9, P(9, 1), now_);  // a new engine already past our last seq
  ASSERT_EQ(rec_.requests.back(), 5u);
  seq_->OnReplayBatch(5, P(5, 1), now_);  // differs from what we applied
  EXPECT_EQ(stats_.engine_restarts.load(), 1u);
  ASSERT_EQ(rec_.requests.back(), 0u);
  Serve(0, 9, 1);
  EXPECT_EQ(rec_.resets.size(), 1u);
  EXPECT_EQ(rec_.applied.size(), 16u);  // 0..5 old + 0..9 new
  EXPECT_EQ(seq_->sync_state(), Sequencer::SyncState::kExact);
}

// A new engine that published as many batches as the old one while we were
// away continues the numbering seamlessly: seq == last + 1 must not be
// trusted after a reconnect until the engine's copy of `last` is compared.
TEST_F(SequencerTest, ReconnectHintHoldsEvenTheNextSeqUntilVerified) {
  Make(true);
  Serve(0, 5);
  seq_->OnPeerConnected(now_, /*reconnected=*/true);
  seq_->OnLive(6, P(6, 1), now_);
  EXPECT_EQ(rec_.applied.size(), 6u);  // held, not applied
  ASSERT_EQ(rec_.requests.back(), 5u);
  seq_->OnReplayBatch(5, P(5, 1), now_);  // not what we applied: a new engine
  EXPECT_EQ(stats_.engine_restarts.load(), 1u);
  ASSERT_EQ(rec_.requests.back(), 0u);
  Serve(0, 6, 1);
  EXPECT_EQ(rec_.resets.size(), 1u);
  EXPECT_EQ(rec_.applied.size(), 13u);  // 0..5 old + 0..6 new
  EXPECT_EQ(rec_.applied.back().payload, P(6, 1));
  EXPECT_EQ(stats_.seq_gaps.load(), 0u);
  EXPECT_EQ(seq_->sync_state(), Sequencer::SyncState::kExact);
}

TEST_F(SequencerTest, ReconnectHintPassesTheSameEngineThrough) {
  Make(true);
  Serve(0, 5);
  seq_->OnPeerConnected(now_, /*reconnected=*/true);
  seq_->OnLive(6, P(6), now_);
  ASSERT_EQ(rec_.requests.back(), 5u);
  Serve(5, 6);
  EXPECT_EQ(rec_.Seqs(), Range(0, 6));
  EXPECT_EQ(stats_.engine_restarts.load(), 0u);
  seq_->OnLive(7, P(7), now_);  // verified once; no further round trips
  EXPECT_EQ(rec_.Seqs(), Range(0, 7));
  EXPECT_EQ(rec_.requests.size(), 2u);  // cold start + the check
}

// The check is pinned to `last` as it was at the reconnect: batches applied
// meanwhile (by a replay already in flight) must not move it.
TEST_F(SequencerTest, ReconnectCheckIsPinnedWhileAReplayIsInFlight) {
  Make(true);
  Serve(0, 5);
  seq_->OnPeerConnected(now_, false);
  now_ += 300ms;
  seq_->Tick(now_);  // probe from 6, in flight
  ASSERT_EQ(rec_.requests.back(), 6u);
  seq_->OnPeerConnected(now_, /*reconnected=*/true);  // the engine came back meanwhile
  seq_->OnLive(7, P(7, 1), now_);                     // held behind the probe
  Serve(6, 7, 1);  // the new engine's 6 and 7 applied as if continuing
  now_ += 300ms;
  seq_->Tick(now_);                     // the reconnect's own probe
  ASSERT_EQ(rec_.requests.back(), 5u);  // checks 5, not 7
  seq_->OnReplayBatch(5, P(5, 1), now_);
  EXPECT_EQ(stats_.engine_restarts.load(), 1u);
  Serve(0, 7, 1);
  EXPECT_EQ(rec_.applied.back().payload, P(7, 1));
  EXPECT_EQ(seq_->sync_state(), Sequencer::SyncState::kExact);
}

TEST_F(SequencerTest, ProbeAfterConnectRecoversBatchesSentBeforeTheSubscription) {
  Make(true);
  seq_->OnReplayEnd(now_);  // cold start: ring empty
  seq_->OnPeerConnected(now_, false);
  ASSERT_TRUE(seq_->NextDeadline().has_value());
  now_ += 100ms;
  seq_->Tick(now_);
  EXPECT_EQ(rec_.requests.size(), 1u);  // not yet
  now_ += 200ms;
  seq_->Tick(now_);
  ASSERT_EQ(rec_.requests.size(), 2u);
  EXPECT_EQ(rec_.requests.back(), 0u);
  Serve(0, 1);  // the engine published 0 and 1 before our subscription was live
  EXPECT_EQ(rec_.Seqs(), Range(0, 1));
  EXPECT_EQ(stats_.batches_lost.load(), 0u);
  EXPECT_FALSE(seq_->NextDeadline().has_value());
}

TEST_F(SequencerTest, ProbeAfterReconnectDetectsAnIdleRestartedEngine) {
  Make(true);
  Serve(0, 4);
  seq_->OnPeerConnected(now_, false);
  now_ += 300ms;
  seq_->Tick(now_);
  Serve(5, 4);  // probe: nothing new
  seq_->OnPeerConnected(now_, /*reconnected=*/true);
  now_ += 300ms;
  seq_->Tick(now_);
  ASSERT_EQ(rec_.requests.back(), 4u);  // verify from our last seq
  seq_->OnReplayEnd(now_);             // nothing at or after 4: a new engine
  EXPECT_EQ(stats_.engine_restarts.load(), 1u);
  ASSERT_EQ(rec_.resets.size(), 1u);
  ASSERT_EQ(rec_.requests.back(), 0u);  // its ring is read from 0
  seq_->OnReplayEnd(now_);             // it has published nothing yet
  EXPECT_EQ(seq_->sync_state(), Sequencer::SyncState::kExact);
  seq_->OnLive(0, P(0, 1), now_);
  EXPECT_EQ(rec_.applied.back().seq, 0u);
  EXPECT_EQ(stats_.duplicate_batches.load(), 0u);
}

TEST_F(SequencerTest, ReplayTimeoutRetriesWithBackoffThenCountsLoss) {
  Make(true);
  Serve(0, 1);
  seq_->OnLive(6, P(6), now_);
  ASSERT_EQ(rec_.requests.size(), 2u);
  now_ += 1001ms;
  seq_->Tick(now_);  // attempt 1 timed out -> backoff 100 ms
  EXPECT_FALSE(rec_.open);
  EXPECT_EQ(rec_.requests.size(), 2u);
  now_ += 100ms;
  seq_->Tick(now_);
  EXPECT_EQ(rec_.requests.size(), 3u);
  now_ += 1001ms;
  seq_->Tick(now_);  // -> backoff 200 ms
  now_ += 150ms;
  seq_->Tick(now_);
  EXPECT_EQ(rec_.requests.size(), 3u);
  now_ += 50ms;
  seq_->Tick(now_);
  EXPECT_EQ(rec_.requests.size(), 4u);
  now_ += 1001ms;
  seq_->Tick(now_);  // retries exhausted
  EXPECT_FALSE(seq_->replaying());
  EXPECT_EQ(Result(ReplayResult::kTimeout), 1u);
  EXPECT_EQ(stats_.batches_lost.load(), 4u);  // 2..5
  EXPECT_EQ(rec_.Seqs(), (std::vector<uint64_t>{0, 1, 6}));
  EXPECT_EQ(seq_->sync_state(), Sequencer::SyncState::kDegraded);
}

TEST_F(SequencerTest, RetryResumesAfterPartialProgress) {
  Make(true);
  seq_->OnReplayBatch(0, P(0), now_);
  seq_->OnReplayBatch(1, P(1), now_);
  now_ += 1001ms;
  seq_->Tick(now_);
  now_ += 100ms;
  seq_->Tick(now_);
  ASSERT_EQ(rec_.requests.back(), 2u);
  Serve(2, 3);
  EXPECT_EQ(rec_.Seqs(), Range(0, 3));
  EXPECT_EQ(stats_.batches_lost.load(), 0u);
}

TEST_F(SequencerTest, ColdStartTimeoutLetsFirstLiveDecide) {
  Make(true);
  for (int i = 0; i < 3; ++i) {
    now_ += 1001ms;
    seq_->Tick(now_);
    now_ += 1s;
    seq_->Tick(now_);
  }
  now_ += 1001ms;
  seq_->Tick(now_);
  EXPECT_EQ(Result(ReplayResult::kTimeout), 1u);
  EXPECT_EQ(seq_->sync_state(), Sequencer::SyncState::kDegraded);
  seq_->OnLive(0, P(0), now_);  // nothing was missing after all
  EXPECT_EQ(stats_.batches_lost.load(), 0u);
  EXPECT_EQ(seq_->sync_state(), Sequencer::SyncState::kExact);
}

TEST_F(SequencerTest, UndecodableBatchConsumesSeqAndDegrades) {
  Make(false);
  seq_->OnLive(0, P(0), now_);
  seq_->OnLive(1, "garbage", now_);
  seq_->OnLive(2, P(2), now_);
  EXPECT_EQ(seq_->sync_state(), Sequencer::SyncState::kDegraded);
  EXPECT_EQ(stats_.seq_gaps.load(), 0u);
  seq_->OnLive(3, "clear", now_);
  EXPECT_EQ(seq_->sync_state(), Sequencer::SyncState::kExact);
}

TEST_F(SequencerTest, ResyncClearsAndTrustsWhatTheRingHolds) {
  Make(true);
  Serve(3, 9);  // overrun: DEGRADED
  ASSERT_EQ(seq_->sync_state(), Sequencer::SyncState::kDegraded);
  seq_->Resync(now_);
  ASSERT_EQ(rec_.resets.size(), 1u);
  EXPECT_EQ(rec_.resets[0], ResetReason::kOperatorResync);
  ASSERT_EQ(rec_.requests.back(), 0u);
  Serve(4, 10);  // ring overrun again: accepted, not a loss
  EXPECT_EQ(stats_.batches_lost.load(), 3u);  // only the first overrun
  EXPECT_EQ(seq_->sync_state(), Sequencer::SyncState::kExact);
  EXPECT_EQ(stats_.resyncs.load(), 1u);
}

TEST_F(SequencerTest, HeldOverflowIsRecoveredByAnotherReplay) {
  Make(true);
  Serve(0, 0);
  seq_->OnLive(2, P(2), now_);  // gap: replay from 1
  for (uint64_t s = 3; s < 20; ++s) seq_->OnLive(s, P(s), now_);  // held, bound 8
  EXPECT_EQ(seq_->held_batches(), 8u);
  Serve(1, 2);  // a short reply; held 2..9 merge, then 20.. missing? no: 10..19 were dropped
  // The merge applied 3..9 and then nothing more arrived; the next live
  // reveals the hole and replays it.
  seq_->OnLive(20, P(20), now_);
  ASSERT_EQ(rec_.requests.back(), 10u);
  Serve(10, 20);
  EXPECT_EQ(rec_.Seqs(), Range(0, 20));
  EXPECT_EQ(stats_.batches_lost.load(), 0u);
}

}  // namespace
}  // namespace kvidx::ingest
