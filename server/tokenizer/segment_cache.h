// SegmentCache: a run of raw text between two added tokens -> its ids, so
// that text sent again (a system prompt, the earlier turns of a chat that
// every request of the conversation repeats) skips normalization,
// pre-tokenization and BPE.
//
// Why it cannot change an id: tokenizers encodes the text between the added
// tokens it finds in the raw input one run at a time (normalize, find the
// normalized added tokens, pre-tokenize, BPE); a run's ids depend on its
// bytes and on whether it starts the input (Metaspace's "first" scheme),
// nothing else. Both are the key, compared in full (no hash-only match).
//
// Admission: a run is kept only the second time it is inserted (a 64-bit
// hash of each inserted run is remembered in a direct-mapped table of
// kSeenSlots slots), so text that never repeats -- the new turn of each
// request -- costs a hash, not a copy that would push useful entries out.
//
// Bounded: runs shorter than min_key_bytes (the word cache serves those) or
// longer than max_key_bytes are not kept; the entries' bytes (key, ids,
// bookkeeping) stay under max_bytes, split over the shards; a full shard
// drops entries in its map's order (arbitrary, roughly random) until the
// new one fits.
//
// Thread-safe: one mutex per shard, held for a hash-map lookup or update;
// ids are copied out of a shared immutable entry after the lock is released.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/mutex.h"

namespace kvidx::tokenizer {

struct SegmentCacheOptions {
  size_t max_bytes = 32u << 20;
  size_t min_key_bytes = 64;
  size_t max_key_bytes = 1u << 20;
};

class SegmentCache {
 public:
  explicit SegmentCache(SegmentCacheOptions options = {});
  SegmentCache(const SegmentCache&) = delete;
  SegmentCache& operator=(const SegmentCache&) = delete;

  // Whether a run of `size` bytes is worth a lookup.
  bool Admits(size_t size) const { return size >= options_.min_key_bytes && size <= options_.max_key_bytes; }

  // Appends the cached ids of (`text`, `at_origin`) to *ids; false on a miss.
  bool Lookup(std::string_view text, bool at_origin, std::vector<uint32_t>* ids) const;
  // Keeps the ids of (`text`, `at_origin`) if it was inserted before.
  void Insert(std::string_view text, bool at_origin, std::span<const uint32_t> ids) const;

  // Entries and their accounted bytes, over all shards (for tests).
  size_t Entries() const;
  size_t Bytes() const;

 private:
  struct Entry {
    std::vector<uint32_t> ids;
  };
  struct KeyHash {
    using is_transparent = void;
    size_t operator()(std::string_view key) const noexcept;
  };
  struct Shard {
    mutable Mutex mu;
    // Key: one byte for at_origin, then the text.
    std::unordered_map<std::string, std::shared_ptr<const Entry>, KeyHash, std::equal_to<>> map
        KVIDX_GUARDED_BY(mu);
    size_t bytes KVIDX_GUARDED_BY(mu) = 0;
  };
  static constexpr size_t kShards = 16;
  static constexpr size_t kSeenSlots = 4096;
  static size_t EntryBytes(size_t key_bytes, size_t ids) { return key_bytes + 4 * ids + 96; }
  Shard& ShardOf(std::string_view key) const;

  SegmentCacheOptions options_;
  mutable std::array<Shard, kShards> shards_;
  // Hashes of inserted runs (admission only: a collision admits early).
  mutable std::array<std::atomic<uint64_t>, kSeenSlots> seen_{};
};

}  // namespace kvidx::tokenizer
