// DiscoveryState: which discovered engines kvidx should have, from each
// provider's successful resolutions and the time, as add / remove actions.
//
// Pure logic, no I/O and no clock of its own: the discovery thread feeds it
// every good answer of a provider (the full engine set it lists) and ticks
// with the current time; it answers with what to add and remove, and the
// thread applies that to the Node. Tests drive it with a fake clock.
//
// Rules (issue 19):
//   - an engine in the answer that kvidx does not have: add it.
//   - an engine missing from an answer enters its grace period (the
//     provider's grace): its sources stay, and the index keeps its blocks.
//     Back in an answer within the grace with the same definition (replica,
//     endpoints, DP size, ...): nothing happens; its sources reconnect and
//     resume by replay. Still missing when the grace ends: remove it.
//     A grace of 0 removes it with the answer that misses it.
//   - an engine back (or still there) with another definition under the same
//     replica name (a new address or port): remove it and add the new one.
//   - a failed resolution is never fed in: the last good set stays.
//   - a replica another provider already has is skipped and counted (the
//     first provider keeps it).
// Identity is the replica name: the SRV target or the address.
//
// Cost: an answer of n engines is n hash lookups (each listed engine moves
// to the front of its provider's recency list); everything else is
// proportional to the changes: the engines missing from the answer are the
// list's tail, walked only as far as the missing and in-grace ones go, and
// the actions, and so the Node's work, name only what changed. Expiry walks
// only the engines whose grace ended (a deadline-ordered map). work()
// counts both parts, for tests of this rule.
//
// Thread-compatible.
#pragma once

#include <chrono>
#include <cstdint>
#include <list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "server/config.h"

namespace kvidx::server {

struct DiscoveryRemoval {
  std::string provider;
  std::string replica;
};

struct DiscoveryActions {
  std::vector<DiscoveryRemoval> remove;  // applied before the adds
  std::vector<EngineEntry> add;

  bool empty() const { return remove.empty() && add.empty(); }
};

class DiscoveryState {
 public:
  using Clock = std::chrono::steady_clock;

  struct ProviderCounts {
    size_t active = 0;     // in the last good answer
    size_t grace = 0;      // missing from it, within the grace period
    uint64_t added = 0;    // add actions issued
    uint64_t removed = 0;  // remove actions issued (grace ended or changed)
    uint64_t conflicts = 0;  // engines skipped: another provider has the replica
  };

  // A good answer of `provider`: every engine it lists now. Engines whose
  // grace ended by `now` are expired as well.
  DiscoveryActions Update(std::string_view provider, std::chrono::milliseconds grace,
                          const std::vector<EngineEntry>& engines, Clock::time_point now);
  // Removes the engines whose grace ended at or before `now`.
  DiscoveryActions Expire(Clock::time_point now);
  // The engine was not added after all (the Node refused it): forget it, so
  // the next answer that lists it tries again.
  void Forget(std::string_view replica);

  // When the next grace period ends, if any engine is in one.
  std::optional<Clock::time_point> NextDeadline() const;
  ProviderCounts Counts(std::string_view provider) const;

  // Operations since construction: `lookups` = engines of answers looked up
  // by replica (one per listed engine); `other` = engine records visited or
  // changed beyond those (missing-engine walk, grace starts and ends, adds,
  // removals, expiry).
  struct Work {
    uint64_t lookups = 0;
    uint64_t other = 0;
  };
  const Work& work() const { return work_; }

 private:
  struct Engine {
    std::string provider;
    EngineEntry entry;
    uint64_t seen = 0;  // the provider's answer number that last listed it
    // In grace until this time; the key of its entry in deadlines_.
    std::optional<Clock::time_point> deadline;
    std::list<Engine*>::iterator order;  // its place in Provider::order
  };
  struct Provider {
    uint64_t answers = 0;
    std::unordered_map<std::string, Engine*> engines;  // by replica
    // Most recently listed first: after an answer, the engines it did not
    // list are the tail.
    std::list<Engine*> order;
    ProviderCounts counts;
  };

  void StartGrace(Engine* e, Clock::time_point until);
  void EndGrace(Engine* e);
  void Drop(const std::string& replica, DiscoveryActions* out);
  void Admit(Provider* p, std::string_view provider, const EngineEntry& entry, DiscoveryActions* out);
  void MarkVanished(Provider* p, std::chrono::milliseconds grace, Clock::time_point now);

  std::unordered_map<std::string, Engine> engines_;  // by replica, all providers
  std::map<std::string, Provider, std::less<>> providers_;
  std::multimap<Clock::time_point, std::string> deadlines_;  // grace end -> replica
  Work work_;
};

}  // namespace kvidx::server
