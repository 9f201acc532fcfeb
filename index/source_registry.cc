#include "index/source_registry.h"

#include <algorithm>

namespace kvidx {

namespace {
std::string NameKey(std::string_view replica, uint32_t dp_rank) {
  std::string k(replica);
  k.push_back('\0');
  k += std::to_string(dp_rank);
  return k;
}
}  // namespace

SourceRegistry::SourceRegistry(Options options) : opts_(std::move(options)) {}

SourceRegistry::~SourceRegistry() {
  for (size_t c = 0; c <= kMaxSources / kChunk; ++c) {
    std::atomic<SourceInfo*>* chunk = chunks_[c].load(std::memory_order_relaxed);
    if (chunk == nullptr) continue;
    for (size_t i = 0; i < kChunk; ++i) delete chunk[i].load(std::memory_order_relaxed);
    delete[] chunk;
  }
}

Result<SourceId> SourceRegistry::Register(std::string_view replica, uint32_t dp_rank, Origin* origin) {
  Origin ignored;
  if (origin == nullptr) origin = &ignored;
  *origin = Origin::kOwn;
  MutexLock lock(mu_);
  std::string key = NameKey(replica, dp_rank);
  if (auto it = by_name_.find(key); it != by_name_.end()) {
    const SourceId id = it->second;
    auto r = std::find_if(released_.begin(), released_.end(), [&](const auto& e) { return e.first == id; });
    if (r != released_.end()) released_.erase(r);
    Slot(id)->live.store(true, std::memory_order_release);
    return id;
  }
  auto* info = new SourceInfo;
  info->replica = std::string(replica);
  info->dp_rank = dp_rank;
  info->live.store(true, std::memory_order_relaxed);
  SourceId id;
  if (std::optional<SourceId> old = TakeReusable()) {
    id = *old;
    const SourceInfo* prev = Slot(id);
    by_name_.erase(NameKey(prev->replica, prev->dp_rank));
    Publish(id, info);
    *origin = Origin::kReused;
  } else {
    const size_t n = count_.load(std::memory_order_relaxed);
    if (n >= kMaxSources) {
      delete info;
      return Status::OutOfRange("too many sources: all " + std::to_string(kMaxSources) +
                                " source ids are live or were released less than reuse_after ago (" +
                                std::to_string(released_.size()) + " released)");
    }
    id = static_cast<SourceId>(n);
    Publish(id, info);
    *origin = Origin::kNew;
    count_.store(n + 1, std::memory_order_release);
  }
  by_name_.emplace(std::move(key), id);
  return id;
}

std::optional<SourceId> SourceRegistry::TakeReusable() {
  if (released_.empty()) return std::nullopt;
  const Clock::time_point now = opts_.now ? opts_.now() : Clock::now();
  if (now - released_.front().second < opts_.reuse_after) return std::nullopt;
  const SourceId id = released_.front().first;
  released_.pop_front();
  return id;
}

void SourceRegistry::Publish(SourceId id, SourceInfo* info) {
  std::atomic<std::atomic<SourceInfo*>*>& c = chunks_[id / kChunk];
  std::atomic<SourceInfo*>* chunk = c.load(std::memory_order_relaxed);
  if (chunk == nullptr) {
    chunk = new std::atomic<SourceInfo*>[kChunk]();
    c.store(chunk, std::memory_order_release);
  }
  SourceInfo* prev = chunk[id % kChunk].exchange(info, std::memory_order_acq_rel);
  if (prev != nullptr) epoch_.Retire(prev, [](void* p) { delete static_cast<SourceInfo*>(p); });
}

std::optional<SourceId> SourceRegistry::Find(std::string_view replica, uint32_t dp_rank) const {
  MutexLock lock(mu_);
  auto it = by_name_.find(NameKey(replica, dp_rank));
  if (it == by_name_.end()) return std::nullopt;
  return it->second;
}

SourceInfo* SourceRegistry::Slot(SourceId id) const {
  if (id >= count_.load(std::memory_order_acquire)) return nullptr;
  std::atomic<SourceInfo*>* chunk = chunks_[id / kChunk].load(std::memory_order_acquire);
  return chunk == nullptr ? nullptr : chunk[id % kChunk].load(std::memory_order_acquire);
}

void SourceRegistry::Retire(SourceId id) {
  MutexLock lock(mu_);
  if (SourceInfo* info = Slot(id)) info->live.store(false, std::memory_order_release);
}

void SourceRegistry::Release(SourceId id) {
  MutexLock lock(mu_);
  SourceInfo* info = Slot(id);
  if (info == nullptr) return;
  info->live.store(false, std::memory_order_release);
  if (std::none_of(released_.begin(), released_.end(), [&](const auto& e) { return e.first == id; })) {
    released_.emplace_back(id, opts_.now ? opts_.now() : Clock::now());
  }
}

size_t SourceRegistry::ids_free() const {
  MutexLock lock(mu_);
  return kMaxSources - count_.load(std::memory_order_relaxed) + released_.size();
}

}  // namespace kvidx
