// Decoder implementation: a hand-written msgpack cursor.
//
// msgpack-cxx's unpack() is deliberately not used on this path: it allocates
// a zone per message and reports malformed input by throwing. This reader
// walks the payload once, never throws, and allocates only by growing the
// caller's reused EventBatch vectors (and, on failure, the error detail).
//
// Length policy (the fail-fast rule of decoder.h):
//   - an array/map header whose element count could not fit in the bytes
//     that remain (>= 1 byte per element, 2 per map pair) -> kTooLarge,
//     before anything is reserved;
//   - a str/bin/ext header whose byte length runs past the end -> kTruncated;
//   - any fixed-width read past the end -> kTruncated.
//
// Leniency decisions (forward compatibility; all documented in decoder.h):
//   - outer array longer than 3, event arrays longer than the newest schema,
//     unknown map keys, and non-str map keys are skipped;
//   - strings must be msgpack str: msgspec always encodes a Python str as str,
//     so a bin there means a different producer and is kWrongType;
//   - non-minimal headers and integer widths are accepted everywhere.
#include "base/byte_coding.h"
#include "ingest/decoder.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "ingest/msgpack_reader.h"

namespace kvidx::ingest {

std::string_view DecodeErrorReasonLabel(DecodeErrorReason r) {
  switch (r) {
    case DecodeErrorReason::kFrameCount: return "frame_count";
    case DecodeErrorReason::kSeqLength: return "seq_length";
    case DecodeErrorReason::kTruncated: return "truncated";
    case DecodeErrorReason::kBadEnvelope: return "bad_envelope";
    case DecodeErrorReason::kBadEvent: return "bad_event";
    case DecodeErrorReason::kWrongType: return "wrong_type";
    case DecodeErrorReason::kTooLarge: return "too_large";
    case DecodeErrorReason::kTrailingBytes: return "trailing_bytes";
  }
  return "unknown";
}

namespace {

using msgpack::Item;
using msgpack::Kind;
using msgpack::KindName;
using msgpack::KindOf;
using msgpack::kHardMaxDepth;
using msgpack::Reader;

enum class Field : uint8_t {
  kBlockHashes,
  kParentBlockHash,
  kTokenIds,
  kBlockSize,
  kLoraId,
  kMedium,
  kLoraName,
  kExtraKeys,
  kGroupIdx,
  kSpecKind,
  kSlidingWindow,
  kLocality,
  kOwnership,
  kSessionId,
  kOrigin,
  kUnknown,
};

struct FieldName {
  std::string_view name;
  Field field;
};

// Declaration order (kv_events.py). The array-form position of a field is its
// index here + 1, for the first kBlockStoredArrayFields / kBlockRemovedArrayFields
// entries: the array form ended (#42892) before later fields were added, so
// anything after those positions is ignored rather than guessed at.
constexpr FieldName kBlockStoredFields[] = {
    {"block_hashes", Field::kBlockHashes},
    {"parent_block_hash", Field::kParentBlockHash},
    {"token_ids", Field::kTokenIds},
    {"block_size", Field::kBlockSize},
    {"lora_id", Field::kLoraId},
    {"medium", Field::kMedium},
    {"lora_name", Field::kLoraName},
    {"extra_keys", Field::kExtraKeys},
    {"group_idx", Field::kGroupIdx},
    {"kv_cache_spec_kind", Field::kSpecKind},
    {"kv_cache_spec_sliding_window", Field::kSlidingWindow},
    {"locality", Field::kLocality},
    {"ownership", Field::kOwnership},
    {"session_id", Field::kSessionId},
    {"origin", Field::kOrigin},  // proposed #51699, map form only
};
constexpr size_t kBlockStoredArrayFields = 11;

constexpr FieldName kBlockRemovedFields[] = {
    {"block_hashes", Field::kBlockHashes},
    {"medium", Field::kMedium},
    {"group_idx", Field::kGroupIdx},
    {"locality", Field::kLocality},
    {"ownership", Field::kOwnership},
};
constexpr size_t kBlockRemovedArrayFields = 3;

std::span<const FieldName> FieldsOf(EventType t) {
  switch (t) {
    case EventType::kBlockStored: return kBlockStoredFields;
    case EventType::kBlockRemoved: return kBlockRemovedFields;
    case EventType::kAllBlocksCleared: return {};
  }
  return {};
}

size_t ArrayFieldsOf(EventType t) {
  switch (t) {
    case EventType::kBlockStored: return kBlockStoredArrayFields;
    case EventType::kBlockRemoved: return kBlockRemovedArrayFields;
    case EventType::kAllBlocksCleared: return 0;
  }
  return 0;
}

bool LookupTag(std::string_view tag, EventType* t) {
  if (tag == "BlockStored") {
    *t = EventType::kBlockStored;
  } else if (tag == "BlockRemoved") {
    *t = EventType::kBlockRemoved;
  } else if (tag == "AllBlocksCleared") {
    *t = EventType::kAllBlocksCleared;
  } else {
    return false;
  }
  return true;
}

// Grows `v` geometrically to hold `n` more elements. Callers have already
// bounded `n` by the payload size.
template <typename T>
void EnsureRoom(std::vector<T>* v, size_t n) {
  size_t need = v->size() + n;
  if (need > v->capacity()) v->reserve(std::max(need, 2 * v->capacity()));
}

class PayloadDecoder : public Reader {
 public:
  PayloadDecoder(std::string_view payload, const DecodeLimits& limits, EventBatch* out, DecodeError* err)
      : Reader(payload, err, limits.max_depth), limits_(limits), out_(out) {}

