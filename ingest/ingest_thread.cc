#include "base/byte_coding.h"
#include "base/sampled_log.h"
#include "ingest/ingest_thread.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include <spdlog/spdlog.h>

#include "ingest/decoder.h"
#include "ingest/sequencer.h"

namespace kvidx::ingest {

using Clock = std::chrono::steady_clock;

struct IngestThread::Command {
  enum class Kind : uint8_t { kAdd, kRemove, kResync } kind = Kind::kAdd;
  SourceSpec spec;
  std::optional<uint64_t> watermark;
  std::optional<uint64_t> watermark_fingerprint;
  uint64_t id = 0;
  std::promise<Status> done;
};

struct IngestThread::Listener {
  std::string key;  // the endpoint as configured (sources sharing it share the socket)
  std::string resolved;
  std::unique_ptr<zmq::socket_t> sub;
  std::unique_ptr<zmq::socket_t> monitor;
  std::unordered_map<std::string, Source*> by_topic;
};

struct IngestThread::Source final : Sequencer::Delegate {
  Loop* loop = nullptr;
  SourceSpec spec;
  std::shared_ptr<SourceStats> stats;
  std::unique_ptr<Sequencer> seq;
  std::unique_ptr<zmq::socket_t> sub;      // connect mode
  std::unique_ptr<zmq::socket_t> monitor;  // connect mode
  std::unique_ptr<zmq::socket_t> dealer;   // while a replay is outstanding
  Listener* listener = nullptr;            // bind mode
  // Bind mode: the accepted connection (fd) this source's traffic last came
  // through, or -1. Set by the first message on a connection, cleared when
  // the monitor reports that connection gone.
  int peer_fd = -1;
  bool connected = false;
  bool ever_connected = false;
  SourceState state = SourceState::kConnecting;

  Sequencer::ApplyOutcome Apply(uint64_t seq, std::string_view payload, uint64_t fingerprint,
                                bool replayed) override;
  void Reset(ResetReason reason) override;
  void SendReplayRequest(uint64_t start_seq) override;
  void CancelReplay() override;
};

namespace {

std::string_view View(const zmq::message_t& m) { return {m.data<char>(), m.size()}; }

}  // namespace

// All state the ingest thread owns. Lives on the thread's stack.
class IngestThread::Loop {
 public:
  explicit Loop(IngestThread* owner)
      : owner_(owner), opts_(owner->opts_), sink_(owner->sink_), decoder_(owner->opts_.decode_limits) {
    epfd_ = epoll_create1(EPOLL_CLOEXEC);
    if (epfd_ < 0) throw std::runtime_error("ingest thread: epoll_create1 failed");
    wake_.kind = ItemKind::kWake;
    wake_.fd = owner_->wake_fd_;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = &wake_;
    if (epoll_ctl(epfd_, EPOLL_CTL_ADD, wake_.fd, &ev) != 0) {
      close(epfd_);
      throw std::runtime_error("ingest thread: cannot watch the wake fd");
    }
  }

  ~Loop() {
    for (auto& [id, s] : sources_) {
      CloseSockets(*s);
      if (owner_->registry_ != nullptr) owner_->registry_->Remove(s->stats.get());
    }
    for (auto& [key, l] : listeners_) CloseListener(*l);
    close(epfd_);
  }

  void RunUntilStopped();

  // Sequencer delegate hooks.
  Sequencer::ApplyOutcome Apply(Source& s, uint64_t seq, std::string_view payload, uint64_t fingerprint,
                                bool replayed);
  void Reset(Source& s, ResetReason reason);
  void OpenReplay(Source& s, uint64_t start);
  void CloseReplay(Source& s);

 private:
  enum class ItemKind : uint8_t { kWake, kSub, kListener, kSubMonitor, kListenerMonitor, kDealer };
  // One socket in the epoll set, through its ZMQ_FD. That fd only says
  // "the socket has news" and is reset by any operation on the socket, so
  // readiness is always confirmed with ZMQ_EVENTS, and a socket that was
  // read from (or written to) is re-checked on the next round instead of
  // waiting for the fd: it may hold messages the fd will not announce.
  struct Watch {
    ItemKind kind = ItemKind::kWake;
    void* owner = nullptr;   // Source* or Listener*
    void* handle = nullptr;  // the zmq socket (nullptr for the wake fd)
    int fd = -1;
    bool pending = false;    // on pending_
    bool alive = true;       // false once its socket is buried
  };

