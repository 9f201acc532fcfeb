#include "server/tokenizer/bpe_model.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "server/tokenizer/json_fields.h"
#include "server/tokenizer/utf8.h"

namespace kvidx::tokenizer {
namespace {

using nlohmann::json;
constexpr uint32_t kNone = UINT32_MAX;
constexpr size_t kShortWord = 48;  // symbols; longer words take the heap

struct ByteMap {
  char32_t to_char[256];
  std::unordered_map<char32_t, uint8_t> to_byte;
  ByteMap() {
    uint32_t extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_char[b] = printable ? char32_t(b) : char32_t(256 + extra++);
      to_byte[to_char[b]] = static_cast<uint8_t>(b);
    }
  }
};
const ByteMap& Bytes() {
  static const ByteMap map;
  return map;
}

// A vocabulary token written in GPT-2's byte map, back to raw bytes; false
// if a character is outside the map (the token cannot come from bytes).
bool UnmapBytes(std::string_view token, std::string* raw) {
  const ByteMap& m = Bytes();
  size_t pos = 0;
  raw->clear();
  while (pos < token.size()) {
    auto it = m.to_byte.find(NextCodePoint(token, &pos));
    if (it == m.to_byte.end()) return false;
    raw->push_back(static_cast<char>(it->second));
  }
  return true;
}

Result<std::pair<std::string, std::string>> MergePair(const json& entry, size_t index) {
  if (entry.is_string()) {
    const std::string& s = entry.get_ref<const std::string&>();
    size_t space = s.find(' ');
    if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
      return Status::InvalidArgument("model.merges[" + std::to_string(index) + "]: expected \"a b\"");
    }
    return std::make_pair(s.substr(0, space), s.substr(space + 1));
  }
  if (entry.is_array() && entry.size() == 2 && entry[0].is_string() && entry[1].is_string()) {
    return std::make_pair(entry[0].get<std::string>(), entry[1].get<std::string>());
  }
  return Status::InvalidArgument("model.merges[" + std::to_string(index) + "]: expected \"a b\" or [a, b]");
}

}  // namespace

char32_t ByteToChar(uint8_t b) { return Bytes().to_char[b]; }

