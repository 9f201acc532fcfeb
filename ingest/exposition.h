// A reader of the Prometheus text exposition format (version 0.0.4), the
// body of an engine's GET /metrics. Engines are not trusted: every line is
// checked, a malformed one is counted and skipped (never a crash, never a
// half-parsed value), and the limits bound the work one response can cause.
//
// Handled: `# HELP` / `# TYPE` and other comments (skipped), label values
// with the format's escapes (\\, \", \n), a trailing comma in the label set,
// values NaN, +Inf, -Inf and any decimal or exponent form, an optional
// timestamp, CRLF line ends. Histogram and summary series are ordinary
// samples here (`_bucket{le="..."}`, `_sum`, `_count`): callers pick the
// names they want. Not handled (counted as bad lines): OpenMetrics' quoted
// metric names and exemplars.
//
// Pure functions over the caller's bytes; thread-safe. A sample's name and
// label names are views into `text`; label values are copies (unescaped).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvidx::ingest {

struct ExpositionLimits {
  size_t max_bytes = 16u << 20;     // the rest of a longer body is not read (truncated)
  size_t max_samples = 1u << 20;    // sample lines read before stopping (truncated)
  size_t max_labels = 64;           // a line with more labels is bad
  size_t max_line_bytes = 64u << 10;  // a longer line is bad
};

struct ExpositionSample {
  std::string_view name;
  std::vector<std::pair<std::string_view, std::string>> labels;
  double value = 0;

  // The value of label `key`, or nullptr if the sample has none.
  const std::string* Label(std::string_view key) const {
    for (const auto& [k, v] : labels) {
      if (k == key) return &v;
    }
    return nullptr;
  }
};

struct ExpositionStats {
  uint64_t samples = 0;    // well-formed sample lines
  uint64_t bad_lines = 0;  // malformed lines, skipped
  bool truncated = false;  // a limit stopped the reading
};

// Parses one sample line (no line end). False if it is not one; `out` is
// then unspecified.
bool ParseSampleLine(std::string_view line, size_t max_labels, ExpositionSample* out);

// Calls `visit(const ExpositionSample&)` for each well-formed sample line of
// `text`, in order.
template <class Visit>
ExpositionStats ReadExposition(std::string_view text, const ExpositionLimits& limits, Visit&& visit) {
  ExpositionStats stats;
  if (text.size() > limits.max_bytes) {
    // Only whole lines: a cut line could parse as a different value.
    const size_t last_eol = text.substr(0, limits.max_bytes).rfind('\n');
    text = last_eol == std::string_view::npos ? std::string_view() : text.substr(0, last_eol + 1);
    stats.truncated = true;
  }
  ExpositionSample sample;
  while (!text.empty()) {
    const size_t eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const size_t first = line.find_first_not_of(" \t");
    if (first == std::string_view::npos || line[first] == '#') continue;
    if (stats.samples >= limits.max_samples) {
      stats.truncated = true;
      break;
    }
    if (line.size() > limits.max_line_bytes || !ParseSampleLine(line.substr(first), limits.max_labels, &sample)) {
      ++stats.bad_lines;
      continue;
    }
    ++stats.samples;
    visit(static_cast<const ExpositionSample&>(sample));
  }
  return stats;
}

}  // namespace kvidx::ingest
