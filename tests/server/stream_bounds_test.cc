// Thread and stream bounds of the gRPC server: an open FindPrefixStream
// holds no thread while idle and at most grpc.max_open_streams are open at
// once (the next ends with RESOURCE_EXHAUSTED naming the limit); calls of
// the synchronous methods (here idle reflection streams, which keep their
// thread) are bounded by grpc.max_threads the same way.
#include <grpcpp/generic/generic_stub.h>

#include <algorithm>
#include <thread>

#include "proc_stats.h"
#include "server_test_util.h"

namespace kvidx::server::testing {
namespace {

using namespace std::chrono_literals;
using Stream = grpc::ClientAsyncReaderWriter<v1::FindPrefixRequest, v1::FindPrefixResult>;

// Waits for `n` completions on `cq`; returns how many succeeded (ok).
int Drain(grpc::CompletionQueue* cq, int n) {
  int ok_count = 0;
  for (int i = 0; i < n; ++i) {
    void* tag = nullptr;
    bool ok = false;
    if (cq->AsyncNext(&tag, &ok, std::chrono::system_clock::now() + 20s) != grpc::CompletionQueue::GOT_EVENT) break;
    ok_count += ok ? 1 : 0;
  }
  return ok_count;
}

// Many FindPrefixStream calls spread over `connections` channels, driven
// through one completion queue. Every operation is issued for all streams
// and then awaited, so `n` streams cost a few round trips, not n.
class StreamFleet {
 public:
  StreamFleet(int port, int connections) {
    for (int i = 0; i < connections; ++i) {
      grpc::ChannelArguments args;
      args.SetInt("kvidx.test.connection", i);  // a distinct connection each
      stubs_.push_back(v1::KvIndex::NewStub(
          grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials(), args)));
    }
  }
  ~StreamFleet() {
    for (auto& c : calls_) {
      c->ctx.TryCancel();
      c->rw->Finish(&c->status, c.get());
    }
    Drain(&cq_, static_cast<int>(calls_.size()));
    cq_.Shutdown();
    void* tag;
    bool ok;
    while (cq_.Next(&tag, &ok)) {
    }
  }

  // Opens `n` more streams; returns how many started.
  int Open(int n) {
    for (int i = 0; i < n; ++i) {
      auto c = std::make_unique<Call>();
      c->rw = stubs_[calls_.size() % stubs_.size()]->PrepareAsyncFindPrefixStream(&c->ctx, &cq_);
      c->rw->StartCall(c.get());
      calls_.push_back(std::move(c));
    }
    return Drain(&cq_, n);
  }

  // One query on each of the last `n` streams; returns how many answered OK.
  int QueryEach(int n) {
    v1::FindPrefixRequest req;
    req.set_model(kModel);
    for (int64_t t : Prompt(1, 64)) req.mutable_tokens()->add_token_ids(t);
    for (size_t i = calls_.size() - n; i < calls_.size(); ++i) calls_[i]->rw->Write(req, calls_[i].get());
    Drain(&cq_, n);
    for (size_t i = calls_.size() - n; i < calls_.size(); ++i) calls_[i]->rw->Read(&calls_[i]->result, calls_[i].get());
    Drain(&cq_, n);
    int answered = 0;
    for (size_t i = calls_.size() - n; i < calls_.size(); ++i) {
      answered += calls_[i]->result.has_response() && calls_[i]->result.code() == 0 ? 1 : 0;
    }
    return answered;
  }

  // Closes the last stream from the client side; its final status.
  grpc::Status CloseLast() {
    calls_.back()->rw->WritesDone(calls_.back().get());
    Drain(&cq_, 1);
    return FinishLast();
  }

  // Reads on the last stream until it ends; its final status.
  grpc::Status FinishLast() {
    Call& c = *calls_.back();
    c.rw->Read(&c.result, &c);
    Drain(&cq_, 1);
    c.rw->Finish(&c.status, &c);
    Drain(&cq_, 1);
    grpc::Status s = c.status;
    calls_.pop_back();
    return s;
  }

