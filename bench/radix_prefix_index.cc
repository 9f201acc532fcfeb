#include "bench/radix_prefix_index.h"

#include <algorithm>

namespace kvidx::bench {
RadixPrefixIndex::RadixPrefixIndex() { NewNode(kNone); }   // kRoot: no edge, never pruned

uint32_t RadixPrefixIndex::NewNode(uint32_t parent) {
  uint32_t id;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
  } else {
    id = static_cast<uint32_t>(nodes_.size());
    nodes_.emplace_back();
  }
  Node& n = nodes_[id];
  n.parent = parent;
  n.live = true;
  if (parent != kNone) nodes_[parent].kids.push_back(id);
  return id;
}

bool RadixPrefixIndex::Store(uint32_t replica, std::span<const uint64_t> blocks, const uint64_t* parent) {
  uint32_t id = kRoot, end = 0;   // the cursor: the next block goes at edge position `end` of node `id`
  if (parent != nullptr) {
    const RunPlace* w = blocks_.Find(*parent);
    if (w == nullptr) return false;
    id = w->run;
    end = w->pos + 1;
  }
  for (size_t i = 0; i < blocks.size(); ++i) {
    Node& node = nodes_[id];
    if (end < node.edge.size()) {
      if (node.edge[end] == blocks[i]) {
        HolderOf(node.holders, replica).Set(end++);
        continue;
      }
      Split(id, end);
    }
    if (const RunPlace* w = blocks_.Find(blocks[i]); w != nullptr) {
      if (w->pos != 0 || nodes_[w->run].parent != id) return false;
      id = w->run;
      HolderOf(nodes_[id].holders, replica).Set(0);
      end = 1;
      continue;
    }
    if (id == kRoot || !nodes_[id].kids.empty()) id = NewNode(id);
    Extend(id, replica, blocks.subspan(i));
    return true;
  }
  return true;
}

void RadixPrefixIndex::Remove(uint32_t replica, std::span<const uint64_t> blocks) {
  UnholdBlocks(blocks_, nodes_, replica, blocks, &touched_);
  for (uint32_t id : touched_) Prune(id);
}

uint32_t RadixPrefixIndex::Match(std::span<const uint64_t> keys, std::span<uint32_t> match) const {
  std::fill(match.begin(), match.end(), 0);
  uint32_t best = 0, id = kRoot;
  size_t i = 0;
  while (i < keys.size()) {
    const RunPlace* w = blocks_.Find(keys[i]);
    if (w == nullptr || w->pos != 0 || nodes_[w->run].parent != id) break;
    id = w->run;
    const Node& node = nodes_[id];
    const size_t len = node.edge.size(), limit = std::min(len, keys.size() - i);
    size_t k = 1;
    while (k < limit && node.edge[k] == keys[i + k]) ++k;
    const uint32_t through =
        MatchSegment(node.holders, static_cast<uint32_t>(i), 0, static_cast<uint32_t>(k), match, &best);
    if (through == 0 || k < len) break;
    i += k;
  }
  return best;
}

uint64_t RadixPrefixIndex::HeldBlocks(uint32_t replica) const { return CountHeld(nodes_, replica); }

uint64_t RadixPrefixIndex::OwnerEntries() const { return CountHeld(nodes_, std::nullopt); }

void RadixPrefixIndex::Split(uint32_t id, uint32_t at) {
  const uint32_t tail = NewNode(kNone);
  Node& head = nodes_[id];
  Node& rest = nodes_[tail];
  rest.parent = id;
  rest.edge.assign(head.edge.begin() + at, head.edge.end());
  for (uint32_t p = 0; p < rest.edge.size(); ++p) blocks_.Move(rest.edge[p], {tail, p});
  head.edge.resize(at);
  rest.kids = std::move(head.kids);
  head.kids = {tail};
  for (uint32_t kid : rest.kids) nodes_[kid].parent = tail;
  // Bits [at, end) move to the new node, shifted down by `at`.
  std::vector<HeldBits> kept;
  for (const HeldBits& h : head.holders) {
    HeldBits moved(h.owner);
    HeldBits cut(h.owner);
    for (uint32_t p = 0; p < h.words() * 64; ++p) {
      if (h.Has(p)) p < at ? cut.Set(p) : moved.Set(p - at);
    }
    if (moved.held > 0) rest.holders.push_back(std::move(moved));
    if (cut.held > 0) kept.push_back(std::move(cut));
  }
  head.holders = std::move(kept);
}

void RadixPrefixIndex::Extend(uint32_t id, uint32_t replica, std::span<const uint64_t> blocks) {
  Node& node = nodes_[id];
  const auto base = static_cast<uint32_t>(node.edge.size());
  node.edge.insert(node.edge.end(), blocks.begin(), blocks.end());
  for (uint32_t j = 0; j < blocks.size(); ++j) {
    blocks_.Insert({id, base + j});   // new: chained after a block that was new
    HolderOf(node.holders, replica).Set(base + j);
  }
}

void RadixPrefixIndex::Prune(uint32_t id) {
  while (id != kRoot && nodes_[id].live && nodes_[id].kids.empty()) {
    Node& node = nodes_[id];
    uint32_t end = 0;
    for (const HeldBits& h : node.holders) end = std::max(end, h.End());
    if (end == node.edge.size()) return;
    for (size_t p = end; p < node.edge.size(); ++p) blocks_.Erase(node.edge[p]);
    node.edge.resize(end);
    if (end > 0) return;
    const uint32_t parent = node.parent;
    std::vector<uint32_t>& kids = nodes_[parent].kids;
    *std::find(kids.begin(), kids.end(), id) = kids.back();
    kids.pop_back();
    node = Node{};
    free_.push_back(id);
    id = parent;
  }
}

}  // namespace kvidx::bench
