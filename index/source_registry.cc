#include "index/source_registry.h"

namespace kvidx {

namespace {
std::string NameKey(std::string_view replica, uint32_t dp_rank) {
  std::string k(replica);
  k.push_back('\0');
  k += std::to_string(dp_rank);
  return k;
}
}  // namespace

Result<SourceId> SourceRegistry::Register(std::string_view replica, uint32_t dp_rank) {
  MutexLock lock(mu_);
  std::string key = NameKey(replica, dp_rank);
  auto it = by_name_.find(key);
  if (it != by_name_.end()) {
    Slot(it->second)->live.store(true, std::memory_order_release);
    return it->second;
  }
  size_t n = count_.load(std::memory_order_relaxed);
  if (n >= kMaxSources) {
    return Status::OutOfRange("too many sources: " + std::to_string(kMaxSources) +
                              " distinct (replica, dp rank) pairs registered; ids of removed sources stay reserved");
  }
  size_t c = n / kChunk;
  SourceInfo* chunk = chunks_[c].load(std::memory_order_relaxed);
  if (chunk == nullptr) {
    owned_.emplace_back(new SourceInfo[kChunk]);
    chunk = owned_.back().get();
    chunks_[c].store(chunk, std::memory_order_release);
  }
  SourceInfo& info = chunk[n % kChunk];
  info.replica = std::string(replica);
  info.dp_rank = dp_rank;
  info.live.store(true, std::memory_order_relaxed);
  by_name_.emplace(std::move(key), static_cast<SourceId>(n));
  count_.store(n + 1, std::memory_order_release);
  return static_cast<SourceId>(n);
}

std::optional<SourceId> SourceRegistry::Find(std::string_view replica, uint32_t dp_rank) const {
  MutexLock lock(mu_);
  auto it = by_name_.find(NameKey(replica, dp_rank));
  if (it == by_name_.end()) return std::nullopt;
  return it->second;
}

const SourceInfo* SourceRegistry::Get(SourceId id) const { return Slot(id); }

SourceInfo* SourceRegistry::Slot(SourceId id) const {
  if (id >= count_.load(std::memory_order_acquire)) return nullptr;
  SourceInfo* chunk = chunks_[id / kChunk].load(std::memory_order_acquire);
  return chunk == nullptr ? nullptr : &chunk[id % kChunk];
}

void SourceRegistry::Retire(SourceId id) {
  MutexLock lock(mu_);
  if (SourceInfo* info = Slot(id)) info->live.store(false, std::memory_order_release);
}

bool SourceRegistry::IsLive(SourceId id) const {
  const SourceInfo* info = Get(id);
  return info != nullptr && info->live.load(std::memory_order_acquire);
}

}  // namespace kvidx
