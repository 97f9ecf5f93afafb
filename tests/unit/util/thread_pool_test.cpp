// ThreadPool::parallel_for with an explicit chunks_per_thread (the even split the decode matmuls
// use): the range is still covered exactly once, and 1 chunk per thread means at most
// num_threads chunks of sizes that differ by at most one.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <vector>

#include "util/thread_pool.h"

namespace kvserve {
namespace {

TEST(ThreadPool, OneChunkPerThreadSplitsEvenly) {
  for (int threads : {2, 3}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 2, 5, 72, 1001}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      std::mutex mu;
      std::vector<int64_t> sizes;
      pool.parallel_for(
          n,
          [&](int64_t b, int64_t e, int) {
            for (int64_t i = b; i < e; ++i) hits[size_t(i)]++;
            std::lock_guard<std::mutex> lock(mu);
            sizes.push_back(e - b);
          },
          1);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)].load(), 1) << "threads " << threads << " n " << n;
      ASSERT_LE(int64_t(sizes.size()), std::min<int64_t>(n, threads)) << "threads " << threads << " n " << n;
      const auto [lo, hi] = std::minmax_element(sizes.begin(), sizes.end());
      EXPECT_LE(*hi - *lo, 1) << "threads " << threads << " n " << n;
    }
  }
}

TEST(ThreadPool, ChunksPerThreadBeyondDefaultCoversRange) {
  ThreadPool pool(2);
  const int64_t n = 777;
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
  for (int per : {0, 1, 4, 16})
    pool.parallel_for(n, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) hits[size_t(i)]++;
    }, per);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)].load(), 4);
}

}  // namespace
}  // namespace kvserve
