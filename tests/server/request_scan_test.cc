// RequestScan against protobuf itself: every message protobuf writes is
// accepted and parsed identically, every mutation protobuf rejects is
// rejected (and only groups beyond that), and the wire-format corner cases
// get the documented codes.
#include <random>

#include <gtest/gtest.h>

#include "kvidx/v1/kvidx.pb.h"
#include "server/request_scan.h"

namespace kvidx::server {
namespace {

ScanLimits Generous() {
  ScanLimits l;
  l.max_parsed_bytes = uint64_t{1} << 30;
  return l;
}

// prefix + n (built by append: GCC 12 warns falsely on "lit" + to_string).
std::string Name(const char* prefix, uint64_t n) {
  std::string out(prefix);
  out.append(std::to_string(n));
  return out;
}

v1::FindPrefixRequest RandomRequest(std::mt19937_64& rng) {
  v1::FindPrefixRequest r;
  r.set_model(Name("model-", rng() % 100));
  if (rng() % 2 == 0) {
    v1::TokenPrompt* t = r.mutable_tokens();
    for (uint64_t i = 0, n = rng() % 300; i < n; ++i) t->add_token_ids(static_cast<int64_t>(rng() % 200000) - 10);
    if (rng() % 2 == 0) t->set_lora_name("lora");
    t->set_cache_salt(rng() % 2 == 0 ? "" : std::string(40, 's'));
    for (uint64_t i = 0, n = rng() % 4; i < n; ++i) {
      v1::MultiModalItem* m = t->add_mm_items();
      m->set_identifier(Name("img", i));
      m->set_offset(static_cast<int64_t>(i * 10));
      m->set_length(5);
    }
  } else {
    v1::BlockHashes* h = r.mutable_hashes();
    for (uint64_t i = 0, n = rng() % 50; i < n; ++i) {
      if (rng() % 2 == 0) {
        h->add_u64(rng());
      } else {
        h->add_digest(std::string(32, static_cast<char>(rng())));
      }
    }
  }
  for (uint64_t i = 0, n = rng() % 3; i < n; ++i) r.add_replicas(Name("r", i));
  for (uint64_t i = 0, n = rng() % 3; i < n; ++i) r.add_tiers(i == 0 ? "CPU" : "DISK");
  r.set_include_block_hashes(rng() % 2 == 0);
  r.set_request_id(rng());
  return r;
}

TEST(RequestScan, AcceptsWhatProtobufWritesAndParsesItIdentically) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 300; ++i) {
    const v1::FindPrefixRequest want = RandomRequest(rng);
    const std::string wire = want.SerializeAsString();
    v1::FindPrefixRequest got;
    ScanResult sr;
    ScanLimits l = Generous();
    l.echo = v1::FindPrefixRequest::descriptor()->FindFieldByName("request_id");
    ASSERT_TRUE(ParseRequest(wire, l, &got, &sr).ok()) << want.ShortDebugString();
    EXPECT_EQ(got.SerializeAsString(), wire);
    EXPECT_EQ(sr.echo, want.request_id());
    // The estimate covers what parsing really takes.
    EXPECT_GE(sr.parsed_bytes, want.SpaceUsedLong()) << want.ShortDebugString();
  }
}

