// BlockHasher: vLLM's prefix-cache block hash, reproduced byte for byte.
//
// vLLM hashes each *full* block of `block_size` tokens as
//     h_i = H(serialize((parent, tuple(tokens_i), extra_keys_i)))
// with parent = h_{i-1} (NONE_HASH for block 0), serialize = Python pickle
// protocol 5 (sha256, xxhash) or canonical CBOR (sha256_cbor, xxhash_cbor),
// and H = SHA-256 or XXH3-128 (see docs: vllm-kv-events.md §5,
// vllm/v1/core/kv_cache_utils.py). kvidx uses it to turn a prompt into the
// keys engines publish, so a single differing byte means a missed lookup.
//
// NONE_HASH = H(serialize(seed)) with the seed as a Python str. The seed is
// PYTHONHASHSEED if the engine had it set, else "vllm-none-hash" for sha256
// and sha256_cbor (vLLM PR #51875). For xxhash/xxhash_cbor an unset
// PYTHONHASHSEED means a random per-process seed, so Create() requires one.
// (Engines before #51875 used os.urandom(32) as NONE_HASH unless
// PYTHONHASHSEED was pinned; such hashes cannot be reproduced at all.)
//
// Object identity: pickle memoizes by identity, so an object that occurs
// twice in one key is written as a BINGET the second time. Each block's key
// tuple is pickled by its own pickle.dumps() call, so the memo never spans
// blocks (the LoRA name repeated on every block is irrelevant). Within one
// key, the parent bytes, the token tuple, the LoRA name, the cache salt and
// the MM identifiers are separate objects from separate sources. BlockHasher
// therefore writes every str/bytes in full. The one theoretical exception is
// CPython's cached singletons (empty str, one-latin-1-character str): a
// one-character LoRA name equal to a one-character cache salt might be the
// same object in the engine, and then its pickle holds a BINGET. Whether it is
// depends on how the engine built each string, which a consumer cannot know;
// we do not model it. CBOR (cbor2 without value_sharing) has no such effect.
//
// Errors: Create() returns InvalidArgument for a bad configuration;
// HashRequest() returns InvalidArgument for inconsistent extra inputs.
// Nothing throws.
//
// Thread-safety: a BlockHasher owns scratch buffers that hashing reuses, so
// the hashing methods are non-const and an instance must not be used by two
// threads at once. Copies are independent; give each thread its own.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "index/block_key.h"
#include "index/cbor_writer.h"
#include "index/pickle_writer.h"
#include "base/status.h"

namespace kvidx {

// `--prefix-caching-hash-algo` values.
enum class HashAlgo : uint8_t { kSha256, kSha256Cbor, kXxhash, kXxhashCbor };

// Accepts exactly "sha256", "sha256_cbor", "xxhash", "xxhash_cbor".
Result<HashAlgo> ParseHashAlgo(std::string_view name);
std::string_view HashAlgoName(HashAlgo algo);
// 32 for SHA-256, 16 for XXH3-128.
size_t HashAlgoDigestSize(HashAlgo algo);
// Whether `len` bytes can be a bytes-form block hash an engine using `algo`
// publishes: one digest, or k concatenated ones (coarse blocks between vLLM
// #29143 and #45939), at most kMaxDigestBytes. InvalidArgument naming the
// accepted lengths otherwise.
inline constexpr size_t kMaxDigestBytes = 1024;
Status CheckDigestLength(HashAlgo algo, size_t len);

// One block hash: the raw digest (32 or 16 bytes). A default-constructed
// digest (size 0) stands for "no parent", like vLLM's `None`.
struct BlockDigest {
  static constexpr size_t kMaxSize = 32;

  std::array<uint8_t, kMaxSize> bytes{};
  uint8_t size = 0;

  std::span<const uint8_t> view() const { return {bytes.data(), size}; }
  bool empty() const { return size == 0; }

  // What vLLM publishes by default: the last 8 digest bytes, big-endian.
  uint64_t wire_u64() const {
    uint64_t w = 0;
    for (size_t i = size < 8 ? 0 : size - 8; i < size; ++i) w = (w << 8) | bytes[i];
    return w;
  }
  // The index key for an engine publishing ints (the default).
  BlockKey ToKey() const { return BlockKey::FromU64(wire_u64()); }
  // The index key for an engine publishing bytes (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0).
  BlockKey ToBytesKey() const { return BlockKey::FromBytes(bytes.data(), size); }

  std::string ToHex() const;
  // Parses 2..64 hex digits (an even number); InvalidArgument otherwise.
  static Result<BlockDigest> FromHex(std::string_view hex);

  friend bool operator==(const BlockDigest& a, const BlockDigest& b) {
    return a.size == b.size && a.bytes == b.bytes;
  }
};

// One element of a block's extra_keys tuple. Non-owning: `text` must outlive
// the call that consumes the key.
struct ExtraKey {
  enum class Kind : uint8_t {
    kStr,     // str: LoRA name, cache salt
    kBytes,   // bytes: prompt-embeds SHA-256 digest
    kInt,     // int: lora_int_id (vLLM before #27211)
    kMmItem,  // (identifier: str, offset: int) 2-tuple (since vLLM #36708)
  };
  Kind kind = Kind::kStr;
  std::string_view text;  // kStr / kBytes payload, kMmItem identifier
  int64_t number = 0;     // kInt value, kMmItem offset relative to the block start

