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
    Unmap(p, sizeof(AWord) * kPoolChunk);
  }
}

OwnerPool::FreeLinks OwnerPool::LinksOf(uint32_t off, uint32_t cls) const {
  if (IsBig(cls)) return big_links_[off >> kBigWordsBits];
  const AWord* p = At(off);
  return {Ld(p[0]), Ld(p[1]), Ld(p[2])};
}

void OwnerPool::SetLinks(uint32_t off, uint32_t cls, const FreeLinks& l) {
  if (IsBig(cls)) {
    big_links_[off >> kBigWordsBits] = l;
    return;
  }
  AWord* p = At(off);
  St(p[0], l.next);
  St(p[1], l.prev);
  St(p[2], l.cls);
}

bool OwnerPool::IsFree(uint32_t off, uint32_t cls) const {
  uint32_t bit = off >> 2;
  if (((free_bits_[bit >> 6] >> (bit & 63)) & 1) == 0) return false;
  return LinksOf(off, cls).cls == cls;
}

void OwnerPool::Push(uint32_t off, uint32_t cls) {
  const uint32_t head = free_[cls];
  SetLinks(off, cls, {head, kNoId, cls});
  if (head != kNoId) {
    FreeLinks h = LinksOf(head, cls);
    h.prev = off;
    SetLinks(head, cls, h);
  }
  free_[cls] = off;
  uint32_t bit = off >> 2;
  free_bits_[bit >> 6] |= uint64_t{1} << (bit & 63);
}

void OwnerPool::Unlink(uint32_t off, uint32_t cls) {
  const FreeLinks l = LinksOf(off, cls);
  if (l.prev == kNoId) {
    free_[cls] = l.next;
  } else {
    FreeLinks p = LinksOf(l.prev, cls);
    p.next = l.next;
    SetLinks(l.prev, cls, p);
  }
  if (l.next != kNoId) {
    FreeLinks n = LinksOf(l.next, cls);
    n.prev = l.prev;
    SetLinks(l.next, cls, n);
  }
  // A big block's links outlive it beside the pool: a smaller free block
  // may start at the same offset later, and IsFree must not read this
  // class for it.
  if (IsBig(cls)) big_links_[off >> kBigWordsBits].cls = kNoId;
  uint32_t bit = off >> 2;
  free_bits_[bit >> 6] &= ~(uint64_t{1} << (bit & 63));
}

uint32_t OwnerPool::Alloc(uint32_t cls) {
  uint32_t c = cls;
  while (c <= kTopPoolClass && free_[c] == kNoId) ++c;
  if (c > kTopPoolClass) {
    if (chunks_ >= kPoolDirSize) std::abort();
    // Zero pages, committed as arrays are written (a heap block could be
    // memory the process already touched).
    AWord* chunk = static_cast<AWord*>(MapZeroed(sizeof(AWord) * kPoolChunk));
    dir_.Set(chunks_, chunk);
    free_bits_.resize(free_bits_.size() + kPoolChunk / 4 / 64, 0);
    big_links_.resize(big_links_.size() + (kPoolChunk >> kBigWordsBits));
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
