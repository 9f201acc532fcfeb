// Snapshot format: what one kvidx snapshot contains and how each part is
// encoded as RocksDB keys and values (format version 2; version 1 is read
// too: it lacks the owners' `follows` column, read as all false).
//
// SnapshotData is the consistent cut the store persists: the index contents
// (BlockIndex::Dump), the medium names behind interned Tier ids, and one
// SourceWatermark per SourceId ever handed out, in id order, so that a
// restore can rebuild SourceRegistry and TierRegistry with identical ids
// before BlockIndex::Restore (owner records name sources and tiers by id).
//
// Keys (bytes; big-endian numbers so byte order is numeric order):
//   "kvidx/format"                      FormatRecord: magic + format version
//   "kvidx/current"                     Manifest: the generation to load
//   'g' be64(gen) type(1) be32(index)   Chunk of generation `gen`
// Chunk types, in key order: 'c' source clocks, 'm' models, 'o' owners
// (index 0..n-1, at most owners_per_chunk records each), 's' sources,
// 't' tier names. Every other chunk type has exactly index 0.
//
// Values: a fixed little-endian envelope
//   u32 magic "KVSC" | u32 format version | u64 gen | u8 type | u8 0 | u16 0
//   | u32 index | u32 payload length | payload | u64 XXH3-64 of all before
// Generation, type and index are repeated inside the value, so a value
// copied under another key (or left over from another generation) is
// rejected, and the checksum catches bit flips that RocksDB's own block
// checksums would miss (e.g. flipped in memory before the SST was written).
// The manifest lists the chunk count and an XXH3-64 over the concatenated
// chunk checksums in key order, so a missing, extra or swapped chunk is a
// Corruption even when every chunk is individually valid.
//
// Owner chunks are columnar (all models, then all sources, ...): the
// columns that barely vary (model, tier, group, refcount, hits, follows)
// compress to almost nothing under the store's LZ4, leaving ~10-14 bytes
// per owner. Version 2 added the `follows` column (one byte, 0 or 1,
// after the key lengths).
//
// Everything here is pure (no I/O); thread-compatible.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "index/block_index.h"
#include "ingest/source_watermark.h"
#include "base/status.h"

namespace kvidx::snapshot {

inline constexpr uint32_t kFormatVersion = 2;        // what Write writes
inline constexpr uint32_t kOldestFormatVersion = 1;  // the oldest this build reads
inline constexpr uint32_t kDefaultOwnersPerChunk = 65536;

struct SnapshotData {
  uint32_t format_version = kFormatVersion;  // set by LoadLatest; Write ignores it
  uint64_t created_unix_ms = 0;
  IndexSnapshot index;
  // TierRegistry names by id (index 0 = "GPU", 1 = "CPU", 2 = "STORAGE", ...).
  std::vector<std::string> tier_names;
  // One per SourceId the registry handed out, sorted by source_id, dense
  // (0..n-1): the identity of the engine the index contents were taken
  // against and how far its stream was applied.
  std::vector<ingest::SourceWatermark> sources;
};

// Content equality (SameContents for the index part).
bool SameSnapshot(const SnapshotData& a, const SnapshotData& b);

// Checks the cross references a restore relies on: sources dense and in id
// order, every owner's model/source/tier known, every clock's source known.
// InvalidArgument (Write) naming the first offending entry.
Status Validate(const SnapshotData& data);

// ---- Encoding (used by SnapshotStore; exposed for tests) -------------------

enum class ChunkType : uint8_t {
  kClocks = 'c',
  kModels = 'm',
  kOwners = 'o',
  kSources = 's',
  kTiers = 't',
};
std::string_view ChunkTypeName(ChunkType t);  // "clocks", "models", ...

inline constexpr std::string_view kFormatKey = "kvidx/format";
inline constexpr std::string_view kCurrentKey = "kvidx/current";
inline constexpr char kGenPrefix = 'g';

std::string ChunkKey(uint64_t gen, ChunkType type, uint32_t index);
// Start of generation `gen`'s key range ("g" + be64(gen)); the range of gen
// is [GenKey(gen), GenKey(gen + 1)).
std::string GenKey(uint64_t gen);
struct ParsedChunkKey {
  uint64_t gen = 0;
  ChunkType type = ChunkType::kOwners;
  uint32_t index = 0;
};
// False if `key` is not a well-formed chunk key.
bool ParseChunkKey(std::string_view key, ParsedChunkKey* out);
// "generation 5 owners#17": how errors name a chunk.
std::string ChunkName(uint64_t gen, ChunkType type, uint32_t index);

struct Manifest {
  uint32_t format_version = kFormatVersion;
  uint64_t gen = 0;
  uint64_t created_unix_ms = 0;
  uint32_t num_chunks = 0;        // all chunks of the generation
  uint32_t num_owner_chunks = 0;
  uint64_t num_owners = 0;
  uint64_t chunks_digest = 0;     // XXH3-64 of the chunk checksums in key order
};
std::string EncodeManifest(const Manifest& m);
// Corruption (bad length/checksum/magic) or FailedPrecondition (unknown version).
Status DecodeManifest(std::string_view value, Manifest* out);

std::string EncodeFormatRecord(uint32_t version);
Status DecodeFormatRecord(std::string_view value, uint32_t* version);

// Wraps a payload in the chunk envelope; *checksum receives the trailer.
// `version`: another than kFormatVersion only for tests of old snapshots.
std::string EncodeChunk(uint64_t gen, ChunkType type, uint32_t index, std::string_view payload,
                        uint64_t* checksum, uint32_t version = kFormatVersion);
// Verifies the envelope against the key it was read under and returns the
// payload (a view into `value`), the checksum and, if asked, the format
// version the chunk was written in.
Status DecodeChunk(std::string_view value, uint64_t gen, ChunkType type, uint32_t index,
                   std::string_view* payload, uint64_t* checksum, uint32_t* version = nullptr);

// Payload codecs. Decoders append to `out` and return Corruption naming the
// field on malformed input; they check ranges (ids, lengths) but not cross
// references (Validate does).
std::string EncodeModels(const std::vector<std::pair<std::string, ModelOptions>>& models);
Status DecodeModels(std::string_view payload, std::vector<std::pair<std::string, ModelOptions>>* out);
std::string EncodeClocks(const std::vector<std::pair<SourceId, uint64_t>>& clocks);
Status DecodeClocks(std::string_view payload, std::vector<std::pair<SourceId, uint64_t>>* out);
std::string EncodeTiers(const std::vector<std::string>& names);
Status DecodeTiers(std::string_view payload, std::vector<std::string>* out);
std::string EncodeSources(const std::vector<ingest::SourceWatermark>& sources);
Status DecodeSources(std::string_view payload, std::vector<ingest::SourceWatermark>* out);
// Encodes owners[0..n) (n <= 2^24) into `out` (cleared first; reused
// buffer) in format `version` (1: without `follows`, for tests of old
// snapshots).
void EncodeOwners(std::span<const OwnerRecord> owners, std::string* out, uint32_t version = kFormatVersion);
Status DecodeOwners(std::string_view payload, std::vector<OwnerRecord>* out, uint32_t version = kFormatVersion);

}  // namespace kvidx::snapshot
