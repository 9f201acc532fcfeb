// Bench fixtures' engine writes: one batch storing a chain of blocks on GPU.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>

#include "base/clock.h"
#include "index/block_key.h"
#include "ingest/testing/fake_engine.h"

namespace kvidx {

// Publishes one batch storing `keys` as a chain (each block's parent is the
// one before it) in BlockStored events of at most 64 blocks, block size 16.
inline void PublishStore(ingest::FakeEngine* eng, std::span<const BlockKey> keys) {
  ingest::EventBatch b;
  b.ts = WallSeconds();
  b.data_parallel_rank = 0;
  for (size_t off = 0; off < keys.size(); off += 64) {
    const size_t cnt = std::min<size_t>(64, keys.size() - off);
    ingest::KvEvent e;
    e.type = ingest::EventType::kBlockStored;
    e.block_hashes = {static_cast<uint32_t>(b.keys.size()), static_cast<uint32_t>(cnt)};
    for (size_t i = 0; i < cnt; ++i) b.keys.push_back(keys[off + i]);
    if (off > 0) e.parent_block_hash = keys[off - 1];
    e.block_size = 16;
    e.medium = "GPU";
    b.events.push_back(e);
  }
  eng->Publish(b, ingest::WireEra::Newest());
}

}  // namespace kvidx
