// Source: one event stream of one engine, i.e. a (replica, DP rank) pair.
//
// vLLM publishes one stream per data-parallel rank (endpoint port + rank), so
// the unit the index tracks ownership for is the (replica name, DP rank)
// pair. SourceRegistry hands out dense SourceIds (0, 1, 2, ...) so that the
// index can keep per-source state in flat arrays and store a source in 16
// bits per owner record.
//
// An id's life: Register binds it to a (replica, rank); Retire marks the
// source gone but keeps the binding, so the same pair registered again
// revives the same id (its restored blocks and counters with it). Release
// is Retire plus a promise from the caller that the index holds nothing of
// the id any more (BlockIndex::ReleaseSource ran): after `reuse_after` a
// *new* pair may take the id, the oldest released first. The wait outlives
// every time-bound use of an old id outside the index (a route in flight
// expires after 10 minutes, a query's answer is built in microseconds), so
// an autoscaled fleet whose pods all get new names runs for ever on a
// bounded set of ids. Only when every id is live or released too recently
// does Register fail (kMaxSources pairs at once).
//
// A SourceInfo is immutable once published, apart from `live`. When an id
// is reused, the old info is retired to an epoch domain and freed once no
// Reader that could have seen it is left, so lock-free readers never see a
// name change under them.
//
// SourceState (source_state.h) is owned by ingest; the index only stores it.
//
// Thread-safe: Register/Retire/Release/Find take an internal mutex; Reader
// is lock-free.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "base/mutex.h"
#include "base/status.h"
#include "base/thread_annotations.h"
#include "index/epoch.h"
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
  using Clock = std::chrono::steady_clock;
  struct Options {
    // How long a released id waits before a new (replica, rank) may take it.
    Clock::duration reuse_after = std::chrono::minutes(15);
    // The time; tests pass a fake clock. Default: Clock::now.
    std::function<Clock::time_point()> now;
  };

  SourceRegistry() : SourceRegistry(Options()) {}
  explicit SourceRegistry(Options options);
  ~SourceRegistry();
  SourceRegistry(const SourceRegistry&) = delete;
  SourceRegistry& operator=(const SourceRegistry&) = delete;

  // Where Register's id came from.
  enum class Origin : uint8_t {
    kOwn,     // the pair's own id, revived if it was retired or released
    kNew,     // never used before: nothing anywhere refers to it
    kReused,  // released by another pair: its per-source state elsewhere
              // (index counters, route state) must start afresh
  };
  // Returns the id of (replica, dp_rank): its own if it has one, else the
  // oldest id released at least reuse_after ago, else a never-used one;
  // `*origin` (if given) says which. OutOfRange when no id is free.
  Result<SourceId> Register(std::string_view replica, uint32_t dp_rank, Origin* origin = nullptr)
      KVIDX_EXCLUDES(mu_);
  // Marks a registered id as no longer existing (no-op for unknown ids).
  void Retire(SourceId id) KVIDX_EXCLUDES(mu_);
  // Retire, and lets a new pair take the id after reuse_after. Only once the
  // index holds nothing of `id`.
  void Release(SourceId id) KVIDX_EXCLUDES(mu_);
  std::optional<SourceId> Find(std::string_view replica, uint32_t dp_rank) const KVIDX_EXCLUDES(mu_);
  // Ids handed out so far (live, retired or released): every id is below it.
  size_t size() const { return count_.load(std::memory_order_acquire); }
  // Ids a new (replica, rank) could take now or after reuse_after: never
  // used ones plus released ones.
  size_t ids_free() const KVIDX_EXCLUDES(mu_);

  // A read section: SourceInfo pointers it returns stay valid (and keep
  // their names) until it ends. Keep it short; one per thread at a time
  // (Readers do not nest).
  class Reader {
   public:
    explicit Reader(const SourceRegistry& r) : r_(r), guard_(r.epoch_) {}
    // Info of a handed-out id; nullptr for an id never returned by Register.
    const SourceInfo* Get(SourceId id) const { return r_.Slot(id); }
    // Registered and not retired.
    bool IsLive(SourceId id) const {
      const SourceInfo* info = Get(id);
      return info != nullptr && info->live.load(std::memory_order_acquire);
    }

   private:
    const SourceRegistry& r_;
    internal::EpochDomain::ReadGuard guard_;
  };

 private:
  static constexpr size_t kChunk = 1024;
  SourceInfo* Slot(SourceId id) const;
  void Publish(SourceId id, SourceInfo* info) KVIDX_REQUIRES(mu_);
  // The oldest released id that may be reused now, or nullopt.
  std::optional<SourceId> TakeReusable() KVIDX_REQUIRES(mu_);

  const Options opts_;
  mutable internal::EpochDomain epoch_;
  mutable Mutex mu_;
  std::unordered_map<std::string, SourceId> by_name_ KVIDX_GUARDED_BY(mu_);  // key: replica + '\0' + rank
  std::deque<std::pair<SourceId, Clock::time_point>> released_ KVIDX_GUARDED_BY(mu_);   // oldest first
  // Chunked so that readers never see a reallocation; chunks of slots are
  // allocated on first use and kept.
  std::unique_ptr<std::atomic<std::atomic<SourceInfo*>*>[]> chunks_{
      new std::atomic<std::atomic<SourceInfo*>*>[kMaxSources / kChunk + 1]()};
  std::atomic<size_t> count_{0};
};

}  // namespace kvidx
