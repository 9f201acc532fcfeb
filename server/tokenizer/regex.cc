#define PCRE2_CODE_UNIT_WIDTH 8
#include "server/tokenizer/regex.h"

#include <pcre2.h>

namespace kvidx::tokenizer {
namespace {

std::string Pcre2Message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof(buf));
  return reinterpret_cast<const char*>(buf);
}

// Per-thread match state: one match data block serves every pattern (only
// the whole match's offsets are read); the JIT stack grows to 8 MiB, enough
// for lookaheads over long whitespace runs.
struct ThreadMatchState {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  ThreadMatchState() { pcre2_jit_stack_assign(context, nullptr, stack); }
  ~ThreadMatchState() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
    pcre2_match_data_free(data);
  }
};

ThreadMatchState& MatchState() {
  thread_local ThreadMatchState state;
  return state;
}

}  // namespace

Result<std::unique_ptr<Regex>> Regex::Compile(std::string_view pattern) {
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &err, &err_offset, nullptr);
  if (code == nullptr) {
    return Status::InvalidArgument("regex " + std::string(pattern) + " does not compile at offset " +
                                   std::to_string(err_offset) + ": " + Pcre2Message(err));
  }
  int jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  if (jit != 0) {
    pcre2_code_free(code);
    return Status::InvalidArgument("regex " + std::string(pattern) + " does not JIT-compile: " + Pcre2Message(jit));
  }
  std::unique_ptr<Regex> re(new Regex());
  re->pattern_ = std::string(pattern);
  re->code_ = code;
  return re;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

Status Regex::FindAll(std::string_view text, std::vector<std::pair<size_t, size_t>>* matches) const {
  auto* code = static_cast<pcre2_code*>(code_);
  ThreadMatchState& st = MatchState();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  bool have_last = false;
  size_t last_end = 0;
  while (start <= text.size()) {
    int rc = pcre2_jit_match(code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, st.data, st.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) return Status::OutOfRange("regex " + pattern_ + ": " + Pcre2Message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.data);
    size_t b = ov[0], e = ov[1];
    if (b == e && have_last && last_end == start) {
      if (start >= text.size()) break;
      start += 1;
      while (start < text.size() && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) ++start;
      continue;
    }
    matches->emplace_back(b, e);
    start = e;
    last_end = e;
    have_last = true;
    if (b == e) {
      // onig moves past an empty match on the next call via the rule above.
      continue;
    }
  }
  return Status::Ok();
}

}  // namespace kvidx::tokenizer
