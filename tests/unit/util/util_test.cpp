#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "util/half.h"
#include "util/status.h"
#include "util/thread_pool.h"
#include "util/units.h"

namespace kvserve {
namespace {

TEST(Status, OkAndErrors) {
  Status ok;
  EXPECT_TRUE(ok.ok());
  Status e = corrupt("x.gguf: bad magic");
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.code(), StatusCode::kCorrupt);
  EXPECT_EQ(e.to_string(), "Corrupt: x.gguf: bad magic");
}

Expected<int> half_of(int x) {
  if (x % 2) return invalid_argument("odd");
  return x / 2;
}
Expected<int> quarter_of(int x) {
  KVS_ASSIGN_OR_RETURN(int h, half_of(x));
  return half_of(h);
}

TEST(Expected, PropagatesErrors) {
  EXPECT_EQ(*quarter_of(8), 2);
  EXPECT_FALSE(quarter_of(6).ok());
  EXPECT_EQ(quarter_of(6).status().message(), "odd");
}

TEST(Units, ParseBytes) {
  EXPECT_EQ(*parse_bytes("512MiB"), 512ull << 20);
  EXPECT_EQ(*parse_bytes("2GiB"), 2ull << 30);
  EXPECT_EQ(*parse_bytes("1.5GB"), 1500000000ull);
  EXPECT_EQ(*parse_bytes("4096"), 4096ull);
  EXPECT_EQ(*parse_bytes("64k"), 65536ull);
  EXPECT_FALSE(parse_bytes("lots").ok());
  EXPECT_FALSE(parse_bytes("12 parsecs").ok());
  EXPECT_FALSE(parse_bytes("-5MiB").ok());
}

TEST(Units, MemoryBudgetFraction) {
  uint64_t ram = physical_memory_bytes();
  ASSERT_GT(ram, 0u);
  uint64_t b = *parse_memory_budget("0.5");
  EXPECT_NEAR(double(b), double(ram) / 2, double(ram) * 1e-6);
  EXPECT_EQ(*parse_memory_budget("1MiB"), 1ull << 20);
}

TEST(Half, RoundTripsAndRounds) {
  for (float f : {0.0f, 1.0f, -2.5f, 65504.0f, 1e-3f}) EXPECT_NEAR(f16_to_f32(f32_to_f16(f)), f, std::abs(f) * 1e-3);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f)), 1.0f);
  // 1 + 2^-8 lies exactly between two bf16 values: ties go to even (1.0).
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 1.0f / 256)), 1.0f);
}

TEST(ThreadPool, CoversRangeExactlyOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 2, 7, 100, 1001}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      for (int rep = 0; rep < 3; ++rep)
        pool.parallel_for(n, [&](int64_t b, int64_t e, int) {
          for (int64_t i = b; i < e; ++i) hits[size_t(i)]++;
        });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)].load(), 3) << "threads " << threads << " n " << n;
    }
  }
}

}  // namespace
}  // namespace kvserve