  bool Decode() {
    if (p_ == end_) return Truncated(1);
    const Kind k = KindOf(*p_);
    if (k == Kind::kArray) {
      if (!DecodeArrayEnvelope()) return false;
    } else if (k == Kind::kMap) {
      if (!DecodeMapEnvelope()) return false;
    } else {
      return Fail(DecodeErrorReason::kBadEnvelope,
                  "expected array [ts, events(, rank)], got " + std::string(KindName(k)));
    }
    if (p_ != end_) {
      return Fail(DecodeErrorReason::kTrailingBytes, std::to_string(remaining()) + " bytes after the batch");
    }
    return true;
  }

 private:
  bool DecodeArrayEnvelope() {
    Item it;
    if (!Next(&it)) return false;
    if (it.n < 2) {
      return Fail(DecodeErrorReason::kBadEnvelope,
                  "outer array has " + std::to_string(it.n) + " elements, expected 2 or 3");
    }
    field_ = "ts";
    if (!ReadTs()) return false;
    field_ = "events";
    if (!ReadEvents()) return false;
    if (it.n >= 3) {
      field_ = "data_parallel_rank";
      if (!ReadRank()) return false;
    }
    field_ = {};
    for (uint64_t i = 3; i < it.n; ++i) {  // a future envelope field
      if (!Skip()) return false;
    }
    return true;
  }

  // Not sent by any vLLM (EventBatch is array_like since day one), but cheap
  // to accept: a non-msgspec producer serialising the dataclass would do this.
  bool DecodeMapEnvelope() {
    Item it;
    if (!Next(&it)) return false;
    bool have_ts = false, have_events = false;
    for (uint64_t i = 0; i < it.n; ++i) {
      std::string_view key;
      bool is_str = false;
      if (!ReadKey(&key, &is_str)) return false;
      if (is_str && key == "ts") {
        field_ = "ts";
        if (!ReadTs()) return false;
        have_ts = true;
      } else if (is_str && key == "events") {
        field_ = "events";
        if (have_events) return Fail(DecodeErrorReason::kBadEnvelope, "duplicate key");
        if (!ReadEvents()) return false;
        have_events = true;
      } else if (is_str && key == "data_parallel_rank") {
        field_ = "data_parallel_rank";
        if (!ReadRank()) return false;
      } else {
        field_ = {};
        if (!Skip()) return false;
      }
      field_ = {};
    }
    if (!have_ts || !have_events) {
      return Fail(DecodeErrorReason::kBadEnvelope, have_ts ? "outer map lacks 'events'" : "outer map lacks 'ts'");
    }
    return true;
  }

  bool ReadTs() {
    Item it;
    if (!Next(&it)) return false;
    switch (it.kind) {
      case Kind::kFloat: out_->ts = it.f; return true;
      case Kind::kUint: out_->ts = static_cast<double>(it.n); return true;
      case Kind::kInt: out_->ts = static_cast<double>(static_cast<int64_t>(it.n)); return true;
      default: return WrongType("float or int", it.kind);
    }
  }

