#include "bench/grpc_bench.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include "base/clock.h"
#include "index/block_hasher.h"
#include "ingest/testing/encoder.h"
#include "bench/publish_store.h"
#include "ingest/testing/fake_engine.h"
#include "kvidx/v1/kvidx.grpc.pb.h"
#include "server/node.h"
#include "server/server.h"

namespace {

using namespace kvidx;
using Clock = std::chrono::steady_clock;

struct Flags {
  int replicas = 64;
  int prompt_tokens = 8192;
  int prompts = 64;
  int clients = 2;
  double seconds = 5;
  int runs = 3;
  std::string mode = "all";
  bool churn = true;
  double churn_rate = 5000;  // batches/s during measurement; 0 = as fast as ingest takes them
  int holders = 8;          // replicas holding (a prefix of) each prompt; 0 = 3/4 of all
  int shared_blocks = 32;   // system prompt every replica holds (blocks)
};

bool ParseFlags(int argc, char** argv, Flags* f) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&]() -> const char* { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--replicas") f->replicas = std::atoi(val());
    else if (a == "--prompt-tokens") f->prompt_tokens = std::atoi(val());
    else if (a == "--prompts") f->prompts = std::atoi(val());
    else if (a == "--clients") f->clients = std::atoi(val());
    else if (a == "--seconds") f->seconds = std::atof(val());
    else if (a == "--runs") f->runs = std::atoi(val());
    else if (a == "--mode") f->mode = val();
    else if (a == "--no-churn") f->churn = false;
    else if (a == "--churn-rate") f->churn_rate = std::atof(val());
    else if (a == "--holders") f->holders = std::atoi(val());
    else if (a == "--shared-blocks") f->shared_blocks = std::atoi(val());
    else return false;
  }
  return f->replicas >= 1 && f->replicas <= 1024 && f->holders >= 0 && f->shared_blocks >= 0 &&
         f->prompt_tokens >= 16 && f->prompts >= 1 && f->clients >= 1 &&
         f->seconds > 0 && f->runs >= 1 &&
         (f->mode == "tokens" || f->mode == "hashes" || f->mode == "stream" || f->mode == "all");
}

struct Sample {
  double qps = 0, p50 = 0, p90 = 0, p99 = 0, ingest_bps = 0;
};

double Pct(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  size_t k = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<long>(k), v.end());
  return v[k];
}

}  // namespace

