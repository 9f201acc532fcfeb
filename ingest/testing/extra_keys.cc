#include "ingest/testing/extra_keys.h"

#include <string>

#include "ingest/msgpack_reader.h"

namespace kvidx::ingest {
namespace {

using msgpack::Item;
using msgpack::Kind;
using msgpack::kHardMaxDepth;
using msgpack::Reader;

class ExtraKeysDecoder : public Reader {
 public:
  ExtraKeysDecoder(std::string_view raw, std::vector<BlockExtraKeys>* out, DecodeError* err)
      : Reader(raw, err, kHardMaxDepth), out_(out) {
    in_extra_keys_ = true;
    field_ = "extra_keys";
  }

  bool Decode() {
    out_->clear();
    Item top;
    if (!Next(&top)) return false;
    if (top.kind == Kind::kNil) return Done();
    if (top.kind != Kind::kArray) return WrongType("array or nil", top.kind);
    out_->resize(static_cast<size_t>(top.n));  // count already bounded by the bytes left
    for (uint64_t i = 0; i < top.n; ++i) {
      block_ = i;
      Item entry;
      if (!Next(&entry)) return false;
      BlockExtraKeys& bk = (*out_)[static_cast<size_t>(i)];
      if (entry.kind == Kind::kNil) continue;
      if (entry.kind != Kind::kArray) return BlockWrongType("array or nil", entry.kind);
      bk.present = true;
      bk.keys.reserve(static_cast<size_t>(entry.n));
      for (uint64_t j = 0; j < entry.n; ++j) {
        if (!ReadKey(&bk.keys.emplace_back())) return false;
      }
    }
    return Done();
  }

 private:
  bool Done() {
    if (p_ != end_) {
      return Fail(DecodeErrorReason::kTrailingBytes, std::to_string(remaining()) + " bytes after extra_keys");
    }
    return true;
  }

  bool BlockWrongType(std::string_view expected, Kind got) {
    return WrongType("block " + std::to_string(block_) + ": " + std::string(expected), got);
  }

  bool ReadKey(kvidx::ExtraKey* k) {
    Item it;
    if (!Next(&it)) return false;
    switch (it.kind) {
      case Kind::kStr:
        *k = kvidx::ExtraKey::Str(it.str());
        return true;
      case Kind::kBin:
        *k = kvidx::ExtraKey::Bytes(it.str());
        return true;
      case Kind::kUint:
      case Kind::kInt:
        k->kind = kvidx::ExtraKey::Kind::kInt;
        return AsInt64(it, &k->number);
      case Kind::kArray: {
        // Multimodal (identifier, offset-in-block) pair.
        if (it.n != 2) return BlockWrongType("a 2-element (identifier, offset) array", it.kind);
        Item id, off;
        if (!Next(&id)) return false;
        if (id.kind != Kind::kStr) return BlockWrongType("str multimodal identifier", id.kind);
        if (!Next(&off)) return false;
        k->kind = kvidx::ExtraKey::Kind::kMmItem;
        k->text = id.str();
        return AsInt64(off, &k->number);
      }
      default: return BlockWrongType("str, int, bin or [str, int]", it.kind);
    }
  }

  std::vector<BlockExtraKeys>* out_;
  uint64_t block_ = 0;
};

}  // namespace

bool DecodeExtraKeys(std::string_view raw, std::vector<BlockExtraKeys>* out, DecodeError* err) {
  return ExtraKeysDecoder(raw, out, err).Decode();
}

}  // namespace kvidx::ingest
