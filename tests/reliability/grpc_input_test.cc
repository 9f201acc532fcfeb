// Hostile gRPC clients against a kvidx-server process: raw bytes (not
// protobuf messages) on every method, and the largest request the server
// accepts made of the cheapest-to-send, costliest-to-materialise content.
// Every call must end with a status the docs name (never INTERNAL,
// UNIMPLEMENTED or UNKNOWN), and memory must stay within the suite's bounds.
#include <future>
#include <random>
#include <string>
#include <vector>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include "common/raw_h2_client.h"
#include "reliability/server_under_attack.h"

namespace kvidx::reliability {
namespace {

const std::vector<std::string> kUnaryMethods = {
    "/kvidx.v1.KvIndex/FindPrefix",           "/kvidx.v1.KvIndex/FindPrefixBatch",
    "/kvidx.v1.KvIndex/ListReplicas",         "/kvidx.v1.KvIndex/GetStats",
    "/kvidx.v1.KvIndex/GetBlock",             "/kvidx.v1.KvIndexAdmin/AddEngine",
    "/kvidx.v1.KvIndexAdmin/RemoveEngine",    "/kvidx.v1.KvIndexAdmin/ListSources",
    "/kvidx.v1.KvIndexAdmin/TriggerSnapshot", "/kvidx.v1.KvIndexAdmin/Resync",
    "/kvidx.v1.KvIndexAdmin/AdvanceClock",    "/kvidx.v1.KvIndexAdmin/ScrapeLoads",
};

class RawCaller {
 public:
  explicit RawCaller(int port)
      : channel_(grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials())),
        stub_(channel_) {}

  grpc::Status Call(const std::string& method, const std::string& bytes) {
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1);
    grpc::ByteBuffer response;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    std::promise<grpc::Status> done;
    stub_.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &response,
                    [&done](grpc::Status s) { done.set_value(std::move(s)); });
    return done.get_future().get();
  }

 private:
  std::shared_ptr<grpc::Channel> channel_;
  grpc::GenericStub stub_;
};

bool Documented(grpc::StatusCode c) {
  return c != grpc::StatusCode::INTERNAL && c != grpc::StatusCode::UNIMPLEMENTED && c != grpc::StatusCode::UNKNOWN;
}

// Bytes that are not a valid protobuf message: a field with wire type 7.
std::string Unparseable(std::mt19937_64& rng) {
  std::string s(1 + rng() % 64, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  s[0] = static_cast<char>(0x0f);  // field 1, wire type 7: invalid
  return s;
}

class GrpcInputTest : public ServerUnderAttack {};

TEST_F(GrpcInputTest, GarbageOnEveryMethodGetsADocumentedStatus) {
  ASSERT_NO_FATAL_FAILURE(Launch());
  RawCaller caller(grpc_port_);
  ExpectBounded("garbage on every method", [&] {
    std::mt19937_64 rng(11);
    for (const std::string& method : kUnaryMethods) {
      for (int i = 0; i < 20; ++i) {
        const grpc::Status s = caller.Call(method, Unparseable(rng));
        EXPECT_FALSE(s.ok()) << method;
        EXPECT_TRUE(Documented(s.error_code())) << method << ": " << s.error_code() << " " << s.error_message();
      }
    }
  });
}

TEST_F(GrpcInputTest, LargestBatchOfEmptyQueriesIsRefusedWithoutMaterialising) {
  ASSERT_NO_FATAL_FAILURE(Launch());
  // 8M empty FindPrefixRequest entries (tag 0x0a, length 0): 16 MB on the
  // wire, about a gigabyte as message objects.
  std::string batch;
  for (int i = 0; i < 8'000'000; ++i) batch.append("\x0a\x00", 2);
  ExpectBounded("16 MB FindPrefixBatch of empty queries x4", [&] {
    std::vector<std::future<grpc::Status>> calls;
    for (int i = 0; i < 4; ++i) {
      calls.push_back(std::async(std::launch::async, [&] {
        RawCaller caller(grpc_port_);
        return caller.Call("/kvidx.v1.KvIndex/FindPrefixBatch", batch);
      }));
    }
    for (auto& f : calls) {
      const grpc::Status s = f.get();
      EXPECT_FALSE(s.ok());
      EXPECT_TRUE(Documented(s.error_code())) << s.error_code() << " " << s.error_message();
    }
  });
}

// HTTP/2 rapid reset on FindPrefix, in bursts small enough for gRPC 1.51's
// teardown to keep up with (see tests/server/rapid_reset_test.cc for why a
// burst of 100,000 is beyond what kvidx alone can bound).
TEST_F(GrpcInputTest, RapidResetBurstsAreBoundedAndReturned) {
  ASSERT_NO_FATAL_FAILURE(Launch());
  ExpectBounded("HTTP/2 rapid reset, 3 bursts of 5,000 streams", [&] {
    for (int burst = 0; burst < 3; ++burst) {
      testing::RawH2Client attacker(grpc_port_);
      ASSERT_TRUE(attacker.RapidReset(5000, "/kvidx.v1.KvIndex/FindPrefix"));
      ASSERT_TRUE(attacker.PingPong(std::chrono::seconds(30)));
    }
    RawCaller caller(grpc_port_);
    const grpc::Status s = caller.Call("/kvidx.v1.KvIndex/GetStats", "");
    EXPECT_TRUE(s.ok()) << s.error_message();
  });
}

}  // namespace
}  // namespace kvidx::reliability
