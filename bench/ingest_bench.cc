#include "bench/ingest_bench.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>
#include <zmq.hpp>

#include "index/block_index.h"
#include "index/source_registry.h"
#include "index/tier.h"
#include "ingest/batch_sink.h"
#include "ingest/index_sink.h"
#include "ingest/ingester.h"
#include "ingest/testing/encoder.h"

// GCC 12 at -O3 reports a bogus -Wrestrict inside std::string assignment of
// short literals (GCC PR 105329); nothing here overlaps.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wrestrict"
#endif

namespace {

using kvidx::ingest::BatchSink;
using kvidx::ingest::EventBatch;
using kvidx::ingest::KvEvent;
using kvidx::ingest::ResetReason;
using kvidx::ingest::SourceSpec;

struct Args {
  uint64_t batches = 200000;  // total, over all sources
  uint32_t blocks = 32;       // per batch (one BlockStored of `blocks` 16-token blocks)
  int sources = 1;
  int active = 0;             // sources that publish (0 = all); the rest stay idle
  size_t threads = 1;
  std::string era = "map";
  bool bytes_hashes = false;
  std::string transport = "tcp";
  int runs = 3;
  std::string sink = "count";  // count | index (IndexSink into a real BlockIndex)
};

bool ParseArgs(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto val = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (k == "--bytes-hashes") {
      a->bytes_hashes = true;
      continue;
    }
    if ((v = val()) == nullptr) return false;
    if (k == "--batches") a->batches = std::strtoull(v, nullptr, 10);
    else if (k == "--blocks") a->blocks = static_cast<uint32_t>(std::strtoul(v, nullptr, 10));
    else if (k == "--sources") a->sources = std::atoi(v);
    else if (k == "--active") a->active = std::atoi(v);
    else if (k == "--threads") a->threads = static_cast<size_t>(std::atoi(v));
    else if (k == "--era") a->era = v;
    else if (k == "--transport") a->transport = v;
    else if (k == "--runs") a->runs = std::atoi(v);
    else if (k == "--sink") a->sink = v;
    else return false;
  }
  if (a->active == 0) a->active = a->sources;
  return a->batches > 0 && a->blocks > 0 && a->sources > 0 && a->active > 0 && a->active <= a->sources &&
         a->threads > 0 && a->runs > 0 &&
         (a->transport == "tcp" || a->transport == "inproc") && (a->sink == "count" || a->sink == "index");
}

class CountingSink : public BatchSink {
 public:
  void OnBatch(const SourceSpec&, uint64_t, const EventBatch& b, bool) override {
    uint64_t blocks = 0;
    uint64_t sum = 0;
    for (const KvEvent& e : b.events) {
      for (const kvidx::BlockKey& k : b.HashesOf(e)) sum += k.wire();
      blocks += e.block_hashes.count;
    }
    checksum_.fetch_add(sum, std::memory_order_relaxed);
    blocks_.fetch_add(blocks, std::memory_order_relaxed);
    events_.fetch_add(b.events.size(), std::memory_order_relaxed);
    batches_.fetch_add(1, std::memory_order_release);
  }
  void OnSourceReset(const SourceSpec&, ResetReason) override { resets_.fetch_add(1); }

  std::atomic<uint64_t> batches_{0}, events_{0}, blocks_{0}, checksum_{0}, resets_{0};
};

// --sink index: the real apply path (IndexSink -> BlockIndex), counted the
// same way so the run knows when everything arrived.
class IndexingSink : public CountingSink {
 public:
  IndexingSink() : sink_(&index_, &sources_, &tiers_) {}
  void OnSourceAdded(const SourceSpec& s) override { sink_.OnSourceAdded(s); }
  void OnBatch(const SourceSpec& s, uint64_t seq, const EventBatch& b, bool replayed) override {
    sink_.OnBatch(s, seq, b, replayed);
    CountingSink::OnBatch(s, seq, b, replayed);
  }
  void OnSourceReset(const SourceSpec& s, ResetReason r) override {
    sink_.OnSourceReset(s, r);
    CountingSink::OnSourceReset(s, r);
  }
  void OnSourceRemoved(const SourceSpec& s) override { sink_.OnSourceRemoved(s); }
  void OnSourceStateChanged(const SourceSpec& s, kvidx::SourceState f, kvidx::SourceState t) override {
    sink_.OnSourceStateChanged(s, f, t);
  }
  uint64_t distinct_blocks() { return index_.BlockCount(0); }

