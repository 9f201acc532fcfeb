#include "base/byte_coding.h"
#include "server/snapshot_format.h"

#include <bit>
#include <cstring>

#include <xxhash.h>

namespace kvidx::snapshot {

// Fixed little-endian layouts are written with memcpy of native values.
static_assert(std::endian::native == std::endian::little, "snapshot encoding assumes a little-endian host");

namespace {

constexpr uint32_t kChunkMagic = 0x4353564b;   // "KVSC"
constexpr uint32_t kManifestMagic = 0x4d53564b;  // "KVSM"
constexpr char kFormatMagic[8] = {'K', 'V', 'I', 'D', 'X', 'S', 'N', 'P'};
constexpr size_t kEnvelopeHeader = 4 + 4 + 8 + 4 + 4 + 4;  // through payload length
constexpr size_t kChecksumLen = 8;

template <typename T>
void Put(std::string* s, T v) {
  char buf[sizeof(T)];
  std::memcpy(buf, &v, sizeof(T));
  s->append(buf, sizeof(T));
}
void PutStr(std::string* s, std::string_view v) {
  Put<uint32_t>(s, static_cast<uint32_t>(v.size()));
  s->append(v);
}
template <typename T>
T Load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Bounds-checked sequential reader; the first failure sticks.
class Reader {
 public:
  Reader(std::string_view data, std::string_view what) : data_(data), what_(what) {}
  template <typename T>
  bool Get(T* v, std::string_view field) {
    if (!Need(sizeof(T), field)) return false;
    *v = Load<T>(data_.data() + pos_);
    pos_ += sizeof(T);
    return true;
  }
  bool GetStr(std::string* v, std::string_view field, size_t max_len = 1 << 20) {
    uint32_t n = 0;
    if (!Get(&n, field)) return false;
    if (n > max_len) return Fail(std::string(field) + " length " + std::to_string(n) + " exceeds " +
                                 std::to_string(max_len));
    if (!Need(n, field)) return false;
    v->assign(data_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  // A view of the next n bytes.
  bool GetBytes(size_t n, const char** p, std::string_view field) {
    if (!Need(n, field)) return false;
    *p = data_.data() + pos_;
    pos_ += n;
    return true;
  }
  bool Fail(std::string why) {
    if (status_.ok()) status_ = Status::Corruption(std::string(what_) + ": " + why);
    return false;
  }
  Status Finish() {
    if (status_.ok() && pos_ != data_.size()) {
      Fail(std::to_string(data_.size() - pos_) + " trailing bytes");
    }
    return status_;
  }
  const Status& status() const { return status_; }
  size_t remaining() const { return data_.size() - pos_; }

 private:
  bool Need(size_t n, std::string_view field) {
    if (!status_.ok()) return false;
    if (data_.size() - pos_ < n) {
      return Fail("truncated at " + std::string(field) + " (offset " + std::to_string(pos_) + ", need " +
                  std::to_string(n) + ", have " + std::to_string(data_.size() - pos_) + ")");
    }
    return true;
  }
  std::string_view data_;
  std::string_view what_;
  size_t pos_ = 0;
  Status status_;
};

bool KnownChunkType(uint8_t t) {
  switch (static_cast<ChunkType>(t)) {
    case ChunkType::kClocks:
    case ChunkType::kModels:
    case ChunkType::kOwners:
    case ChunkType::kSources:
    case ChunkType::kTiers:
      return true;
  }
  return false;
}

Status VersionCheck(uint32_t version, std::string_view where) {
  if (version >= kOldestFormatVersion && version <= kFormatVersion) return Status::Ok();
  return Status::FailedPrecondition(std::string(where) + ": snapshot format version " + std::to_string(version) +
                                    " is not supported (this build reads versions " +
                                    std::to_string(kOldestFormatVersion) + " to " + std::to_string(kFormatVersion) +
                                    ")");
}

// Owner key length byte: 0 integer form, 0xff empty bytes form, else bytes.
uint8_t KeyLenCode(const BlockKey& k) {
  if (!k.is_bytes()) return 0;
  return k.byte_len() == 0 ? 0xff : static_cast<uint8_t>(k.byte_len());
}

}  // namespace

bool SameSnapshot(const SnapshotData& a, const SnapshotData& b) {
  return a.created_unix_ms == b.created_unix_ms && a.tier_names == b.tier_names && a.sources == b.sources &&
         SameContents(a.index, b.index);
}

Status Validate(const SnapshotData& d) {
  if (d.index.models.size() > kMaxModels) {
    return Status::InvalidArgument(std::to_string(d.index.models.size()) + " models exceed kMaxModels");
  }
  if (d.tier_names.size() > kMaxTiers) {
    return Status::InvalidArgument(std::to_string(d.tier_names.size()) + " tier names exceed kMaxTiers");
  }
  if (d.sources.size() > kMaxSources) {
    return Status::InvalidArgument(std::to_string(d.sources.size()) + " sources exceed kMaxSources");
  }
  for (size_t i = 0; i < d.sources.size(); ++i) {
    if (d.sources[i].source_id != i) {
      return Status::InvalidArgument("sources must be dense and sorted by source_id: entry " + std::to_string(i) +
                                     " has source_id " + std::to_string(d.sources[i].source_id) + " (" +
                                     d.sources[i].replica + "/dp" + std::to_string(d.sources[i].dp_rank) + ")");
    }
  }
  for (const auto& [s, clock] : d.index.source_clocks) {
    if (s >= d.sources.size()) {
      return Status::InvalidArgument("source clock of source " + std::to_string(s) + " without a watermark entry");
    }
  }
  for (const OwnerRecord& o : d.index.owners) {
    if (o.model >= d.index.models.size() || o.source >= d.sources.size() ||
        static_cast<size_t>(o.tier) >= d.tier_names.size()) {
      return Status::InvalidArgument("owner record of block " + o.key.ToString() + " names model " +
                                     std::to_string(o.model) + " / source " + std::to_string(o.source) +
                                     " / tier " + std::to_string(static_cast<int>(o.tier)) +
                                     " not listed in the snapshot");
    }
  }
  return Status::Ok();
}

std::string_view ChunkTypeName(ChunkType t) {
  switch (t) {
    case ChunkType::kClocks: return "clocks";
    case ChunkType::kModels: return "models";
    case ChunkType::kOwners: return "owners";
    case ChunkType::kSources: return "sources";
    case ChunkType::kTiers: return "tiers";
  }
  return "unknown";
}

std::string GenKey(uint64_t gen) {
  std::string k(1, kGenPrefix);
  AppendBigEndian(&k, gen, 8);
  return k;
}

std::string ChunkKey(uint64_t gen, ChunkType type, uint32_t index) {
  std::string k = GenKey(gen);
  k.push_back(static_cast<char>(type));
  AppendBigEndian(&k, index, 4);
  return k;
}

bool ParseChunkKey(std::string_view key, ParsedChunkKey* out) {
  if (key.size() != 14 || key[0] != kGenPrefix || !KnownChunkType(static_cast<uint8_t>(key[9]))) return false;
  out->gen = LoadBigEndian(reinterpret_cast<const uint8_t*>(key.data() + 1), 8);
  out->type = static_cast<ChunkType>(key[9]);
  out->index = static_cast<uint32_t>(LoadBigEndian(reinterpret_cast<const uint8_t*>(key.data() + 10), 4));
  return true;
}

std::string ChunkName(uint64_t gen, ChunkType type, uint32_t index) {
  return "generation " + std::to_string(gen) + " " + std::string(ChunkTypeName(type)) + "#" + std::to_string(index);
}

// ---- Manifest and format record --------------------------------------------

std::string EncodeManifest(const Manifest& m) {
  std::string s;
  Put<uint32_t>(&s, kManifestMagic);
  Put<uint32_t>(&s, m.format_version);
  Put<uint64_t>(&s, m.gen);
  Put<uint64_t>(&s, m.created_unix_ms);
  Put<uint32_t>(&s, m.num_chunks);
  Put<uint32_t>(&s, m.num_owner_chunks);
  Put<uint64_t>(&s, m.num_owners);
  Put<uint64_t>(&s, m.chunks_digest);
  Put<uint64_t>(&s, XXH3_64bits(s.data(), s.size()));
  return s;
}

Status DecodeManifest(std::string_view v, Manifest* m) {
  constexpr size_t kLen = 4 + 4 + 8 + 8 + 4 + 4 + 8 + 8 + 8;
  if (v.size() < 8) {
    return Status::Corruption("key '" + std::string(kCurrentKey) + "': manifest of " + std::to_string(v.size()) +
                              " bytes is truncated");
  }
  if (Load<uint32_t>(v.data()) != kManifestMagic) {
    return Status::Corruption("key '" + std::string(kCurrentKey) + "': bad manifest magic");
  }
  // The version comes before the length check: a future version may be longer.
  Status vs = VersionCheck(Load<uint32_t>(v.data() + 4), "key '" + std::string(kCurrentKey) + "'");
  if (!vs.ok()) return vs;
  if (v.size() != kLen) {
    return Status::Corruption("key '" + std::string(kCurrentKey) + "': manifest is " + std::to_string(v.size()) +
                              " bytes, expected " + std::to_string(kLen));
  }
  if (XXH3_64bits(v.data(), kLen - 8) != Load<uint64_t>(v.data() + kLen - 8)) {
    return Status::Corruption("key '" + std::string(kCurrentKey) + "': manifest checksum mismatch");
  }
  Reader r(v.substr(4, kLen - 12), "manifest");
  bool ok = r.Get(&m->format_version, "version") && r.Get(&m->gen, "gen") &&
            r.Get(&m->created_unix_ms, "created") && r.Get(&m->num_chunks, "num_chunks") &&
            r.Get(&m->num_owner_chunks, "num_owner_chunks") && r.Get(&m->num_owners, "num_owners") &&
            r.Get(&m->chunks_digest, "chunks_digest");
  (void)ok;
  Status st = r.Finish();
  if (!st.ok()) return st;
  if (m->num_chunks != m->num_owner_chunks + 4) {
    return Status::Corruption("key '" + std::string(kCurrentKey) + "': manifest lists " +
                              std::to_string(m->num_chunks) + " chunks with " + std::to_string(m->num_owner_chunks) +
                              " owner chunks");
  }
  return Status::Ok();
}

std::string EncodeFormatRecord(uint32_t version) {
  std::string s(kFormatMagic, sizeof(kFormatMagic));
  Put<uint32_t>(&s, version);
  return s;
}

Status DecodeFormatRecord(std::string_view v, uint32_t* version) {
  if (v.size() != sizeof(kFormatMagic) + 4 || std::memcmp(v.data(), kFormatMagic, sizeof(kFormatMagic)) != 0) {
    return Status::Corruption("key '" + std::string(kFormatKey) + "': not a kvidx format record (" +
                              std::to_string(v.size()) + " bytes)");
  }
  *version = Load<uint32_t>(v.data() + sizeof(kFormatMagic));
  return VersionCheck(*version, "key '" + std::string(kFormatKey) + "'");
}

// ---- Chunk envelope ----------------------------------------------------------

std::string EncodeChunk(uint64_t gen, ChunkType type, uint32_t index, std::string_view payload,
                        uint64_t* checksum, uint32_t version) {
  std::string s;
  s.reserve(kEnvelopeHeader + payload.size() + kChecksumLen);
  Put<uint32_t>(&s, kChunkMagic);
  Put<uint32_t>(&s, version);
  Put<uint64_t>(&s, gen);
  Put<uint32_t>(&s, static_cast<uint32_t>(type));
  Put<uint32_t>(&s, index);
  Put<uint32_t>(&s, static_cast<uint32_t>(payload.size()));
  s.append(payload);
  uint64_t sum = XXH3_64bits(s.data(), s.size());
  Put<uint64_t>(&s, sum);
  *checksum = sum;
  return s;
}

Status DecodeChunk(std::string_view v, uint64_t gen, ChunkType type, uint32_t index, std::string_view* payload,
                   uint64_t* checksum, uint32_t* version) {
  std::string name = ChunkName(gen, type, index);
  if (v.size() < kEnvelopeHeader + kChecksumLen) {
    return Status::Corruption(name + ": value of " + std::to_string(v.size()) + " bytes is truncated");
  }
  if (Load<uint32_t>(v.data()) != kChunkMagic) return Status::Corruption(name + ": bad chunk magic");
  Status vs = VersionCheck(Load<uint32_t>(v.data() + 4), name);
  if (!vs.ok()) return vs;
  if (version != nullptr) *version = Load<uint32_t>(v.data() + 4);
  uint32_t len = Load<uint32_t>(v.data() + 24);
  if (v.size() != kEnvelopeHeader + len + kChecksumLen) {
    return Status::Corruption(name + ": value is " + std::to_string(v.size()) + " bytes, header says " +
                              std::to_string(kEnvelopeHeader + len + kChecksumLen));
  }
  uint64_t sum = XXH3_64bits(v.data(), v.size() - kChecksumLen);
  if (sum != Load<uint64_t>(v.data() + v.size() - kChecksumLen)) {
    return Status::Corruption(name + ": checksum mismatch (bit flip or torn value)");
  }
  if (Load<uint64_t>(v.data() + 8) != gen || Load<uint32_t>(v.data() + 16) != static_cast<uint32_t>(type) ||
      Load<uint32_t>(v.data() + 20) != index) {
    return Status::Corruption(name + ": value belongs to " +
                              ChunkName(Load<uint64_t>(v.data() + 8),
                                        static_cast<ChunkType>(Load<uint32_t>(v.data() + 16) & 0xff),
                                        Load<uint32_t>(v.data() + 20)));
  }
  *payload = v.substr(kEnvelopeHeader, len);
  *checksum = sum;
  return Status::Ok();
}

// ---- Payloads ------------------------------------------------------------------

std::string EncodeModels(const std::vector<std::pair<std::string, ModelOptions>>& models) {
  std::string s;
  Put<uint32_t>(&s, static_cast<uint32_t>(models.size()));
  for (const auto& [name, o] : models) {
    PutStr(&s, name);
    Put<uint32_t>(&s, o.max_query_blocks);
    Put<uint8_t>(&s, o.index_all_groups ? 1 : 0);
  }
  return s;
}

Status DecodeModels(std::string_view payload, std::vector<std::pair<std::string, ModelOptions>>* out) {
  Reader r(payload, "models chunk");
  uint32_t n = 0;
  if (r.Get(&n, "count") && n > kMaxModels) r.Fail("model count " + std::to_string(n) + " exceeds kMaxModels");
  for (uint32_t i = 0; i < n && r.status().ok(); ++i) {
    std::string name;
    ModelOptions o;
    uint8_t all = 0;
    if (!(r.GetStr(&name, "model name") && r.Get(&o.max_query_blocks, "max_query_blocks") &&
          r.Get(&all, "index_all_groups"))) {
      break;
    }
    if (all > 1) r.Fail("model '" + name + "': index_all_groups byte " + std::to_string(all));
    o.index_all_groups = all == 1;
    out->emplace_back(std::move(name), o);
  }
  return r.Finish();
}

std::string EncodeClocks(const std::vector<std::pair<SourceId, uint64_t>>& clocks) {
  std::string s;
  Put<uint32_t>(&s, static_cast<uint32_t>(clocks.size()));
  for (const auto& [src, clock] : clocks) {
    Put<uint32_t>(&s, src);
    Put<uint64_t>(&s, clock);
  }
  return s;
}

Status DecodeClocks(std::string_view payload, std::vector<std::pair<SourceId, uint64_t>>* out) {
  Reader r(payload, "clocks chunk");
  uint32_t n = 0;
  if (r.Get(&n, "count") && n > kMaxSources) r.Fail("clock count " + std::to_string(n) + " exceeds kMaxSources");
  for (uint32_t i = 0; i < n && r.status().ok(); ++i) {
    uint32_t src = 0;
    uint64_t clock = 0;
    if (!(r.Get(&src, "source") && r.Get(&clock, "clock"))) break;
    if (src >= kMaxSources) r.Fail("clock of source id " + std::to_string(src));
    out->emplace_back(src, clock);
  }
  return r.Finish();
}

std::string EncodeTiers(const std::vector<std::string>& names) {
  std::string s;
  Put<uint32_t>(&s, static_cast<uint32_t>(names.size()));
  for (const std::string& n : names) PutStr(&s, n);
  return s;
}

Status DecodeTiers(std::string_view payload, std::vector<std::string>* out) {
  Reader r(payload, "tiers chunk");
  uint32_t n = 0;
  if (r.Get(&n, "count") && n > kMaxTiers) r.Fail("tier count " + std::to_string(n) + " exceeds kMaxTiers");
  for (uint32_t i = 0; i < n && r.status().ok(); ++i) {
    std::string name;
    if (!r.GetStr(&name, "tier name")) break;
    out->push_back(std::move(name));
  }
  return r.Finish();
}

std::string EncodeSources(const std::vector<ingest::SourceWatermark>& sources) {
  std::string s;
  Put<uint32_t>(&s, static_cast<uint32_t>(sources.size()));
  for (const ingest::SourceWatermark& w : sources) {
    Put<uint32_t>(&s, w.source_id);
    PutStr(&s, w.replica);
    Put<uint32_t>(&s, w.dp_rank);
    PutStr(&s, w.model);
    PutStr(&s, w.endpoint);
    Put<uint8_t>(&s, w.has_seq ? 1 : 0);
    Put<uint64_t>(&s, w.last_seq);
    Put<uint64_t>(&s, w.last_batch_fingerprint);
    Put<uint64_t>(&s, std::bit_cast<uint64_t>(w.last_batch_ts));
    Put<uint8_t>(&s, w.state);
    Put<uint64_t>(&s, w.gpu_capacity_blocks);
  }
  return s;
}

Status DecodeSources(std::string_view payload, std::vector<ingest::SourceWatermark>* out) {
  Reader r(payload, "sources chunk");
  uint32_t n = 0;
  if (r.Get(&n, "count") && n > kMaxSources) r.Fail("source count " + std::to_string(n) + " exceeds kMaxSources");
  for (uint32_t i = 0; i < n && r.status().ok(); ++i) {
    ingest::SourceWatermark w;
    uint8_t has_seq = 0;
    uint64_t ts_bits = 0;
    if (!(r.Get(&w.source_id, "source_id") && r.GetStr(&w.replica, "replica") && r.Get(&w.dp_rank, "dp_rank") &&
          r.GetStr(&w.model, "model") && r.GetStr(&w.endpoint, "endpoint") && r.Get(&has_seq, "has_seq") &&
          r.Get(&w.last_seq, "last_seq") && r.Get(&w.last_batch_fingerprint, "last_batch_fingerprint") &&
          r.Get(&ts_bits, "last_batch_ts") && r.Get(&w.state, "state") &&
          r.Get(&w.gpu_capacity_blocks, "gpu_capacity_blocks"))) {
      break;
    }
    if (has_seq > 1) r.Fail("source " + std::to_string(w.source_id) + ": has_seq byte " + std::to_string(has_seq));
    w.has_seq = has_seq == 1;
    w.last_batch_ts = std::bit_cast<double>(ts_bits);
    out->push_back(std::move(w));
  }
  return r.Finish();
}

// Columns: u32 n | u16 model[n] | u16 source[n] | u8 tier[n] | u8 keylen[n]
// | u8 follows[n] (version >= 2; 0 or 1) | u32 group[n] | u32 refcount[n] | u32 hits[n] | u32 stamp[n] | u64 wire[n]
// | digest bytes of the bytes-form keys, in order.
void EncodeOwners(std::span<const OwnerRecord> owners, std::string* out, uint32_t version) {
  const size_t n = owners.size();
  const bool with_follows = version >= 2;
  size_t extra = 0;
  for (const OwnerRecord& o : owners) extra += o.key.byte_len();
  out->clear();
  out->resize(4 + n * (2 + 2 + 1 + 1 + (with_follows ? 1 : 0) + 4 + 4 + 4 + 4 + 8) + extra);
  char* p = out->data();
  auto put = [&p](auto v) {
    std::memcpy(p, &v, sizeof(v));
    p += sizeof(v);
  };
  put(static_cast<uint32_t>(n));
  for (const OwnerRecord& o : owners) put(static_cast<uint16_t>(o.model));
  for (const OwnerRecord& o : owners) put(static_cast<uint16_t>(o.source));
  for (const OwnerRecord& o : owners) put(static_cast<uint8_t>(o.tier));
  for (const OwnerRecord& o : owners) put(KeyLenCode(o.key));
  if (with_follows) {
    for (const OwnerRecord& o : owners) put(static_cast<uint8_t>(o.follows));
  }
  for (const OwnerRecord& o : owners) put(o.group);
  for (const OwnerRecord& o : owners) put(o.refcount);
  for (const OwnerRecord& o : owners) put(o.hits);
  for (const OwnerRecord& o : owners) put(o.stamp);
  for (const OwnerRecord& o : owners) put(o.key.wire());
  for (const OwnerRecord& o : owners) {
    size_t len = o.key.byte_len();
    if (len == 0) continue;
    o.key.CopyBytes(reinterpret_cast<uint8_t*>(p));
    p += len;
  }
}

Status DecodeOwners(std::string_view payload, std::vector<OwnerRecord>* out, uint32_t version) {
  Reader r(payload, "owners chunk");
  uint32_t n = 0;
  if (!r.Get(&n, "count")) return r.Finish();
  const bool with_follows = version >= 2;
  const size_t fixed = 2 + 2 + 1 + 1 + (with_follows ? 1 : 0) + 4 + 4 + 4 + 4 + 8;
  if (static_cast<uint64_t>(n) * fixed > r.remaining()) {
    return Status::Corruption("owners chunk: " + std::to_string(n) + " records do not fit in " +
                              std::to_string(r.remaining()) + " bytes");
  }
  const char *model = nullptr, *source = nullptr, *tier = nullptr, *keylen = nullptr, *follows = nullptr,
             *group = nullptr, *ref = nullptr, *hits = nullptr, *stamp = nullptr, *wire = nullptr;
  r.GetBytes(2 * size_t{n}, &model, "model");
  r.GetBytes(2 * size_t{n}, &source, "source");
  r.GetBytes(size_t{n}, &tier, "tier");
  r.GetBytes(size_t{n}, &keylen, "keylen");
  if (with_follows) r.GetBytes(size_t{n}, &follows, "follows");
  r.GetBytes(4 * size_t{n}, &group, "group");
  r.GetBytes(4 * size_t{n}, &ref, "refcount");
  r.GetBytes(4 * size_t{n}, &hits, "hits");
  r.GetBytes(4 * size_t{n}, &stamp, "stamp");
  r.GetBytes(8 * size_t{n}, &wire, "wire");
  if (!r.status().ok()) return r.Finish();
  size_t base = out->size();
  out->resize(base + n);
  for (uint32_t i = 0; i < n; ++i) {
    OwnerRecord& o = (*out)[base + i];
    o.model = Load<uint16_t>(model + 2 * i);
    o.source = Load<uint16_t>(source + 2 * i);
    uint8_t t = static_cast<uint8_t>(tier[i]);
    o.group = Load<uint32_t>(group + 4 * i);
    o.refcount = Load<uint32_t>(ref + 4 * i);
    o.hits = Load<uint32_t>(hits + 4 * i);
    o.stamp = Load<uint32_t>(stamp + 4 * i);
    uint64_t w = Load<uint64_t>(wire + 8 * i);
    uint8_t kl = static_cast<uint8_t>(keylen[i]);
    const uint8_t f = follows == nullptr ? 0 : static_cast<uint8_t>(follows[i]);
    if (f > 1) {
      out->resize(base);
      return Status::Corruption("owners chunk: record " + std::to_string(i) + " has follows flag " +
                                std::to_string(f));
    }
    o.follows = f == 1;
    if (t >= kMaxTiers || o.refcount == 0 || o.source >= kMaxSources || o.model >= kMaxModels) {
      out->resize(base);
      return Status::Corruption("owners chunk: record " + std::to_string(i) + " has model " +
                                std::to_string(o.model) + " source " + std::to_string(o.source) + " tier " +
                                std::to_string(t) + " refcount " + std::to_string(o.refcount));
    }
    o.tier = static_cast<Tier>(t);
    if (kl == 0) {
      o.key = BlockKey::FromU64(w);
    } else if (kl == 0xff || kl <= BlockKey::kMaxBytes) {
      size_t len = kl == 0xff ? 0 : kl;
      const char* bytes = nullptr;
      if (!r.GetBytes(len, &bytes, "key bytes")) {
        out->resize(base);
        return r.Finish();
      }
      o.key = BlockKey::FromBytes(reinterpret_cast<const uint8_t*>(bytes), len);
      if (o.key.wire() != w) {
        out->resize(base);
        return Status::Corruption("owners chunk: record " + std::to_string(i) + ": key bytes disagree with wire value");
      }
    } else {
      out->resize(base);
      return Status::Corruption("owners chunk: record " + std::to_string(i) + " key length " + std::to_string(kl));
    }
  }
  Status st = r.Finish();
  if (!st.ok()) out->resize(base);
  return st;
}

}  // namespace kvidx::snapshot
