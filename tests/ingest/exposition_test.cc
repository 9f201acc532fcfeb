// The Prometheus text-format reader against the format's own examples and
// against bodies an engine (or an attacker posing as one) could send.
#include "ingest/exposition.h"

#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace kvidx::ingest {
namespace {

std::vector<ExpositionSample> ReadAll(std::string_view text, ExpositionStats* stats = nullptr,
                                      const ExpositionLimits& limits = {}) {
  std::vector<ExpositionSample> out;
  ExpositionStats st = ReadExposition(text, limits, [&](const ExpositionSample& s) { out.push_back(s); });
  if (stats != nullptr) *stats = st;
  return out;
}

TEST(Exposition, ReadsTheFormatsOwnExample) {
  // From the Prometheus exposition-format documentation.
  const std::string text =
      "# HELP http_requests_total The total number of HTTP requests.\n"
      "# TYPE http_requests_total counter\n"
      "http_requests_total{method=\"post\",code=\"200\"} 1027 1395066363000\n"
      "http_requests_total{method=\"post\",code=\"400\"}    3 1395066363000\n"
      "\n"
      "# Escaping in label values:\n"
      "msdos_file_access_time_seconds{path=\"C:\\\\DIR\\\\FILE.TXT\",error=\"Cannot find file:\\n\\\"FILE.TXT\\\"\"} "
      "1.458255915e9\n"
      "metric_without_timestamp_and_labels 12.47\n"
      "something_weird{problem=\"division by zero\"} +Inf -3982045\n"
      "http_request_duration_seconds_bucket{le=\"0.05\"} 24054\n"
      "http_request_duration_seconds_bucket{le=\"+Inf\"} 144320\n"
      "http_request_duration_seconds_sum 53423\n"
      "rpc_duration_seconds{quantile=\"0.5\"} 4773\n";
  ExpositionStats st;
  std::vector<ExpositionSample> s = ReadAll(text, &st);
  EXPECT_EQ(st.bad_lines, 0u);
  EXPECT_FALSE(st.truncated);
  ASSERT_EQ(s.size(), 9u);
  EXPECT_EQ(s[0].name, "http_requests_total");
  EXPECT_EQ(*s[0].Label("code"), "200");
  EXPECT_EQ(s[0].value, 1027);
  EXPECT_EQ(s[1].value, 3);
  EXPECT_EQ(*s[2].Label("path"), "C:\\DIR\\FILE.TXT");
  EXPECT_EQ(*s[2].Label("error"), "Cannot find file:\n\"FILE.TXT\"");
  EXPECT_DOUBLE_EQ(s[2].value, 1.458255915e9);
  EXPECT_EQ(s[3].labels.size(), 0u);
  EXPECT_TRUE(std::isinf(s[4].value) && s[4].value > 0);
  EXPECT_EQ(*s[6].Label("le"), "+Inf");
  EXPECT_EQ(s[8].Label("nope"), nullptr);
}

TEST(Exposition, ValuesInEveryFormGoAccepts) {
  std::vector<ExpositionSample> s = ReadAll("a NaN\nb -Inf\nc 1e-3\nd -0.5\ne 7\nf Inf\ng .25\nh +3\n");
  ASSERT_EQ(s.size(), 8u);
  EXPECT_TRUE(std::isnan(s[0].value));
  EXPECT_TRUE(std::isinf(s[1].value) && s[1].value < 0);
  EXPECT_DOUBLE_EQ(s[2].value, 1e-3);
  EXPECT_EQ(s[3].value, -0.5);
  EXPECT_TRUE(std::isinf(s[5].value));
  EXPECT_EQ(s[6].value, 0.25);
  EXPECT_EQ(s[7].value, 3);
}

TEST(Exposition, CrlfTrailingCommaAndBlanksAreFine) {
  ExpositionStats st;
  std::vector<ExpositionSample> s = ReadAll("x{a=\"1\",} 2\r\n  y { b = \"2\" , c=\"3\" }\t4\r\n", &st);
  EXPECT_EQ(st.bad_lines, 0u);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(*s[0].Label("a"), "1");
  EXPECT_EQ(s[1].labels.size(), 2u);
  EXPECT_EQ(s[1].value, 4);
}

TEST(Exposition, MalformedLinesAreCountedAndSkipped) {
  const char* bad[] = {
      "9starts_with_digit 1",       "name_only",
      "x{a=\"1\" 2",                "x{a=1} 2",
      "x{a=\"unterminated} 2",      "x{a=\"bad\\escape\"} 2",
      "x{=\"v\"} 2",                "x 1 2 3",
      "x 12abc",                    "x 1 notatime",
      "x{a=\"1\"}{b=\"2\"} 3",      "{\"quoted.name\"} 1",
      "x --1",                      "x{a:b=\"1\"} 2",
  };
  for (const char* line : bad) {
    ExpositionStats st;
    const std::string body = std::string(line) + "\nok 1\n";  // names are views into it
    std::vector<ExpositionSample> s = ReadAll(body, &st);
    EXPECT_EQ(st.bad_lines, 1u) << line;
    ASSERT_EQ(s.size(), 1u) << line;
    EXPECT_EQ(s[0].name, "ok");
  }
}

TEST(Exposition, LimitsBoundTheWorkAndNeverCutALine) {
  std::string body;
  for (int i = 0; i < 100; ++i) body += "m{i=\"" + std::to_string(i) + "\"} 123456\n";
  ExpositionLimits byte_limit;
  byte_limit.max_bytes = body.size() / 2 + 3;  // mid-line
  ExpositionStats st;
  std::vector<ExpositionSample> s = ReadAll(body, &st, byte_limit);
  EXPECT_TRUE(st.truncated);
  EXPECT_EQ(st.bad_lines, 0u);
  for (const ExpositionSample& x : s) EXPECT_EQ(x.value, 123456);  // no cut value

  ExpositionLimits sample_limit;
  sample_limit.max_samples = 10;
  s = ReadAll(body, &st, sample_limit);
  EXPECT_EQ(s.size(), 10u);
  EXPECT_TRUE(st.truncated);

  ExpositionLimits label_limit;
  label_limit.max_labels = 2;
  s = ReadAll("a{x=\"1\",y=\"2\",z=\"3\"} 1\nb{x=\"1\"} 2\n", &st, label_limit);
  EXPECT_EQ(st.bad_lines, 1u);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].name, "b");

  ExpositionLimits line_limit;
  line_limit.max_line_bytes = 16;
  const std::string long_line = "short 1\n" + std::string(100, 'a') + " 1\n";
  s = ReadAll(long_line, &st, line_limit);
  EXPECT_EQ(st.bad_lines, 1u);
  EXPECT_EQ(s.size(), 1u);
}

TEST(Exposition, BinaryGarbageIsOnlyBadLines) {
  std::string junk;
  uint32_t x = 12345;
  for (int i = 0; i < 1 << 16; ++i) {
    x = x * 1103515245u + 12345u;
    junk.push_back(static_cast<char>(x >> 24));
  }
  ExpositionStats st;
  (void)ReadAll(junk, &st);
  EXPECT_FALSE(st.truncated);
}

}  // namespace
}  // namespace kvidx::ingest