 private:
  kvidx::BlockIndex index_;
  kvidx::SourceRegistry sources_;
  kvidx::TierRegistry tiers_;
  kvidx::ingest::IndexSink sink_;
};

std::string Payload(uint64_t salt, const Args& a, const kvidx::ingest::WireEra& era) {
  EventBatch b;
  b.ts = 1.7e9 + static_cast<double>(salt);
  b.data_parallel_rank = 0;
  KvEvent e;
  e.type = kvidx::ingest::EventType::kBlockStored;
  e.block_hashes = {0, a.blocks};
  e.token_ids = {0, a.blocks * 16};
  e.block_size = 16;
  e.medium = "GPU";
  for (uint32_t i = 0; i < a.blocks; ++i) {
    uint64_t h = (salt * 0x9e3779b97f4a7c15ull) ^ (i * 0xbf58476d1ce4e5b9ull);
    if (a.bytes_hashes) {
      uint8_t d[32];
      for (int k = 0; k < 32; ++k) d[k] = static_cast<uint8_t>(h >> (8 * (k % 8))) ^ static_cast<uint8_t>(k);
      b.keys.push_back(kvidx::BlockKey::FromBytes(d, 32));
    } else {
      b.keys.push_back(kvidx::BlockKey::FromU64(h));
    }
  }
  for (uint32_t t = 0; t < a.blocks * 16; ++t) b.tokens.push_back(1000 + (t * 7919) % 150000);
  b.events.push_back(e);
  return kvidx::ingest::EncodePayload(b, era);
}

std::string Numbered(const char* prefix, long long n) {
  std::string s(prefix);
  s.append(std::to_string(n));
  return s;
}

struct RunResult {
  double seconds = 0;
  uint64_t batches = 0, events = 0, blocks = 0, bytes = 0;
};

