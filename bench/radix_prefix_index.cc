#include "bench/radix_prefix_index.h"

#include <algorithm>
#include <bit>

namespace kvidx::bench {
namespace {

// Consecutive held positions from position 0, at most `cap`.
template <typename H>
uint32_t LeadingHeld(const H& h, uint32_t cap) {
  uint32_t n = 0;
  for (size_t w = 0; w < h.words() && n < cap; ++w) {
    const uint64_t bits = h.word(w);
    n += static_cast<uint32_t>(std::countr_one(bits));
    if (bits != ~uint64_t{0}) break;
  }
  return std::min(n, cap);
}

// One past the highest held position (0 if none).
template <typename H>
uint32_t HeldEnd(const H& h) {
  for (size_t w = h.words(); w-- > 0;) {
    if (h.word(w) != 0) return static_cast<uint32_t>(w * 64 + 64 - std::countl_zero(h.word(w)));
  }
  return 0;
}

}  // namespace

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
    const Where* w = Locate(*parent);
    if (w == nullptr) return false;
    id = w->node;
    end = w->pos + 1;
  }
  for (size_t i = 0; i < blocks.size(); ++i) {
    Node& node = nodes_[id];
    if (end < node.edge.size()) {
      if (node.edge[end] == blocks[i]) {
        Hold(node, end++, replica);
        continue;
      }
      Split(id, end);
    }
    if (const Where* w = Locate(blocks[i]); w != nullptr) {
      if (w->pos != 0 || nodes_[w->node].parent != id) return false;
      id = w->node;
      Hold(nodes_[id], 0, replica);
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
  touched_.clear();
  for (uint64_t h : blocks) {
    const Where* found = Locate(h);
    if (found == nullptr) continue;
    const Where w = *found;
    Node& node = nodes_[w.node];
    auto hd = std::find_if(node.holders.begin(), node.holders.end(),
                           [&](const Holder& x) { return x.replica == replica; });
    const uint64_t bit = uint64_t{1} << (w.pos % 64);
    if (hd == node.holders.end() || (hd->word(w.pos / 64) & bit) == 0) continue;
    hd->grow_word(w.pos / 64) &= ~bit;
    if (--hd->held == 0) {
      *hd = std::move(node.holders.back());
      node.holders.pop_back();
    }
    if (touched_.empty() || touched_.back() != w.node) touched_.push_back(w.node);
  }
  std::sort(touched_.begin(), touched_.end());
  touched_.erase(std::unique(touched_.begin(), touched_.end()), touched_.end());
  for (uint32_t id : touched_) Prune(id);
}

uint32_t RadixPrefixIndex::Match(std::span<const uint64_t> keys, std::span<uint32_t> match) const {
  std::fill(match.begin(), match.end(), 0);
  uint32_t best = 0, id = kRoot;
  size_t i = 0;
  while (i < keys.size()) {
    const Where* w = Locate(keys[i]);
    if (w == nullptr || w->pos != 0 || nodes_[w->node].parent != id) break;
    id = w->node;
    const Node& node = nodes_[id];
    const size_t len = node.edge.size(), limit = std::min(len, keys.size() - i);
    size_t k = 1;
    while (k < limit && node.edge[k] == keys[i + k]) ++k;
    // A replica reached this node iff it matched every block before it.
    uint32_t through = 0;
    for (const Holder& h : node.holders) {
      if (match[h.replica] != i) continue;
      const uint32_t run = LeadingHeld(h, static_cast<uint32_t>(k));
      match[h.replica] = static_cast<uint32_t>(i + run);
      best = std::max(best, match[h.replica]);
      through += run == len;
    }
    if (through == 0 || k < len) break;
    i += k;
  }
  return best;
}

uint64_t RadixPrefixIndex::HeldBlocks(uint32_t replica) const {
  uint64_t n = 0;
  for (const Node& node : nodes_) {
    for (const Holder& h : node.holders) n += h.replica == replica ? h.held : 0;
  }
  return n;
}

uint64_t RadixPrefixIndex::OwnerEntries() const {
  uint64_t n = 0;
  for (const Node& node : nodes_) {
    for (const Holder& h : node.holders) n += h.held;
  }
  return n;
}

void RadixPrefixIndex::Split(uint32_t id, uint32_t at) {
  const uint32_t tail = NewNode(kNone);
  Node& head = nodes_[id];
  Node& rest = nodes_[tail];
  rest.parent = id;
  rest.edge.assign(head.edge.begin() + at, head.edge.end());
  for (uint32_t p = 0; p < rest.edge.size(); ++p) Move(rest.edge[p], {tail, p});
  head.edge.resize(at);
  rest.kids = std::move(head.kids);
  head.kids = {tail};
  for (uint32_t kid : rest.kids) nodes_[kid].parent = tail;
  // Bits [at, end) move to the new node, shifted down by `at`.
  std::vector<Holder> kept;
  for (Holder& h : head.holders) {
    Holder moved(h.replica);
    Holder cut(h.replica);
    for (uint32_t p = 0; p < h.words() * 64; ++p) {
      if ((h.word(p / 64) >> (p % 64) & 1) == 0) continue;
      Holder& to = p < at ? cut : moved;
      const uint32_t q = p < at ? p : p - at;
      to.grow_word(q / 64) |= uint64_t{1} << (q % 64);
      ++to.held;
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
    blocks_.insert(Where{id, base + j});
    Hold(node, base + j, replica);
  }
}

RadixPrefixIndex::Holder& RadixPrefixIndex::HolderOf(Node& node, uint32_t replica) {
  for (Holder& h : node.holders) {
    if (h.replica == replica) return h;
  }
  return node.holders.emplace_back(replica);
}

void RadixPrefixIndex::Hold(Node& node, uint32_t pos, uint32_t replica) {
  Holder& h = HolderOf(node, replica);
  uint64_t& word = h.grow_word(pos / 64);
  const uint64_t bit = uint64_t{1} << (pos % 64);
  if ((word & bit) != 0) return;
  word |= bit;
  ++h.held;
}

void RadixPrefixIndex::Prune(uint32_t id) {
  while (id != kRoot && nodes_[id].live && nodes_[id].kids.empty()) {
    Node& node = nodes_[id];
    uint32_t end = 0;
    for (const Holder& h : node.holders) end = std::max(end, HeldEnd(h));
    if (end == node.edge.size()) return;
    for (size_t p = end; p < node.edge.size(); ++p) blocks_.erase(blocks_.find(BlockHash{node.edge[p]}));
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
