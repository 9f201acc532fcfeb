#include "tools/sim/timed_workload.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <random>

#include <nlohmann/json.hpp>

namespace kvidx::sim {
namespace {

constexpr uint32_t kTraceBlockTokens = 512;      // Mooncake's hash_ids granularity
constexpr uint64_t kUniqueIds = uint64_t{1} << 62;

uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

bool IsBlank(const std::string& line) { return line.find_first_not_of(" \t\r") == std::string::npos; }

// Reads an unsigned field, or says what is wrong with it.
std::string GetU32(const nlohmann::json& obj, const char* name, uint32_t* out) {
  auto it = obj.find(name);
  if (it == obj.end()) return std::string("no \"") + name + "\" field";
  if (!it->is_number_unsigned() || it->get<uint64_t>() > std::numeric_limits<uint32_t>::max()) {
    return std::string("\"") + name + "\" is not an integer in [0, 2^32)";
  }
  *out = static_cast<uint32_t>(it->get<uint64_t>());
  return {};
}

std::string ParseTraceLine(const nlohmann::json& obj, double rate_scale, uint64_t index, TimedRequest* r) {
  if (!obj.is_object()) return "not a JSON object";
  auto ts = obj.find("timestamp");
  if (ts == obj.end() || !ts->is_number() || ts->get<double>() < 0) return "\"timestamp\" is not a non-negative number";
  r->arrival = ts->get<double>() / 1000.0 / rate_scale;
  if (std::string e = GetU32(obj, "input_length", &r->prompt_tokens); !e.empty()) return e;
  if (std::string e = GetU32(obj, "output_length", &r->output_tokens); !e.empty()) return e;
  if (r->prompt_tokens == 0) return "\"input_length\" is 0";
  r->output_tokens = std::max<uint32_t>(1, r->output_tokens);
  auto ids = obj.find("hash_ids");
  if (ids == obj.end() || !ids->is_array()) return "\"hash_ids\" is not an array";
  uint32_t left = r->prompt_tokens;
  for (const nlohmann::json& id : *ids) {
    if (!id.is_number_unsigned()) return "\"hash_ids\" holds a value that is not a non-negative integer";
    if (left == 0) break;
    const uint32_t n = std::min(left, kTraceBlockTokens);
    r->segments.push_back({id.get<uint64_t>() & (kUniqueIds - 1), n});
    left -= n;
  }
  // A prompt longer than its hash_ids cover ends in tokens nobody shares.
  if (left > 0) r->segments.push_back({kUniqueIds | index, left});
  return {};
}

class Sampler {
 public:
  explicit Sampler(uint64_t seed) : rng_(seed) {}
  double Exp(double rate) { return std::exponential_distribution<double>(rate)(rng_); }
  uint32_t Uniform(uint32_t lo, uint32_t hi) { return std::uniform_int_distribution<uint32_t>(lo, hi)(rng_); }
  size_t Zipf(const std::vector<double>& cdf) {
    const double u = std::uniform_real_distribution<double>(0, cdf.back())(rng_);
    return static_cast<size_t>(std::lower_bound(cdf.begin(), cdf.end(), u) - cdf.begin());
  }

 private:
  std::mt19937_64 rng_;
};

std::vector<double> ZipfCdf(uint32_t n, double s) {
  std::vector<double> cdf(n);
  double sum = 0;
  for (uint32_t k = 0; k < n; ++k) cdf[k] = sum += 1.0 / std::pow(k + 1.0, s);
  return cdf;
}

}  // namespace

std::vector<int64_t> PromptTokens(const TimedRequest& r) {
  std::vector<int64_t> out;
  out.reserve(r.prompt_tokens);
  for (const Segment& s : r.segments) {
    for (uint32_t j = 0; j < s.tokens; ++j) out.push_back(static_cast<int64_t>(1 + Mix(s.id * 1000003 + j) % 100000));
  }
  return out;
}

Result<std::vector<TimedRequest>> LoadTimedTrace(const std::string& path, double rate_scale, uint64_t max_requests) {
  if (!(rate_scale > 0)) return Status::InvalidArgument("rate scale must be > 0");
  std::ifstream in(path);
  if (!in) return Status::NotFound("cannot open trace " + path);
  std::vector<TimedRequest> out;
  std::string line;
  for (uint64_t line_no = 1; std::getline(in, line) && (max_requests == 0 || out.size() < max_requests); ++line_no) {
    if (IsBlank(line)) continue;
    nlohmann::json obj = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    TimedRequest r;
    std::string error = obj.is_discarded() ? std::string("not valid JSON") : ParseTraceLine(obj, rate_scale, line_no, &r);
    if (!error.empty()) return Status::Corruption(path + ":" + std::to_string(line_no) + ": " + error);
    out.push_back(std::move(r));
  }
  if (in.bad()) return Status::Corruption("read error in trace " + path);
  if (out.empty()) return Status::Corruption("trace " + path + " holds no request");
  std::stable_sort(out.begin(), out.end(), [](const TimedRequest& a, const TimedRequest& b) { return a.arrival < b.arrival; });
  return out;
}

Result<std::vector<TimedRequest>> MakeSynthetic(const SyntheticOptions& o) {
  if (o.scenario != "hotspot" && o.scenario != "burst" && o.scenario != "unique") {
    return Status::InvalidArgument("unknown scenario \"" + o.scenario + "\" (hotspot, burst, unique)");
  }
  if (!(o.rate > 0) || o.requests == 0 || o.system_prompts == 0 || o.burst_n == 0) {
    return Status::InvalidArgument("rate, requests, system prompts and burst n must be > 0");
  }
  Sampler rng(o.seed);
  const std::vector<double> cdf = ZipfCdf(o.system_prompts, o.zipf);
  std::vector<TimedRequest> out;
  double t = 0;
  uint64_t next_unique = kUniqueIds;
  uint32_t burst = 0;
  while (out.size() < o.requests) {
    t += rng.Exp(o.rate);
    TimedRequest r;
    r.arrival = t;
    r.output_tokens = rng.Uniform(o.output_min, o.output_max);
    if (o.scenario == "hotspot") {
      r.segments.push_back({1 + rng.Zipf(cdf), o.system_tokens});
      r.segments.push_back({next_unique++, rng.Uniform(o.question_min, o.question_max)});
    } else if (o.scenario == "unique") {
      r.segments.push_back({next_unique++, o.system_tokens + rng.Uniform(o.question_min, o.question_max)});
    } else {
      r.segments.push_back({next_unique++, rng.Uniform(o.burst_prompt_min, o.burst_prompt_max)});
      r.burst = ++burst;
      r.n = o.burst_n;
    }
    for (const Segment& s : r.segments) r.prompt_tokens += s.tokens;
    const uint32_t copies = o.scenario == "burst" ? o.burst_n : 1;
    for (uint32_t k = 0; k < copies && out.size() < o.requests; ++k) {
      out.push_back(r);
      if (k > 0) out.back().output_tokens = rng.Uniform(o.output_min, o.output_max);
    }
  }
  return out;
}

}  // namespace kvidx::sim
