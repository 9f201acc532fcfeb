// Encoder implementation: a small hand-written msgpack writer.
//
// Hand-written rather than msgpack::packer because msgspec's output has two
// details a generic packer does not reproduce on its own: the map16 header
// chosen from the *declared* field count, and unsigned forms for every
// non-negative integer regardless of the C++ type it came from.
#include "base/byte_coding.h"
#include "ingest/testing/encoder.h"

#include <algorithm>
#include <cstring>

namespace kvidx::ingest {
namespace {

class Writer {
 public:
  explicit Writer(std::string* out) : out_(out) {}

  void Byte(uint8_t b) { out_->push_back(static_cast<char>(b)); }
  void BE(uint64_t v, int bytes) {
    AppendBigEndian(out_, v, static_cast<size_t>(bytes));
  }
  void Raw(const void* p, size_t n) { out_->append(static_cast<const char*>(p), n); }

  void Nil() { Byte(0xc0); }
  void Uint(uint64_t v) {
    if (v <= 0x7f) {
      Byte(static_cast<uint8_t>(v));
    } else if (v <= 0xff) {
      Byte(0xcc);
      BE(v, 1);
    } else if (v <= 0xffff) {
      Byte(0xcd);
      BE(v, 2);
    } else if (v <= 0xffffffffu) {
      Byte(0xce);
      BE(v, 4);
    } else {
      Byte(0xcf);
      BE(v, 8);
    }
  }
  // msgspec: non-negative ints always take the unsigned forms.
  void Int(int64_t v) {
    if (v >= 0) return Uint(static_cast<uint64_t>(v));
    uint64_t bits = static_cast<uint64_t>(v);
    if (v >= -32) {
      Byte(static_cast<uint8_t>(bits));
    } else if (v >= -128) {
      Byte(0xd0);
      BE(bits, 1);
    } else if (v >= -32768) {
      Byte(0xd1);
      BE(bits, 2);
    } else if (v >= -2147483648LL) {
      Byte(0xd2);
      BE(bits, 4);
    } else {
      Byte(0xd3);
      BE(bits, 8);
    }
  }
  void Float64(double d) {
    uint64_t bits;
    std::memcpy(&bits, &d, sizeof bits);
    Byte(0xcb);
    BE(bits, 8);
  }
  void Str(std::string_view s) {
    size_t n = s.size();
    if (n < 32) {
      Byte(static_cast<uint8_t>(0xa0 | n));
    } else if (n <= 0xff) {
      Byte(0xd9);
      BE(n, 1);
    } else if (n <= 0xffff) {
      Byte(0xda);
      BE(n, 2);
    } else {
      Byte(0xdb);
      BE(n, 4);
    }
    Raw(s.data(), n);
  }
  void Bin(const uint8_t* p, size_t n) {
    if (n <= 0xff) {
      Byte(0xc4);
      BE(n, 1);
    } else if (n <= 0xffff) {
      Byte(0xc5);
      BE(n, 2);
    } else {
      Byte(0xc6);
      BE(n, 4);
    }
    Raw(p, n);
  }
  void Array(size_t n) {
    if (n < 16) {
      Byte(static_cast<uint8_t>(0x90 | n));
    } else if (n <= 0xffff) {
      Byte(0xdc);
      BE(n, 2);
    } else {
      Byte(0xdd);
      BE(n, 4);
    }
  }
  // msgspec sizes the header from the declared field count (+1 for the tag)
  // and patches the real pair count in afterwards, so a struct with >= 15
  // fields gets a map16 header even when fewer pairs are written.
  void MapHeader(size_t pairs, size_t declared_with_tag) {
    if (declared_with_tag < 16) {
      Byte(static_cast<uint8_t>(0x80 | pairs));
    } else if (declared_with_tag <= 0xffff) {
      Byte(0xde);
      BE(pairs, 2);
    } else {
      Byte(0xdf);
      BE(pairs, 4);
    }
  }
  void OptStr(const std::optional<std::string_view>& s) {
    if (s) {
      Str(*s);
    } else {
      Nil();
    }
  }
  void OptInt(const std::optional<int64_t>& v) {
    if (v) {
      Int(*v);
    } else {
      Nil();
    }
  }

 private:
  std::string* out_;
};

class BatchEncoder {
 public:
  BatchEncoder(const EventBatch& batch, const WireEra& era, std::string* out)
      : b_(batch), era_(era), w_(out) {
    era_.array_schema = std::clamp(era_.array_schema, 1, 6);
  }

