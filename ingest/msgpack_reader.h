// A msgpack cursor over one buffer: the reading half of the decoder, shared
// with the extra-keys decoder of ingest/testing. Never throws, never
// allocates except for error details; errors go to a DecodeError with the
// event, field and byte offset they were found at. Internal to ingest:
// everything else goes through decoder.h.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>

#include "base/byte_coding.h"
#include "ingest/decoder.h"

namespace kvidx::ingest::msgpack {

// Skipping unknown values recurses; this caps the stack whatever the limits say.
inline constexpr uint32_t kHardMaxDepth = 256;

enum class Kind : uint8_t { kNil, kBool, kUint, kInt, kFloat, kStr, kBin, kArray, kMap, kExt, kInvalid };

inline std::string_view KindName(Kind k) {
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

inline Kind KindOf(uint8_t b) {
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

// The cursor plus error plumbing shared by the payload decoder
// (decoder.cc) and the extra-keys decoder (testing/extra_keys.cc).
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

}  // namespace kvidx::ingest::msgpack
