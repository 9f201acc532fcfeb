#include "base/byte_coding.h"
#include "index/pickle_writer.h"

#include <algorithm>
#include <bit>
#include <cassert>
#include <cstring>
#include <limits>

namespace kvidx {

namespace {

using namespace pickle_op;  // NOLINT: opcode names read like pickle.py

// Largest encoding of one int64/uint64: LONG1, length, 9 bytes.
constexpr size_t kMaxIntBytes = 11;
static_assert(kMaxIntBytes >= 8, "EncodeInt's fast path stores 8 bytes");

// Header of a bytes/str opcode with a 1/4/8-byte little-endian length.
size_t BlobHeader(uint8_t* h, size_t len, uint8_t op1, uint8_t op4, uint8_t op8) {
  if (len <= 0xff) {
    h[0] = op1;
    h[1] = static_cast<uint8_t>(len);
    return 2;
  }
  if (len <= 0xffffffffu) {
    h[0] = op4;
    StoreLittleEndian(h + 1, len, 4);
    return 5;
  }
  h[0] = op8;
  StoreLittleEndian(h + 1, len, 8);
  return 9;
}

}  // namespace

void PickleWriter::Reset() {
  len_ = 0;
  frame_start_ = kNoFrame;
  framing_ = true;
  memo_count_ = 0;
  // PROTO is written before framing starts (CPython dump()); every pickle
  // writes something after it, which opens the first frame, so open it now.
  // (If the first write bypasses framing, the empty frame is dropped by
  // CommitFrame, exactly as if it had never been opened.)
  if (buf_.size() < 256) Grow(256);
  buf_[0] = kProto;
  buf_[1] = 5;
  frame_start_ = 2;
  len_ = 2 + kFrameHeaderSize;
}

void PickleWriter::CopyOutOfLine(uint8_t* dst, const uint8_t* src, size_t len) { std::memcpy(dst, src, len); }

void PickleWriter::Grow(size_t min_capacity) {
  buf_.resize(std::max({min_capacity, buf_.size() * 2, size_t{256}}));
}

uint8_t* PickleWriter::ReserveSlow(size_t n) {
  const bool open_frame = framing_ && frame_start_ == kNoFrame;
  const size_t need = len_ + n + (open_frame ? kFrameHeaderSize : 0);
  if (need > buf_.size()) Grow(need);
  if (open_frame) {
    // The header is filled (or squeezed out) by CommitFrame().
    frame_start_ = len_;
    len_ += kFrameHeaderSize;
  }
  return buf_.data() + len_;
}

void PickleWriter::CommitFrame() {
  if (frame_start_ == kNoFrame) return;
  const size_t frame_len = len_ - frame_start_ - kFrameHeaderSize;
  uint8_t* h = buf_.data() + frame_start_;
  if (frame_len >= kFrameSizeMin) {
    h[0] = kFrame;
    StoreLittleEndian(h + 1, frame_len, 8);
  } else {
    std::memmove(h, h + kFrameHeaderSize, frame_len);
    len_ -= kFrameHeaderSize;
  }
  frame_start_ = kNoFrame;
}

void PickleWriter::Memoize() {
  uint8_t* p = Reserve(1);
  *p = kMemoize;
  len_ += 1;
  ++memo_count_;
}

size_t PickleWriter::EncodeInt(uint8_t* p, int64_t v) {
  const uint64_t u = static_cast<uint64_t>(v);
  if (u <= 0x7fffffff) [[likely]] {
    // Token ids: BININT1 / BININT2 / BININT chosen without branches, since
    // real prompts mix ids below and above 65536 unpredictably. Opcode and
    // all four value bytes go out in one 8-byte store (the caller reserved
    // kMaxIntBytes); only the opcode's length is kept.
    const uint64_t c1 = u > 0xff, c2 = u > 0xffff;
    // K (0x4b) -> M (0x4d) -> J (0x4a); lengths 2 -> 3 -> 5.
    const uint64_t word = (kBinInt1 + 2 * c1 - 3 * c2) | (u << 8);  // little-endian layout
    if constexpr (std::endian::native == std::endian::little) {
      std::memcpy(p, &word, 8);
    } else {
      StoreLittleEndian(p, word, 8);
    }
    return 2 + c1 + 2 * c2;
  }
  if (v >= std::numeric_limits<int32_t>::min() && v < 0) {
    p[0] = kBinInt;  // negative ints that fit 32 bits
    StoreLittleEndian(p + 1, u, 4);
    return 5;
  }
  // LONG1, as CPython encode_long(): bit length of |v| / 8 + 1 bytes of
  // little-endian two's complement, minus one byte for a negative value whose
  // top byte is pure sign extension.
  const uint64_t mag = v < 0 ? 0 - u : u;
  const size_t nbits = 64 - static_cast<size_t>(__builtin_clzll(mag));
  size_t nbytes = nbits / 8 + 1;
  for (size_t i = 0; i < nbytes; ++i) {
    p[2 + i] = i < 8 ? static_cast<uint8_t>(u >> (8 * i)) : (v < 0 ? 0xff : 0x00);
  }
  if (v < 0 && nbytes > 1 && p[2 + nbytes - 1] == 0xff && (p[2 + nbytes - 2] & 0x80) != 0) {
    --nbytes;
  }
  p[0] = kLong1;
  p[1] = static_cast<uint8_t>(nbytes);
  return 2 + nbytes;
}

void PickleWriter::WriteInt(int64_t v) {
  OpcodeBoundary();
  uint8_t* p = Reserve(kMaxIntBytes);
  len_ += EncodeInt(p, v);
}

void PickleWriter::WriteUInt(uint64_t v) {
  if (v <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    WriteInt(static_cast<int64_t>(v));
    return;
  }
  // 2^63..2^64-1: 64 significant bits -> 9 bytes, the last one 0x00.
  OpcodeBoundary();
  uint8_t* p = Reserve(kMaxIntBytes);
  p[0] = kLong1;
  p[1] = 9;
  StoreLittleEndian(p + 2, v, 8);
  p[10] = 0;
  len_ += 11;
}

void PickleWriter::WriteLongBlob(bool is_str, const void* data, size_t len) {
  OpcodeBoundary();
  uint8_t h[9];
  const size_t hl = is_str ? BlobHeader(h, len, kShortBinUnicode, kBinUnicode, kBinUnicode8)
                           : BlobHeader(h, len, kShortBinBytes, kBinBytes, kBinBytes8);
  // CPython _Pickler_write_bytes: payloads of >= 64 KiB end the open frame
  // and are written outside any frame.
  const bool bypass = len >= kFrameSizeTarget;
  if (bypass) {
    CommitFrame();
    framing_ = false;
  }
  uint8_t* p = Reserve(hl + len);
  std::memcpy(p, h, hl);
  std::memcpy(p + hl, data, len);
  len_ += hl + len;
  if (bypass) framing_ = true;
  Memoize();
}

void PickleWriter::WriteMemoGet(uint32_t memo_index) {
  assert(memo_index < memo_count_);
  OpcodeBoundary();
  uint8_t* p = Reserve(5);
  if (memo_index < 256) {
    p[0] = kBinGet;
    p[1] = static_cast<uint8_t>(memo_index);
    len_ += 2;
  } else {
    p[0] = kLongBinGet;
    StoreLittleEndian(p + 1, memo_index, 4);
    len_ += 5;
  }
}

void PickleWriter::WriteIntTuple(std::span<const int64_t> values) {
  const size_t n = values.size();
  BeginTuple(n);
  if (n == 0) return;
  // Before element i the frame holds at most (current + MARK + 11*i) bytes;
  // if even the last check cannot reach the target, no check can fire.
  const size_t frame_now = frame_start_ == kNoFrame ? 0 : len_ - frame_start_ - kFrameHeaderSize;
  if (frame_now + 1 + kMaxIntBytes * n < kFrameSizeTarget) {
    uint8_t* p = Reserve(kMaxIntBytes * n);
    uint8_t* const start = p;
    for (int64_t v : values) p += EncodeInt(p, v);
    len_ += static_cast<size_t>(p - start);
  } else {
    for (int64_t v : values) WriteInt(v);
  }
  EndTuple(n);
}

}  // namespace kvidx
