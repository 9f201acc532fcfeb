#include "index/tier.h"

namespace kvidx {

TierRegistry::TierRegistry() {
  names_[0] = "GPU";
  names_[1] = "CPU";
  names_[2] = "STORAGE";
  count_.store(3, std::memory_order_release);
}

std::optional<Tier> TierRegistry::Find(std::string_view medium) const {
  size_t n = count_.load(std::memory_order_acquire);
  for (size_t i = 0; i < n; ++i) {
    if (names_[i] == medium) return static_cast<Tier>(i);
  }
  return std::nullopt;
}

Result<Tier> TierRegistry::Intern(std::string_view medium) {
  if (auto t = Find(medium)) return *t;
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = count_.load(std::memory_order_relaxed);
  for (size_t i = 0; i < n; ++i) {
    if (names_[i] == medium) return static_cast<Tier>(i);
  }
  if (n >= kMaxTiers) {
    return Status::OutOfRange("too many distinct media (limit " + std::to_string(kMaxTiers) +
                              "), cannot intern '" + std::string(medium) + "'");
  }
  names_[n] = std::string(medium);
  count_.store(n + 1, std::memory_order_release);
  return static_cast<Tier>(n);
}

std::string_view TierRegistry::Name(Tier t) const {
  size_t i = static_cast<size_t>(t);
  if (i >= count_.load(std::memory_order_acquire)) return {};
  return names_[i];
}

}  // namespace kvidx
