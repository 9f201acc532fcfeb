#include "index/record_set.h"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>

namespace kvidx::internal {

// A chunk's header sits in front of its members: `cap` 16-bit offsets
// (array form) or 64 words (bitmap form, cap == 0).
struct RecordSet::Chunk {
  uint16_t n;     // members
  uint16_t cap;   // array capacity; 0 = bitmap
  uint32_t pad;
  uint16_t* array() { return reinterpret_cast<uint16_t*>(this + 1); }
  const uint16_t* array() const { return reinterpret_cast<const uint16_t*>(this + 1); }
  uint64_t* bits() { return reinterpret_cast<uint64_t*>(this + 1); }
  const uint64_t* bits() const { return reinterpret_cast<const uint64_t*>(this + 1); }
};

namespace {
constexpr uint32_t kBitmapWords = 64;   // 4096 bits
}  // namespace

RecordSet::Chunk* RecordSet::NewChunk(uint32_t cap) {
  size_t bytes = sizeof(RecordSet::Chunk) + (cap == 0 ? kBitmapWords * 8 : cap * sizeof(uint16_t));
  auto* c = static_cast<RecordSet::Chunk*>(std::calloc(1, bytes));
  if (c == nullptr) std::abort();
  c->cap = static_cast<uint16_t>(cap);
  return c;
}

void RecordSet::FreeChunk(Chunk* c) { std::free(c); }

RecordSet::~RecordSet() { Clear(); }

void RecordSet::Clear() {
  for (Chunk* c : chunks_) FreeChunk(c);
  chunks_.clear();
  chunks_.shrink_to_fit();
  size_ = 0;
}

bool RecordSet::Insert(uint32_t id) {
  const uint32_t ci = id >> kChunkBits;
  const uint16_t off = static_cast<uint16_t>(id & ((1u << kChunkBits) - 1));
  if (ci >= chunks_.size()) chunks_.resize(ci + 1, nullptr);
  Chunk* c = chunks_[ci];
  if (c == nullptr) c = chunks_[ci] = NewChunk(4);
  if (c->cap == 0) {
    uint64_t& w = c->bits()[off >> 6];
    const uint64_t bit = uint64_t{1} << (off & 63);
    if (w & bit) return false;
    w |= bit;
  } else {
    uint16_t* a = c->array();
    // Records are allocated in ascending id order, so a new member is
    // usually the largest: skip the search then.
    uint16_t* pos = c->n == 0 || a[c->n - 1] < off ? a + c->n : std::lower_bound(a, a + c->n, off);
    if (pos != a + c->n && *pos == off) return false;
    if (c->n == c->cap) {
      // Grow by ~1/4 (the slack is per-member memory), or become a bitmap
      // once an array would be as large as one.
      Chunk* d;
      if (c->n >= kArrayMax) {
        d = NewChunk(0);
        for (uint32_t i = 0; i < c->n; ++i) d->bits()[a[i] >> 6] |= uint64_t{1} << (a[i] & 63);
        d->bits()[off >> 6] |= uint64_t{1} << (off & 63);
      } else {
        uint32_t cap = std::min<uint32_t>(kArrayMax, c->cap + c->cap / 4 + 4);
        d = NewChunk(cap);
        uint32_t at = static_cast<uint32_t>(pos - a);
        std::memcpy(d->array(), a, at * sizeof(uint16_t));
        d->array()[at] = off;
        std::memcpy(d->array() + at + 1, a + at, (c->n - at) * sizeof(uint16_t));
      }
      d->n = static_cast<uint16_t>(c->n + 1);
      FreeChunk(c);
      chunks_[ci] = d;
      ++size_;
      return true;
    }
    std::memmove(pos + 1, pos, static_cast<size_t>(a + c->n - pos) * sizeof(uint16_t));
    *pos = off;
  }
  ++c->n;
  ++size_;
  return true;
}

void RecordSet::InsertSorted(const std::vector<uint32_t>& ids) {
  if (size_ != 0) {
    for (uint32_t id : ids) Insert(id);
    return;
  }
  for (size_t i = 0; i < ids.size();) {
    const uint32_t ci = ids[i] >> kChunkBits;
    size_t j = i;
    while (j < ids.size() && (ids[j] >> kChunkBits) == ci) ++j;
    const uint32_t n = static_cast<uint32_t>(j - i);
    Chunk* c = NewChunk(n > kArrayMax ? 0 : n);
    for (size_t k = i; k < j; ++k) {
      const uint16_t off = static_cast<uint16_t>(ids[k] & ((1u << kChunkBits) - 1));
      if (c->cap == 0) {
        c->bits()[off >> 6] |= uint64_t{1} << (off & 63);
      } else {
        c->array()[k - i] = off;
      }
    }
    c->n = static_cast<uint16_t>(n);
    if (ci >= chunks_.size()) chunks_.resize(ci + 1, nullptr);
    chunks_[ci] = c;
    size_ += n;
    i = j;
  }
}

bool RecordSet::Erase(uint32_t id) {
  const uint32_t ci = id >> kChunkBits;
  const uint16_t off = static_cast<uint16_t>(id & ((1u << kChunkBits) - 1));
  if (ci >= chunks_.size() || chunks_[ci] == nullptr) return false;
  Chunk* c = chunks_[ci];
  if (c->cap == 0) {
    uint64_t& w = c->bits()[off >> 6];
    const uint64_t bit = uint64_t{1} << (off & 63);
    if ((w & bit) == 0) return false;
    w &= ~bit;
  } else {
    uint16_t* a = c->array();
    uint16_t* pos = std::lower_bound(a, a + c->n, off);
    if (pos == a + c->n || *pos != off) return false;
    std::memmove(pos, pos + 1, static_cast<size_t>(a + c->n - pos - 1) * sizeof(uint16_t));
  }
  --c->n;
  --size_;
  if (c->n == 0) {
    // An empty chunk goes (a bitmap is not kept around for a few members:
    // it stays until empty, which bounds the churn at the kArrayMax boundary).
    FreeChunk(c);
    chunks_[ci] = nullptr;
  }
  return true;
}

bool RecordSet::Contains(uint32_t id) const {
  const uint32_t ci = id >> kChunkBits;
  const uint16_t off = static_cast<uint16_t>(id & ((1u << kChunkBits) - 1));
  if (ci >= chunks_.size() || chunks_[ci] == nullptr) return false;
  const Chunk* c = chunks_[ci];
  if (c->cap == 0) return (c->bits()[off >> 6] >> (off & 63)) & 1;
  return std::binary_search(c->array(), c->array() + c->n, off);
}

void RecordSet::AppendTo(std::vector<uint32_t>* out) const {
  out->reserve(out->size() + size_);
  for (uint32_t ci = 0; ci < chunks_.size(); ++ci) {
    const Chunk* c = chunks_[ci];
    if (c == nullptr) continue;
    const uint32_t base = ci << kChunkBits;
    if (c->cap != 0) {
      for (uint32_t i = 0; i < c->n; ++i) out->push_back(base + c->array()[i]);
      continue;
    }
    for (uint32_t w = 0; w < kBitmapWords; ++w) {
      for (uint64_t m = c->bits()[w]; m != 0; m &= m - 1) {
        out->push_back(base + w * 64 + static_cast<uint32_t>(std::countr_zero(m)));
      }
    }
  }
}

size_t RecordSet::MemoryBytes() const {
  size_t bytes = chunks_.capacity() * sizeof(Chunk*);
  for (const Chunk* c : chunks_) {
    if (c != nullptr) bytes += sizeof(Chunk) + (c->cap == 0 ? kBitmapWords * 8 : c->cap * sizeof(uint16_t));
  }
  return bytes;
}

}  // namespace kvidx::internal
