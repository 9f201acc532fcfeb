#include "bench/w2_indexes.h"

#include <algorithm>
#include <string>

namespace kvidx::bench {

// ---- kvidx ----

Result<std::unique_ptr<KvidxW2Index>> KvidxW2Index::Create(uint32_t max_query_blocks) {
  auto index = std::make_unique<KvidxW2Index>();
  if (Status s = index->Init(max_query_blocks); !s.ok()) return s;
  return index;
}

Status KvidxW2Index::Init(uint32_t max_query_blocks) {
  ModelOptions options;
  options.max_query_blocks = std::max(max_query_blocks, options.max_query_blocks);
  Result<ModelId> model = index_.AddModel("w2", options);
  if (!model.ok()) return model.status();
  model_ = *model;
  return Status::Ok();
}

Status KvidxW2Index::Query(std::span<const Key> keys, std::span<uint32_t> match) {
  std::fill(match.begin(), match.end(), 0);
  Status s = index_.FindPrefix(model_, keys, filter_, &found_);
  if (!s.ok()) return s;
  for (const SourceMatch& m : found_.sources) {
    if (m.source >= match.size()) {
      return Status::Internal("FindPrefix reported unknown source " + std::to_string(m.source));
    }
    match[m.source] = m.gpu_blocks;
  }
  return Status::Ok();
}

Status KvidxW2Index::Store(uint32_t replica, std::span<const Key> run, const Key* parent) {
  std::optional<BlockKey> p;
  if (parent != nullptr) p = *parent;
  return index_.Store(model_, static_cast<SourceId>(replica), Tier::kGpu, KvGroup{}, run, p);
}

Status KvidxW2Index::Remove(uint32_t replica, std::span<const Key> blocks) {
  return index_.Remove(model_, static_cast<SourceId>(replica), Tier::kGpu, KvGroup{}, blocks);
}

uint64_t KvidxW2Index::HeldBlocks(uint32_t replica) const {
  uint64_t n = 0;
  for (const auto& [tier, blocks] : index_.GetSourceStats(static_cast<SourceId>(replica)).blocks_per_tier) n += blocks;
  return n;
}

}  // namespace kvidx::bench
