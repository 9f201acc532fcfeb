#include "bench/run_prefix_index.h"

#include <algorithm>

namespace kvidx::bench {

uint32_t RunPrefixIndex::NewRun() {
  if (!free_.empty()) {
    const uint32_t id = free_.back();
    free_.pop_back();
    return id;
  }
  runs_.emplace_back();
  return static_cast<uint32_t>(runs_.size() - 1);
}

void RunPrefixIndex::Store(uint32_t replica, std::span<const uint64_t> blocks, const uint64_t* parent) {
  uint32_t run = kNone, end = 0;   // the cursor: the chain continues at runs_[run].keys[end]
  if (const RunPlace* p = parent == nullptr ? nullptr : blocks_.Find(*parent); p != nullptr) {
    run = p->run;
    end = p->pos + 1;
  }
  for (uint64_t h : blocks) {
    if (run != kNone && end < runs_[run].keys.size() && runs_[run].keys[end] == h) {
      HolderOf(runs_[run].holders, replica).Set(end++);
      continue;
    }
    // Not next in the cursor's run: a new block extends the run whose last
    // entry is its parent, else opens a run; one probe tells whether it is
    // new, and where it is if not.
    const bool extend = run != kNone && end == runs_[run].keys.size();
    const uint32_t target = extend ? run : NewRun();
    const auto pos = static_cast<uint32_t>(runs_[target].keys.size());
    runs_[target].keys.push_back(h);
    const auto [at, added] = blocks_.Insert({target, pos});
    if (!added) {
      runs_[target].keys.pop_back();
      if (!extend) free_.push_back(target);
    }
    run = at.run;
    end = at.pos + 1;
    HolderOf(runs_[run].holders, replica).Set(at.pos);
  }
}

void RunPrefixIndex::Remove(uint32_t replica, std::span<const uint64_t> blocks) {
  UnholdBlocks(blocks_, runs_, replica, blocks, &touched_);
  for (uint32_t id : touched_) Prune(id);
}

uint32_t RunPrefixIndex::Match(std::span<const uint64_t> keys, std::span<uint32_t> match) const {
  std::fill(match.begin(), match.end(), 0);
  uint32_t best = 0;
  size_t i = 0;
  while (i < keys.size()) {
    const RunPlace* p = blocks_.Find(keys[i]);
    if (p == nullptr) break;
    const Run& run = runs_[p->run];
    const size_t limit = std::min(run.keys.size() - p->pos, keys.size() - i);
    size_t k = 1;
    while (k < limit && run.keys[p->pos + k] == keys[i + k]) ++k;
    if (MatchSegment(run.holders, static_cast<uint32_t>(i), p->pos, static_cast<uint32_t>(k), match, &best) == 0) break;
    i += k;
  }
  return best;
}

uint64_t RunPrefixIndex::HeldBlocks(uint32_t replica) const { return CountHeld(runs_, replica); }

uint64_t RunPrefixIndex::OwnerEntries() const { return CountHeld(runs_, std::nullopt); }

void RunPrefixIndex::Prune(uint32_t id) {
  Run& run = runs_[id];
  uint32_t end = 0;
  for (const HeldBits& h : run.holders) end = std::max(end, h.End());
  if (end == run.keys.size()) return;
  for (size_t p = end; p < run.keys.size(); ++p) blocks_.Erase(run.keys[p]);
  run.keys.resize(end);
  if (end > 0) return;
  run = Run{};
  free_.push_back(id);
}

}  // namespace kvidx::bench
