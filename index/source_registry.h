// Source: one event stream of one engine, i.e. a (replica, DP rank) pair.
//
// vLLM publishes one stream per data-parallel rank (endpoint port + rank), so
// the unit the index tracks ownership for is the (replica name, DP rank)
// pair. SourceRegistry hands out dense SourceIds (0, 1, 2, ...) so that the
// index can keep per-source state in flat arrays and store a source in 16
// bits per owner record. Ids are never reused while the registry lives.
//
// A removed source is retired, not forgotten: owner records, snapshots
// (dense by id) and lock-free readers of Get() may still name its id, so
// the id stays bound to its (replica, rank) and a later Register of the same
// pair revives it. What a retired id keeps is its SourceInfo and name-map
// entry (~100 bytes plus twice the replica name); consumers that enumerate
// sources (metrics, listings) skip retired ones. The bound on distinct
// (replica, rank) pairs over the registry's life is kMaxSources.
//
// SourceState (source_state.h) is owned by ingest; the index only stores it.
//
// Thread-safe: Register/Find take an internal mutex; Get is lock-free for ids
// that Register has returned.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/mutex.h"
#include "base/status.h"
#include "base/thread_annotations.h"
#include "index/source_state.h"

namespace kvidx {

using SourceId = uint32_t;
// Owner records store a source in 16 bits; two values are reserved.
inline constexpr SourceId kMaxSources = 65534;


struct SourceInfo {
  std::string replica;   // operator-visible replica name (pod, host:port, ...)
  uint32_t dp_rank = 0;
  std::atomic<bool> live{false};   // false once retired (until registered again)
};

class SourceRegistry {
 public:
  SourceRegistry() = default;
  SourceRegistry(const SourceRegistry&) = delete;
  SourceRegistry& operator=(const SourceRegistry&) = delete;

  // Returns the id of (replica, dp_rank), assigning the next one on first
  // sight (and reviving it if retired). OutOfRange after kMaxSources sources.
  Result<SourceId> Register(std::string_view replica, uint32_t dp_rank) KVIDX_EXCLUDES(mu_);
  // Marks a registered id as no longer existing (no-op for unknown ids).
  void Retire(SourceId id) KVIDX_EXCLUDES(mu_);
  // Registered and not retired.
  bool IsLive(SourceId id) const;
  std::optional<SourceId> Find(std::string_view replica, uint32_t dp_rank) const KVIDX_EXCLUDES(mu_);
  // Info of a registered id; nullptr for an id never returned by Register.
  const SourceInfo* Get(SourceId id) const;
  size_t size() const { return count_.load(std::memory_order_acquire); }

 private:
  SourceInfo* Slot(SourceId id) const;

  static constexpr size_t kChunk = 1024;
  mutable Mutex mu_;
  std::unordered_map<std::string, SourceId> by_name_ KVIDX_GUARDED_BY(mu_);  // key: replica + '\0' + rank
  // Chunked so that Get() never sees a reallocation.
  std::unique_ptr<std::atomic<SourceInfo*>[]> chunks_{new std::atomic<SourceInfo*>[kMaxSources / kChunk + 1]()};
  std::vector<std::unique_ptr<SourceInfo[]>> owned_ KVIDX_GUARDED_BY(mu_);
  std::atomic<size_t> count_{0};
};

}  // namespace kvidx
