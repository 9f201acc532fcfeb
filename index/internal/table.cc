#include "index/internal/table.h"

#include <cstdlib>
#include <new>

#include "index/internal/ptr_dir.h"

namespace kvidx::internal {

namespace {

inline uint8_t CtrlByte(uint64_t word, uint32_t i) { return static_cast<uint8_t>(word >> (8 * i)); }
inline uint64_t WithCtrlByte(uint64_t word, uint32_t i, uint8_t b) {
  return (word & ~(uint64_t{0xFF} << (8 * i))) | (uint64_t{b} << (8 * i));
}

}  // namespace

Table::Table(uint32_t g) : groups_(g), bytes_(size_t{g} * (sizeof(std::atomic<uint64_t>) + 8 * sizeof(AWord))) {
  mem_ = bytes_ >= kMapBytes ? MapZeroed(bytes_) : ::operator new(bytes_, std::align_val_t{64});
  ctrl_ = static_cast<std::atomic<uint64_t>*>(mem_);
  slots_ = reinterpret_cast<AWord*>(ctrl_ + g);
  for (uint32_t i = 0; i < g; ++i) new (&ctrl_[i]) std::atomic<uint64_t>(kLsbs * kCtrlEmpty);
  for (uint32_t i = 0; i < g * 8; ++i) new (&slots_[i]) AWord(kNoId);
}

Table::~Table() {
  // The atomics are trivially destructible: only the memory goes.
  if (bytes_ >= kMapBytes) {
    Unmap(mem_, bytes_);
  } else {
    ::operator delete(mem_, std::align_val_t{64});
  }
}

uint32_t Table::GroupsFor(const Table* old, uint32_t n) {
  if (old != nullptr && uint64_t{n} * 16 > uint64_t{old->capacity()} * 7) return old->groups_ * 2;
  uint32_t groups = 1;
  while (uint64_t{groups} * 8 * 7 < (uint64_t{n} + 1) * 16) groups <<= 1;
  return groups;
}

bool Table::Insert(uint64_t hash, uint32_t id) {
  uint32_t mask = groups_ - 1;
  uint32_t g = GroupOf(hash, groups_);
  for (uint32_t step = 0;; ++step) {
    uint64_t m = MatchEmptyOrDeleted(ctrl_[g].load(std::memory_order_relaxed));
    if (m != 0) return InsertAt(g * 8 + LowestByte(m), hash, id);
    g = (g + step + 1) & mask;
  }
}

bool Table::InsertAt(uint32_t slot, uint64_t hash, uint32_t id) {
  const uint32_t g = slot / 8, i = slot % 8;
  const uint64_t ctrl = ctrl_[g].load(std::memory_order_relaxed);
  // The id before the tag: a reader that sees the tag reads this id.
  St(slots_[slot], id);
  ctrl_[g].store(WithCtrlByte(ctrl, i, TagOf(hash)), std::memory_order_relaxed);
  return CtrlByte(ctrl, i) == kCtrlEmpty;
}

bool Table::Erase(uint64_t hash, uint32_t id) {
  uint32_t found = kNoId;
  const uint32_t slot = FindSlot(hash, [id](uint32_t candidate) { return candidate == id; }, &found);
  if (slot == kNoId) std::abort();  // a live record must be in the table
  return EraseSlot(slot);
}

bool Table::EraseSlot(uint32_t slot) {
  const uint32_t g = slot / 8, i = slot % 8;
  const uint64_t ctrl = ctrl_[g].load(std::memory_order_relaxed);
  // A group that still has an empty slot never made a probe continue past
  // it, so the slot can become empty again; otherwise tombstone.
  const bool empty_ok = MatchEmpty(ctrl) != 0;
  ctrl_[g].store(WithCtrlByte(ctrl, i, empty_ok ? kCtrlEmpty : kCtrlDeleted), std::memory_order_relaxed);
  St(slots_[slot], kNoId);
  return empty_ok;
}

}  // namespace kvidx::internal
