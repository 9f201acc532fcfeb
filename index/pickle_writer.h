// PickleWriter: a byte-exact encoder for the subset of Python pickle protocol
// 5 that vLLM's block-hash keys use (None, int, bytes, str, tuple).
//
// vLLM's default block hash is SHA-256 over `pickle.dumps(key, protocol=5)`,
// so "the same key" means "the same bytes CPython's C pickler writes". This
// class reproduces those bytes, including the two places where CPython is
// stateful:
//   - Framing: protocol 4+ wraps output in FRAME opcodes. CPython's C pickler
//     (Modules/_pickle.c) opens a frame lazily on the first write after PROTO,
//     and at the start of every save() of any object (atoms included) it
//     commits the open frame if it already holds >= 64 KiB. A committed frame
//     shorter than 4 bytes loses its FRAME header. bytes/str payloads of
//     >= 64 KiB commit the open frame and are written unframed. STOP is the
//     last byte of the last frame. (Checked against CPython 3.11 for frames
//     split inside a token tuple, after a tuple, and around big payloads.)
//   - Memo: every bytes, str and non-empty tuple gets MEMOIZE (0x94) right
//     after it; ints and None never do. Pickle memoizes by object identity,
//     so an object written twice is a BINGET the second time. The writer
//     cannot know Python object identity: callers that need it use
//     WriteMemoGet() with the index returned by next_memo_index().
//
// Usage: Reset(), then exactly one top-level object, then Finish(). The
// caller is responsible for the sequence being a well-formed object (every
// BeginTuple(n) followed by n objects and EndTuple(n)); this is checked only
// by assert in debug builds. str arguments must be UTF-8 (what Python's
// pickle writes for str).
//
// The buffer is reused across Reset() calls, so steady-state encoding does
// not allocate. Not thread-safe; one writer per thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <vector>

namespace kvidx {

// Pickle opcodes used here (Lib/pickle.py names).
namespace pickle_op {
inline constexpr uint8_t kProto = 0x80;
inline constexpr uint8_t kFrame = 0x95;
inline constexpr uint8_t kStop = '.';
inline constexpr uint8_t kNone = 'N';
inline constexpr uint8_t kBinInt1 = 'K';
inline constexpr uint8_t kBinInt2 = 'M';
inline constexpr uint8_t kBinInt = 'J';
inline constexpr uint8_t kLong1 = 0x8a;
inline constexpr uint8_t kShortBinBytes = 'C';
inline constexpr uint8_t kBinBytes = 'B';
inline constexpr uint8_t kBinBytes8 = 0x8e;
inline constexpr uint8_t kShortBinUnicode = 0x8c;
inline constexpr uint8_t kBinUnicode = 'X';
inline constexpr uint8_t kBinUnicode8 = 0x8d;
inline constexpr uint8_t kEmptyTuple = ')';
inline constexpr uint8_t kMark = '(';
inline constexpr uint8_t kTuple = 't';
inline constexpr uint8_t kTuple1 = 0x85;  // TUPLE2 = 0x86, TUPLE3 = 0x87
inline constexpr uint8_t kMemoize = 0x94;
inline constexpr uint8_t kBinGet = 'h';
inline constexpr uint8_t kLongBinGet = 'j';
}  // namespace pickle_op

class PickleWriter {
 public:
  // CPython _pickle.c constants.
  static constexpr size_t kFrameSizeTarget = 64 * 1024;
  static constexpr size_t kFrameSizeMin = 4;
  static constexpr size_t kFrameHeaderSize = 9;

  PickleWriter() = default;

  // Starts a new pickle: clears the buffer and the memo, writes PROTO 5.
  void Reset();

  void WriteNone() {
    OpcodeBoundary();
    *Reserve(1) = pickle_op::kNone;
    len_ += 1;
  }
  void WriteInt(int64_t v);
  void WriteUInt(uint64_t v);
  void WriteBytes(const void* data, size_t len) {
    if (len <= 0xff) {
      WriteShortBlob(pickle_op::kShortBinBytes, data, len);
    } else {
      WriteLongBlob(false, data, len);
    }
  }
  void WriteBytes(std::span<const uint8_t> b) { WriteBytes(b.data(), b.size()); }
  void WriteStr(std::string_view utf8) {
    if (utf8.size() <= 0xff) {
      WriteShortBlob(pickle_op::kShortBinUnicode, utf8.data(), utf8.size());
    } else {
      WriteLongBlob(true, utf8.data(), utf8.size());
    }
  }
  // A reference to an already memoized object (BINGET / LONG_BINGET).
  void WriteMemoGet(uint32_t memo_index);

