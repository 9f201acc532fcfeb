#include "ingest/testing/fake_engine.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <thread>

#include <spdlog/spdlog.h>
#include <zmq_addon.hpp>

#include "ingest/source_config.h"

namespace kvidx::ingest {

bool VllmPubBinds(std::string_view endpoint) {
  return endpoint.find('*') != std::string_view::npos || endpoint.find("::") != std::string_view::npos ||
         endpoint.starts_with("ipc://") || endpoint.starts_with("inproc://");
}

namespace {

std::string Resolve(zmq::socket_t& s) {
  std::string ep = s.get(zmq::sockopt::last_endpoint);
  // A wildcard bind reports 0.0.0.0; callers connect over loopback.
  if (ep.starts_with("tcp://0.0.0.0:")) ep = "tcp://127.0.0.1:" + ep.substr(14);
  return ep;
}

void SendFrames(zmq::socket_t& s, const Frames& frames) {
  for (size_t i = 0; i < frames.size(); ++i) {
    auto flags = i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
    (void)s.send(zmq::buffer(frames[i]), flags);
  }
}

// Binding right after closing the previous socket on the same port can race
// with the I/O thread releasing it; retry briefly when reopening.
void BindWithRetry(zmq::socket_t& s, const std::string& ep, bool reopen) {
  for (int attempt = 0;; ++attempt) {
    try {
      s.bind(ep);
      return;
    } catch (const zmq::error_t& e) {
      if (!reopen || e.num() != EADDRINUSE || attempt >= 100) throw;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
}

}  // namespace

FakeEngine::FakeEngine(const FakeEngineOptions& options)
    : opts_(options), buffer_steps_(options.buffer_steps), replay_format_(options.replay_format) {}

Result<std::unique_ptr<FakeEngine>> FakeEngine::Create(const FakeEngineOptions& options) {
  std::unique_ptr<FakeEngine> e(new FakeEngine(options));
  auto pub = OffsetEndpoint(options.endpoint, options.data_parallel_rank);
  if (!pub.ok()) return pub.status();
  e->pub_config_ = pub.value();
  if (!options.replay_endpoint.empty()) {
    auto rep = OffsetEndpoint(options.replay_endpoint, options.data_parallel_rank);
    if (!rep.ok()) return rep.status();
    e->replay_config_ = rep.value();
  }
  e->pub_binds_ = options.pub_bind.value_or(VllmPubBinds(e->pub_config_));
  if (options.context != nullptr) {
    e->ctx_ = options.context;
  } else {
    e->own_ctx_ = std::make_unique<zmq::context_t>(1);
    e->ctx_ = e->own_ctx_.get();
  }
  e->wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (e->wake_fd_ < 0) return Status::Internal("fake engine: eventfd failed");
  if (Status s = e->OpenSockets(false); !s.ok()) return s;
  e->thread_ = std::thread([raw = e.get()] { raw->Run(); });
  return e;
}

Status FakeEngine::OpenPubSocket(bool reopen) {
  if (pub_config_.empty()) return Status::Ok();
  try {
    pub_ = std::make_unique<zmq::socket_t>(*ctx_, zmq::socket_type::pub);
    pub_->set(zmq::sockopt::sndhwm, opts_.sndhwm);
    pub_->set(zmq::sockopt::linger, 0);
    if (pub_binds_) {
      // After a restart, rebind the port we got the first time.
      BindWithRetry(*pub_, pub_endpoint_.empty() ? pub_config_ : pub_endpoint_, reopen);
      pub_endpoint_ = Resolve(*pub_);
    } else {
      pub_->connect(pub_config_);
      pub_endpoint_ = pub_config_;
    }
  } catch (const zmq::error_t& e) {
    pub_.reset();
    return Status::Unavailable("fake engine: cannot open PUB " + pub_config_ + ": " + e.what());
  }
  return Status::Ok();
}

Status FakeEngine::OpenSockets(bool reopen) {
  if (Status s = OpenPubSocket(reopen); !s.ok()) return s;
  if (replay_config_.empty()) return Status::Ok();
  try {
    router_ = std::make_unique<zmq::socket_t>(*ctx_, zmq::socket_type::router);
    router_->set(zmq::sockopt::linger, 0);
    router_->set(zmq::sockopt::sndhwm, 0);  // a replay reply is never dropped at our side
    BindWithRetry(*router_, replay_endpoint_.empty() ? replay_config_ : replay_endpoint_, reopen);
    replay_endpoint_ = Resolve(*router_);
  } catch (const zmq::error_t& e) {
    pub_.reset();
    router_.reset();
    return Status::Unavailable("fake engine: cannot open ROUTER " + replay_config_ + ": " + e.what());
  }
  return Status::Ok();
}

Status FakeEngine::OpenPub(const std::string& endpoint) {
  auto ep = OffsetEndpoint(endpoint, opts_.data_parallel_rank);
  if (!ep.ok()) return ep.status();
  Op op;
  op.kind = Op::Kind::kOpenPub;
  op.payload = ep.value();
  op.done = std::make_shared<std::promise<Status>>();
  auto fut = op.done->get_future();
  Enqueue(std::move(op));
  return fut.get();
}

FakeEngine::~FakeEngine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  uint64_t one = 1;
  if (wake_fd_ >= 0) (void)!write(wake_fd_, &one, sizeof one);
  if (thread_.joinable()) thread_.join();
  pub_.reset();
  router_.reset();
  if (wake_fd_ >= 0) close(wake_fd_);
}

void FakeEngine::Enqueue(Op op) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(op));
  }
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof one);
}

