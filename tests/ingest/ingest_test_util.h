// Helpers shared by the ingest tests: batch builders, a recording sink, waits.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "ingest/batch_sink.h"
#include "ingest/event.h"
#include "ingest/testing/encoder.h"

namespace kvidx::ingest::testing {

// A batch storing `n` blocks whose hashes are base, base+1, ... (int form)
// or their 32-byte big-endian expansion (bytes form), 16 tokens each.
inline EventBatch StoreBatch(uint64_t base, uint32_t n, uint32_t rank = 0, bool bytes_hashes = false,
                             double ts = 0) {
  EventBatch b;
  b.ts = ts != 0 ? ts : 1.7e9 + static_cast<double>(base) / 1000.0;
  b.data_parallel_rank = rank;
  KvEvent e;
  e.type = EventType::kBlockStored;
  e.block_hashes = {0, n};
  e.token_ids = {0, n * 16};
  e.block_size = 16;
  e.medium = "GPU";
  for (uint32_t i = 0; i < n; ++i) {
    if (bytes_hashes) {
      uint8_t digest[32] = {};
      uint64_t v = base + i;
      for (int k = 0; k < 8; ++k) digest[31 - k] = static_cast<uint8_t>(v >> (8 * k));
      digest[0] = 0xab;
      b.keys.push_back(BlockKey::FromBytes(digest, 32));
    } else {
      b.keys.push_back(BlockKey::FromU64(base + i));
    }
  }
  for (uint32_t t = 0; t < n * 16; ++t) b.tokens.push_back(static_cast<int64_t>(t));
  b.events.push_back(e);
  return b;
}

inline EventBatch RemoveBatch(uint64_t hash, uint32_t rank = 0) {
  EventBatch b;
  b.ts = 1.7e9 + 0.5;
  b.data_parallel_rank = rank;
  KvEvent e;
  e.type = EventType::kBlockRemoved;
  e.block_hashes = {0, 1};
  e.medium = "GPU";
  b.keys.push_back(BlockKey::FromU64(hash));
  b.events.push_back(e);
  return b;
}

inline EventBatch ClearBatch(uint32_t rank = 0) {
  EventBatch b;
  b.ts = 1.7e9 + 0.25;
  b.data_parallel_rank = rank;
  KvEvent e;
  e.type = EventType::kAllBlocksCleared;
  b.events.push_back(e);
  return b;
}

inline std::string StorePayload(uint64_t base, uint32_t n = 2, uint32_t rank = 0,
                                const WireEra& era = WireEra::Newest(), bool bytes_hashes = false) {
  return EncodePayload(StoreBatch(base, n, rank, bytes_hashes), era);
}

// Records everything a BatchSink sees. Thread-safe.
class RecordingSink : public BatchSink {
 public:
  struct PerSource {
    std::vector<uint64_t> seqs;         // applied, in order
    std::vector<uint64_t> live_seqs;    // the subset that came from the SUB socket
    uint64_t replayed = 0;
    std::set<uint64_t> blocks;          // wire() of currently stored blocks
    std::vector<ResetReason> resets;
    std::vector<SourceState> states;    // every state entered
    bool added = false;
    bool removed = false;
  };

  void OnSourceAdded(const SourceSpec& s) override {
    std::lock_guard<std::mutex> lock(mu_);
    per_[s.name].added = true;
  }
  void OnBatch(const SourceSpec& s, uint64_t seq, const EventBatch& b, bool replayed) override {
    std::lock_guard<std::mutex> lock(mu_);
    PerSource& p = per_[s.name];
    p.seqs.push_back(seq);
    if (replayed) {
      ++p.replayed;
    } else {
      p.live_seqs.push_back(seq);
    }
    for (const KvEvent& e : b.events) {
      switch (e.type) {
        case EventType::kBlockStored:
          for (const BlockKey& k : b.HashesOf(e)) p.blocks.insert(k.wire());
          break;
        case EventType::kBlockRemoved:
          for (const BlockKey& k : b.HashesOf(e)) p.blocks.erase(k.wire());
          break;
        case EventType::kAllBlocksCleared:
          p.blocks.clear();
          break;
      }
    }
  }
  void OnSourceReset(const SourceSpec& s, ResetReason r) override {
    std::lock_guard<std::mutex> lock(mu_);
    PerSource& p = per_[s.name];
    p.resets.push_back(r);
    p.blocks.clear();
  }
  void OnSourceStateChanged(const SourceSpec& s, SourceState, SourceState to) override {
    std::lock_guard<std::mutex> lock(mu_);
    per_[s.name].states.push_back(to);
  }
  void OnSourceRemoved(const SourceSpec& s) override {
    std::lock_guard<std::mutex> lock(mu_);
    per_[s.name].removed = true;
  }

  PerSource Get(const std::string& name) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = per_.find(name);
    return it == per_.end() ? PerSource{} : it->second;
  }
  bool Saw(const std::string& name, uint64_t seq) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = per_.find(name);
    if (it == per_.end()) return false;
    for (uint64_t s : it->second.seqs) {
      if (s == seq) return true;
    }
    return false;
  }
  bool SawLive(const std::string& name, uint64_t seq) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = per_.find(name);
    if (it == per_.end()) return false;
    for (uint64_t s : it->second.live_seqs) {
      if (s == seq) return true;
    }
    return false;
  }
  size_t Applied(const std::string& name) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = per_.find(name);
    return it == per_.end() ? 0 : it->second.seqs.size();
  }

 private:
  mutable std::mutex mu_;
  std::map<std::string, PerSource> per_;
};

// Polls `pred` every 2 ms until true or `timeout`; returns its last value.
inline bool WaitFor(const std::function<bool()>& pred,
                    std::chrono::milliseconds timeout = std::chrono::milliseconds(10000)) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return pred();
}

// seqs == [first, first+1, ..., last]?
inline bool IsRange(const std::vector<uint64_t>& seqs, uint64_t first, uint64_t last) {
  if (seqs.size() != last - first + 1) return false;
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (seqs[i] != first + i) return false;
  }
  return true;
}

}  // namespace kvidx::ingest::testing