  bool ProcessCommands();  // false = stop
  Status DoAdd(const SourceSpec& spec, std::optional<uint64_t> watermark, std::optional<uint64_t> fingerprint);
  Status DoRemove(uint64_t id);
  Status DoResync(uint64_t id);
  // False (errno set) if the socket cannot join the epoll set.
  bool WatchSocket(zmq::socket_t& sock, ItemKind kind, void* owner);
  void MarkPending(Watch* w);
  void MarkPending(zmq::socket_t& sock);
  void Dispatch(Watch& w);
  void RequeueRound();
  void DrainSub(zmq::socket_t& sock, Source* fixed, Listener* listener);
  void DrainDealer(Source& s, void* handle);
  void DrainMonitor(zmq::socket_t& mon, Source* s, Listener* l);
  void RunTimers(Clock::time_point now);
  Clock::duration PollTimeout(Clock::time_point now) const;
  void AfterEvent(Source& s);
  SourceState ComputeState(const Source& s) const;
  void MarkReceived(Source& s);
  void BindPeer(Source& s, zmq::message_t& first_frame);

  std::unique_ptr<zmq::socket_t> MakeSub();
  std::unique_ptr<zmq::socket_t> StartMonitor(zmq::socket_t& sock, int events);
  void CloseSockets(Source& s);
  void CloseListener(Listener& l);
  // Every socket leaves through here: out of the epoll set while its fd is
  // still open (zmq closes it later, from the reaper thread), closed after
  // the round that may still name it.
  void Bury(std::unique_ptr<zmq::socket_t> sock) {
    if (!sock) return;
    auto it = watches_.find(sock->handle());
    if (it != watches_.end()) {
      Watch* w = it->second.get();
      (void)epoll_ctl(epfd_, EPOLL_CTL_DEL, w->fd, nullptr);
      w->alive = false;
      if (w->pending) std::erase(pending_, w);  // round_ may name it too: freed only after the round
      dead_watches_.push_back(std::move(it->second));
      watches_.erase(it);
    }
    graveyard_.push_back(std::move(sock));
  }

  IngestThread* owner_;
  const IngestOptions& opts_;
  BatchSink* sink_;
  Decoder decoder_;
  EventBatch batch_;  // reused for every batch: no allocation once warm

  std::unordered_map<uint64_t, std::unique_ptr<Source>> sources_;
  std::unordered_map<std::string, std::unique_ptr<Listener>> listeners_;
  std::unordered_set<Source*> timed_;  // sources with an armed sequencer timer

  int epfd_ = -1;
  Watch wake_;
  std::unordered_map<void*, std::unique_ptr<Watch>> watches_;  // by socket handle
  std::vector<Watch*> pending_;  // sockets to check with ZMQ_EVENTS next round
  std::vector<Watch*> round_;    // this round's share of pending_
  size_t round_pos_ = 0;         // next entry of round_ to check
  std::array<epoll_event, 256> events_;
  // Sockets (and their watches) closed while this round's results may still
  // name them; freed before the next wait.
  std::vector<std::unique_ptr<zmq::socket_t>> graveyard_;
  std::vector<std::unique_ptr<Watch>> dead_watches_;

