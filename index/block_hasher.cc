// SHA-256 goes through OpenSSL's low-level SHA256_Init/Update/Final: for the
// ~85-byte inputs of a 16-token block they cost ~98 ns against ~115 ns for
// EVP with a pre-fetched EVP_MD and a reused context, and ~365 ns for the
// one-shot SHA256(), which OpenSSL 3 routes through EVP_Q_digest (a fetch per
// call). They are deprecated in OpenSSL 3.0 but still shipped; builds with
// OPENSSL_NO_DEPRECATED_3_0 fall back to EVP.
#define OPENSSL_SUPPRESS_DEPRECATED 1

#include "index/block_hasher.h"

#include <openssl/evp.h>
#include <openssl/sha.h>
#include <xxhash.h>

#include <bit>
#include <cstring>
#include <utility>

namespace kvidx {

namespace {

constexpr std::string_view kDefaultNoneHashSeed = "vllm-none-hash";

bool UsesCbor(HashAlgo algo) { return algo == HashAlgo::kSha256Cbor || algo == HashAlgo::kXxhashCbor; }

bool UsesXxhash(HashAlgo algo) { return algo == HashAlgo::kXxhash || algo == HashAlgo::kXxhashCbor; }

void Sha256(std::span<const uint8_t> data, uint8_t out[32]) {
#ifndef OPENSSL_NO_DEPRECATED_3_0
  SHA256_CTX ctx;
  SHA256_Init(&ctx);
  SHA256_Update(&ctx, data.data(), data.size());
  SHA256_Final(out, &ctx);
#else
  // Fetched once; EVP_MD objects are immutable and safe to share.
  static EVP_MD* const md = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), out, &len, md, nullptr);
#endif
}

void Xxh3_128(std::span<const uint8_t> data, uint8_t out[16]) {
  // Canonical form (XXH128_canonicalFromHash, = Python xxh3_128_digest):
  // big-endian high64 || low64. Done inline: the library call plus reading
  // back its two 8-byte stores as one cost a store-forwarding stall per block.
  const XXH128_hash_t h = XXH3_128bits(data.data(), data.size());
  uint64_t hi = h.high64, lo = h.low64;
  if constexpr (std::endian::native == std::endian::little) {
    hi = __builtin_bswap64(hi);
    lo = __builtin_bswap64(lo);
  }
  std::memcpy(out, &hi, 8);
  std::memcpy(out + 8, &lo, 8);
}

template <typename Writer>
void WriteExtraKeys(Writer& w, std::span<const ExtraKey> extra) {
  if (extra.empty()) {
    w.WriteNone();
    return;
  }
  w.BeginTuple(extra.size());
  for (const ExtraKey& k : extra) {
    switch (k.kind) {
      case ExtraKey::Kind::kStr:
        w.WriteStr(k.text);
        break;
      case ExtraKey::Kind::kBytes:
        w.WriteBytes(k.text.data(), k.text.size());
        break;
      case ExtraKey::Kind::kInt:
        w.WriteInt(k.number);
        break;
      case ExtraKey::Kind::kMmItem:
        w.BeginTuple(2);
        w.WriteStr(k.text);
        w.WriteInt(k.number);
        w.EndTuple(2);
        break;
    }
  }
  w.EndTuple(extra.size());
}

// Adapts CborWriter to the tuple/None vocabulary of WriteExtraKeys.
struct CborTupleAdapter {
  CborWriter& w;
  void WriteNone() { w.WriteNull(); }
  void BeginTuple(size_t n) { w.BeginArray(n); }
  void EndTuple(size_t) {}
  void WriteStr(std::string_view s) { w.WriteStr(s); }
  void WriteBytes(const void* d, size_t n) { w.WriteBytes(d, n); }
  void WriteInt(int64_t v) { w.WriteInt(v); }
};

}  // namespace

// ---- HashAlgo ---------------------------------------------------------------

Result<HashAlgo> ParseHashAlgo(std::string_view name) {
  if (name == "sha256") return HashAlgo::kSha256;
  if (name == "sha256_cbor") return HashAlgo::kSha256Cbor;
  if (name == "xxhash") return HashAlgo::kXxhash;
  if (name == "xxhash_cbor") return HashAlgo::kXxhashCbor;
  return Status::InvalidArgument("unknown hash algorithm '" + std::string(name) +
                                 "' (expected sha256, sha256_cbor, xxhash or xxhash_cbor)");
}

std::string_view HashAlgoName(HashAlgo algo) {
  switch (algo) {
    case HashAlgo::kSha256: return "sha256";
    case HashAlgo::kSha256Cbor: return "sha256_cbor";
    case HashAlgo::kXxhash: return "xxhash";
    case HashAlgo::kXxhashCbor: return "xxhash_cbor";
  }
  return "unknown";
}