  bool ReadRank() {
    Item it;
    if (!Next(&it)) return false;
    if (it.kind == Kind::kNil) {
      out_->data_parallel_rank.reset();
      return true;
    }
    int64_t v;
    if (!AsInt64(it, &v)) return false;
    out_->data_parallel_rank = v;
    return true;
  }

  bool ReadEvents() {
    Item it;
    if (!Next(&it)) return false;
    if (it.kind != Kind::kArray) {
      return Fail(DecodeErrorReason::kBadEnvelope, "expected array, got " + std::string(KindName(it.kind)));
    }
    if (it.n > limits_.max_events_per_batch) {
      return Fail(DecodeErrorReason::kTooLarge, std::to_string(it.n) + " events exceed the limit of " +
                                                    std::to_string(limits_.max_events_per_batch));
    }
    field_ = {};
    for (uint64_t i = 0; i < it.n; ++i) {
      event_ = static_cast<int64_t>(i);
      type_ = {};
      if (!DecodeEvent()) return false;
    }
    event_ = -1;
    type_ = {};
    field_ = "events";
    return true;
  }

  bool DecodeEvent() {
    if (p_ == end_) return Truncated(1);
    const Kind k = KindOf(*p_);
    if (k == Kind::kArray) return DecodeArrayEvent();
    if (k == Kind::kMap) return DecodeMapEvent();
    return Fail(DecodeErrorReason::kBadEvent, "expected tagged array or map, got " + std::string(KindName(k)));
  }

  bool DecodeArrayEvent() {
    Item it;
    if (!Next(&it)) return false;
    if (it.n == 0) return Fail(DecodeErrorReason::kBadEvent, "empty event array");
    Item tag;
    if (!Next(&tag)) return false;
    if (tag.kind != Kind::kStr) {
      return Fail(DecodeErrorReason::kBadEvent, "tag: expected str, got " + std::string(KindName(tag.kind)));
    }
    EventType t;
    if (!LookupTag(tag.str(), &t)) {
      ++out_->unknown_events;
      for (uint64_t i = 1; i < it.n; ++i) {
        if (!Skip()) return false;
      }
      return true;
    }
    type_ = EventTypeName(t);
    KvEvent& e = out_->events.emplace_back();
    e.type = t;
    const auto fields = FieldsOf(t);
    const size_t positional = ArrayFieldsOf(t);
    for (uint64_t i = 1; i < it.n; ++i) {
      if (i - 1 < positional) {
        field_ = fields[i - 1].name;
        if (!DecodeField(fields[i - 1].field, &e)) return false;
      } else {
        field_ = {};
        if (!Skip()) return false;  // a newer schema's field
      }
    }
    field_ = {};
    return true;
  }

  bool DecodeMapEvent() {
    Item it;
    if (!Next(&it)) return false;
    const uint64_t pairs = it.n;
    const uint8_t* body = p_;

    // msgspec writes "type" first; anything else costs one extra scan.
    Item tag;
    bool found = false;
    uint64_t first = 0;  // pairs consumed before field decoding starts
    if (pairs > 0 && remaining() >= 5 && std::memcmp(p_, "\xa4type", 5) == 0) {
      p_ += 5;
      if (!Next(&tag)) return false;
      found = true;
      first = 1;
    } else {
      for (uint64_t i = 0; i < pairs && !found; ++i) {
        std::string_view key;
        bool is_str = false;
        if (!ReadKey(&key, &is_str)) return false;
        if (is_str && key == "type") {
          if (!Next(&tag)) return false;
          found = true;
        } else if (!Skip()) {
          return false;
        }
      }
      p_ = body;
    }
    if (!found) return Fail(DecodeErrorReason::kBadEvent, "map event without a 'type' key");
    if (tag.kind != Kind::kStr) {
      return Fail(DecodeErrorReason::kBadEvent, "type: expected str, got " + std::string(KindName(tag.kind)));
    }
    // A str tag's bytes stay valid: they are a view into the payload.
    EventType t;
    if (!LookupTag(tag.str(), &t)) {
      ++out_->unknown_events;
      for (uint64_t i = first; i < pairs; ++i) {
        if (!Skip() || !Skip()) return false;
      }
      return true;
    }
    type_ = EventTypeName(t);
    KvEvent& e = out_->events.emplace_back();
    e.type = t;
    const auto fields = FieldsOf(t);
    size_t hint = 0;  // keys usually come in declaration order
    for (uint64_t i = first; i < pairs; ++i) {
      std::string_view key;
      bool is_str = false;
      field_ = {};
      if (!ReadKey(&key, &is_str)) return false;
      Field f = Field::kUnknown;
      if (is_str) {
        for (size_t j = 0; j < fields.size(); ++j) {
          size_t k = hint + j < fields.size() ? hint + j : hint + j - fields.size();
          if (fields[k].name == key) {
            f = fields[k].field;
            field_ = fields[k].name;
            hint = k + 1;
            break;
          }
        }
      }
      // Unknown keys, non-str keys, and a second "type" (slow path) are skipped.
      if (f == Field::kUnknown) {
        if (!Skip()) return false;
      } else if (!DecodeField(f, &e)) {
        return false;
      }
    }
    field_ = {};
    return true;
  }