  std::array<zmq::message_t, 5> frames_;
  uint64_t monitor_counter_ = 0;
};

// ---- Source delegate -------------------------------------------------------

Sequencer::ApplyOutcome IngestThread::Source::Apply(uint64_t s, std::string_view payload, uint64_t fingerprint,
                                                    bool replayed) {
  return loop->Apply(*this, s, payload, fingerprint, replayed);
}
void IngestThread::Source::Reset(ResetReason reason) { loop->Reset(*this, reason); }
void IngestThread::Source::SendReplayRequest(uint64_t start_seq) { loop->OpenReplay(*this, start_seq); }
void IngestThread::Source::CancelReplay() { loop->CloseReplay(*this); }

Sequencer::ApplyOutcome IngestThread::Loop::Apply(Source& s, uint64_t seq, std::string_view payload,
                                                  uint64_t fingerprint, bool replayed) {
  SourceStats& st = *s.stats;
  DecodeError err;
  if (!decoder_.DecodePayload(payload, &batch_, &err)) {
    auto& c = st.decode_errors[ErrorIndex(err.reason)];
    uint64_t n = c.fetch_add(1, std::memory_order_relaxed) + 1;
    if (ShouldLogSampled(n)) {
      spdlog::warn("source {}: seq {} undecodable ({}: {}); source DEGRADED [x{}]", s.spec.name, seq,
                   DecodeErrorReasonLabel(err.reason), err.detail, n);
    }
    return {.decoded = false, .cleared_all = false};
  }
  if (batch_.data_parallel_rank && *batch_.data_parallel_rank != static_cast<int64_t>(s.spec.dp_rank)) {
    uint64_t n = st.dp_rank_mismatches.fetch_add(1, std::memory_order_relaxed) + 1;
    if (ShouldLogSampled(n)) {
      spdlog::warn("source {}: batch seq {} says data_parallel_rank {} [x{}]", s.spec.name, seq,
                   *batch_.data_parallel_rank, n);
    }
  }
  bool cleared = false;
  std::array<uint64_t, kNumEventTypes> counts{};
  for (const KvEvent& e : batch_.events) {
    ++counts[static_cast<size_t>(e.type)];
    cleared |= e.type == EventType::kAllBlocksCleared;
  }
  SourceStats::Inc(st.batches);
  for (size_t t = 0; t < kNumEventTypes; ++t) {
    if (counts[t] != 0) SourceStats::Inc(st.events[t], counts[t]);
  }
  if (batch_.unknown_events != 0) SourceStats::Inc(st.unknown_events, batch_.unknown_events);
  st.last_batch_ts.store(batch_.ts, std::memory_order_relaxed);
  batch_.fingerprint = fingerprint;
  try {
    sink_->OnBatch(s.spec, seq, batch_, replayed);
  } catch (const std::exception& e) {
    spdlog::error("source {}: sink threw on seq {}: {}", s.spec.name, seq, e.what());
  } catch (...) {
    spdlog::error("source {}: sink threw on seq {}", s.spec.name, seq);
  }
  return {.decoded = true, .cleared_all = cleared};
}

void IngestThread::Loop::Reset(Source& s, ResetReason reason) {
  spdlog::warn("source {}: {}: clearing its blocks", s.spec.name, ResetReasonName(reason));
  try {
    sink_->OnSourceReset(s.spec, reason);
  } catch (...) {
    spdlog::error("source {}: sink threw in OnSourceReset", s.spec.name);
  }
}

void IngestThread::Loop::OpenReplay(Source& s, uint64_t start) {
  CloseReplay(s);
  try {
    auto d = std::make_unique<zmq::socket_t>(*owner_->ctx_, zmq::socket_type::dealer);
    d->set(zmq::sockopt::linger, 0);
    d->set(zmq::sockopt::rcvhwm, 0);
    d->connect(s.spec.replay_endpoint);
    // The pipe exists as soon as connect() returns, so this queues even
    // before the TCP handshake completes.
    std::string seq;
    AppendBigEndian(&seq, start, 8);
    (void)d->send(zmq::const_buffer(nullptr, 0), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    (void)d->send(zmq::buffer(seq), zmq::send_flags::dontwait);
    s.dealer = std::move(d);
    if (!WatchSocket(*s.dealer, ItemKind::kDealer, &s)) {
      spdlog::warn("source {}: cannot watch the replay socket (epoll_ctl: {})", s.spec.name, std::strerror(errno));
      CloseReplay(s);  // the sequencer's timeout and retries take it from here
      return;
    }
    spdlog::info("source {}: replay requested from seq {} ({})", s.spec.name, start, s.spec.replay_endpoint);
  } catch (const zmq::error_t& e) {
    // No socket: the sequencer's timeout and retries take it from here.
    spdlog::warn("source {}: cannot send replay request to {}: {}", s.spec.name, s.spec.replay_endpoint,
                 e.what());
  }
}

void IngestThread::Loop::CloseReplay(Source& s) { Bury(std::move(s.dealer)); }

// ---- sockets ---------------------------------------------------------------

std::unique_ptr<zmq::socket_t> IngestThread::Loop::MakeSub() {
  auto sub = std::make_unique<zmq::socket_t>(*owner_->ctx_, zmq::socket_type::sub);
  sub->set(zmq::sockopt::linger, 0);
  sub->set(zmq::sockopt::rcvhwm, opts_.sub_rcvhwm);
  sub->set(zmq::sockopt::reconnect_ivl, static_cast<int>(opts_.reconnect_ivl.count()));
  sub->set(zmq::sockopt::reconnect_ivl_max, static_cast<int>(opts_.reconnect_ivl_max.count()));
  if (opts_.heartbeat_ivl.count() > 0) {
    sub->set(zmq::sockopt::heartbeat_ivl, static_cast<int>(opts_.heartbeat_ivl.count()));
    sub->set(zmq::sockopt::heartbeat_timeout, static_cast<int>(opts_.heartbeat_timeout.count()));
    sub->set(zmq::sockopt::heartbeat_ttl, static_cast<int>(opts_.heartbeat_timeout.count()));
  }
  return sub;
}

std::unique_ptr<zmq::socket_t> IngestThread::Loop::StartMonitor(zmq::socket_t& sock, int events) {
  std::string ep = "inproc://kvidx-monitor-" + std::to_string(owner_->index_) + "-" +
                   std::to_string(monitor_counter_++) + "-" + std::to_string(reinterpret_cast<uintptr_t>(this));
  if (zmq_socket_monitor(sock.handle(), ep.c_str(), events) != 0) throw zmq::error_t();
  auto pair = std::make_unique<zmq::socket_t>(*owner_->ctx_, zmq::socket_type::pair);
  pair->set(zmq::sockopt::linger, 0);
  pair->connect(ep);
  return pair;
}

void IngestThread::Loop::CloseSockets(Source& s) {
  Bury(std::move(s.dealer));
  if (s.sub && s.monitor) zmq_socket_monitor(s.sub->handle(), nullptr, 0);
  Bury(std::move(s.monitor));
  Bury(std::move(s.sub));
}

void IngestThread::Loop::CloseListener(Listener& l) {
  if (l.sub && l.monitor) zmq_socket_monitor(l.sub->handle(), nullptr, 0);
  Bury(std::move(l.monitor));
  Bury(std::move(l.sub));
}

// ---- control ---------------------------------------------------------------

Status IngestThread::Loop::DoAdd(const SourceSpec& spec, std::optional<uint64_t> watermark,
                                 std::optional<uint64_t> fingerprint) {
  if (sources_.contains(spec.id)) {
    return Status::InvalidArgument("source id " + std::to_string(spec.id) + " (" + spec.name + ") already added");
  }
  auto s = std::make_unique<Source>();
  s->loop = this;
  s->spec = spec;
  auto stats = std::make_shared<SourceStats>();
  stats->source = spec.name;
  stats->replica = spec.replica;
  stats->dp_rank = spec.dp_rank;
  stats->endpoint = spec.endpoint;
  Listener* created = nullptr;
  try {
    if (spec.mode == ConnectMode::kConnect) {
      s->sub = MakeSub();
      s->sub->set(zmq::sockopt::subscribe, spec.topic);
      // Monitor first: the handshake can complete before connect() returns.
      if (opts_.monitor_peers) {
        s->monitor = StartMonitor(*s->sub, ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_DISCONNECTED);
      }
      s->sub->connect(spec.endpoint);
    } else {
      auto it = listeners_.find(spec.endpoint);
      if (it == listeners_.end()) {
        auto l = std::make_unique<Listener>();
        l->key = spec.endpoint;
        l->sub = MakeSub();
        if (opts_.monitor_peers) {
          l->monitor = StartMonitor(*l->sub, ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED);
        }
        l->sub->bind(spec.endpoint);
        l->resolved = l->sub->get(zmq::sockopt::last_endpoint);
        created = l.get();
        it = listeners_.emplace(spec.endpoint, std::move(l)).first;
      }
      Listener& l = *it->second;
      if (l.by_topic.contains(spec.topic)) {
        return Status::InvalidArgument("source " + spec.name + ": topic '" + spec.topic + "' on " + spec.endpoint +
                                       " is already claimed by " + l.by_topic[spec.topic]->spec.name +
                                       " (bind mode tells engines apart by topic)");
      }
      l.sub->set(zmq::sockopt::subscribe, spec.topic);
      l.by_topic[spec.topic] = s.get();
      s->listener = &l;
      stats->endpoint = l.resolved;
    }
  } catch (const zmq::error_t& e) {
    CloseSockets(*s);
    if (created != nullptr) {
      CloseListener(*created);
      listeners_.erase(spec.endpoint);
    }
    return Status::Unavailable("source " + spec.name + ": cannot " +
                               (spec.mode == ConnectMode::kBind ? "bind " : "connect ") + spec.endpoint + ": " +
                               e.what());
  }
  Sequencer::Options so;
  so.has_replay = spec.has_replay();
  so.watermark = watermark;
  so.watermark_fingerprint = fingerprint;
  so.replay = opts_.replay;
  s->stats = std::move(stats);
  s->seq = std::make_unique<Sequencer>(so, s->stats.get(), s.get());
  Source& src = *s;
  bool watched = (!src.sub || WatchSocket(*src.sub, ItemKind::kSub, &src)) &&
                 (!src.monitor || WatchSocket(*src.monitor, ItemKind::kSubMonitor, &src));
  if (created != nullptr) {
    watched = watched && WatchSocket(*created->sub, ItemKind::kListener, created) &&
              (!created->monitor || WatchSocket(*created->monitor, ItemKind::kListenerMonitor, created));
  } else if (src.listener != nullptr) {
    MarkPending(*src.listener->sub);  // setsockopt may have consumed its fd's news
  }
  if (!watched) {
    std::string why = std::strerror(errno);
    if (src.listener != nullptr && created == nullptr) {
      src.listener->by_topic.erase(spec.topic);
      src.listener->sub->set(zmq::sockopt::unsubscribe, spec.topic);
    }
    CloseSockets(src);
    if (created != nullptr) {
      CloseListener(*created);
      listeners_.erase(spec.endpoint);
    }
    return Status::Unavailable("source " + spec.name + ": cannot watch its sockets (epoll_ctl: " + why + ")");
  }
  if (owner_->registry_ != nullptr) owner_->registry_->Add(src.stats);
  sources_.emplace(spec.id, std::move(s));
  spdlog::info("source {}: added ({} {}, replay {}, topic '{}', thread {})", spec.name, ConnectModeName(spec.mode),
               src.stats->endpoint, spec.has_replay() ? spec.replay_endpoint : "none", spec.topic, owner_->index_);
  try {
    sink_->OnSourceAdded(spec);
  } catch (...) {
    spdlog::error("source {}: sink threw in OnSourceAdded", spec.name);
  }
  src.seq->Start(Clock::now());
  AfterEvent(src);
  return Status::Ok();
}

Status IngestThread::Loop::DoRemove(uint64_t id) {
  auto it = sources_.find(id);
  if (it == sources_.end()) return Status::NotFound("no source with id " + std::to_string(id));
  Source& s = *it->second;
  CloseSockets(s);
  if (Listener* l = s.listener) {
    l->by_topic.erase(s.spec.topic);
    if (l->sub) {
      l->sub->set(zmq::sockopt::unsubscribe, s.spec.topic);
      MarkPending(*l->sub);
    }
    if (l->by_topic.empty()) {
      std::string key = l->key;  // erase() must not see a reference into the node it frees
      CloseListener(*l);
      listeners_.erase(key);
    }
  }
  timed_.erase(&s);
  if (owner_->registry_ != nullptr) owner_->registry_->Remove(s.stats.get());
  spdlog::info("source {}: removed", s.spec.name);
  try {
    sink_->OnSourceRemoved(s.spec);
  } catch (...) {
    spdlog::error("source {}: sink threw in OnSourceRemoved", s.spec.name);
  }
  sources_.erase(it);
  return Status::Ok();
}

Status IngestThread::Loop::DoResync(uint64_t id) {
  auto it = sources_.find(id);
  if (it == sources_.end()) return Status::NotFound("no source with id " + std::to_string(id));
  Source& s = *it->second;
  spdlog::info("source {}: operator resync", s.spec.name);
  s.seq->Resync(Clock::now());
  AfterEvent(s);
  return Status::Ok();
}

bool IngestThread::Loop::ProcessCommands() {
  std::vector<std::unique_ptr<Command>> cmds;
  {
    std::lock_guard<std::mutex> lock(owner_->mu_);
    if (!owner_->running_) return false;
    cmds.swap(owner_->commands_);
  }
  for (auto& c : cmds) {
    Status st;
    try {
      switch (c->kind) {
        case Command::Kind::kAdd: st = DoAdd(c->spec, c->watermark, c->watermark_fingerprint); break;
        case Command::Kind::kRemove: st = DoRemove(c->id); break;
        case Command::Kind::kResync: st = DoResync(c->id); break;
      }
    } catch (const std::exception& e) {
      st = Status::Internal(std::string("ingest thread: ") + e.what());
    }
    c->done.set_value(std::move(st));
  }
  return true;
}

// ---- state -----------------------------------------------------------------

SourceState IngestThread::Loop::ComputeState(const Source& s) const {
  if (opts_.monitor_peers && s.ever_connected && !s.connected) return SourceState::kDisconnected;
  Sequencer::SyncState sync = s.seq->sync_state();
  if (sync == Sequencer::SyncState::kReplaying) return SourceState::kReplaying;
  if (!s.ever_connected && !s.seq->last_applied()) return SourceState::kConnecting;
  return sync == Sequencer::SyncState::kDegraded ? SourceState::kDegraded : SourceState::kExact;
}

void IngestThread::Loop::AfterEvent(Source& s) {
  if (s.seq->NextDeadline()) {
    timed_.insert(&s);
  } else {
    timed_.erase(&s);
  }
  SourceState st = ComputeState(s);
  if (st == s.state) return;
  SourceState from = s.state;
  s.state = st;
  s.stats->state.store(static_cast<uint8_t>(st), std::memory_order_relaxed);
  auto level = st == SourceState::kDegraded || st == SourceState::kDisconnected ? spdlog::level::warn
                                                                                 : spdlog::level::info;
  spdlog::log(level, "source {}: {} -> {} (last seq {}, lost {})", s.spec.name, SourceStateName(from),
              SourceStateName(st), s.stats->last_seq.load(std::memory_order_relaxed),
              s.stats->batches_lost.load(std::memory_order_relaxed));
  try {
    sink_->OnSourceStateChanged(s.spec, from, st);
  } catch (...) {
    spdlog::error("source {}: sink threw in OnSourceStateChanged", s.spec.name);
  }
}

void IngestThread::Loop::MarkReceived(Source& s) {
  // Without a monitor, traffic is the only evidence of a connection.
  if (!opts_.monitor_peers) s.connected = s.ever_connected = true;
}

void IngestThread::Loop::BindPeer(Source& s, zmq::message_t& first_frame) {
  // Several engines share one bound SUB socket; the monitor names the
  // connections (fds) but not the engines. libzmq tags every received
  // message with the fd it came through (ZMQ_SRCFD), so the first message of
  // a topic on a connection ties that connection to the source.
  int fd = zmq_msg_get(first_frame.handle(), ZMQ_SRCFD);
  if (fd >= 0 && fd == s.peer_fd) return;
  if (fd < 0) {  // a transport without fds (inproc): traffic is the evidence
    s.connected = s.ever_connected = true;
    return;
  }
  // A new connection for a source that had one: the engine went away and
  // came back, possibly restarted. Same rule as a connect-mode handshake.
  bool reconnected = s.ever_connected;
  s.peer_fd = fd;
  SourceStats::Inc(s.stats->peer_connects);
  if (reconnected) s.seq->OnPeerConnected(Clock::now(), /*reconnected=*/true);
  s.connected = s.ever_connected = true;
}

// ---- data path -------------------------------------------------------------

void IngestThread::Loop::DrainSub(zmq::socket_t& sock, Source* fixed, Listener* listener) {
  for (size_t n = 0; n < opts_.max_burst; ++n) {
    size_t nf = 0;
    for (;;) {
      zmq::message_t& m = frames_[std::min(nf, frames_.size() - 1)];
      if (!sock.recv(m, zmq::recv_flags::dontwait)) break;
      ++nf;
      if (!m.more()) break;
    }
    if (nf == 0) return;
    Source* s = fixed;
    if (listener != nullptr) {
      auto it = listener->by_topic.find(std::string(View(frames_[0])));
      if (it == listener->by_topic.end()) {
        uint64_t c = owner_->unknown_topic_.fetch_add(1, std::memory_order_relaxed) + 1;
        if (ShouldLogSampled(c)) {
          spdlog::warn("bind {}: message with unclaimed topic '{}' dropped [x{}]", listener->resolved,
                       View(frames_[0]), c);
        }
        continue;
      }
      s = it->second;
    }
    if (listener != nullptr && opts_.monitor_peers) {
      BindPeer(*s, frames_[0]);
    } else {
      MarkReceived(*s);
    }
    if (nf != 3) {
      uint64_t c = s->stats->decode_errors[ErrorIndex(DecodeErrorReason::kFrameCount)].fetch_add(1) + 1;
      if (ShouldLogSampled(c)) spdlog::warn("source {}: message with {} frames dropped [x{}]", s->spec.name, nf, c);
      AfterEvent(*s);
      continue;
    }
    RawMessage raw;
    DecodeError err;
    const std::array<std::string_view, 3> views = {View(frames_[0]), View(frames_[1]), View(frames_[2])};
    if (!Decoder::SplitFrames(views, &raw, &err)) {
      uint64_t c = s->stats->decode_errors[ErrorIndex(err.reason)].fetch_add(1) + 1;
      if (ShouldLogSampled(c)) spdlog::warn("source {}: {} [x{}]", s->spec.name, err.detail, c);
      AfterEvent(*s);
      continue;
    }
    if (listener == nullptr && !s->spec.topic.empty() && raw.topic != s->spec.topic) {
      // SUB filters by prefix; vLLM topics are exact.
      uint64_t c = s->stats->decode_errors[ErrorIndex(IngestErrorReason::kTopicMismatch)].fetch_add(1) + 1;
      if (ShouldLogSampled(c)) spdlog::warn("source {}: topic '{}' is not '{}' [x{}]", s->spec.name, raw.topic, s->spec.topic, c);
      continue;
    }
    s->seq->OnLive(raw.seq, raw.payload, Clock::now());
    AfterEvent(*s);
  }
}

void IngestThread::Loop::DrainDealer(Source& s, void* handle) {
  for (size_t n = 0; n < opts_.max_burst; ++n) {
    if (!s.dealer || s.dealer->handle() != handle) return;  // replaced or closed meanwhile
    size_t nf = 0;
    for (;;) {
      zmq::message_t& m = frames_[std::min(nf, frames_.size() - 1)];
      if (!s.dealer->recv(m, zmq::recv_flags::dontwait)) break;
      ++nf;
      if (!m.more()) break;
    }
    if (nf == 0) return;
    MarkReceived(s);
    // [b"", seq, payload] (before vLLM #45177) or [b"", topic, seq, payload].
    std::string_view seq_frame;
    std::string_view payload;
    bool ok = (nf == 3 || nf == 4) && frames_[0].size() == 0;
    if (ok) {
      seq_frame = View(frames_[nf - 2]);
      payload = View(frames_[nf - 1]);
      ok = seq_frame.size() == 8;
    }
    if (!ok) {
      uint64_t c = s.stats->decode_errors[ErrorIndex(IngestErrorReason::kReplayFrame)].fetch_add(1) + 1;
      if (ShouldLogSampled(c)) spdlog::warn("source {}: malformed replay reply ({} frames) [x{}]", s.spec.name, nf, c);
      continue;
    }
    uint64_t seq = LoadBigEndian(seq_frame);
    auto now = Clock::now();
    if (seq == kReplayEndSeq) {
      s.seq->OnReplayEnd(now);
    } else {
      s.seq->OnReplayBatch(seq, payload, now);
    }
    AfterEvent(s);
  }
}

void IngestThread::Loop::DrainMonitor(zmq::socket_t& mon, Source* s, Listener* l) {
  for (;;) {
    std::array<zmq::message_t, 2> ev;
    if (!mon.recv(ev[0], zmq::recv_flags::dontwait)) return;
    if (ev[0].more()) (void)mon.recv(ev[1], zmq::recv_flags::dontwait);
    while (ev[1].more()) (void)mon.recv(ev[1], zmq::recv_flags::dontwait);  // future frames
    if (ev[0].size() < 6) continue;
    uint16_t event;
    uint32_t value;
    std::memcpy(&event, ev[0].data(), 2);
    std::memcpy(&value, static_cast<const char*>(ev[0].data()) + 2, 4);
    if (s != nullptr) {
      if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
        SourceStats::Inc(s->stats->peer_connects);
        // A second handshake means the PUB peer went away and came back:
        // possibly a restarted engine.
        s->seq->OnPeerConnected(Clock::now(), /*reconnected=*/s->ever_connected);
        s->connected = s->ever_connected = true;
      } else if (event == ZMQ_EVENT_DISCONNECTED) {
        SourceStats::Inc(s->stats->peer_disconnects);
        s->connected = false;
        s->ever_connected = true;
      }
      AfterEvent(*s);
    } else if (l != nullptr) {
      if (event == ZMQ_EVENT_ACCEPTED) {
        // Some engine on this socket (re)connected; which one is unknown
        // until it sends, so every source here probes for batches sent
        // before it subscribed.
        for (auto& [topic, src] : l->by_topic) src->seq->OnPeerConnected(Clock::now(), /*reconnected=*/false);
      } else if (event == ZMQ_EVENT_DISCONNECTED) {
        // Only the sources whose traffic came through that connection lose
        // their peer. (A message still queued from a closed connection can
        // re-tie a source to its fd after this; if the kernel has reused the
        // fd for another engine by then, that source shows connected until
        // the fd closes again. Rare, and never affects sequencing.)
        for (auto& [topic, src] : l->by_topic) {
          if (src->peer_fd != static_cast<int>(value)) continue;
          src->peer_fd = -1;
          src->connected = false;
          SourceStats::Inc(src->stats->peer_disconnects);
        }
      }
      for (auto& [topic, src] : l->by_topic) AfterEvent(*src);
    }
  }
}

void IngestThread::Loop::RunTimers(Clock::time_point now) {
  if (timed_.empty()) return;
  std::vector<Source*> due;
  for (Source* s : timed_) {
    auto d = s->seq->NextDeadline();
    if (!d || *d <= now) due.push_back(s);
  }
  for (Source* s : due) {
    s->seq->Tick(now);
    AfterEvent(*s);
  }
}

Clock::duration IngestThread::Loop::PollTimeout(Clock::time_point now) const {
  Clock::duration t = std::chrono::milliseconds(100);
  for (Source* s : timed_) {
    if (auto d = s->seq->NextDeadline()) t = std::min<Clock::duration>(t, *d - now);
  }
  return std::max<Clock::duration>(t, Clock::duration::zero());
}

bool IngestThread::Loop::WatchSocket(zmq::socket_t& sock, ItemKind kind, void* owner) {
  auto w = std::make_unique<Watch>();
  w->kind = kind;
  w->owner = owner;
  w->handle = sock.handle();
  w->fd = sock.get(zmq::sockopt::fd);
  epoll_event ev{};
  ev.events = EPOLLIN;  // level-triggered: the fd stays readable until ZMQ_EVENTS consumes its news
  ev.data.ptr = w.get();
  if (epoll_ctl(epfd_, EPOLL_CTL_ADD, w->fd, &ev) != 0) return false;
  Watch* raw = w.get();
  watches_[w->handle] = std::move(w);
  MarkPending(raw);  // it may already hold messages (or, a dealer, have sent)
  return true;
}

void IngestThread::Loop::MarkPending(Watch* w) {
  if (w->pending || !w->alive) return;
  w->pending = true;
  pending_.push_back(w);
}

void IngestThread::Loop::MarkPending(zmq::socket_t& sock) {
  auto it = watches_.find(sock.handle());
  if (it != watches_.end()) MarkPending(it->second.get());
}

void IngestThread::Loop::Dispatch(Watch& w) {
  switch (w.kind) {
    case ItemKind::kWake:
      break;
    case ItemKind::kSub: {
      auto* s = static_cast<Source*>(w.owner);
      if (s->sub && s->sub->handle() == w.handle) DrainSub(*s->sub, s, nullptr);
      break;
    }
    case ItemKind::kListener: {
      auto* l = static_cast<Listener*>(w.owner);
      if (l->sub && l->sub->handle() == w.handle) DrainSub(*l->sub, nullptr, l);
      break;
    }
    case ItemKind::kSubMonitor: {
      auto* s = static_cast<Source*>(w.owner);
      if (s->monitor && s->monitor->handle() == w.handle) DrainMonitor(*s->monitor, s, nullptr);
      break;
    }
    case ItemKind::kListenerMonitor: {
      auto* l = static_cast<Listener*>(w.owner);
      if (l->monitor && l->monitor->handle() == w.handle) DrainMonitor(*l->monitor, nullptr, l);
      break;
    }
    case ItemKind::kDealer:
      DrainDealer(*static_cast<Source*>(w.owner), w.handle);
      break;
  }
}

void IngestThread::Loop::RequeueRound() {
  // A round cut short by an exception: the socket being handled and those
  // not reached yet are checked again, or their pending flag would keep
  // them off every later round.
  for (size_t i = round_pos_; i < round_.size(); ++i) {
    round_[i]->pending = false;
    MarkPending(round_[i]);
  }
  round_.clear();
  round_pos_ = 0;
}

void IngestThread::Loop::RunUntilStopped() {
  // Work per round is proportional to the sockets with news, not to the
  // sockets watched: idle sources cost nothing (zmq_poll would scan them all).
  for (;;) {
    try {
      if (!ProcessCommands()) return;
      graveyard_.clear();
      dead_watches_.clear();
      int timeout_ms = 0;
      if (pending_.empty()) {
        timeout_ms = static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(PollTimeout(Clock::now())).count());
      }
      int n = epoll_wait(epfd_, events_.data(), static_cast<int>(events_.size()), timeout_ms);
      if (n < 0) {
        if (errno != EINTR) spdlog::error("ingest thread {}: epoll_wait: {}", owner_->index_, std::strerror(errno));
        continue;
      }
      for (int i = 0; i < n; ++i) {
        auto* w = static_cast<Watch*>(events_[static_cast<size_t>(i)].data.ptr);
        if (w->kind == ItemKind::kWake) {
          uint64_t v;
          (void)!read(owner_->wake_fd_, &v, sizeof v);
          continue;
        }
        MarkPending(w);
      }
      round_.swap(pending_);
      pending_.clear();
      for (round_pos_ = 0; round_pos_ < round_.size(); ++round_pos_) {
        Watch* w = round_[round_pos_];
        w->pending = false;
        if (!w->alive) continue;  // buried earlier in this round
        int zev = 0;
        size_t len = sizeof zev;
        if (zmq_getsockopt(w->handle, ZMQ_EVENTS, &zev, &len) != 0) {
          if (zmq_errno() == ETERM) return;
          continue;
        }
        if ((zev & ZMQ_POLLIN) == 0) continue;
        Dispatch(*w);
        MarkPending(w);  // read from: check again next round
      }
      round_.clear();
      RunTimers(Clock::now());
    } catch (const zmq::error_t& e) {
      if (e.num() == ETERM) return;
      spdlog::error("ingest thread {}: {}", owner_->index_, e.what());
      RequeueRound();
    } catch (const std::exception& e) {
      spdlog::error("ingest thread {}: {}", owner_->index_, e.what());
      RequeueRound();
    }
  }
}

