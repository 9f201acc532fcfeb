// RecordSet: an exact set of record ids (one shard's id space), the
// per-source membership that lets ClearSource, clock rebases and eviction
// peeks visit only a source's own blocks.
//
// Ids are grouped in 4096-id chunks, like the shard's record arena. A chunk
// holds a sorted array of 16-bit offsets while it has at most 64 members
// (2 bytes each) and a 512-byte bitmap beyond (1 bit per id): a member
// costs 2 bytes in a sparse chunk, at most 8 in a bitmap. Every store and
// removal of a source updates its set, so the array stays short enough to
// insert into cheaply (docs/BENCHMARKS.md: W2 +15% over 256-member arrays,
// for +1.2 B per block at W1's 64-replica point).
//
// Thread-compatible: owned by one source's writer.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace kvidx::internal {

class RecordSet {
 public:
  RecordSet() = default;
  RecordSet(const RecordSet&) = delete;
  RecordSet& operator=(const RecordSet&) = delete;
  RecordSet(RecordSet&&) = default;
  RecordSet& operator=(RecordSet&&) = default;
  ~RecordSet();

  // Returns false if `id` was already (resp. not) a member.
  bool Insert(uint32_t id);
  bool Erase(uint32_t id);
  bool Contains(uint32_t id) const;
  uint64_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // Inserts ascending, distinct `ids`; into an empty set it builds every
  // chunk at its final size in one pass (bulk loads: Restore).
  void InsertSorted(const std::vector<uint32_t>& ids);
  // Members in ascending order, appended to *out.
  void AppendTo(std::vector<uint32_t>* out) const;
  void Clear();
  // Heap bytes held (for tests and capacity estimates).
  size_t MemoryBytes() const;

 private:
  static constexpr uint32_t kChunkBits = 12;
  static constexpr uint32_t kArrayMax = 64;
  struct Chunk;
  static Chunk* NewChunk(uint32_t cap);   // cap 16-bit slots, or a bitmap when 0
  static void FreeChunk(Chunk* c);

  std::vector<Chunk*> chunks_;   // by id >> kChunkBits; nullptr = no member there
  uint64_t size_ = 0;
};

}  // namespace kvidx::internal