  static ExtraKey Str(std::string_view s) { return {Kind::kStr, s, 0}; }
  static ExtraKey Bytes(std::string_view b) { return {Kind::kBytes, b, 0}; }
  static ExtraKey Int(int64_t v) { return {Kind::kInt, {}, v}; }
  static ExtraKey MmItem(std::string_view identifier, int64_t offset) {
    return {Kind::kMmItem, identifier, offset};
  }

  // Compares the text, not where it lives.
  friend bool operator==(const ExtraKey&, const ExtraKey&) = default;
};

// A multimodal placeholder range in the prompt (vLLM PlaceholderRange).
struct MultiModalItem {
  std::string_view identifier;  // mm_hash, or "<lora_name>:<mm_hash>" with tower-connector LoRA
  int64_t offset = 0;           // first token of the item in the prompt
  int64_t length = 0;           // number of tokens
};

// The per-request inputs that feed extra_keys. Non-owning views; everything
// must outlive the HashRequest() call.
struct RequestExtras {
  std::optional<std::string_view> lora_name;  // on every block when set
  std::string_view cache_salt;                // block 0 only; empty = none
  // Sorted by offset, as vLLM assumes. Walked with vLLM's exact algorithm.
  std::span<const MultiModalItem> mm_items;
  // Prompt embeds: SHA-256 of the raw tensor bytes of each full block's
  // slice, one per full block, in order. Empty = no prompt embeds.
  std::span<const BlockDigest> prompt_embeds_digests;
};

struct BlockHasherOptions {
  HashAlgo algo = HashAlgo::kSha256;
  // PYTHONHASHSEED of the engine, verbatim; nullopt = unset.
  std::optional<std::string> seed;
  // vLLM's hash_block_size (block_size x DCP size, or the GCD/prefix_match_unit
  // for hybrid models).
  size_t block_size = 16;
};

// How vLLM publishes the hash of a coarse block (a group whose block_size is
// k x hash_block_size) in bytes mode. The int wire value is the same in both.
enum class CoarseHashEra : uint8_t {
  kLastSubHash,    // since vLLM #45939 (2026-06-22): the last fine hash
  kConcatenation,  // #29143 .. #45939: the k fine hashes concatenated
};

// Appends one entry per complete coarse block of `fine_per_coarse` fine
// hashes: the digest bytes vLLM publishes for it. Trailing fine hashes that do
// not fill a coarse block are ignored (vLLM only hashes full blocks).
// InvalidArgument if fine_per_coarse is 0.
Status CoarseBlockHashBytes(std::span<const BlockDigest> fine, size_t fine_per_coarse,
                            CoarseHashEra era, std::vector<std::string>* out);

class BlockHasher {
 public:
  static constexpr size_t kMaxBlockSize = size_t{1} << 20;

  // InvalidArgument for block_size outside [1, kMaxBlockSize] or a missing
  // seed with xxhash/xxhash_cbor.
  static Result<BlockHasher> Create(const BlockHasherOptions& options);

  HashAlgo algo() const { return algo_; }
  size_t block_size() const { return block_size_; }
  const std::string& seed() const { return seed_; }
  const BlockDigest& none_hash() const { return none_hash_; }

  // Hashes every full block of `tokens` (a trailing partial block is
  // skipped), chained from NONE_HASH. Clears *out, then appends one digest
  // per full block. Reuses *out's capacity and internal buffers: no heap
  // allocation per block once warmed up. InvalidArgument if
  // prompt_embeds_digests is non-empty but shorter than the block count.
  Status HashRequest(std::span<const int64_t> tokens, const RequestExtras& extras,
                     std::vector<BlockDigest>* out);
  Status HashRequest(std::span<const int64_t> tokens, std::vector<BlockDigest>* out) {
    return HashRequest(tokens, RequestExtras{}, out);
  }

  // One block: H(serialize((parent or NONE_HASH, tuple(tokens), extra))).
  // `extra` empty means extra_keys = None. Any token count is accepted.
  BlockDigest HashBlock(const BlockDigest& parent, std::span<const int64_t> tokens,
                        std::span<const ExtraKey> extra);

  // The exact bytes HashBlock() feeds to the digest. Valid until the next
  // non-const call.
  std::span<const uint8_t> SerializeBlock(const BlockDigest& parent, std::span<const int64_t> tokens,
                                          std::span<const ExtraKey> extra);

  // serialize(seed as a Python str), and its digest = NONE_HASH.
  static std::vector<uint8_t> SerializeSeed(HashAlgo algo, std::string_view seed);
  static BlockDigest ComputeNoneHash(HashAlgo algo, std::string_view seed);

  // The algorithm's digest of already serialized bytes.
  static BlockDigest Digest(HashAlgo algo, std::span<const uint8_t> data);
  static void DigestInto(HashAlgo algo, std::span<const uint8_t> data, BlockDigest* out);

 private:
  BlockHasher(HashAlgo algo, std::string seed, size_t block_size);

  HashAlgo algo_;
  size_t block_size_;
  std::string seed_;
  BlockDigest none_hash_;
  PickleWriter pickle_;
  CborWriter cbor_;
  std::vector<ExtraKey> extra_scratch_;  // per-block extra keys, reused
};

}  // namespace kvidx