int RunGrpcBench(int argc, char** argv) {
  Flags f;
  if (!ParseFlags(argc, argv, &f)) {
    std::fprintf(stderr,
                 "usage: kvidx-bench grpc [--replicas N] [--prompt-tokens N] [--prompts N] [--clients N] "
                 "[--seconds S] [--runs N] [--mode tokens|hashes|stream|all] [--no-churn]\n");
    return 2;
  }
  spdlog::set_level(spdlog::level::warn);
  std::mt19937_64 rng(42);

  // Prompts and their vLLM block hashes; all start with the same system prompt.
  auto hasher = BlockHasher::Create(BlockHasherOptions{});
  std::vector<std::vector<int64_t>> prompts(f.prompts);
  std::vector<std::vector<BlockKey>> keys(f.prompts);
  std::vector<int64_t> system_prompt(static_cast<size_t>(f.shared_blocks) * 16);
  for (auto& t : system_prompt) t = static_cast<int64_t>(rng() % 128000);
  for (int p = 0; p < f.prompts; ++p) {
    prompts[p].resize(f.prompt_tokens);
    for (auto& t : prompts[p]) t = static_cast<int64_t>(rng() % 128000);
    std::copy_n(system_prompt.begin(), std::min(system_prompt.size(), prompts[p].size()), prompts[p].begin());
    std::vector<BlockDigest> d;
    (void)hasher->HashRequest(prompts[p], &d);
    for (const auto& x : d) keys[p].push_back(x.ToKey());
  }
  const size_t nblocks = keys[0].size();

  // The fleet: one publisher per replica.
  std::vector<std::unique_ptr<ingest::FakeEngine>> engines;
  server::ServerConfig cfg;
  cfg.grpc.listen = "127.0.0.1:0";
  cfg.grpc.max_query_tokens = 1 << 20;
  cfg.metrics.listen = "";
  cfg.data_dir = "";
  cfg.snapshot.interval_seconds = 0;
  server::ModelConfig mc;
  mc.name = "bench";
  cfg.models.push_back(mc);
  for (int r = 0; r < f.replicas; ++r) {
    ingest::FakeEngineOptions o;
    o.endpoint = "tcp://127.0.0.1:*";
    o.pub_bind = true;
    o.replay_endpoint = "tcp://127.0.0.1:*";
    auto e = ingest::FakeEngine::Create(o);
    if (!e.ok()) {
      std::fprintf(stderr, "engine: %s\n", e.status().ToString().c_str());
      return 1;
    }
    server::EngineEntry ee;
    ee.engine.replica = "vllm-" + std::to_string(r);
    ee.engine.model = "bench";
    ee.engine.endpoint = e.value()->pub_endpoint();
    ee.engine.replay_endpoint = e.value()->replay_endpoint();
    cfg.engines.push_back(ee);
    engines.push_back(std::move(e).value());
  }
  auto srv = server::Server::Create(cfg);
  if (!srv.ok() || !srv.value()->Start().ok()) {
    std::fprintf(stderr, "server failed to start\n");
    return 1;
  }
  server::Server& server = *srv.value();
  while (!server.serving()) std::this_thread::sleep_for(std::chrono::milliseconds(20));

  // Each prompt is held to a random depth by `holders` random replicas (by
  // 3/4 of them with --holders 0: the worst case); every replica holds the
  // system prompt.
  uint64_t published = 0;
  const uint32_t shared = std::min<uint32_t>(static_cast<uint32_t>(f.shared_blocks), static_cast<uint32_t>(nblocks));
  std::vector<std::vector<uint32_t>> held(f.replicas, std::vector<uint32_t>(f.prompts));
  for (int r = 0; r < f.replicas; ++r) {
    for (int p = 0; p < f.prompts; ++p) {
      const bool holds = f.holders == 0 ? rng() % 4 != 0
                                        : rng() % static_cast<uint64_t>(f.replicas) < static_cast<uint64_t>(f.holders);
      uint32_t n = holds ? static_cast<uint32_t>(rng() % (nblocks + 1)) : 0;
      n = std::max(n, shared);
      held[r][p] = n;
      if (n == 0) continue;
      PublishStore(engines[r].get(), std::span<const BlockKey>(keys[p]).first(n));
      ++published;
    }
  }
  const auto& sink_stats = server.node().sink().stats();
  while (sink_stats.applied_batches.load() < published) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  uint64_t owners = 0;
  for (int r = 0; r < f.replicas; ++r) {
    for (int p = 0; p < f.prompts; ++p) owners += held[r][p];
  }
  std::printf("setup: %d replicas, %d prompts x %zu blocks (%u shared), holders %d, %" PRIu64
              " owner entries, %" PRIu64 " batches\n",
              f.replicas, f.prompts, nblocks, shared, f.holders, owners, published);

  const std::string target = "127.0.0.1:" + std::to_string(server.grpc_port());
  std::vector<kvidx::v1::FindPrefixRequest> by_tokens(f.prompts), by_hashes(f.prompts);
  for (int p = 0; p < f.prompts; ++p) {
    by_tokens[p].set_model("bench");
    for (int64_t t : prompts[p]) by_tokens[p].mutable_tokens()->add_token_ids(t);
    by_hashes[p].set_model("bench");
    for (const BlockKey& k : keys[p]) by_hashes[p].mutable_hashes()->add_u64(k.wire());
  }

  // Sanity: the answer equals what was published.
  {
    auto ch = grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
    auto stub = kvidx::v1::KvIndex::NewStub(ch);
    for (int p = 0; p < std::min(f.prompts, 4); ++p) {
      grpc::ClientContext ctx;
      kvidx::v1::FindPrefixResponse resp;
      if (!stub->FindPrefix(&ctx, by_tokens[p], &resp).ok()) {
        std::fprintf(stderr, "sanity query failed\n");
        return 1;
      }
      for (const auto& m : resp.replicas()) {
        int r = std::atoi(m.replica().c_str() + 5);
        if (m.matched_blocks() != held[r][p]) {
          std::fprintf(stderr, "sanity: %s prompt %d: %u != %u\n", m.replica().c_str(), p, m.matched_blocks(),
                       held[r][p]);
          return 1;
        }
      }
    }
  }

  // The index alone, for comparison: FindPrefix on the server's index.
  {
    PrefixMatch pm;
    auto model = server.node().FindModel("bench");
    std::vector<double> us;
    for (int i = 0; i < 20000; ++i) {
      int p = static_cast<int>(rng() % static_cast<uint64_t>(f.prompts));
      auto t0 = Clock::now();
      (void)server.node().index().FindPrefix(model->id, keys[p], PrefixFilter{}, &pm);
      us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
    std::vector<double> hs;
    std::vector<BlockDigest> d;
    for (int i = 0; i < 2000; ++i) {
      int p = static_cast<int>(rng() % static_cast<uint64_t>(f.prompts));
      auto t0 = Clock::now();
      (void)hasher->HashRequest(prompts[p], &d);
      hs.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
    std::printf("in-process: index FindPrefix p50 %.1f us p99 %.1f us (%zu sources matched); hashing p50 %.1f us\n",
                Pct(us, 0.5), Pct(us, 0.99), pm.sources.size(), Pct(hs, 0.5));
  }

  // Churn: store 16 fresh blocks and remove the 16 stored before, per batch.
  std::atomic<bool> churn_on{false}, stop{false};
  std::thread churn([&] {
    std::mt19937_64 crng(7);
    std::vector<std::vector<BlockKey>> last(f.replicas);
    Clock::time_point next_at = Clock::now();
    while (!stop.load()) {
      if (!churn_on.load()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        continue;
      }
      int r = static_cast<int>(crng() % static_cast<uint64_t>(f.replicas));
      ingest::EventBatch b;
      b.ts = WallSeconds();
      b.data_parallel_rank = 0;
      if (!last[r].empty()) {
        ingest::KvEvent e;
        e.type = ingest::EventType::kBlockRemoved;
        e.block_hashes = {0, static_cast<uint32_t>(last[r].size())};
        b.keys = last[r];
        e.medium = "GPU";
        b.events.push_back(e);
      }
      last[r].clear();
      for (int i = 0; i < 16; ++i) last[r].push_back(BlockKey::FromU64(crng()));
      ingest::KvEvent s;
      s.type = ingest::EventType::kBlockStored;
      s.block_hashes = {static_cast<uint32_t>(b.keys.size()), 16};
      b.keys.insert(b.keys.end(), last[r].begin(), last[r].end());
      s.block_size = 16;
      s.medium = "GPU";
      b.events.push_back(s);
      engines[r]->Publish(b, ingest::WireEra::Newest());
      // Paced at --churn-rate; and never more than ~1000 batches ahead of ingest.
      ++published;
      if (f.churn_rate > 0) {
        next_at += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(1.0 / f.churn_rate));
        if (next_at < Clock::now() - std::chrono::milliseconds(100)) next_at = Clock::now();
        std::this_thread::sleep_until(next_at);
      }
      while (!stop.load() && published > sink_stats.applied_batches.load() + 1000) {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    }
  });

  auto run_mode = [&](const std::string& mode) -> Sample {
    std::atomic<bool> go{false}, done{false};
    std::vector<std::vector<double>> lat(f.clients);
    std::vector<std::thread> th;
    for (int c = 0; c < f.clients; ++c) {
      th.emplace_back([&, c] {
        grpc::ChannelArguments args;
        args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // one connection per client
        auto ch = grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
        auto stub = kvidx::v1::KvIndex::NewStub(ch);
        std::mt19937_64 qrng(1000 + static_cast<uint64_t>(c));
        kvidx::v1::FindPrefixResponse resp;
        kvidx::v1::FindPrefixResult res;
        std::unique_ptr<grpc::ClientContext> sctx;
        std::unique_ptr<grpc::ClientReaderWriter<kvidx::v1::FindPrefixRequest, kvidx::v1::FindPrefixResult>> stream;
        if (mode == "stream") {
          sctx = std::make_unique<grpc::ClientContext>();
          stream = stub->FindPrefixStream(sctx.get());
        }
        lat[c].reserve(1 << 20);
        while (!go.load()) std::this_thread::yield();
        while (!done.load()) {
          int p = static_cast<int>(qrng() % static_cast<uint64_t>(f.prompts));
          auto t0 = Clock::now();
          bool ok;
          if (mode == "stream") {
            ok = stream->Write(by_hashes[p]) && stream->Read(&res) && res.code() == 0;
          } else {
            grpc::ClientContext ctx;
            resp.Clear();
            ok = stub->FindPrefix(&ctx, mode == "tokens" ? by_tokens[p] : by_hashes[p], &resp).ok();
          }
          auto t1 = Clock::now();
          if (!ok) {
            std::fprintf(stderr, "query failed\n");
            std::exit(1);
          }
          lat[c].push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
        }
        if (stream) {
          stream->WritesDone();
          (void)stream->Finish();
        }
      });
    }
    const uint64_t b0 = sink_stats.applied_batches.load();
    auto t0 = Clock::now();
    go.store(true);
    std::this_thread::sleep_for(std::chrono::duration<double>(f.seconds));
    done.store(true);
    for (auto& t : th) t.join();
    double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    const uint64_t b1 = sink_stats.applied_batches.load();
    std::vector<double> all;
    for (auto& v : lat) all.insert(all.end(), v.begin(), v.end());
    Sample s;
    s.qps = static_cast<double>(all.size()) / secs;
    s.ingest_bps = static_cast<double>(b1 - b0) / secs;
    s.p50 = Pct(all, 0.50);
    s.p90 = Pct(all, 0.90);
    s.p99 = Pct(all, 0.99);
    return s;
  };

  std::vector<std::string> modes =
      f.mode == "all" ? std::vector<std::string>{"hashes", "tokens", "stream"} : std::vector<std::string>{f.mode};
  if (f.churn) churn_on.store(true);
  std::printf("%-8s %4s %12s %10s %10s %10s %16s\n", "mode", "run", "queries/s", "p50 us", "p90 us", "p99 us",
              "ingest batch/s");
  for (const std::string& mode : modes) {
    std::vector<Sample> samples;
    for (int run = 0; run < f.runs; ++run) {
      Sample s = run_mode(mode);
      samples.push_back(s);
      std::printf("%-8s %4d %12.0f %10.1f %10.1f %10.1f %16.0f\n", mode.c_str(), run + 1, s.qps, s.p50, s.p90, s.p99,
                  s.ingest_bps);
      std::fflush(stdout);
    }
    auto med = [&](double Sample::*m) {
      std::vector<double> v;
      for (auto& s : samples) v.push_back(s.*m);
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    std::printf("%-8s %4s %12.0f %10.1f %10.1f %10.1f %16.0f\n", mode.c_str(), "med", med(&Sample::qps),
                med(&Sample::p50), med(&Sample::p90), med(&Sample::p99), med(&Sample::ingest_bps));
  }
  stop.store(true);
  churn.join();
  (void)server.Shutdown(std::chrono::seconds(1));
  return 0;
}
