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
#include <cstdio>
#include <cstring>
#include <limits>

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

// Skipping unknown values recurses; this caps the stack whatever the limits say.
constexpr uint32_t kHardMaxDepth = 256;

enum class Kind : uint8_t { kNil, kBool, kUint, kInt, kFloat, kStr, kBin, kArray, kMap, kExt, kInvalid };

std::string_view KindName(Kind k) {
  switch (k) {
    case Kind::kNil: return "nil";
    case Kind::kBool: return "bool";
    case Kind::kUint:
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kStr: return "str";
    case Kind::kBin: return "bin";
    case Kind::kArray: return "array";
    case Kind::kMap: return "map";
    case Kind::kExt: return "ext";
    case Kind::kInvalid: return "invalid byte 0xc1";
  }
  return "?";
}

Kind KindOf(uint8_t b) {
  if (b <= 0x7f) return Kind::kUint;
  if (b <= 0x8f) return Kind::kMap;
  if (b <= 0x9f) return Kind::kArray;
  if (b <= 0xbf) return Kind::kStr;
  if (b >= 0xe0) return Kind::kInt;
  switch (b) {
    case 0xc0: return Kind::kNil;
    case 0xc2:
    case 0xc3: return Kind::kBool;
    case 0xc4:
    case 0xc5:
    case 0xc6: return Kind::kBin;
    case 0xca:
    case 0xcb: return Kind::kFloat;
    case 0xcc:
    case 0xcd:
    case 0xce:
    case 0xcf: return Kind::kUint;
    case 0xd0:
    case 0xd1:
    case 0xd2:
    case 0xd3: return Kind::kInt;
    case 0xd9:
    case 0xda:
    case 0xdb: return Kind::kStr;
    case 0xdc:
    case 0xdd: return Kind::kArray;
    case 0xde:
    case 0xdf: return Kind::kMap;
    case 0xc7:
    case 0xc8:
    case 0xc9:
    case 0xd4:
    case 0xd5:
    case 0xd6:
    case 0xd7:
    case 0xd8: return Kind::kExt;
    default: return Kind::kInvalid;  // 0xc1
  }
}

// One decoded msgpack header. For str/bin/ext the body has been consumed and
// is in [data, data+n); for array/map only the header has been consumed.
struct Item {
  Kind kind = Kind::kNil;
  uint64_t n = 0;           // uint value, int bits, byte length, element/pair count, bool
  double f = 0;
  const uint8_t* data = nullptr;

  std::string_view str() const { return {reinterpret_cast<const char*>(data), static_cast<size_t>(n)}; }
};

// The cursor plus error plumbing shared by the payload and extra-keys decoders.
class Reader {
 public:
  Reader(std::string_view buf, DecodeError* err, uint32_t max_depth)
      : begin_(reinterpret_cast<const uint8_t*>(buf.data())),
        p_(begin_),
        end_(begin_ + buf.size()),
        err_(err),
        max_depth_(std::min(max_depth, kHardMaxDepth)) {}

 protected:
  size_t remaining() const { return static_cast<size_t>(end_ - p_); }

  // Builds "event 2 (BlockStored): field token_ids: <what>". Only runs on
  // failure, so it may allocate.
  bool Fail(DecodeErrorReason reason, std::string_view what) {
    if (err_ == nullptr) return false;
    err_->reason = reason;
    std::string& d = err_->detail;
    d.clear();
    if (event_ >= 0) {
      d += "event " + std::to_string(event_);
      if (!type_.empty()) {
        d += " (";
        d += type_;
        d += ")";
      }
      d += ": ";
    } else if (!in_extra_keys_) {
      d += "batch: ";
    }
    if (!field_.empty()) {
      d += "field ";
      d += field_;
      d += ": ";
    }
    d += what;
    char at[48];
    std::snprintf(at, sizeof at, " (at byte %zu of %zu)", static_cast<size_t>(p_ - begin_),
                  static_cast<size_t>(end_ - begin_));
    d += at;
    return false;
  }
  bool WrongType(std::string_view expected, Kind got) {
    std::string what = "expected ";
    what += expected;
    what += ", got ";
    what += KindName(got);
    return Fail(DecodeErrorReason::kWrongType, what);
  }
  bool Truncated(size_t need) {
    return Fail(DecodeErrorReason::kTruncated,
                "payload ends early (need " + std::to_string(need) + " more bytes, " +
                    std::to_string(remaining()) + " left)");
  }
  bool Need(size_t n) { return n <= remaining() || Truncated(n); }