  void Encode() {
    w_.Array(era_.with_rank ? 3 : 2);
    w_.Float64(b_.ts);
    w_.Array(b_.events.size());
    for (const KvEvent& e : b_.events) {
      if (era_.form == EventForm::kMap) {
        MapEvent(e);
      } else {
        ArrayEvent(e);
      }
    }
    if (era_.with_rank) w_.OptInt(b_.data_parallel_rank);
  }

 private:
  void Hash(const BlockKey& k) {
    if (k.is_bytes()) {
      uint8_t buf[BlockKey::kMaxBytes];
      k.CopyBytes(buf);
      w_.Bin(buf, k.byte_len());
    } else if (era_.signed_int_hashes) {
      w_.Int(static_cast<int64_t>(k.wire()));
    } else {
      w_.Uint(k.wire());
    }
  }
  void Hashes(const KvEvent& e) {
    auto hs = b_.HashesOf(e);
    w_.Array(hs.size());
    for (const BlockKey& k : hs) Hash(k);
  }
  void Parent(const KvEvent& e) {
    if (e.parent_block_hash) {
      Hash(*e.parent_block_hash);
    } else {
      w_.Nil();
    }
  }
  void Tokens(const KvEvent& e) {
    auto ts = b_.TokensOf(e);
    w_.Array(ts.size());
    for (int64_t t : ts) w_.Int(t);
  }
  void ExtraKeys(const KvEvent& e) {
    if (e.extra_keys) {
      w_.Raw(e.extra_keys->data(), e.extra_keys->size());
    } else {
      w_.Nil();
    }
  }

  void ArrayEvent(const KvEvent& e) {
    const int v = era_.array_schema;
    switch (e.type) {
      case EventType::kBlockStored: {
        static constexpr int kLen[] = {0, 5, 6, 7, 8, 9, 11};
        w_.Array(1 + kLen[v]);
        w_.Str("BlockStored");
        Hashes(e);
        Parent(e);
        Tokens(e);
        w_.Int(e.block_size);
        w_.OptInt(e.lora_id);
        if (v >= 2) w_.OptStr(e.medium);
        if (v >= 3) w_.OptStr(e.lora_name);
        if (v >= 4) ExtraKeys(e);
        if (v >= 5) w_.OptInt(e.group_idx);
        if (v >= 6) {
          w_.OptStr(e.kv_cache_spec_kind);
          w_.OptInt(e.kv_cache_spec_sliding_window);
        }
        return;
      }
      case EventType::kBlockRemoved: {
        static constexpr int kLen[] = {0, 1, 2, 2, 2, 3, 3};
        w_.Array(1 + kLen[v]);
        w_.Str("BlockRemoved");
        Hashes(e);
        if (v >= 2) w_.OptStr(e.medium);
        if (v >= 5) w_.OptInt(e.group_idx);
        return;
      }
      case EventType::kAllBlocksCleared:
        w_.Array(1);
        w_.Str("AllBlocksCleared");
        return;
    }
  }

