#include "server/discovery_state.h"

#include <utility>

namespace kvidx::server {

void DiscoveryState::StartGrace(Engine* e, Clock::time_point until) {
  ++work_.other;
  e->deadline = until;
  deadlines_.emplace(until, e->entry.engine.replica);
  ++providers_.find(e->provider)->second.counts.grace;
  --providers_.find(e->provider)->second.counts.active;
}

void DiscoveryState::EndGrace(Engine* e) {
  ++work_.other;
  auto [first, last] = deadlines_.equal_range(*e->deadline);
  for (auto it = first; it != last; ++it) {
    if (it->second == e->entry.engine.replica) {
      deadlines_.erase(it);
      break;
    }
  }
  e->deadline.reset();
  --providers_.find(e->provider)->second.counts.grace;
  ++providers_.find(e->provider)->second.counts.active;
}

// Forgets the engine and issues its removal.
void DiscoveryState::Drop(const std::string& replica, DiscoveryActions* out) {
  auto it = engines_.find(replica);
  if (it == engines_.end()) return;
  Engine& e = it->second;
  if (e.deadline) EndGrace(&e);
  Provider& p = providers_.find(e.provider)->second;
  ++work_.other;
  --p.counts.active;
  ++p.counts.removed;
  p.order.erase(e.order);
  p.engines.erase(replica);
  out->remove.push_back({e.provider, replica});
  engines_.erase(it);
}

void DiscoveryState::Admit(Provider* p, std::string_view provider, const EngineEntry& entry, DiscoveryActions* out) {
  const std::string& replica = entry.engine.replica;
  ++work_.lookups;
  auto it = engines_.find(replica);
  if (it != engines_.end()) {
    Engine& e = it->second;
    if (e.provider != provider) {
      ++p->counts.conflicts;
      return;
    }
    if (e.seen == p->answers) return;  // listed twice in one answer
    if (SameEngine(e.entry, entry)) {
      e.seen = p->answers;
      p->order.splice(p->order.begin(), p->order, e.order);
      if (e.deadline) EndGrace(&e);  // back within the grace: its sources never left
      return;
    }
    Drop(replica, out);  // redefined: the old sources read the wrong place
  }
  Engine& e = engines_[replica];
  e.provider = std::string(provider);
  e.entry = entry;
  e.seen = p->answers;
  e.order = p->order.insert(p->order.begin(), &e);
  p->engines.emplace(replica, &e);
  ++work_.other;
  ++p->counts.active;
  ++p->counts.added;
  out->add.push_back(entry);
}

void DiscoveryState::MarkVanished(Provider* p, std::chrono::milliseconds grace, Clock::time_point now) {
  // Listed engines moved to the front: the rest is the tail.
  for (auto it = p->order.rbegin(); it != p->order.rend() && (*it)->seen != p->answers; ++it) {
    ++work_.other;
    if (!(*it)->deadline) StartGrace(*it, now + grace);
  }
}

DiscoveryActions DiscoveryState::Update(std::string_view provider, std::chrono::milliseconds grace,
                                        const std::vector<EngineEntry>& engines, Clock::time_point now) {
  auto pit = providers_.find(provider);
  if (pit == providers_.end()) pit = providers_.emplace(std::string(provider), Provider{}).first;
  Provider* p = &pit->second;
  ++p->answers;
  DiscoveryActions out;
  for (const EngineEntry& entry : engines) Admit(p, provider, entry, &out);
  MarkVanished(p, grace, now);
  DiscoveryActions expired = Expire(now);
  out.remove.insert(out.remove.end(), expired.remove.begin(), expired.remove.end());
  return out;
}

DiscoveryActions DiscoveryState::Expire(Clock::time_point now) {
  DiscoveryActions out;
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    std::string replica = deadlines_.begin()->second;
    Drop(replica, &out);
  }
  return out;
}

void DiscoveryState::Forget(std::string_view replica) {
  auto it = engines_.find(std::string(replica));
  if (it == engines_.end()) return;
  Engine& e = it->second;
  if (e.deadline) EndGrace(&e);
  Provider& p = providers_.find(e.provider)->second;
  --p.counts.active;
  --p.counts.added;
  p.order.erase(e.order);
  p.engines.erase(e.entry.engine.replica);
  engines_.erase(it);
}

std::optional<DiscoveryState::Clock::time_point> DiscoveryState::NextDeadline() const {
  if (deadlines_.empty()) return std::nullopt;
  return deadlines_.begin()->first;
}

DiscoveryState::ProviderCounts DiscoveryState::Counts(std::string_view provider) const {
  auto it = providers_.find(provider);
  return it == providers_.end() ? ProviderCounts{} : it->second.counts;
}

}  // namespace kvidx::server
