// Checks the "no heap allocation per block" contract of BlockHasher by
// counting global operator new calls (replaced for this test binary only).
// GCC (-O1+, e.g. sanitizer builds) flags free() on memory from a *replaced*
// operator new as mismatched once both are inlined; here they are a matched
// malloc/free pair by construction.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <vector>

#include "index/block_hasher.h"

namespace {
std::atomic<bool> g_counting{false};
std::atomic<long> g_allocations{0};
}  // namespace

void* operator new(std::size_t n) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace kvidx {
namespace {

long CountAllocations(BlockHasher& h, const std::vector<int64_t>& tokens, const RequestExtras& extras,
                      std::vector<BlockDigest>* out) {
  g_allocations = 0;
  g_counting = true;
  const Status s = h.HashRequest(tokens, extras, out);
  g_counting = false;
  EXPECT_TRUE(s.ok());
  return g_allocations.load();
}

TEST(BlockHasherAllocations, NoneOnceWarm) {
  std::vector<int64_t> tokens(8192);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int64_t>(i * 31 % 150000);
  const MultiModalItem mm[] = {{"img", 100, 600}, {"img2", 4000, 300}};
  RequestExtras extras;
  extras.lora_name = "adapter";
  extras.cache_salt = "salt";
  extras.mm_items = mm;
  for (HashAlgo algo : {HashAlgo::kSha256, HashAlgo::kSha256Cbor, HashAlgo::kXxhash, HashAlgo::kXxhashCbor}) {
    SCOPED_TRACE(HashAlgoName(algo));
    Result<BlockHasher> h = BlockHasher::Create({algo, std::string("0"), 16});
    ASSERT_TRUE(h.ok());
    std::vector<BlockDigest> out;
    CountAllocations(*h, tokens, extras, &out);  // warm-up: buffers and `out` grow
    ASSERT_EQ(out.size(), 512u);
    EXPECT_EQ(CountAllocations(*h, tokens, extras, &out), 0);
    EXPECT_EQ(CountAllocations(*h, tokens, RequestExtras{}, &out), 0);
  }
}

}  // namespace
}  // namespace kvidx