bool RunOnce(const Args& a, const kvidx::ingest::WireEra& era, RunResult* out) {
  zmq::context_t ctx(2, 4 * a.sources + 64);
  std::vector<zmq::socket_t> pubs;
  std::vector<std::string> eps;
  for (int i = 0; i < a.sources; ++i) {
    pubs.emplace_back(ctx, zmq::socket_type::xpub);
    pubs.back().set(zmq::sockopt::sndhwm, 0);  // never drop: measure throughput, not loss
    pubs.back().set(zmq::sockopt::linger, 0);
    pubs.back().set(zmq::sockopt::rcvtimeo, 10000);
    if (a.transport == "tcp") {
      pubs.back().bind("tcp://127.0.0.1:*");
    } else {
      pubs.back().bind(Numbered("inproc://kvidx-ingest-bench-", i));
    }
    eps.push_back(pubs.back().get(zmq::sockopt::last_endpoint));
  }
  std::unique_ptr<CountingSink> sink_owner =
      a.sink == "index" ? std::make_unique<IndexingSink>() : std::make_unique<CountingSink>();
  CountingSink& sink = *sink_owner;
  kvidx::ingest::IngestOptions o;
  o.num_threads = a.threads;
  o.sub_rcvhwm = 0;
  o.context = &ctx;  // inproc needs the publisher's context
  kvidx::ingest::Ingester ing(o, &sink);
  if (!ing.Start().ok()) return false;
  for (int i = 0; i < a.sources; ++i) {
    kvidx::ingest::EngineConfig c;
    c.replica = Numbered("bench", i);
    c.model = "m";
    c.endpoint = eps[static_cast<size_t>(i)];
    if (auto s = ing.AddEngine(c); !s.ok()) {
      std::fprintf(stderr, "add source: %s\n", s.ToString().c_str());
      return false;
    }
  }
  for (auto& p : pubs) {
    zmq::message_t sub;
    if (!p.recv(sub)) {
      std::fprintf(stderr, "subscriber never subscribed\n");
      return false;
    }
  }
  std::vector<std::string> payloads;
  // Distinct payloads (distinct block hashes); with --sink index, enough that
  // most stores insert new blocks rather than bump a refcount.
  const uint64_t distinct = a.sink == "index" ? std::min<uint64_t>(a.batches, 200000) : 64;
  for (uint64_t k = 0; k < distinct; ++k) payloads.push_back(Payload(k, a, era));
  std::vector<uint64_t> seq(static_cast<size_t>(a.sources), 0);
  std::string seq_frame;
  uint64_t bytes = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (uint64_t n = 0; n < a.batches; ++n) {
    size_t src = n % static_cast<size_t>(a.active);
    const std::string& p = payloads[n % payloads.size()];
    seq_frame = kvidx::ingest::EncodeSeq(seq[src]++);
    pubs[src].send(zmq::const_buffer(nullptr, 0), zmq::send_flags::sndmore);
    pubs[src].send(zmq::buffer(seq_frame), zmq::send_flags::sndmore);
    pubs[src].send(zmq::buffer(p), zmq::send_flags::none);
    bytes += p.size();
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (sink.batches_.load(std::memory_order_acquire) < a.batches) {
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "timeout: %llu of %llu batches delivered\n",
                   static_cast<unsigned long long>(sink.batches_.load()), static_cast<unsigned long long>(a.batches));
      return false;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  auto t1 = std::chrono::steady_clock::now();
  out->seconds = std::chrono::duration<double>(t1 - t0).count();
  out->batches = sink.batches_.load();
  out->events = sink.events_.load();
  out->blocks = sink.blocks_.load();
  out->bytes = bytes;
  uint64_t lost = 0;
  for (const auto& s : ing.ListSources()) lost += s.stats->batches_lost.load();
  if (lost != 0 || sink.resets_.load() != 0) {
    std::fprintf(stderr, "warning: %llu batches lost, %llu resets\n", static_cast<unsigned long long>(lost),
                 static_cast<unsigned long long>(sink.resets_.load()));
  }
  if (auto* ix = dynamic_cast<IndexingSink*>(&sink)) {
    std::printf("        index holds %llu distinct blocks\n", static_cast<unsigned long long>(ix->distinct_blocks()));
  }
  ing.Stop();
  return true;
}

void Print(const char* label, const RunResult& r) {
  std::printf("%-7s %8.3f s  %10.0f batches/s  %10.0f events/s  %12.0f blocks/s  %8.1f MB/s\n", label, r.seconds,
              static_cast<double>(r.batches) / r.seconds, static_cast<double>(r.events) / r.seconds,
              static_cast<double>(r.blocks) / r.seconds, static_cast<double>(r.bytes) / r.seconds / 1e6);
}

}  // namespace

int RunIngestBench(int argc, char** argv) {
  Args a;
  if (!ParseArgs(argc, argv, &a)) {
    std::fprintf(stderr,
                 "usage: kvidx-bench ingest [--batches N] [--blocks B] [--sources S] [--active K] [--threads T] [--sink count|index]\n"
                 "                          [--era map|array-v6|...] [--bytes-hashes]\n"
                 "                          [--transport tcp|inproc] [--runs R]\n");
    return 2;
  }
  kvidx::ingest::WireEra era;
  if (!kvidx::ingest::ParseWireEra(a.era, &era)) {
    std::fprintf(stderr, "unknown --era '%s'\n", a.era.c_str());
    return 2;
  }
  spdlog::set_level(spdlog::level::warn);
  std::printf("ingest bench: %llu batches x %u blocks (16 tokens), %d source(s) (%d publishing), %zu thread(s), era %s, %s hashes, %s\n",
              static_cast<unsigned long long>(a.batches), a.blocks, a.sources, a.active, a.threads, a.era.c_str(),
              a.bytes_hashes ? "bytes" : "int", a.transport.c_str());
  std::vector<RunResult> results;
  for (int r = 0; r < a.runs; ++r) {
    RunResult res;
    if (!RunOnce(a, era, &res)) return 1;
    Print(Numbered("run ", r + 1).c_str(), res);
    results.push_back(res);
  }
  std::sort(results.begin(), results.end(), [](const RunResult& x, const RunResult& y) { return x.seconds < y.seconds; });
  Print("median", results[results.size() / 2]);
  return 0;
}
