#include "tools/sim/sim_rank.h"

#include <algorithm>
#include <chrono>

#include "base/clock.h"

namespace kvidx::sim {

using ingest::EventType;
using ingest::KvEvent;

Result<std::unique_ptr<SimRank>> SimRank::Create(const SimRankOptions& options) {
  if (options.num_blocks == 0 || options.num_blocks > (1u << 30)) {
    return Status::InvalidArgument("num_blocks must be in [1, 2^30]");
  }
  Result<BlockHasher> hasher = BlockHasher::Create(options.hasher);
  if (!hasher.ok()) return hasher.status();
  std::unique_ptr<SimRank> r(new SimRank(options, std::move(hasher).value()));
  ingest::FakeEngineOptions pub = options.publisher;
  pub.data_parallel_rank = options.dp_rank;
  Result<std::unique_ptr<ingest::FakeEngine>> engine = ingest::FakeEngine::Create(pub);
  if (!engine.ok()) return engine.status();
  r->publisher_ = std::move(engine).value();
  return r;
}

SimRank::SimRank(const SimRankOptions& options, BlockHasher hasher)
    : opts_(options), hasher_(std::move(hasher)), blocks_(options.num_blocks) {
  for (uint32_t b = 0; b < blocks_.size(); ++b) PushFree(b);
}

uint32_t SimRank::PopFree() {
  uint32_t b = free_.front();
  free_.pop_front();
  blocks_[b].in_free = false;
  return b;
}

void SimRank::PushFree(uint32_t b) {
  free_.push_back(b);
  blocks_[b].free_pos = std::prev(free_.end());
  blocks_[b].in_free = true;
}

void SimRank::Publish(std::optional<ingest::DropMode> drop) {
  batch_.ts = WallSeconds();
  batch_.data_parallel_rank = opts_.dp_rank;
  // One thread drives this rank, so the seq read here is the one Publish takes.
  if (drop) {
    publisher_->DropSeqs({publisher_->next_seq()}, *drop);
    ++batches_dropped_;
  }
  publisher_->Publish(batch_, opts_.era);
  ++batches_published_;
  events_published_ += batch_.events.size();
}

Result<ServeResult> SimRank::Serve(std::span<const int64_t> tokens, bool full_report,
                                   std::optional<ingest::DropMode> drop) {
  const size_t bs = hasher_.block_size();
  // The request needs one block per started block of tokens; cut what cannot fit.
  size_t max_tokens = blocks_.size() * bs;
  if (tokens.size() > max_tokens) tokens = tokens.first(max_tokens);
  Status s = hasher_.HashRequest(tokens, &digests_);
  if (!s.ok()) return s;

  ServeResult res;
  res.full_blocks = digests_.size();
  if (!hold_) batch_.Clear();
  held_.clear();

  // 1. Longest cached prefix (vLLM get_computed_blocks). Touching a hit block
  //    takes it out of the free queue.
  size_t hits = 0;
  while (hits < digests_.size()) {
    auto it = cached_.find(KeyOf(digests_[hits]));
    if (it == cached_.end()) break;
    Block& b = blocks_[it->second];
    if (b.in_free) {
      free_.erase(b.free_pos);
      b.in_free = false;
    }
    ++b.ref;
    held_.push_back(it->second);
    ++hits;
  }
  res.hit_blocks = hits;
  if (full_report && hits > 0) {
    KvEvent e;
    e.type = EventType::kBlockStored;
    e.block_hashes = {static_cast<uint32_t>(batch_.keys.size()), static_cast<uint32_t>(hits)};
    for (size_t i = 0; i < hits; ++i) batch_.keys.push_back(KeyOf(digests_[i]));
    e.token_ids = {static_cast<uint32_t>(batch_.tokens.size()), static_cast<uint32_t>(hits * bs)};
    batch_.tokens.insert(batch_.tokens.end(), tokens.begin(), tokens.begin() + hits * bs);
    e.block_size = static_cast<int64_t>(bs);
    e.medium = "GPU";
    batch_.events.push_back(e);
  }

  // 2. Allocate the rest (vLLM get_new_blocks: pops the free-queue head,
  //    evicting its cached hash).
  size_t needed = (tokens.size() + bs - 1) / bs - hits;
  needed = std::min(needed, free_.size());
  size_t first_new = held_.size();
  for (size_t i = 0; i < needed; ++i) {
    uint32_t id = PopFree();
    Block& b = blocks_[id];
    if (b.cached) {
      cached_.erase(b.key);
      b.cached = false;
      KvEvent e;
      e.type = EventType::kBlockRemoved;
      e.block_hashes = {static_cast<uint32_t>(batch_.keys.size()), 1};
      batch_.keys.push_back(b.key);
      e.medium = "GPU";
      batch_.events.push_back(e);
      ++res.evicted;
    }
    b.ref = 1;
    held_.push_back(id);
  }

  // 3. Cache the newly computed full blocks (vLLM cache_full_blocks).
  size_t full_held = std::min(digests_.size(), held_.size());
  if (full_held > hits) {
    KvEvent e;
    e.type = EventType::kBlockStored;
    e.block_hashes = {static_cast<uint32_t>(batch_.keys.size()), static_cast<uint32_t>(full_held - hits)};
    for (size_t i = hits; i < full_held; ++i) {
      Block& b = blocks_[held_[i]];
      b.key = KeyOf(digests_[i]);
      b.cached = true;
      cached_[b.key] = held_[i];
      batch_.keys.push_back(b.key);
    }
    if (hits > 0) e.parent_block_hash = KeyOf(digests_[hits - 1]);
    e.token_ids = {static_cast<uint32_t>(batch_.tokens.size()), static_cast<uint32_t>((full_held - hits) * bs)};
    batch_.tokens.insert(batch_.tokens.end(), tokens.begin() + hits * bs, tokens.begin() + full_held * bs);
    e.block_size = static_cast<int64_t>(bs);
    e.medium = "GPU";
    batch_.events.push_back(e);
  }
  (void)first_new;

  if (!hold_ && !batch_.events.empty()) {
    Publish(drop);
    res.seq = publisher_->next_seq() - 1;
    res.published = true;
    res.dropped = drop.has_value();
    res.events = batch_.events.size();
  }

  // 4. The request finishes: free tail-first so its last blocks go first.
  for (auto it = held_.rbegin(); it != held_.rend(); ++it) {
    Block& b = blocks_[*it];
    if (--b.ref == 0) PushFree(*it);
  }
  return res;
}

std::optional<uint64_t> SimRank::PublishHeld() {
  if (batch_.events.empty()) return std::nullopt;
  Publish();
  batch_.Clear();
  return publisher_->next_seq() - 1;
}

std::vector<BlockKey> SimRank::CachedKeys() const {
  std::vector<BlockKey> out;
  out.reserve(cached_.size());
  for (const auto& kv : cached_) out.push_back(kv.first);
  return out;
}

size_t SimRank::CachedPrefix(std::span<const BlockKey> keys) const {
  size_t n = 0;
  while (n < keys.size() && cached_.count(keys[n]) != 0) ++n;
  return n;
}

void SimRank::ResetPrefixCache() {
  for (Block& b : blocks_) b.cached = false;
  cached_.clear();
  batch_.Clear();
  KvEvent e;
  e.type = EventType::kAllBlocksCleared;
  batch_.events.push_back(e);
  Publish();
}

Status SimRank::Restart(bool recreate_sockets) {
  for (Block& b : blocks_) b.cached = false;
  cached_.clear();
  return publisher_->Restart(recreate_sockets);
}

}  // namespace kvidx::sim
