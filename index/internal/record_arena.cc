#include "index/internal/record_arena.h"

#include <cstdlib>

namespace kvidx::internal {

RecordArena::~RecordArena() {
  for (size_t i = 0; i < rec_dir_.size(); ++i) {
    Rec* r = rec_dir_.Get(i);
    if (r == nullptr) break;
    std::free(r);
  }
  for (size_t i = 0; i < side_dir_.size(); ++i) std::free(side_dir_.Get(i));
}

BlockKey RecordArena::KeyOf(uint32_t id) const {
  Rec* r = At(id);
  if (r == nullptr) return {};
  uint64_t wire = KeyWire(r);
  SideKey* side = side_dir_.Get(id >> kRecChunkBits);
  uint32_t code = side == nullptr ? 0 : Ld(side[id & (kRecChunk - 1)].w[0]);
  uint32_t head[6] = {};
  for (int i = 0; code != 0 && i < 6; ++i) head[i] = Ld(side[id & (kRecChunk - 1)].w[1 + i]);
  return KeyFromParts(wire, code, head);
}

uint32_t RecordArena::Alloc() {
  if (free_ != kNoId) {
    uint32_t id = free_;
    free_ = Ld(At(id)->w[3]);
    return id;
  }
  uint32_t id = top_.load(std::memory_order_relaxed);
  if ((id >> kRecChunkBits) >= kRecDirSize) std::abort();  // 2^26 blocks in one shard
  if ((id & (kRecChunk - 1)) == 0 && rec_dir_.Get(id >> kRecChunkBits) == nullptr) {
    // malloc, not new[]: pages are committed as records are written; ids at
    // or above top_ are never read, so no initialisation is needed.
    Rec* chunk = static_cast<Rec*>(std::malloc(sizeof(Rec) * kRecChunk));
    if (chunk == nullptr) std::abort();
    rec_dir_.Set(id >> kRecChunkBits, chunk);
  }
  top_.store(id + 1, std::memory_order_release);
  return id;
}

size_t RecordArena::MemoryBytes() const {
  const uint32_t chunks = (top() + kRecChunk - 1) >> kRecChunkBits;
  size_t bytes = size_t{chunks} * kRecChunk * sizeof(Rec);
  if (has_side_.load(std::memory_order_acquire)) {
    for (uint32_t c = 0; c < chunks; ++c) bytes += side_dir_.Get(c) != nullptr ? kRecChunk * sizeof(SideKey) : 0;
  }
  return bytes;
}

void RecordArena::Free(uint32_t id) {
  Rec* r = At(id);
  St(r->w[2], kSrcFree << 16);
  St(r->w[3], free_);
  free_ = id;
}

void RecordArena::WriteSideKeySlow(uint32_t id, const ProbeKey& k) {
  SideKey* side = side_dir_.Get(id >> kRecChunkBits);
  if (side == nullptr) {
    if (k.code == 0) return;   // integer keys need no side entry
    // Zeroed: records created before this chunk existed are integer form.
    side = static_cast<SideKey*>(std::calloc(kRecChunk, sizeof(SideKey)));
    if (side == nullptr) std::abort();
    side_dir_.Set(id >> kRecChunkBits, side);
    has_side_.store(true, std::memory_order_relaxed);  // published by the write section's end
  }
  SideKey& s = side[id & (kRecChunk - 1)];
  St(s.w[0], k.code);
  for (int i = 0; i < 6; ++i) St(s.w[1 + i], k.head[i]);
}

}  // namespace kvidx::internal