size_t HashAlgoDigestSize(HashAlgo algo) { return UsesXxhash(algo) ? 16 : 32; }

Status CheckDigestLength(HashAlgo algo, size_t len) {
  const size_t d = HashAlgoDigestSize(algo);
  if (len != 0 && len % d == 0 && len <= kMaxDigestBytes) return Status::Ok();
  return Status::InvalidArgument("length " + std::to_string(len) + " is not a " + std::string(HashAlgoName(algo)) +
                                 " digest (" + std::to_string(d) + " bytes, or a multiple of " + std::to_string(d) +
                                 " up to " + std::to_string(kMaxDigestBytes) + " for a concatenated coarse block)");
}

// ---- BlockDigest -------------------------------------------------------------

std::string BlockDigest::ToHex() const {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  s.reserve(size * 2);
  for (size_t i = 0; i < size; ++i) {
    s.push_back(kHex[bytes[i] >> 4]);
    s.push_back(kHex[bytes[i] & 0xf]);
  }
  return s;
}

Result<BlockDigest> BlockDigest::FromHex(std::string_view hex) {
  if (hex.empty() || hex.size() % 2 != 0 || hex.size() > 2 * kMaxSize) {
    return Status::InvalidArgument("digest hex must have an even number of digits, 2.." +
                                   std::to_string(2 * kMaxSize) + ", got " + std::to_string(hex.size()));
  }
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  BlockDigest d;
  d.size = static_cast<uint8_t>(hex.size() / 2);
  for (size_t i = 0; i < d.size; ++i) {
    const int hi = nibble(hex[2 * i]);
    const int lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return Status::InvalidArgument("not a hex digit in digest '" + std::string(hex) + "'");
    d.bytes[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return d;
}

// ---- Coarse groups -----------------------------------------------------------

Status CoarseBlockHashBytes(std::span<const BlockDigest> fine, size_t fine_per_coarse, CoarseHashEra era,
                            std::vector<std::string>* out) {
  if (fine_per_coarse == 0) return Status::InvalidArgument("fine_per_coarse must be >= 1");
  const size_t n = fine.size() / fine_per_coarse;
  for (size_t i = 0; i < n; ++i) {
    std::string bytes;
    if (era == CoarseHashEra::kLastSubHash) {
      const BlockDigest& last = fine[(i + 1) * fine_per_coarse - 1];
      bytes.assign(reinterpret_cast<const char*>(last.bytes.data()), last.size);
    } else {
      for (size_t j = i * fine_per_coarse; j < (i + 1) * fine_per_coarse; ++j) {
        bytes.append(reinterpret_cast<const char*>(fine[j].bytes.data()), fine[j].size);
      }
    }
    out->push_back(std::move(bytes));
  }
  return Status::Ok();
}

// ---- BlockHasher -------------------------------------------------------------

void BlockHasher::DigestInto(HashAlgo algo, std::span<const uint8_t> data, BlockDigest* out) {
  if (UsesXxhash(algo)) {
    Xxh3_128(data, out->bytes.data());
    out->size = 16;
  } else {
    Sha256(data, out->bytes.data());
    out->size = 32;
  }
}

BlockDigest BlockHasher::Digest(HashAlgo algo, std::span<const uint8_t> data) {
  BlockDigest d;
  DigestInto(algo, data, &d);
  return d;
}

std::vector<uint8_t> BlockHasher::SerializeSeed(HashAlgo algo, std::string_view seed) {
  std::span<const uint8_t> bytes;
  PickleWriter p;
  CborWriter c;
  if (UsesCbor(algo)) {
    c.WriteStr(seed);
    bytes = c.Finish();
  } else {
    p.Reset();
    p.WriteStr(seed);
    bytes = p.Finish();
  }
  return {bytes.begin(), bytes.end()};
}

BlockDigest BlockHasher::ComputeNoneHash(HashAlgo algo, std::string_view seed) {
  return Digest(algo, SerializeSeed(algo, seed));
}

BlockHasher::BlockHasher(HashAlgo algo, std::string seed, size_t block_size)
    : algo_(algo), block_size_(block_size), seed_(std::move(seed)) {
  none_hash_ = ComputeNoneHash(algo_, seed_);
}

Result<BlockHasher> BlockHasher::Create(const BlockHasherOptions& options) {
  if (options.block_size == 0 || options.block_size > kMaxBlockSize) {
    return Status::InvalidArgument("block size must be in [1, " + std::to_string(kMaxBlockSize) + "], got " +
                                   std::to_string(options.block_size));
  }
  std::string seed;
  if (options.seed.has_value()) {
    seed = *options.seed;
  } else if (UsesXxhash(options.algo)) {
    return Status::InvalidArgument(
        std::string(HashAlgoName(options.algo)) +
        " needs an explicit seed: without PYTHONHASHSEED, vLLM derives NONE_HASH for xxhash/xxhash_cbor "
        "from os.urandom(32), so block hashes are only reproducible when every engine runs with "
        "PYTHONHASHSEED pinned; pass that value as the seed");
  } else {
    seed = std::string(kDefaultNoneHashSeed);
  }
  BlockHasher h(options.algo, std::move(seed), options.block_size);
  // Size the buffers once so that hashing never allocates in steady state.
  h.extra_scratch_.reserve(8);
  return h;
}

std::span<const uint8_t> BlockHasher::SerializeBlock(const BlockDigest& parent, std::span<const int64_t> tokens,
                                                     std::span<const ExtraKey> extra) {
  // vLLM: `if not parent_block_hash: parent_block_hash = NONE_HASH`.
  const BlockDigest& p = parent.empty() ? none_hash_ : parent;
  if (UsesCbor(algo_)) {
    cbor_.Reset();
    cbor_.BeginArray(3);
    cbor_.WriteBytes(p.bytes.data(), p.size);
    cbor_.WriteIntArray(tokens);
    CborTupleAdapter a{cbor_};
    WriteExtraKeys(a, extra);
    return cbor_.Finish();
  }
  pickle_.Reset();
  pickle_.BeginTuple(3);
  pickle_.WriteBytes(p.bytes.data(), p.size);
  pickle_.WriteIntTuple(tokens);
  WriteExtraKeys(pickle_, extra);
  pickle_.EndTuple(3);
  return pickle_.Finish();
}

BlockDigest BlockHasher::HashBlock(const BlockDigest& parent, std::span<const int64_t> tokens,
                                   std::span<const ExtraKey> extra) {
  return Digest(algo_, SerializeBlock(parent, tokens, extra));
}

Status BlockHasher::HashRequest(std::span<const int64_t> tokens, const RequestExtras& extras,
                                std::vector<BlockDigest>* out) {
  out->clear();
  const size_t num_blocks = tokens.size() / block_size_;
  if (!extras.prompt_embeds_digests.empty() && extras.prompt_embeds_digests.size() < num_blocks) {
    return Status::InvalidArgument("prompt_embeds_digests has " + std::to_string(extras.prompt_embeds_digests.size()) +
                                   " entries but the prompt has " + std::to_string(num_blocks) + " full blocks");
  }
  // Digests are written in place and the parent is read from the previous
  // slot: copying a digest right after the hash function stored it costs a
  // store-forwarding stall per block.
  out->resize(num_blocks);

  const std::span<const MultiModalItem> mm = extras.mm_items;
  size_t mm_idx = 0;  // vLLM's curr_mm_idx, carried from block to block
  const BlockDigest* parent = &none_hash_;
  for (size_t b = 0; b < num_blocks; ++b) {
    const int64_t start = static_cast<int64_t>(b * block_size_);
    const int64_t end = start + static_cast<int64_t>(block_size_);
    extra_scratch_.clear();

    // generate_block_hash_extra_keys: lora + mm + cache_salt + prompt_embeds.
    if (extras.lora_name.has_value()) extra_scratch_.push_back(ExtraKey::Str(*extras.lora_name));

    // _gen_mm_extra_hash_keys, step for step (items sorted by offset).
    if (!mm.empty() && mm.back().offset + mm.back().length > start) {
      while (mm_idx < mm.size()) {
        const MultiModalItem& item = mm[mm_idx];
        if (end > item.offset) {
          if (start >= item.offset + item.length) {
            ++mm_idx;  // the block is past this item
            continue;
          }
          extra_scratch_.push_back(ExtraKey::MmItem(item.identifier, item.offset - start));
          if (end >= item.offset + item.length) {
            ++mm_idx;  // item ends here; the next one may start in this block
          } else {
            break;  // item continues into the next block
          }
        } else {
          break;  // the block has not reached this item yet
        }
      }
    }

    if (start == 0 && !extras.cache_salt.empty()) extra_scratch_.push_back(ExtraKey::Str(extras.cache_salt));

    if (!extras.prompt_embeds_digests.empty()) {
      const BlockDigest& e = extras.prompt_embeds_digests[b];
      extra_scratch_.push_back(
          ExtraKey::Bytes(std::string_view(reinterpret_cast<const char*>(e.bytes.data()), e.size)));
    }

    BlockDigest* d = &(*out)[b];
    DigestInto(algo_, SerializeBlock(*parent, tokens.subspan(static_cast<size_t>(start), block_size_), extra_scratch_),
               d);
    parent = d;
  }
  return Status::Ok();
}

}  // namespace kvidx
