// Internal to the block index: a shard's hash table from key hash to
// record id.
//
// Swiss-style open addressing: 8-slot groups, one control byte per slot
// (a 7-bit tag of the hash, or empty / deleted), matched 8 at a time with
// SWAR, and 4-byte record ids; triangular probing over groups. The table
// stores no keys: a lookup confirms a tag match with the caller's
// predicate on the record id. Readers probe with relaxed loads while one
// writer (the shard's) inserts and erases; a table is never resized in
// place but rebuilt on the side (ForEachId into a new Table) and swapped.
#pragma once

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>

#include "index/internal/words.h"

namespace kvidx::internal {

inline constexpr uint8_t kCtrlEmpty = 0x80;
inline constexpr uint8_t kCtrlDeleted = 0xFE;
inline constexpr uint64_t kLsbs = 0x0101010101010101ULL;
inline constexpr uint64_t kMsbs = 0x8080808080808080ULL;

// Bit 7 of byte i set where ctrl byte i == tag (may report false positives
// after a true match; callers verify the key).
inline uint64_t MatchTag(uint64_t ctrl, uint8_t tag) {
  uint64_t x = ctrl ^ (kLsbs * tag);
  return (x - kLsbs) & ~x & kMsbs;
}
inline uint64_t MatchEmpty(uint64_t ctrl) { return ctrl & ~(ctrl << 6) & kMsbs; }
inline uint64_t MatchEmptyOrDeleted(uint64_t ctrl) { return ctrl & ~(ctrl << 7) & kMsbs; }
inline uint32_t LowestByte(uint64_t m) { return static_cast<uint32_t>(std::countr_zero(m)) >> 3; }
inline uint32_t GroupOf(uint64_t hash, uint32_t groups) { return static_cast<uint32_t>(hash >> 7) & (groups - 1); }
inline uint8_t TagOf(uint64_t hash) { return static_cast<uint8_t>(hash & 0x7F); }

// Control words and slots live in one allocation. Large tables are mapped
// directly: a grown-out table is then returned to the kernel when retired,
// where from the heap glibc would keep it resident (its dynamic mmap
// threshold rises past table sizes after the first large free).
class Table {
 public:
  explicit Table(uint32_t groups);   // a power of two
  ~Table();
  Table(const Table&) = delete;
  Table& operator=(const Table&) = delete;

  // The size of the table that replaces `old` (null: none yet) holding `n`
  // ids: a table more than 7/16 full doubles (so loads stay in 7/16..7/8);
  // otherwise the smallest size with load <= 7/16, which drops tombstones
  // and shrinks a table emptied by mass removal.
  static uint32_t GroupsFor(const Table* old, uint32_t n);

  uint32_t groups() const { return groups_; }
  uint32_t capacity() const { return groups_ * 8; }
  // Bytes allocated for control bytes and slots.
  size_t bytes() const { return bytes_; }
  // How many ids fit before the table must be rebuilt (load 7/8).
  uint32_t max_load() const { return capacity() * 7 / 8; }

  // --- Readers (any thread; relaxed loads, results checked by the caller)
  // The first id whose tag matches `hash` and for which `holds(id)`, or
  // kNoId.
  template <typename Holds>
  uint32_t Find(uint64_t hash, Holds holds) const {
    uint32_t id = kNoId;
    FindSlot(hash, holds, &id);
    return id;
  }
  // Find's slot (group * 8 + index in the group), or kNoId; *id = the id.
  // A writer that erases what it found passes the slot to EraseSlot. With
  // `free_slot` (writers), a miss also reports the slot Insert would take,
  // for InsertAt.
  template <typename Holds>
  uint32_t FindSlot(uint64_t hash, Holds holds, uint32_t* id, uint32_t* free_slot = nullptr) const;
  // A query pipeline's hints: prefetches `hash`'s home group; the id of the
  // first tag match there, or kNoId. Unvalidated.
  // Inlined by force like Shard::PrefetchGroup: with only the caller
  // forced, GCC 12 emitted no prefetch at all (W1 queries/s fell ~45%).
  [[gnu::always_inline]] void PrefetchGroup(uint64_t hash) const {
    uint32_t g = GroupOf(hash, groups_);
    __builtin_prefetch(&ctrl_[g]);
    __builtin_prefetch(&slots_[g * 8]);
  }
  [[gnu::always_inline]] uint32_t PeekId(uint64_t hash) const {
    uint32_t g = GroupOf(hash, groups_);
    uint64_t m = MatchTag(ctrl_[g].load(std::memory_order_relaxed), TagOf(hash));
    return m == 0 ? kNoId : Ld(slots_[g * 8 + LowestByte(m)]);
  }

  // --- The writer
  // Places `id` in the first empty or deleted slot of its probe sequence;
  // true when the slot was empty (one less before the next rebuild).
  bool Insert(uint64_t hash, uint32_t id);
  // Removes `id`, which must be present; true when its slot became empty
  // again rather than a tombstone (one more before the next rebuild).
  bool Erase(uint64_t hash, uint32_t id);
  // Erase of the id in `slot` (from FindSlot, with no write since).
  bool EraseSlot(uint32_t slot);
  // Insert into `slot`, a miss's free_slot from FindSlot with no write
  // since; true when the slot was empty, as Insert.
  bool InsertAt(uint32_t slot, uint64_t hash, uint32_t id);
  // fn(id) for every id in the table.
  template <typename Fn>
  void ForEachId(Fn fn) const;

 private:
  static constexpr size_t kMapBytes = 64 * 1024;
  uint32_t groups_;
  std::atomic<uint64_t>* ctrl_;   // 8 control bytes per group
  AWord* slots_;                  // record ids, 8 per group
  size_t bytes_;
  void* mem_;
};

template <typename Holds>
inline uint32_t Table::FindSlot(uint64_t hash, Holds holds, uint32_t* id, uint32_t* free_slot) const {
  uint32_t mask = groups_ - 1;
  uint32_t g = GroupOf(hash, groups_);
  uint8_t tag = TagOf(hash);
  if (free_slot != nullptr) *free_slot = kNoId;
  for (uint32_t step = 0; step < groups_; ++step) {
    uint64_t ctrl = ctrl_[g].load(std::memory_order_relaxed);
    for (uint64_t m = MatchTag(ctrl, tag); m != 0; m &= m - 1) {
      const uint32_t slot = g * 8 + LowestByte(m);
      const uint32_t candidate = Ld(slots_[slot]);
      if (holds(candidate)) {
        *id = candidate;
        return slot;
      }
    }
    // Insert's choice: the first empty or deleted slot on the probe path.
    if (free_slot != nullptr && *free_slot == kNoId) {
      const uint64_t f = MatchEmptyOrDeleted(ctrl);
      if (f != 0) *free_slot = g * 8 + LowestByte(f);
    }
    if (MatchEmpty(ctrl) != 0) break;
    g = (g + step + 1) & mask;
  }
  *id = kNoId;
  return kNoId;
}

template <typename Fn>
void Table::ForEachId(Fn fn) const {
  for (uint32_t g = 0; g < groups_; ++g) {
    uint64_t ctrl = ctrl_[g].load(std::memory_order_relaxed);
    for (uint32_t i = 0; i < 8; ++i) {
      if (((ctrl >> (8 * i)) & 0x80) == 0) fn(Ld(slots_[g * 8 + i]));
    }
  }
}

}  // namespace kvidx::internal
