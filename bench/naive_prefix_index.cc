#include "bench/naive_prefix_index.h"

#include <algorithm>

namespace kvidx::bench {
namespace {

auto IsGpuOwner(uint32_t replica) {
  return [replica](const auto& o) { return o.replica == replica && o.tier == 0; };
}

}  // namespace

void NaivePrefixIndex::Store(uint32_t replica, std::span<const uint64_t> blocks) {
  for (uint64_t key : blocks) {
    std::vector<Owner>& owners = owners_[key];
    auto o = std::find_if(owners.begin(), owners.end(), IsGpuOwner(replica));
    if (o != owners.end()) {
      ++o->refcount;
    } else {
      owners.push_back({replica, 0, 1});
    }
  }
}

void NaivePrefixIndex::Remove(uint32_t replica, std::span<const uint64_t> blocks) {
  for (uint64_t key : blocks) {
    auto it = owners_.find(key);
    if (it == owners_.end()) continue;   // like kvidx's remove_unknown drift: nothing to undo
    std::vector<Owner>& owners = it->second;
    auto o = std::find_if(owners.begin(), owners.end(), IsGpuOwner(replica));
    if (o == owners.end() || --o->refcount > 0) continue;
    *o = owners.back();
    owners.pop_back();
    if (owners.empty()) owners_.erase(it);
  }
}

uint32_t NaivePrefixIndex::Match(std::span<const uint64_t> keys, std::span<uint32_t> match) const {
  std::fill(match.begin(), match.end(), 0);
  uint32_t best = 0;
  for (uint32_t i = 0; i < keys.size(); ++i) {
    auto it = owners_.find(keys[i]);
    if (it == owners_.end()) break;
    uint32_t alive = 0;
    for (const Owner& o : it->second) {
      if (o.tier == 0 && match[o.replica] == i) {
        match[o.replica] = i + 1;
        ++alive;
      }
    }
    if (alive == 0) break;
    best = i + 1;
  }
  return best;
}

uint64_t NaivePrefixIndex::HeldBlocks(uint32_t replica) const {
  uint64_t n = 0;
  for (const auto& [key, owners] : owners_) n += std::count_if(owners.begin(), owners.end(), IsGpuOwner(replica));
  return n;
}

uint64_t NaivePrefixIndex::OwnerEntries() const {
  uint64_t n = 0;
  for (const auto& [key, owners] : owners_) n += owners.size();
  return n;
}

}  // namespace kvidx::bench