  // Fields without a default are always written (nil when absent); fields
  // with a default (all None in vLLM) are omitted when absent.
  void MapEvent(const KvEvent& e) {
    switch (e.type) {
      case EventType::kBlockStored: {
        const bool origin = era_.origin_field && e.origin.has_value();
        size_t pairs = 1 + 7 + e.extra_keys.has_value() + e.group_idx.has_value() +
                       e.kv_cache_spec_kind.has_value() + e.kv_cache_spec_sliding_window.has_value() +
                       e.locality.has_value() + e.ownership.has_value() + e.session_id.has_value() + origin;
        w_.MapHeader(pairs, era_.origin_field ? 16 : 15);
        w_.Str("type");
        w_.Str("BlockStored");
        w_.Str("block_hashes");
        Hashes(e);
        w_.Str("parent_block_hash");
        Parent(e);
        w_.Str("token_ids");
        Tokens(e);
        w_.Str("block_size");
        w_.Int(e.block_size);
        w_.Str("lora_id");
        w_.OptInt(e.lora_id);
        w_.Str("medium");
        w_.OptStr(e.medium);
        w_.Str("lora_name");
        w_.OptStr(e.lora_name);
        if (e.extra_keys) {
          w_.Str("extra_keys");
          ExtraKeys(e);
        }
        OptIntField("group_idx", e.group_idx);
        OptStrField("kv_cache_spec_kind", e.kv_cache_spec_kind);
        OptIntField("kv_cache_spec_sliding_window", e.kv_cache_spec_sliding_window);
        OptStrField("locality", e.locality);
        OptStrField("ownership", e.ownership);
        OptStrField("session_id", e.session_id);
        if (origin) OptStrField("origin", e.origin);
        return;
      }
      case EventType::kBlockRemoved: {
        size_t pairs = 1 + 2 + e.group_idx.has_value() + e.locality.has_value() + e.ownership.has_value();
        w_.MapHeader(pairs, 6);
        w_.Str("type");
        w_.Str("BlockRemoved");
        w_.Str("block_hashes");
        Hashes(e);
        w_.Str("medium");
        w_.OptStr(e.medium);
        OptIntField("group_idx", e.group_idx);
        OptStrField("locality", e.locality);
        OptStrField("ownership", e.ownership);
        return;
      }
      case EventType::kAllBlocksCleared:
        w_.MapHeader(1, 1);
        w_.Str("type");
        w_.Str("AllBlocksCleared");
        return;
    }
  }
  void OptIntField(std::string_view name, const std::optional<int64_t>& v) {
    if (!v) return;
    w_.Str(name);
    w_.Int(*v);
  }
  void OptStrField(std::string_view name, const std::optional<std::string_view>& v) {
    if (!v) return;
    w_.Str(name);
    w_.Str(*v);
  }

  const EventBatch& b_;
  WireEra era_;
  Writer w_;
};

}  // namespace

void EncodePayload(const EventBatch& batch, const WireEra& era, std::string* out) {
  out->clear();
  BatchEncoder(batch, era, out).Encode();
}

std::string EncodePayload(const EventBatch& batch, const WireEra& era) {
  std::string out;
  EncodePayload(batch, era, &out);
  return out;
}

std::string WireEraName(const WireEra& era) {
  std::string s;
  if (era.form == EventForm::kMap) {
    s = era.origin_field ? "map-origin" : "map";
  } else {
    s = "array-v" + std::to_string(std::clamp(era.array_schema, 1, 6));
  }
  if (!era.with_rank) s += "-norank";
  if (era.signed_int_hashes) s += "-signed";
  return s;
}

bool ParseWireEra(std::string_view name, WireEra* era) {
  WireEra e;
  auto strip_suffix = [&name](std::string_view suffix) {
    if (name.size() >= suffix.size() && name.substr(name.size() - suffix.size()) == suffix) {
      name.remove_suffix(suffix.size());
      return true;
    }
    return false;
  };
  e.signed_int_hashes = strip_suffix("-signed");
  e.with_rank = !strip_suffix("-norank");
  if (name == "map") {
    e.form = EventForm::kMap;
  } else if (name == "map-origin") {
    e.form = EventForm::kMap;
    e.origin_field = true;
  } else if (name.size() == 8 && name.substr(0, 7) == "array-v" && name[7] >= '1' && name[7] <= '6') {
    e.form = EventForm::kArray;
    e.array_schema = name[7] - '0';
  } else {
    return false;
  }
  *era = e;
  return true;
}

std::string EncodeSeq(uint64_t seq) {
  std::string s;
  AppendBigEndian(&s, seq, 8);
  return s;
}

Frames LiveMessageFrames(std::string_view topic, uint64_t seq, std::string_view payload) {
  return {std::string(topic), EncodeSeq(seq), std::string(payload)};
}

Frames ReplayRequestFrames(uint64_t start_seq) { return {std::string(), EncodeSeq(start_seq)}; }

Frames ReplayReplyFrames(ReplayFormat format, std::string_view identity, std::string_view topic,
                         uint64_t seq, std::string_view payload) {
  if (format == ReplayFormat::kLegacy) {
    return {std::string(identity), std::string(), EncodeSeq(seq), std::string(payload)};
  }
  return {std::string(identity), std::string(), std::string(topic), EncodeSeq(seq), std::string(payload)};
}

Frames ReplayEndFrames(ReplayFormat format, std::string_view identity) {
  if (format == ReplayFormat::kLegacy) {
    return {std::string(identity), std::string(), EncodeSeq(kReplayEndSeq), std::string()};
  }
  return {std::string(identity), std::string(), std::string(), EncodeSeq(kReplayEndSeq), std::string()};
}

}  // namespace kvidx::ingest