  // Reads a map key. A str key is returned in *key; any other key is skipped
  // whole and *is_str is false.
  bool ReadKey(std::string_view* key, bool* is_str) {
    if (p_ == end_) return Truncated(1);
    if (KindOf(*p_) != Kind::kStr) {
      *is_str = false;
      return Skip();
    }
    Item it;
    if (!Next(&it)) return false;
    *key = it.str();
    *is_str = true;
    return true;
  }

  bool DecodeField(Field f, KvEvent* e) {
    switch (f) {
      case Field::kBlockHashes: return ReadHashes(&e->block_hashes);
      case Field::kParentBlockHash: return ReadParent(&e->parent_block_hash);
      case Field::kTokenIds: return ReadTokens(&e->token_ids);
      case Field::kBlockSize: {
        Item it;
        return Next(&it) && AsInt64(it, &e->block_size);
      }
      case Field::kLoraId: return ReadOptInt(&e->lora_id);
      case Field::kMedium: return ReadOptStr(&e->medium);
      case Field::kLoraName: return ReadOptStr(&e->lora_name);
      case Field::kExtraKeys: return ReadExtraKeys(&e->extra_keys);
      case Field::kGroupIdx: return ReadOptInt(&e->group_idx);
      case Field::kSpecKind: return ReadOptStr(&e->kv_cache_spec_kind);
      case Field::kSlidingWindow: return ReadOptInt(&e->kv_cache_spec_sliding_window);
      case Field::kLocality: return ReadOptStr(&e->locality);
      case Field::kOwnership: return ReadOptStr(&e->ownership);
      case Field::kSessionId: return ReadOptStr(&e->session_id);
      case Field::kOrigin: return ReadOptStr(&e->origin);
      case Field::kUnknown: return Skip();
    }
    return Skip();
  }

  bool ReadOptInt(std::optional<int64_t>* out) {
    Item it;
    if (!Next(&it)) return false;
    if (it.kind == Kind::kNil) {
      out->reset();
      return true;
    }
    int64_t v;
    if (!AsInt64(it, &v)) return false;
    *out = v;
    return true;
  }

  bool ReadOptStr(std::optional<std::string_view>* out) {
    Item it;
    if (!Next(&it)) return false;
    if (it.kind == Kind::kNil) {
      out->reset();
      return true;
    }
    if (it.kind != Kind::kStr) return WrongType("str or nil", it.kind);
    *out = it.str();
    return true;
  }

  bool ReadExtraKeys(std::optional<std::string_view>* out) {
    if (p_ == end_) return Truncated(1);
    const Kind k = KindOf(*p_);
    if (k == Kind::kNil) {
      ++p_;
      out->reset();
      return true;
    }
    if (k != Kind::kArray) {
      Item it;
      if (!Next(&it)) return false;
      return WrongType("array or nil", it.kind);
    }
    const uint8_t* start = p_;
    if (!Skip()) return false;  // validates the structure, bounded depth
    *out = std::string_view(reinterpret_cast<const char*>(start), static_cast<size_t>(p_ - start));
    return true;
  }

  // Hash: any int (negative = pre-#23673 signed hash()) or bin of any length.
  bool HashFromItem(const Item& it, BlockKey* k) {
    switch (it.kind) {
      case Kind::kUint: *k = BlockKey::FromU64(it.n); return true;
      case Kind::kInt: *k = BlockKey::FromI64(static_cast<int64_t>(it.n)); return true;
      case Kind::kBin: *k = BlockKey::FromBytes(it.data, static_cast<size_t>(it.n)); return true;
      default: return WrongType("int or bin", it.kind);
    }
  }

