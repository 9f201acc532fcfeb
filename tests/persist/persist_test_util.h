// Helpers shared by the persistence tests: temp directories and snapshots.
#pragma once

#include <stdlib.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "index/block_index.h"
#include "server/snapshot_format.h"

namespace kvidx::snapshot::testing {

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it
// (including "<dir>.corrupt-*" siblings, which live inside it too).
class TempDir {
 public:
  TempDir() {
    const char* base = getenv("TMPDIR");
    std::string tmpl = std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/kvidx-persist-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    char* p = mkdtemp(buf.data());
    path_ = p != nullptr ? p : "";
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  // The store directory inside it (not created).
  std::string db() const { return path_ + "/db"; }

 private:
  std::string path_;
};

inline uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A deterministic snapshot `k` with `owners` owner records, built directly
// (no BlockIndex): owners sorted and unique, one model, `n_sources` sources.
inline SnapshotData SyntheticSnapshot(uint64_t k, size_t owners, uint32_t n_sources = 8) {
  SnapshotData d;
  d.created_unix_ms = k;
  d.index.models.push_back({"model-a", ModelOptions{}});
  d.index.models.push_back({"model-b", ModelOptions{4096, true}});
  d.tier_names = {"GPU", "CPU", "STORAGE", "FS"};
  for (uint32_t s = 0; s < n_sources; ++s) {
    ingest::SourceWatermark w;
    w.source_id = s;
    w.replica = "replica-" + std::to_string(s / 2);
    w.dp_rank = s % 2;
    w.model = "model-a";
    w.endpoint = "tcp://10.0.0." + std::to_string(s / 2) + ":" + std::to_string(5557 + s % 2);
    w.has_seq = s != 0;
    w.last_seq = k * 100 + s;
    w.last_batch_fingerprint = Mix(k * 31 + s);
    w.last_batch_ts = 1.7e9 + static_cast<double>(k) + 0.25 * s;
    w.state = static_cast<uint8_t>(s % kNumSourceStates);
    w.gpu_capacity_blocks = s * 1000;
    d.sources.push_back(std::move(w));
    if (s % 3 != 2) d.index.source_clocks.emplace_back(s, k * 1000 + s + (uint64_t{1} << 33));
  }
  uint64_t key = Mix(k) % 1000;
  for (size_t i = 0; i < owners;) {
    key += 1 + Mix(key) % 64;
    uint64_t h = Mix(key ^ k);
    uint32_t copies = 1 + static_cast<uint32_t>(h % 3);
    for (uint32_t c = 0; c < copies && i < owners; ++c, ++i) {
      OwnerRecord o;
      o.model = 0;
      o.key = BlockKey::FromU64(key);
      o.source = (static_cast<uint32_t>(h >> 8) + c) % n_sources;  // distinct for c < n_sources
      o.tier = static_cast<Tier>((h >> 20) % 4);
      o.group = 0;
      o.refcount = 1 + static_cast<uint32_t>((h >> 24) % 2);
      o.hits = static_cast<uint32_t>((h >> 28) % 5);
      o.stamp = static_cast<uint32_t>(h >> 40);
      d.index.owners.push_back(o);
    }
  }
  // Owners must be sorted by (model, key, source, ...): sort each key's run by source.
  std::stable_sort(d.index.owners.begin(), d.index.owners.end(), [](const OwnerRecord& a, const OwnerRecord& b) {
    if (a.key.wire() != b.key.wire()) return a.key.wire() < b.key.wire();
    return a.source < b.source;
  });
  return d;
}

// Files directly in `dir` whose names start with `prefix` and end with `suffix`.
inline std::vector<std::filesystem::path> FilesEndingWith(const std::string& dir, std::string_view suffix,
                                                          std::string_view prefix = "") {
  std::vector<std::filesystem::path> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    std::string n = e.path().filename().string();
    if (n.ends_with(suffix) && n.starts_with(prefix)) out.push_back(e.path());
  }
  return out;
}

inline std::filesystem::path Largest(const std::vector<std::filesystem::path>& files) {
  std::filesystem::path best;
  uintmax_t size = 0;
  for (const auto& f : files) {
    if (std::filesystem::file_size(f) >= size) {
      size = std::filesystem::file_size(f);
      best = f;
    }
  }
  return best;
}

// XORs `n` bytes of `f` from `offset` with 0x10 (each one changes).
inline void FlipBytes(const std::filesystem::path& f, uintmax_t offset, size_t n) {
  std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
  for (size_t i = 0; i < n; ++i) {
    io.seekg(static_cast<std::streamoff>(offset + i));
    char c = 0;
    io.read(&c, 1);
    c = static_cast<char>(c ^ 0x10);
    io.seekp(static_cast<std::streamoff>(offset + i));
    io.write(&c, 1);
  }
}
inline void FlipByte(const std::filesystem::path& f, uintmax_t offset) { FlipBytes(f, offset, 1); }

// Name -> contents of every file under `dir` except RocksDB's own info logs
// (LOG, LOG.old.*), which any open attempt appends to: what a refused open
// must leave exactly as it was.
inline std::map<std::string, std::string> FileContents(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (!e.is_regular_file() || name == "LOG" || name.starts_with("LOG.old")) continue;
    std::ifstream in(e.path(), std::ios::binary);
    out[e.path().string()] = std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return out;
}

}  // namespace kvidx::snapshot::testing