uint64_t FakeEngine::Publish(std::string payload) {
  Op op;
  op.kind = Op::Kind::kPublish;
  op.payload = std::move(payload);
  uint64_t seq;
  {
    std::lock_guard<std::mutex> lock(mu_);
    seq = next_seq_++;
    op.seq = seq;
    if (drop_.erase(seq) > 0) {
      op.send = false;
      op.buffer = drop_mode_ == DropMode::kNotSent;
    }
    queue_.push_back(std::move(op));
  }
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof one);
  return seq;
}

uint64_t FakeEngine::Publish(const EventBatch& batch, const WireEra& era) {
  return Publish(EncodePayload(batch, era));
}

uint64_t FakeEngine::next_seq() const {
  std::lock_guard<std::mutex> lock(mu_);
  return next_seq_;
}

void FakeEngine::Flush() {
  Op op;
  op.kind = Op::Kind::kBarrier;
  op.done = std::make_shared<std::promise<Status>>();
  auto fut = op.done->get_future();
  Enqueue(std::move(op));
  fut.wait();
}

void FakeEngine::DropSeqs(const std::set<uint64_t>& seqs, DropMode mode) {
  std::lock_guard<std::mutex> lock(mu_);
  drop_.insert(seqs.begin(), seqs.end());
  drop_mode_ = mode;
}

Status FakeEngine::Restart(bool recreate_sockets) {
  Op op;
  op.kind = Op::Kind::kRestart;
  op.recreate = recreate_sockets;
  op.done = std::make_shared<std::promise<Status>>();
  auto fut = op.done->get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    next_seq_ = 0;
    drop_.clear();
    queue_.push_back(std::move(op));
  }
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof one);
  return fut.get();
}

void FakeEngine::SetReplayEnabled(bool enabled) {
  std::lock_guard<std::mutex> lock(mu_);
  replay_enabled_ = enabled;
}

void FakeEngine::SetBufferSteps(size_t steps) {
  std::lock_guard<std::mutex> lock(mu_);
  buffer_steps_ = steps;
}

void FakeEngine::SetReplayFormat(ReplayFormat format) {
  std::lock_guard<std::mutex> lock(mu_);
  replay_format_ = format;
}

std::optional<uint64_t> FakeEngine::SendGarbage(GarbageKind kind) {
  Op op;
  op.kind = Op::Kind::kGarbage;
  op.garbage = kind;
  std::optional<uint64_t> consumed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (kind == GarbageKind::kBadPayload) {
      op.seq = next_seq_++;
      consumed = op.seq;
    }
    queue_.push_back(std::move(op));
  }
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof one);
  return consumed;
}

void FakeEngine::SendLive(const std::string& topic, uint64_t seq, const std::string& payload) {
  if (!pub_) return;  // no PUB yet: buffered only
  std::string seq_frame = EncodeSeq(seq);
  (void)pub_->send(zmq::buffer(topic), zmq::send_flags::sndmore);
  (void)pub_->send(zmq::buffer(seq_frame), zmq::send_flags::sndmore);
  (void)pub_->send(zmq::buffer(payload), zmq::send_flags::none);
  live_sent_.fetch_add(1, std::memory_order_relaxed);
}

void FakeEngine::TrimRing() {
  size_t steps;
  {
    std::lock_guard<std::mutex> lock(mu_);
    steps = buffer_steps_;
  }
  while (ring_.size() > steps) ring_.pop_front();
}