Result<std::unique_ptr<BpeModel>> BpeModel::Parse(const json& spec, bool byte_level) {
  const std::string path = "model";
  Result<std::string> type = TypeOf(spec, path);
  if (!type.ok()) return type.status();
  if (*type != "BPE") return Status::InvalidArgument("model.type: unsupported model type " + *type);
  if (auto d = spec.find("dropout"); d != spec.end() && !d->is_null() && !(d->is_number() && d->get<double>() == 0)) {
    return Status::InvalidArgument("model.dropout: unsupported BPE dropout (must be null)");
  }
  std::unique_ptr<BpeModel> m(new BpeModel());
  m->byte_level_ = byte_level;
  auto vocab = spec.find("vocab");
  if (vocab == spec.end() || !vocab->is_object()) return Status::InvalidArgument("model.vocab: expected an object");
  m->vocab_.reserve(vocab->size());
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    if (!it.value().is_number_unsigned() || it.value().get<uint64_t>() >= kNone) {
      return Status::InvalidArgument("model.vocab[" + it.key() + "]: expected an id");
    }
    m->vocab_[it.key()] = it.value().get<uint32_t>();
  }
  Result<bool> fuse = BoolField(spec, "fuse_unk", path, false);
  Result<bool> fallback = BoolField(spec, "byte_fallback", path, false);
  Result<bool> ignore = BoolField(spec, "ignore_merges", path, false);
  Result<std::string> prefix = StringField(spec, "continuing_subword_prefix", path, "");
  Result<std::string> suffix = StringField(spec, "end_of_word_suffix", path, "");
  for (const Status* s : {&fuse.status(), &fallback.status(), &ignore.status(), &prefix.status(), &suffix.status()}) {
    if (!s->ok()) return *s;
  }
  m->fuse_unk_ = *fuse;
  m->byte_fallback_ = *fallback;
  m->ignore_merges_ = *ignore;
  m->prefix_ = *prefix;
  m->suffix_ = *suffix;
  if (byte_level && (!m->prefix_.empty() || !m->suffix_.empty())) {
    return Status::InvalidArgument("model: continuing_subword_prefix/end_of_word_suffix with a ByteLevel "
                                   "pre-tokenizer is unsupported");
  }
  if (auto unk = spec.find("unk_token"); unk != spec.end() && !unk->is_null()) {
    if (!unk->is_string()) return Status::InvalidArgument("model.unk_token: expected a string");
    auto id = m->vocab_.find(unk->get<std::string>());
    if (id == m->vocab_.end()) return Status::InvalidArgument("model.unk_token: not in the vocabulary");
    m->unk_id_ = id->second;
  }
  auto merges = spec.find("merges");
  if (merges == spec.end() || !merges->is_array()) return Status::InvalidArgument("model.merges: expected an array");
  m->merges_ = MergeTable(merges->size());
  for (size_t i = 0; i < merges->size(); ++i) {
    auto pair = MergePair((*merges)[i], i);
    if (!pair.ok()) return pair.status();
    const auto& [a, b] = *pair;
    auto ia = m->vocab_.find(a), ib = m->vocab_.find(b);
    if (ia == m->vocab_.end() || ib == m->vocab_.end()) {
      return Status::InvalidArgument("model.merges[" + std::to_string(i) + "]: token not in the vocabulary");
    }
    std::string merged = a + b.substr(std::min(m->prefix_.size(), b.size()));
    auto in = m->vocab_.find(merged);
    if (in == m->vocab_.end()) {
      return Status::InvalidArgument("model.merges[" + std::to_string(i) + "]: merged token not in the vocabulary");
    }
    m->merges_.Insert(ia->second, ib->second, MergeTable::Target{static_cast<uint32_t>(i), in->second});
  }
  std::fill(std::begin(m->byte_ids_), std::end(m->byte_ids_), kNone);
  if (byte_level) {
    std::string raw;
    m->byte_vocab_.reserve(m->vocab_.size());
    for (const auto& [token, id] : m->vocab_) {
      if (UnmapBytes(token, &raw)) m->byte_vocab_[raw] = id;
    }
    for (int b = 0; b < 256; ++b) {
      auto it = m->byte_vocab_.find(std::string(1, static_cast<char>(b)));
      if (it != m->byte_vocab_.end()) m->byte_ids_[b] = it->second;
    }
  }
  return m;
}

const uint32_t* BpeModel::Lookup(std::string_view key) const {
  const Vocab& v = byte_level_ ? byte_vocab_ : vocab_;
  auto it = v.find(key);
  return it == v.end() ? nullptr : &it->second;
}

// BPE::merge_word of tokenizers: one symbol per unit, byte fallback for
// units outside the vocabulary, else unk (fused runs if fuse_unk), else
// the unit is dropped.
Status BpeModel::InitialSymbols(std::string_view word, std::vector<uint32_t>* symbols) const {
  uint32_t pending_unk = kNone;  // an unk symbol not yet emitted
  std::string unit;
  size_t pos = 0;
  while (pos < word.size()) {
    const size_t start = pos;
    if (byte_level_) {
      const uint32_t id = byte_ids_[static_cast<uint8_t>(word[pos++])];
      if (id != kNone) {
        if (pending_unk != kNone) symbols->push_back(pending_unk), pending_unk = kNone;
        symbols->push_back(id);
        continue;
      }
      unit.clear();
      AppendUtf8(ByteToChar(static_cast<uint8_t>(word[start])), &unit);
    } else {
      pos += Utf8Length(static_cast<uint8_t>(word[pos]));
      unit.clear();
      if (start != 0) unit += prefix_;
      unit.append(word.substr(start, pos - start));
      if (pos == word.size()) unit += suffix_;
      if (auto it = vocab_.find(unit); it != vocab_.end()) {
        if (pending_unk != kNone) symbols->push_back(pending_unk), pending_unk = kNone;
        symbols->push_back(it->second);
        continue;
      }
    }
    if (byte_fallback_) {
      bool all = true;
      const size_t mark = symbols->size();
      for (unsigned char c : unit) {
        char code[8];
        std::snprintf(code, sizeof(code), "<0x%02X>", c);
        auto it = vocab_.find(std::string_view(code));
        if (it == vocab_.end()) {
          all = false;
          break;
        }
        symbols->push_back(it->second);
      }
      if (all) continue;
      symbols->resize(mark);
    }
    if (unk_id_) {
      if (pending_unk != kNone && !fuse_unk_) symbols->push_back(pending_unk);
      pending_unk = *unk_id_;
    }
  }
  if (pending_unk != kNone) symbols->push_back(pending_unk);
  return Status::Ok();
}