 private:
  struct Call {
    grpc::ClientContext ctx;
    std::unique_ptr<Stream> rw;
    v1::FindPrefixResult result;
    grpc::Status status;
  };
  std::vector<std::unique_ptr<v1::KvIndex::Stub>> stubs_;
  grpc::CompletionQueue cq_;
  std::vector<std::unique_ptr<Call>> calls_;
};

TEST(StreamBoundsTest, IdleStreamsHoldNoThreadAndTheOneOverTheLimitIsRefused) {
  constexpr int kStreams = 2000;
  TempDir dir;
  ServerConfig cfg = TestConfig(dir, /*persistent=*/false);
  cfg.grpc.max_open_streams = kStreams;
  RunningServer rs = StartServer(cfg);
  ASSERT_NE(rs.server, nullptr);
  StreamFleet fleet(rs.server->grpc_port(), 4);
  // Warm up: gRPC starts its pollers and executor threads on first use.
  ASSERT_EQ(fleet.Open(8), 8);
  ASSERT_EQ(fleet.QueryEach(8), 8);
  const int threads_before = ThreadCount();

  ASSERT_EQ(fleet.Open(kStreams - 8), kStreams - 8);
  EXPECT_EQ(fleet.QueryEach(kStreams - 8), kStreams - 8);
  // gRPC's executor may add threads under load, up to two per core.
  const int slack = 16 + 2 * static_cast<int>(std::thread::hardware_concurrency());
  EXPECT_LE(ThreadCount(), threads_before + slack) << "threads before: " << threads_before;
  EXPECT_LE(ThreadCount(kGrpcSyncThreads), 4);

  ASSERT_EQ(fleet.Open(1), 1);
  const grpc::Status refused = fleet.FinishLast();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(refused.error_message().find("grpc.max_open_streams"), std::string::npos) << refused.error_message();

  // A stream that ends frees its place. The server releases it when the
  // call is done on its side, which may be just after the client saw the
  // status: a new stream may be refused until then.
  EXPECT_TRUE(fleet.CloseLast().ok());
  bool served = false;
  for (auto end = std::chrono::steady_clock::now() + 10s; !served && std::chrono::steady_clock::now() < end;) {
    ASSERT_EQ(fleet.Open(1), 1);
    served = fleet.QueryEach(1) == 1;
    if (!served) {
      (void)fleet.FinishLast();
      std::this_thread::sleep_for(10ms);
    }
  }
  EXPECT_TRUE(served);
}

TEST(StreamBoundsTest, SynchronousCallsAreBoundedByMaxThreads) {
  constexpr uint32_t kMaxThreads = 8;
  TempDir dir;
  ServerConfig cfg = TestConfig(dir, /*persistent=*/false);
  cfg.grpc.max_threads = kMaxThreads;
  RunningServer rs = StartServer(cfg);
  ASSERT_NE(rs.server, nullptr);
  auto get_stats = [&](std::chrono::milliseconds timeout) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + timeout);
    v1::GetStatsResponse stats;
    return rs.stubs.index->GetStats(&ctx, {}, &stats);
  };
  // An admin call: synchronous, so it needs a thread from the budget.
  auto list_sources = [&](std::chrono::milliseconds timeout) {
    grpc::ClientContext ctx;
    Admin(&ctx);
    ctx.set_deadline(std::chrono::system_clock::now() + timeout);
    v1::ListSourcesResponse sources;
    return rs.stubs.admin->ListSources(&ctx, {}, &sources);
  };
  ASSERT_TRUE(list_sources(5s).ok());
  // Idle reflection streams: each keeps a synchronous handler thread.
  constexpr int kStreams = 64;
  grpc::GenericStub generic(rs.stubs.channel);
  grpc::CompletionQueue cq;
  std::vector<std::unique_ptr<grpc::ClientContext>> ctxs;
  std::vector<std::unique_ptr<grpc::GenericClientAsyncReaderWriter>> calls;
  for (int i = 0; i < kStreams; ++i) {
    ctxs.push_back(std::make_unique<grpc::ClientContext>());
    calls.push_back(generic.PrepareCall(ctxs.back().get(),
                                        "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq));
    calls.back()->StartCall(calls.back().get());
  }
  EXPECT_EQ(Drain(&cq, kStreams), kStreams);
  // A refused stream's read fails at once; the others block in the server.
  std::vector<grpc::ByteBuffer> bufs(kStreams);
  for (int i = 0; i < kStreams; ++i) calls[i]->Read(&bufs[i], reinterpret_cast<void*>(intptr_t{i}));
  std::vector<int> refused;
  void* tag;
  bool ok;
  while (cq.AsyncNext(&tag, &ok, std::chrono::system_clock::now() + 1s) == grpc::CompletionQueue::GOT_EVENT) {
    refused.push_back(static_cast<int>(reinterpret_cast<intptr_t>(tag)));
  }
  EXPECT_GE(ThreadCount(kGrpcSyncThreads), 2);  // the held streams' threads, by name
  EXPECT_LE(ThreadCount(kGrpcSyncThreads), static_cast<int>(kMaxThreads));
  EXPECT_GE(refused.size(), kStreams - kMaxThreads);
  std::vector<grpc::Status> statuses(kStreams);
  for (int i : refused) calls[i]->Finish(&statuses[i], &statuses[i]);
  Drain(&cq, static_cast<int>(refused.size()));
  for (int i : refused) {
    EXPECT_EQ(statuses[i].error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << statuses[i].error_message();
  }
  // So is a synchronous unary call while the budget is spent; the query
  // methods, on the callback API, still answer.
  EXPECT_EQ(list_sources(5s).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(get_stats(5s).ok());

  const int held = kStreams - static_cast<int>(refused.size());
  for (auto& c : ctxs) c->TryCancel();
  Drain(&cq, held);
  for (int i = 0; i < kStreams; ++i) {
    if (std::find(refused.begin(), refused.end(), i) == refused.end()) calls[i]->Finish(&statuses[i], &statuses[i]);
  }
  Drain(&cq, held);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  // Once the streams are gone the threads serve calls again.
  EXPECT_TRUE(WaitFor([&] { return list_sources(1s).ok(); }));
}

}  // namespace
}  // namespace kvidx::server::testing