void FakeEngine::Execute(Op& op) {
  switch (op.kind) {
    case Op::Kind::kPublish:
      if (op.send) SendLive(opts_.topic, op.seq, op.payload);
      if (op.buffer) {
        ring_.emplace_back(op.seq, std::move(op.payload));
        TrimRing();
      }
      break;
    case Op::Kind::kGarbage: {
      static const std::string kJunk = "\xc1\xc1 not msgpack";
      if (!pub_) break;
      if (op.garbage == GarbageKind::kWrongFrameCount) {
        SendFrames(*pub_, {opts_.topic, kJunk});
      } else if (op.garbage == GarbageKind::kShortSeq) {
        SendFrames(*pub_, {opts_.topic, std::string("\x00\x01\x02", 3), kJunk});
      } else {
        SendLive(opts_.topic, op.seq, kJunk);
        ring_.emplace_back(op.seq, kJunk);
        TrimRing();
      }
      break;
    }
    case Op::Kind::kRestart: {
      ring_.clear();
      Status st;
      if (op.recreate) {
        pub_.reset();
        router_.reset();
        st = OpenSockets(true);
      }
      op.done->set_value(st);
      break;
    }
    case Op::Kind::kBarrier:
      op.done->set_value(Status::Ok());
      break;
    case Op::Kind::kOpenPub: {
      if (pub_) {
        op.done->set_value(Status::FailedPrecondition("fake engine: PUB already open"));
        break;
      }
      pub_config_ = op.payload;
      pub_binds_ = opts_.pub_bind.value_or(VllmPubBinds(pub_config_));
      op.done->set_value(OpenPubSocket(false));
      break;
    }
  }
}

void FakeEngine::ServeReplay() {
  // Serve every pending request, each synchronously (as vLLM does).
  while (router_) {
    std::vector<zmq::message_t> req;
    auto n = zmq::recv_multipart(*router_, std::back_inserter(req), zmq::recv_flags::dontwait);
    if (!n) return;
    bool enabled;
    ReplayFormat format;
    {
      std::lock_guard<std::mutex> lock(mu_);
      enabled = replay_enabled_;
      format = replay_format_;
    }
    if (req.size() != 3 || req[1].size() != 0) {
      spdlog::debug("fake engine: ignoring malformed replay request ({} frames)", req.size());
      continue;
    }
    if (!enabled) continue;  // an engine that never answers: the client must time out
    uint64_t start = 0;
    for (uint8_t b : std::string_view(req[2].data<char>(), req[2].size())) start = (start << 8) | b;
    replay_requests_.fetch_add(1, std::memory_order_relaxed);
    last_replay_start_.store(start, std::memory_order_relaxed);
    TrimRing();
    std::string identity = req[0].to_string();
    for (const auto& [seq, payload] : ring_) {
      if (seq >= start) SendFrames(*router_, ReplayReplyFrames(format, identity, opts_.topic, seq, payload));
    }
    SendFrames(*router_, ReplayEndFrames(format, identity));
  }
}

void FakeEngine::Run() {
  try {
    for (;;) {
      // vLLM polls the ROUTER before each queue get; we wait on both.
      zmq::pollitem_t items[2] = {{nullptr, wake_fd_, ZMQ_POLLIN, 0}, {nullptr, 0, ZMQ_POLLIN, 0}};
      int count = 1;
      if (router_) {
        items[1].socket = router_->handle();
        count = 2;
      }
      zmq::poll(items, count, std::chrono::milliseconds(100));
      if (items[0].revents & ZMQ_POLLIN) {
        uint64_t v;
        (void)!read(wake_fd_, &v, sizeof v);
      }
      ServeReplay();
      std::deque<Op> ops;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stop_) break;
        ops.swap(queue_);
      }
      for (Op& op : ops) {
        Execute(op);
        // Keep replay responsive during long publish bursts.
        if (router_ && (router_->get(zmq::sockopt::events) & ZMQ_POLLIN)) ServeReplay();
      }
    }
  } catch (const zmq::error_t& e) {
    spdlog::error("fake engine publisher thread stopped: {}", e.what());
  }
  // Unblock anyone waiting on a barrier.
  std::lock_guard<std::mutex> lock(mu_);
  for (Op& op : queue_) {
    if (op.done) op.done->set_value(Status::Unavailable("fake engine stopped"));
  }
  queue_.clear();
}

}  // namespace kvidx::ingest
