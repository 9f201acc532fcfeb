#include "index/internal/hit_view.h"

#include <algorithm>
#include <new>

namespace kvidx::internal {

const HitView* HitView::Build(std::span<const std::pair<uint32_t, const HitRanges*>> owners) {
  uint32_t pieces = 0;
  for (const auto& [owner, ranges] : owners) pieces += ranges == nullptr ? 0 : static_cast<uint32_t>(ranges->pieces());
  if (pieces == 0) return nullptr;
  const auto n = static_cast<uint32_t>(owners.size());
  auto* v = new (::operator new(BytesFor(n, pieces))) HitView;
  v->owners_ = n;
  v->pieces_ = pieces;
  auto* out = const_cast<Owner*>(v->Owners());
  auto* piece = const_cast<HitRanges::Piece*>(v->Pieces());
  uint32_t first = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const std::span<const HitRanges::Piece> all =
        owners[i].second == nullptr ? std::span<const HitRanges::Piece>() : owners[i].second->all();
    out[i] = Owner{owners[i].first, first, static_cast<uint32_t>(all.size())};
    for (const HitRanges::Piece& p : all) piece[first++] = {p.begin, p.end, std::min(p.count, kMaxViewedHits)};
  }
  return v;
}

void HitView::Delete(void* view) {
  static_cast<HitView*>(view)->~HitView();
  ::operator delete(view);
}

HitRanges::Sum HitView::Over(uint32_t owner, uint32_t begin, uint32_t end, uint32_t row) const {
  const Owner* o = row < owners_ && Owners()[row].owner == owner ? &Owners()[row] : nullptr;
  for (uint32_t i = 0; o == nullptr && i < owners_; ++i) {
    if (Owners()[i].owner == owner) o = &Owners()[i];
  }
  if (o == nullptr) return {};
  return HitRanges::SumOver({Pieces() + o->first, o->count}, begin, end);
}

}  // namespace kvidx::internal
