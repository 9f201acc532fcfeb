#include "bench/w2_trace.h"

#include <algorithm>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "bench/workload_hash.h"

namespace kvidx::bench {
namespace {

bool IsBlank(const std::string& line) {
  return line.find_first_not_of(" \t\r") == std::string::npos;
}

// Appends one request's chained hashes to `trace`, or says what is wrong
// with the line (without the "file:line" prefix the caller adds).
std::string AddRequest(const nlohmann::json& request, uint32_t expand, std::vector<uint64_t>* content,
                       W2Trace* trace) {
  if (!request.is_object()) return "not a JSON object";
  auto ids = request.find("hash_ids");
  if (ids == request.end()) return "no \"hash_ids\" field";
  if (!ids->is_array()) return "\"hash_ids\" is not an array";
  if (ids->size() * uint64_t{expand} > std::numeric_limits<uint32_t>::max()) return "request has 2^32 blocks or more";
  content->clear();
  for (const nlohmann::json& id : *ids) {
    // nlohmann stores every non-negative integer literal as unsigned.
    if (!id.is_number_unsigned()) {
      // Only a number is shown by value: dump() recurses into arrays and
      // objects, and a deeply nested one would overflow the stack.
      const std::string shown = id.is_number() ? id.dump() : std::string("a JSON ") + id.type_name();
      return "\"hash_ids\" holds " + shown + ", not a non-negative integer";
    }
    const uint64_t h = id.get<uint64_t>();
    for (uint32_t k = 0; k < expand; ++k) content->push_back((h << 5) | k);
  }
  const size_t begin = trace->hashes.size();
  trace->hashes.resize(begin + content->size());
  ChainHashes(content->data(), content->size(), trace->hashes.data() + begin);
  trace->offsets.push_back(trace->hashes.size());
  trace->max_request_blocks = std::max(trace->max_request_blocks, static_cast<uint32_t>(content->size()));
  return {};
}

}  // namespace

Result<W2Trace> LoadW2Trace(const std::string& path, uint32_t expand) {
  std::ifstream in(path);
  if (!in) return Status::NotFound("cannot open trace " + path);
  W2Trace trace;
  std::vector<uint64_t> content;
  std::string line;
  for (uint64_t line_no = 1; std::getline(in, line); ++line_no) {
    if (IsBlank(line)) continue;
    // No exceptions: a malformed line yields a "discarded" value instead.
    nlohmann::json request = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    std::string error = request.is_discarded() ? std::string("not valid JSON")
                                                : AddRequest(request, expand, &content, &trace);
    if (!error.empty()) return Status::Corruption(path + ":" + std::to_string(line_no) + ": " + error);
  }
  if (in.bad()) return Status::Corruption("read error in trace " + path);
  if (trace.requests() == 0) return Status::Corruption("trace " + path + " holds no request");
  return trace;
}

}  // namespace kvidx::bench