  bool Body(Item* it, Kind kind, uint64_t len) {
    if (len > remaining()) return Truncated(static_cast<size_t>(len));
    it->kind = kind;
    it->n = len;
    it->data = p_;
    p_ += len;
    return true;
  }
  bool Container(Item* it, Kind kind, uint64_t count) {
    uint64_t min_bytes = kind == Kind::kMap ? 2 * count : count;
    if (min_bytes > remaining()) {
      return Fail(DecodeErrorReason::kTooLarge,
                  std::string(KindName(kind)) + " header claims " + std::to_string(count) +
                      " elements but only " + std::to_string(remaining()) + " bytes remain");
    }
    it->kind = kind;
    it->n = count;
    return true;
  }

  // Reads the next header (see Item). Fails on truncation, impossible
  // counts, and the never-used byte 0xc1.
  bool Next(Item* it) {
    if (p_ == end_) return Truncated(1);
    const uint8_t b = *p_++;
    if (b <= 0x7f) {
      it->kind = Kind::kUint;
      it->n = b;
      return true;
    }
    if (b >= 0xe0) {
      it->kind = Kind::kInt;
      it->n = static_cast<uint64_t>(static_cast<int64_t>(static_cast<int8_t>(b)));
      return true;
    }
    if (b <= 0x8f) return Container(it, Kind::kMap, b & 0x0f);
    if (b <= 0x9f) return Container(it, Kind::kArray, b & 0x0f);
    if (b <= 0xbf) return Body(it, Kind::kStr, b & 0x1f);
    switch (b) {
      case 0xc0:
        it->kind = Kind::kNil;
        return true;
      case 0xc2:
      case 0xc3:
        it->kind = Kind::kBool;
        it->n = b & 1;
        return true;
      case 0xc4:
      case 0xc5:
      case 0xc6: {
        const int w = 1 << (b - 0xc4);
        if (!Need(w)) return false;
        uint64_t len = LoadBigEndian(p_, w);
        p_ += w;
        return Body(it, Kind::kBin, len);
      }
      case 0xc7:
      case 0xc8:
      case 0xc9: {
        const int w = 1 << (b - 0xc7);
        if (!Need(w + 1)) return false;
        uint64_t len = LoadBigEndian(p_, w);
        p_ += w + 1;  // length, then the ext type byte
        return Body(it, Kind::kExt, len);
      }
      case 0xca: {
        if (!Need(4)) return false;
        uint32_t bits = static_cast<uint32_t>(LoadBigEndian(p_, 4));
        float f;
        std::memcpy(&f, &bits, sizeof f);
        p_ += 4;
        it->kind = Kind::kFloat;
        it->f = f;
        return true;
      }
      case 0xcb: {
        if (!Need(8)) return false;
        uint64_t bits = LoadBigEndian(p_, 8);
        std::memcpy(&it->f, &bits, sizeof bits);
        p_ += 8;
        it->kind = Kind::kFloat;
        return true;
      }
      case 0xcc:
      case 0xcd:
      case 0xce:
      case 0xcf: {
        const int w = 1 << (b - 0xcc);
        if (!Need(w)) return false;
        it->kind = Kind::kUint;
        it->n = LoadBigEndian(p_, w);
        p_ += w;
        return true;
      }
      case 0xd0:
      case 0xd1:
      case 0xd2:
      case 0xd3: {
        const int w = 1 << (b - 0xd0);
        if (!Need(w)) return false;
        uint64_t raw = LoadBigEndian(p_, w);
        p_ += w;
        const int shift = 64 - 8 * w;  // sign-extend from w bytes
        it->kind = Kind::kInt;
        it->n = shift == 0 ? raw : static_cast<uint64_t>(static_cast<int64_t>(raw << shift) >> shift);
        return true;
      }
      case 0xd4:
      case 0xd5:
      case 0xd6:
      case 0xd7:
      case 0xd8: {
        if (!Need(1)) return false;
        ++p_;  // ext type byte
        return Body(it, Kind::kExt, uint64_t{1} << (b - 0xd4));
      }
      case 0xd9:
      case 0xda:
      case 0xdb: {
        const int w = 1 << (b - 0xd9);
        if (!Need(w)) return false;
        uint64_t len = LoadBigEndian(p_, w);
        p_ += w;
        return Body(it, Kind::kStr, len);
      }
      case 0xdc:
      case 0xdd:
      case 0xde:
      case 0xdf: {
        const int w = (b & 1) ? 4 : 2;
        if (!Need(w)) return false;
        uint64_t count = LoadBigEndian(p_, w);
        p_ += w;
        return Container(it, b <= 0xdd ? Kind::kArray : Kind::kMap, count);
      }
      default:
        --p_;  // point the error at the offending byte
        return Fail(DecodeErrorReason::kWrongType, "invalid msgpack type byte 0xc1");
    }
  }