  bool ReadParent(std::optional<BlockKey>* out) {
    Item it;
    if (!Next(&it)) return false;
    if (it.kind == Kind::kNil) {
      out->reset();
      return true;
    }
    BlockKey k;
    if (!HashFromItem(it, &k)) return false;
    *out = k;
    return true;
  }

  bool ReadHashes(Slice* s) {
    Item it;
    if (!Next(&it)) return false;
    if (it.kind != Kind::kArray) return WrongType("array", it.kind);
    if (it.n > limits_.max_hashes_per_event) {
      return Fail(DecodeErrorReason::kTooLarge, std::to_string(it.n) + " hashes exceed the limit of " +
                                                    std::to_string(limits_.max_hashes_per_event));
    }
    std::vector<BlockKey>& keys = out_->keys;
    const size_t count = static_cast<size_t>(it.n);
    if (keys.size() + count > std::numeric_limits<uint32_t>::max()) {
      return Fail(DecodeErrorReason::kTooLarge, "batch holds more than 2^32 hashes");
    }
    EnsureRoom(&keys, count);
    s->offset = static_cast<uint32_t>(keys.size());
    s->count = static_cast<uint32_t>(count);
    for (size_t i = 0; i < count; ++i) {
      // Fast path: the default wire form, uint64 (cf + 8 bytes).
      if (remaining() >= 9 && *p_ == 0xcf) {
        keys.push_back(BlockKey::FromU64(LoadBigEndian(p_ + 1, 8)));
        p_ += 9;
        continue;
      }
      Item h;
      if (!Next(&h)) return false;
      BlockKey k;
      if (!HashFromItem(h, &k)) return false;
      keys.push_back(k);
    }
    return true;
  }

  bool ReadTokens(Slice* s) {
    Item it;
    if (!Next(&it)) return false;
    if (it.kind != Kind::kArray) return WrongType("array", it.kind);
    if (it.n > limits_.max_tokens_per_event) {
      return Fail(DecodeErrorReason::kTooLarge, std::to_string(it.n) + " token ids exceed the limit of " +
                                                    std::to_string(limits_.max_tokens_per_event));
    }
    std::vector<int64_t>& tokens = out_->tokens;
    const size_t count = static_cast<size_t>(it.n);
    if (tokens.size() + count > std::numeric_limits<uint32_t>::max()) {
      return Fail(DecodeErrorReason::kTooLarge, "batch holds more than 2^32 token ids");
    }
    EnsureRoom(&tokens, count);
    const size_t base = tokens.size();
    tokens.resize(base + count);
    int64_t* dst = tokens.data() + base;
    s->offset = static_cast<uint32_t>(base);
    s->count = static_cast<uint32_t>(count);
    for (size_t i = 0; i < count; ++i) {
      // Fast paths: token ids are small non-negative ints (fixint, u16, u32).
      if (p_ < end_) {
        const uint8_t b = *p_;
        if (b <= 0x7f) {
          dst[i] = b;
          ++p_;
          continue;
        }
        if (b == 0xcd && remaining() >= 3) {
          dst[i] = static_cast<int64_t>(LoadBigEndian(p_ + 1, 2));
          p_ += 3;
          continue;
        }
        if (b == 0xce && remaining() >= 5) {
          dst[i] = static_cast<int64_t>(LoadBigEndian(p_ + 1, 4));
          p_ += 5;
          continue;
        }
      }
      Item t;
      if (!Next(&t) || !AsInt64(t, &dst[i])) return false;
    }
    return true;
  }

  const DecodeLimits& limits_;
  EventBatch* out_;
};

}  // namespace

bool Decoder::SplitFrames(std::span<const std::string_view, 3> frames, RawMessage* out, DecodeError* err) {
  if (frames[1].size() != 8) {
    if (err != nullptr) {
      err->reason = DecodeErrorReason::kSeqLength;
      err->detail = "sequence frame has " + std::to_string(frames[1].size()) + " bytes, expected 8";
    }
    return false;
  }
  out->topic = frames[0];
  out->seq = LoadBigEndian(reinterpret_cast<const uint8_t*>(frames[1].data()), 8);
  out->payload = frames[2];
  return true;
}

bool Decoder::DecodePayload(std::string_view payload, EventBatch* out, DecodeError* err) const {
  out->Clear();
  return PayloadDecoder(payload, limits_, out, err).Decode();
}

}  // namespace kvidx::ingest
