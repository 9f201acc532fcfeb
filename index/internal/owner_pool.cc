#include "index/internal/owner_pool.h"

#include <cstdlib>

namespace kvidx::internal {

namespace {
inline uint32_t ClassWords(uint32_t cls) { return kOwnerWords << cls; }
}  // namespace

OwnerPool::OwnerPool() {
  for (uint32_t& f : free_) f = kNoId;
}

OwnerPool::~OwnerPool() {
  for (size_t i = 0; i < dir_.size(); ++i) {
    AWord* p = dir_.Get(i);
    if (p == nullptr) break;
    std::free(p);
  }
}

bool OwnerPool::IsFree(uint32_t off, uint32_t cls) const {
  uint32_t bit = off >> 2;
  if (((free_bits_[bit >> 6] >> (bit & 63)) & 1) == 0) return false;
  return Ld(At(off)[2]) == cls;
}

void OwnerPool::Push(uint32_t off, uint32_t cls) {
  AWord* p = At(off);
  St(p[0], free_[cls]);
  St(p[1], kNoId);
  St(p[2], cls);
  if (free_[cls] != kNoId) St(At(free_[cls])[1], off);
  free_[cls] = off;
  uint32_t bit = off >> 2;
  free_bits_[bit >> 6] |= uint64_t{1} << (bit & 63);
}

void OwnerPool::Unlink(uint32_t off, uint32_t cls) {
  AWord* p = At(off);
  uint32_t next = Ld(p[0]);
  uint32_t prev = Ld(p[1]);
  if (prev == kNoId) {
    free_[cls] = next;
  } else {
    St(At(prev)[0], next);
  }
  if (next != kNoId) St(At(next)[1], prev);
  uint32_t bit = off >> 2;
  free_bits_[bit >> 6] &= ~(uint64_t{1} << (bit & 63));
}

uint32_t OwnerPool::Alloc(uint32_t cls) {
  uint32_t c = cls;
  while (c <= kTopPoolClass && free_[c] == kNoId) ++c;
  if (c > kTopPoolClass) {
    if (chunks_ >= kPoolDirSize) std::abort();
    // Uninitialised until written, so pages are committed only as used.
    AWord* chunk = static_cast<AWord*>(std::malloc(sizeof(AWord) * kPoolChunk));
    if (chunk == nullptr) std::abort();
    dir_.Set(chunks_, chunk);
    free_bits_.resize(free_bits_.size() + kPoolChunk / 4 / 64, 0);
    c = kTopPoolClass;
    Push(chunks_ << kPoolChunkBits, c);
    ++chunks_;
  }
  uint32_t off = free_[c];
  Unlink(off, c);
  while (c > cls) {   // split: keep the lower half, free the upper
    --c;
    Push(off + ClassWords(c), c);
  }
  return off;
}

void OwnerPool::Free(uint32_t off, uint32_t cls) {
  while (cls < kTopPoolClass) {
    uint32_t buddy = off ^ ClassWords(cls);
    if (!IsFree(buddy, cls)) break;
    Unlink(buddy, cls);
    off = off < buddy ? off : buddy;
    ++cls;
  }
  Push(off, cls);
}

}  // namespace kvidx::internal