// Word::merge_all of tokenizers: repeatedly merges the adjacent pair of
// lowest rank, the leftmost among equals (its heap orders by rank, then
// position; stale entries are skipped).
void BpeModel::MergeAll(std::vector<uint32_t>* symbols) const {
  std::vector<uint32_t>& ids = *symbols;
  const size_t n = ids.size();
  if (n < 2) return;
  if (n <= kShortWord) return MergeAllShort(symbols);
  struct Entry {
    uint32_t rank;
    uint32_t pos;
    uint32_t id;
    bool operator>(const Entry& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::vector<int32_t> prev(n), next(n);
  std::vector<bool> alive(n, true);
  for (size_t i = 0; i < n; ++i) {
    prev[i] = static_cast<int32_t>(i) - 1;
    next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
  }
  std::vector<Entry> heap;
  heap.reserve(n);
  auto push = [&](uint32_t pos, uint32_t left, uint32_t right) {
    if (auto m = FindMerge(left, right)) {
      heap.push_back(Entry{m->rank, pos, m->id});
      std::push_heap(heap.begin(), heap.end(), std::greater<>());
    }
  };
  for (size_t i = 0; i + 1 < n; ++i) push(static_cast<uint32_t>(i), ids[i], ids[i + 1]);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    const Entry top = heap.back();
    heap.pop_back();
    if (!alive[top.pos] || next[top.pos] < 0) continue;
    const auto right = static_cast<uint32_t>(next[top.pos]);
    auto m = FindMerge(ids[top.pos], ids[right]);
    if (!m || m->id != top.id) continue;
    ids[top.pos] = top.id;
    alive[right] = false;
    next[top.pos] = next[right];
    if (next[right] >= 0) prev[static_cast<size_t>(next[right])] = static_cast<int32_t>(top.pos);
    if (prev[top.pos] >= 0) {
      const auto p = static_cast<uint32_t>(prev[top.pos]);
      push(p, ids[p], ids[top.pos]);
    }
    if (next[top.pos] >= 0) push(top.pos, ids[top.pos], ids[static_cast<size_t>(next[top.pos])]);
  }
  size_t out = 0;
  for (size_t i = 0; i < n; ++i) {
    if (alive[i]) ids[out++] = ids[i];
  }
  ids.resize(out);
}

// The same order for short words without the heap: the lowest rank among
// the current adjacent pairs, the leftmost among equals, merged until none
// is left. Each pair's rank is looked up once, when the pair forms.
void BpeModel::MergeAllShort(std::vector<uint32_t>* symbols) const {
  std::vector<uint32_t>& ids = *symbols;
  uint32_t rank[kShortWord];
  uint32_t merged[kShortWord];
  size_t n = ids.size();
  auto lookup = [&](size_t i) {
    const MergeTable::Target* m = FindMerge(ids[i], ids[i + 1]);
    rank[i] = m ? m->rank : kNone;
    merged[i] = m ? m->id : kNone;
  };
  for (size_t i = 0; i + 1 < n; ++i) lookup(i);
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i) {
      if (rank[i] < rank[best]) best = i;
    }
    if (rank[best] == kNone) break;
    ids[best] = merged[best];
    ids.erase(ids.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    for (size_t i = best + 1; i + 1 < n - 1; ++i) {
      rank[i] = rank[i + 1];
      merged[i] = merged[i + 1];
    }
    --n;
    if (best > 0) lookup(best - 1);
    if (best + 1 < n) lookup(best);
  }
}

Status BpeModel::Tokenize(std::string_view word, std::vector<uint32_t>* ids) const {
  if (word.empty()) return Status::Ok();
  if (ignore_merges_) {
    if (const uint32_t* id = Lookup(word)) {
      ids->push_back(*id);
      return Status::Ok();
    }
  }
  std::vector<uint32_t> symbols;
  symbols.reserve(word.size());
  Status s = InitialSymbols(word, &symbols);
  if (!s.ok()) return s;
  MergeAll(&symbols);
  ids->insert(ids->end(), symbols.begin(), symbols.end());
  return Status::Ok();
}

}  // namespace kvidx::tokenizer