// ---- IngestThread ----------------------------------------------------------

IngestThread::IngestThread(const IngestOptions& options, zmq::context_t* context, BatchSink* sink,
                           MetricsRegistry* registry, size_t index)
    : opts_(options), ctx_(context), sink_(sink), registry_(registry), index_(index) {}

IngestThread::~IngestThread() {
  Stop();
  if (wake_fd_ >= 0) close(wake_fd_);
}

Status IngestThread::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (running_ || thread_.joinable()) return Status::FailedPrecondition("ingest thread already started");
  if (wake_fd_ < 0) wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) return Status::Internal("ingest thread: eventfd failed");
  running_ = true;
  thread_ = std::thread([this] { Run(); });
  return Status::Ok();
}

void IngestThread::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    running_ = false;
  }
  if (wake_fd_ >= 0) {
    uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof one);
  }
  if (thread_.joinable()) thread_.join();
}

void IngestThread::Run() {
  try {
    Loop loop(this);
    loop.RunUntilStopped();
  } catch (const std::exception& e) {
    spdlog::error("ingest thread {}: {}", index_, e.what());
  }
  // Commands that raced with Stop(): nobody will run them.
  std::lock_guard<std::mutex> lock(mu_);
  running_ = false;
  for (auto& c : commands_) c->done.set_value(Status::Unavailable("ingest thread stopped"));
  commands_.clear();
}

Status IngestThread::Submit(std::unique_ptr<Command> cmd) {
  auto fut = cmd->done.get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!running_) return Status::FailedPrecondition("ingest thread not running");
    commands_.push_back(std::move(cmd));
  }
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof one);
  return fut.get();
}

Status IngestThread::AddSource(const SourceSpec& spec, std::optional<uint64_t> watermark,
                               std::optional<uint64_t> watermark_fingerprint) {
  auto c = std::make_unique<Command>();
  c->kind = Command::Kind::kAdd;
  c->spec = spec;
  c->watermark = watermark;
  c->watermark_fingerprint = watermark_fingerprint;
  return Submit(std::move(c));
}

Status IngestThread::RemoveSource(uint64_t source_id) {
  auto c = std::make_unique<Command>();
  c->kind = Command::Kind::kRemove;
  c->id = source_id;
  return Submit(std::move(c));
}

Status IngestThread::Resync(uint64_t source_id) {
  auto c = std::make_unique<Command>();
  c->kind = Command::Kind::kResync;
  c->id = source_id;
  return Submit(std::move(c));
}

}  // namespace kvidx::ingest