TEST(RequestScan, RejectsEveryMutationProtobufRejects) {
  std::mt19937_64 rng(11);
  int rejected = 0;
  for (int i = 0; i < 2000; ++i) {
    std::string wire = RandomRequest(rng).SerializeAsString();
    if (wire.empty()) continue;
    switch (rng() % 4) {
      case 3: wire += static_cast<char>(rng() % 16); break;                             // a byte appended
      case 0: wire.resize(rng() % wire.size()); break;                                 // truncated
      case 1: wire[rng() % wire.size()] = static_cast<char>(rng()); break;              // one byte flipped
      default: wire.insert(rng() % wire.size(), 1, static_cast<char>(rng())); break;  // one byte inserted
    }
    v1::FindPrefixRequest proto;
    const bool protobuf_ok = proto.ParseFromString(wire);
    v1::FindPrefixRequest ours;
    grpc::Status s = ParseRequest(wire, Generous(), &ours);
    // Stricter than protobuf only for groups, which no kvidx message has.
    if (protobuf_ok && !s.ok()) {
      EXPECT_NE(s.error_message().find("group"), std::string::npos) << s.error_message();
    }
    if (!protobuf_ok) {
      EXPECT_FALSE(s.ok()) << i;
    }
    if (!s.ok()) {
      EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 100);
}

TEST(RequestScan, WireCornerCases) {
  const auto* d = v1::FindPrefixRequest::descriptor();
  auto code = [&](const std::string& wire) { return ScanRequest(wire, d, Generous()).error_code(); };
  EXPECT_EQ(code(""), grpc::StatusCode::OK);
  EXPECT_EQ(code(std::string("\x00", 1)), grpc::StatusCode::INVALID_ARGUMENT);          // field 0
  EXPECT_EQ(code("\x0f"), grpc::StatusCode::INVALID_ARGUMENT);                          // wire type 7
  EXPECT_EQ(code("\x0b\x0c"), grpc::StatusCode::INVALID_ARGUMENT);                      // a group
  EXPECT_EQ(code("\x38\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"), grpc::StatusCode::INVALID_ARGUMENT);  // 11-byte varint
  // BlockHashes.u64 packed; a fixed64 element where a varint is due is an
  // unknown field to protobuf, and to us.
  EXPECT_EQ(code("\x1a\x03\x0a\x01\x05"), grpc::StatusCode::OK);
  EXPECT_EQ(code("\x1a\x09\x09\x01\x02\x03\x04\x05\x06\x07\x08"), grpc::StatusCode::OK);
  // Invalid UTF-8 in a string: the scan passes, parsing refuses.
  v1::FindPrefixRequest out;
  grpc::Status s = ParseRequest("\x0a\x02\xff\xfe", Generous(), &out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST(RequestScan, CapsAndBudgetStopTheScan) {
  ScanLimits l = Generous();
  l.caps.push_back({v1::TokenPrompt::descriptor()->FindFieldByName("token_ids"), 10, "too many tokens"});
  v1::FindPrefixRequest r;
  r.set_model("m");
  for (int i = 0; i < 10; ++i) r.mutable_tokens()->add_token_ids(i);
  r.set_request_id(42);
  ScanResult sr;
  l.echo = v1::FindPrefixRequest::descriptor()->FindFieldByName("request_id");
  EXPECT_TRUE(ScanRequest(r.SerializeAsString(), v1::FindPrefixRequest::descriptor(), l).ok());
  r.mutable_tokens()->add_token_ids(10);
  grpc::Status s = ScanRequest(r.SerializeAsString(), v1::FindPrefixRequest::descriptor(), l, &sr);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(s.error_message(), "too many tokens");
  EXPECT_EQ(sr.echo, 42u);  // found after the refusal

  // The same cap counts unpacked elements too.
  std::string unpacked = "\x0a\x01m\x12\x16";
  for (int i = 0; i < 11; ++i) unpacked.append("\x08\x01", 2);
  EXPECT_EQ(ScanRequest(unpacked, v1::FindPrefixRequest::descriptor(), l).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);

  // The largest legitimate query at the default limits fits the default
  // budget (2 x 16 MiB): 1M token ids.
  ScanLimits defaults;
  defaults.max_parsed_bytes = 32 << 20;
  v1::FindPrefixRequest longest;
  longest.set_model("m");
  for (int i = 0; i < (1 << 20); ++i) longest.mutable_tokens()->add_token_ids(i % 32000);
  EXPECT_TRUE(ScanRequest(longest.SerializeAsString(), v1::FindPrefixRequest::descriptor(), defaults).ok());

  ScanLimits tiny;
  tiny.max_parsed_bytes = 4096;
  v1::FindPrefixRequest many;
  for (int i = 0; i < 100; ++i) many.add_replicas("");
  s = ScanRequest(many.SerializeAsString(), v1::FindPrefixRequest::descriptor(), tiny);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(s.error_message().find("once parsed"), std::string::npos);
}

}  // namespace
}  // namespace kvidx::server
