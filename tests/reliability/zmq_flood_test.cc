// Hostile engines: a real ZMQ PUB on 127.0.0.1 sends a kvidx-server process
// thousands of malformed messages (wrong frame counts, bad seq frames,
// mutated and truncated real payloads, absurd msgpack lengths, seq jumps to
// 2^63). The server must count them, keep going, and stay within the
// suite's memory and thread bounds.
#include <random>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "decode/decode_test_util.h"
#include "reliability/server_under_attack.h"

namespace kvidx::reliability {
namespace {

std::string SeqFrame(uint64_t seq) {
  std::string f(8, '\0');
  for (int i = 0; i < 8; ++i) f[i] = static_cast<char>(seq >> (56 - 8 * i));
  return f;
}

void Send(zmq::socket_t& pub, const std::vector<std::string>& frames) {
  for (size_t i = 0; i < frames.size(); ++i) {
    const auto flags = i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
    (void)pub.send(zmq::buffer(frames[i]), flags);
  }
}

// One malformed message of kind `k` (0..7), built around a real payload.
std::vector<std::string> Malformed(int k, uint64_t seq, const std::string& real, std::mt19937_64& rng) {
  std::string p = real;
  switch (k % 8) {
    case 0: return {""};                                            // topic only
    case 1: return {"", SeqFrame(seq)};                             // no payload frame
    case 2: return {"", SeqFrame(seq), p, p};                       // an extra frame
    case 3: return {"", "\x01\x02\x03", p};                         // a 3-byte seq
    case 4:                                                          // truncated payload
      p.resize(rng() % p.size());
      return {"", SeqFrame(seq), p};
    case 5:                                                          // bit flips
      for (int i = 0; i < 8; ++i) p[rng() % p.size()] ^= static_cast<char>(1u << (rng() % 8));
      return {"", SeqFrame(seq), p};
    case 6:                                                          // array32 claiming 2^32-1 entries
      return {"", SeqFrame(seq), std::string("\x93\xcb\x41\xd9\x54\xfc\x40\x10\x00\x00\xdd\xff\xff\xff\xff", 15)};
    default:                                                         // absurd seq jump
      return {"", SeqFrame((uint64_t{1} << 63) + seq), real};
  }
}

class ZmqFloodTest : public ServerUnderAttack {};

TEST_F(ZmqFloodTest, MalformedMessagesAreCountedWithinBounds) {
  zmq::context_t ctx(1);
  zmq::socket_t pub(ctx, zmq::socket_type::pub);
  pub.set(zmq::sockopt::sndhwm, 0);
  pub.bind("tcp://127.0.0.1:*");
  const std::string endpoint = pub.get(zmq::sockopt::last_endpoint);
  ASSERT_NO_FATAL_FAILURE(Launch("  - {replica: r0, model: m, endpoint: \"" + endpoint + "\"}\n"));

  const std::string real = ingest::testing::VectorPayload("map_form_newest");
  ASSERT_FALSE(real.empty());
  // The subscription reaches the PUB after the connect: repeat seq 0 until
  // it is applied (repeats are counted as duplicates).
  const auto joined_by = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  while (MetricSum(Metrics(), "kvidx_batches_total") < 1 && std::chrono::steady_clock::now() < joined_by) {
    Send(pub, {"", SeqFrame(0), real});
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_GE(MetricSum(Metrics(), "kvidx_batches_total"), 1) << "the subscription never reached the PUB";

  constexpr int kMessages = 3000;
  uint64_t seq = 1;
  ExpectBounded("malformed ZMQ flood", [&] {
    std::mt19937_64 rng(15);
    for (int i = 0; i < kMessages; ++i) {
      Send(pub, Malformed(i, seq, real, rng));
      if (i % 8 >= 3 && i % 8 <= 6) ++seq;  // kinds that carry a readable seq consume it
      if (i % 256 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    // A valid batch after the flood: once it is applied, all before it were seen.
    const double before = MetricSum(Metrics(), "kvidx_batches_total");
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(15);
    while (MetricSum(Metrics(), "kvidx_batches_total") <= before && std::chrono::steady_clock::now() < end) {
      Send(pub, {"", SeqFrame(seq), real});
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  const std::string m = Metrics();
  EXPECT_GT(MetricSum(m, "kvidx_decode_errors_total"), 0) << m;
  EXPECT_GT(MetricSum(m, "kvidx_seq_implausible_total"), 0) << m;
  EXPECT_LT(MetricSum(m, "kvidx_batches_lost_total"), 1e6) << "a seq jump was counted as a loss";
}

}  // namespace
}  // namespace kvidx::reliability