  // Skips one complete value of any type, nesting at most max_depth deep.
  bool Skip(uint32_t depth = 0) {
    Item it;
    if (!Next(&it)) return false;
    if (it.kind != Kind::kArray && it.kind != Kind::kMap) return true;
    if (depth >= max_depth_) {
      return Fail(DecodeErrorReason::kTooLarge, "nesting deeper than " + std::to_string(max_depth_));
    }
    uint64_t values = it.kind == Kind::kMap ? 2 * it.n : it.n;
    for (uint64_t i = 0; i < values; ++i) {
      if (!Skip(depth + 1)) return false;
    }
    return true;
  }

  bool AsInt64(const Item& it, int64_t* v) {
    if (it.kind == Kind::kUint) {
      if (it.n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Fail(DecodeErrorReason::kWrongType, "integer " + std::to_string(it.n) + " exceeds int64");
      }
      *v = static_cast<int64_t>(it.n);
      return true;
    }
    if (it.kind == Kind::kInt) {
      *v = static_cast<int64_t>(it.n);
      return true;
    }
    return WrongType("int", it.kind);
  }

  const uint8_t* begin_;
  const uint8_t* p_;
  const uint8_t* end_;
  DecodeError* err_;
  uint32_t max_depth_;
  // Error context.
  int64_t event_ = -1;
  std::string_view type_;
  std::string_view field_;
  bool in_extra_keys_ = false;
};

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

  bool ReadKey(ExtraKey* k) {
    Item it;
    if (!Next(&it)) return false;
    switch (it.kind) {
      case Kind::kStr:
        k->kind = ExtraKey::Kind::kStr;
        k->str.assign(it.str());
        return true;
      case Kind::kBin:
        k->kind = ExtraKey::Kind::kBytes;
        k->str.assign(it.str());
        return true;
      case Kind::kUint:
      case Kind::kInt:
        k->kind = ExtraKey::Kind::kInt;
        return AsInt64(it, &k->num);
      case Kind::kArray: {
        // Multimodal (identifier, offset-in-block) pair.
        if (it.n != 2) return BlockWrongType("a 2-element (identifier, offset) array", it.kind);
        Item id, off;
        if (!Next(&id)) return false;
        if (id.kind != Kind::kStr) return BlockWrongType("str multimodal identifier", id.kind);
        if (!Next(&off)) return false;
        k->kind = ExtraKey::Kind::kMm;
        k->str.assign(id.str());
        return AsInt64(off, &k->num);
      }
      default: return BlockWrongType("str, int, bin or [str, int]", it.kind);
    }
  }

  std::vector<BlockExtraKeys>* out_;
  uint64_t block_ = 0;
};

}  // namespace

bool Decoder::SplitFrames(std::span<const std::string_view> frames, RawMessage* out, DecodeError* err) {
  if (frames.size() != 3) {
    if (err != nullptr) {
      err->reason = DecodeErrorReason::kFrameCount;
      err->detail = "message has " + std::to_string(frames.size()) + " frames, expected 3 (topic, seq, payload)";
    }
    return false;
  }
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

bool DecodeExtraKeys(std::string_view raw, std::vector<BlockExtraKeys>* out, DecodeError* err) {
  return ExtraKeysDecoder(raw, out, err).Decode();
}

}  // namespace kvidx::ingest