  // A tuple of n elements: BeginTuple(n), n objects, EndTuple(n).
  void BeginTuple(size_t n) {
    OpcodeBoundary();
    if (n == 0) {
      *Reserve(1) = pickle_op::kEmptyTuple;  // never memoized
      len_ += 1;
    } else if (n > 3) {
      *Reserve(1) = pickle_op::kMark;
      len_ += 1;
    }
  }
  void EndTuple(size_t n) {
    if (n == 0) return;
    uint8_t* p = Reserve(2);
    p[0] = n <= 3 ? static_cast<uint8_t>(pickle_op::kTuple1 + n - 1) : pickle_op::kTuple;
    p[1] = pickle_op::kMemoize;
    len_ += 2;
    ++memo_count_;
  }

  // Same bytes as BeginTuple(n), WriteInt() for each value, EndTuple(n), but
  // skips the per-element frame checks when the tuple cannot reach the frame
  // target. This is the block-hash hot path (token ids).
  void WriteIntTuple(std::span<const int64_t> values);

  // Writes STOP, closes the last frame and returns the pickle. The span stays
  // valid until the next non-const call.
  std::span<const uint8_t> Finish() {
    *Reserve(1) = pickle_op::kStop;  // inside the last frame
    len_ += 1;
    CommitFrame();
    return {buf_.data(), len_};
  }

  // Index the next MEMOIZE will assign (= number of memoized objects so far).
  uint32_t next_memo_index() const { return memo_count_; }

 private:
  static constexpr size_t kNoFrame = static_cast<size_t>(-1);

  // Makes room for n more bytes and returns where they go (len_ is not
  // advanced). Opens a frame if framing is on and none is open, like
  // CPython's _Pickler_Write. The fast path is inline: this runs several
  // times per block.
  uint8_t* Reserve(size_t n) {
    if ((frame_start_ != kNoFrame || !framing_) && len_ + n <= buf_.size()) [[likely]] {
      return buf_.data() + len_;
    }
    return ReserveSlow(n);
  }
  uint8_t* ReserveSlow(size_t n);
  void Grow(size_t min_capacity);
  // bytes/str below 256 bytes: header, payload, MEMOIZE. Never bypasses framing.
  void WriteShortBlob(uint8_t op, const void* data, size_t len) {
    OpcodeBoundary();
    uint8_t* p = Reserve(len + 3);
    p[0] = op;
    p[1] = static_cast<uint8_t>(len);
    CopyShort(p + 2, static_cast<const uint8_t*>(data), len);
    p[2 + len] = pickle_op::kMemoize;
    len_ += len + 3;
    ++memo_count_;
  }
  void WriteLongBlob(bool is_str, const void* data, size_t len);
  // memcpy for len < 256. GCC expands a plain memcpy of a bounded length into
  // `rep movsq`, whose startup cost dominated hashing a 16-token block;
  // fixed-size copies avoid it for digests and short strings. Digests (16/32
  // bytes, just written by the hash function in 4- or 8-byte stores) are
  // copied in 4-byte units so that the loads can be store-forwarded.
  static void CopyShort(uint8_t* dst, const uint8_t* src, size_t len) {
    if (len == 32 || len == 16) {
      for (size_t i = 0; i < len; i += 4) std::memcpy(dst + i, src + i, 4);
    } else if (len >= 16 && len <= 32) {
      std::memcpy(dst, src, 16);
      std::memcpy(dst + len - 16, src + len - 16, 16);
    } else if (len >= 8 && len < 16) {
      std::memcpy(dst, src, 8);
      std::memcpy(dst + len - 8, src + len - 8, 8);
    } else if (len < 8) {
      for (size_t i = 0; i < len; ++i) dst[i] = src[i];
    } else {
      CopyOutOfLine(dst, src, len);
    }
  }
  static void CopyOutOfLine(uint8_t* dst, const uint8_t* src, size_t len);
  void Memoize();
  // CPython save() prologue: commits the frame once it reached the target.
  void OpcodeBoundary() {
    if (frame_start_ != kNoFrame && len_ - frame_start_ - kFrameHeaderSize >= kFrameSizeTarget) {
      CommitFrame();
    }
  }
  void CommitFrame();
  // Encodes one int at p (space for kMaxIntBytes must exist); returns bytes used.
  static inline size_t EncodeInt(uint8_t* p, int64_t v);

  std::vector<uint8_t> buf_;   // capacity only grows; len_ is the used prefix
  size_t len_ = 0;
  size_t frame_start_ = kNoFrame;  // offset of the open frame's header
  bool framing_ = false;
  uint32_t memo_count_ = 0;
};

}  // namespace kvidx
