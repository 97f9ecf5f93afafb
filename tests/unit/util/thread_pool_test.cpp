// ThreadPool::parallel_for's split: every index exactly once in non-empty ranges, a few calls per
// thread (claims take half of what is left), and a slow thread's share taken over by the others.
#include "util/thread_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>
#include <thread>
#include <vector>

namespace kvserve {
namespace {

struct Call {
  int64_t begin, end;
  int thread;
};

std::vector<Call> record_calls(ThreadPool& pool, int64_t n,
                               const std::function<void(const Call&)>& also = {}) {
  std::mutex mu;
  std::vector<Call> calls;
  pool.parallel_for(n, [&](int64_t b, int64_t e, int t) {
    if (also) also({b, e, t});
    std::lock_guard<std::mutex> lock(mu);
    calls.push_back({b, e, t});
  });
  std::sort(calls.begin(), calls.end(), [](const Call& a, const Call& b) { return a.begin < b.begin; });
  return calls;
}

TEST(ThreadPool, RangesAreNonEmptyDisjointAndFew) {
  for (int threads : {2, 3, 5}) {
    ThreadPool pool(threads);
    for (int64_t n : {2, 3, 36, 192, 1001, 100000}) {
      for (int rep = 0; rep < 20; ++rep) {
        const std::vector<Call> calls = record_calls(pool, n);
        int64_t at = 0;
        for (const Call& c : calls) {
          ASSERT_EQ(c.begin, at) << "threads " << threads << " n "
                                 << n;  // sorted, so gaps/overlaps show here
          ASSERT_LT(c.begin, c.end);
          ASSERT_GE(c.thread, 0);
          ASSERT_LT(c.thread, threads);
          at = c.end;
        }
        ASSERT_EQ(at, n);
        // Each claim takes half of what is left of a segment (own from the front, stolen from
        // the back): about log2 claims per segment for its owner and as many for thieves.
        const int64_t per_segment = 2 * (int64_t(std::ceil(std::log2(double(n)))) + 1);
        EXPECT_LE(int64_t(calls.size()), threads * per_segment) << "threads " << threads << " n " << n;
      }
    }
  }
}

TEST(ThreadPool, ClaimsTakeAtLeastTheGrain) {
  // A claim shorter than the grain takes all that is left of its segment, so each segment ends
  // in at most one such call.
  for (int threads : {2, 3}) {
    ThreadPool pool(threads);
    for (int64_t grain : {4, 7}) {
      std::mutex mu;
      std::vector<int64_t> lengths;
      int64_t total = 0;
      pool.parallel_for(
          301,
          [&](int64_t b, int64_t e, int) {
            std::lock_guard<std::mutex> lock(mu);
            lengths.push_back(e - b);
            total += e - b;
          },
          grain);
      EXPECT_EQ(total, 301);
      EXPECT_LE(std::count_if(lengths.begin(), lengths.end(), [&](int64_t l) { return l < grain; }), threads)
          << "threads " << threads << " grain " << grain;
    }
  }
}

TEST(ThreadPool, RangesBeyond32BitIndicesAreCutIntoRounds) {
  // Segment bounds are 32-bit: a larger n runs as rounds of at most 2^31 indices, shifted back.
  ThreadPool pool(2);
  const int64_t n = (int64_t(1) << 32) + 12345;
  const std::vector<Call> calls = record_calls(pool, n);
  int64_t at = 0;
  for (const Call& c : calls) {
    ASSERT_EQ(c.begin, at);
    ASSERT_LT(c.begin, c.end);
    at = c.end;
  }
  EXPECT_EQ(at, n);
}

TEST(ThreadPool, SlowThreadsShareIsTakenOver) {
  // Workers sleep in every call; the caller (thread 0) is fast, so once its own segment is done it
  // steals half of what is left of theirs, again and again: it ends up with its own share plus at
  // least half of every worker's (a worker's first claim is half of its segment).
  for (int threads : {2, 3}) {
    ThreadPool pool(threads);
    const int64_t n = 64 * threads;
    std::atomic<int64_t> by_caller{0};
    record_calls(pool, n, [&](const Call& c) {
      if (c.thread == 0) {
        by_caller += c.end - c.begin;
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    });
    EXPECT_GE(by_caller.load(), 64 + (threads - 1) * 32) << "threads " << threads;
  }
}

TEST(ThreadPool, ManyShortJobsInARow) {
  // Back-to-back jobs of varied sizes (decode's pattern): a worker late from one job must never
  // run a range of another with the wrong function.
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(512);
  for (int job = 0; job < 3000; ++job) {
    const int64_t n = 1 + (job * 37) % 512;
    const int tag = job;
    pool.parallel_for(n, [&, tag](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) hits[size_t(i)] += tag % 2 == 0 ? 1 : -1;
    });
  }
  // Odd and even jobs alternate over sizes that repeat every 512 jobs; count what each index got.
  std::vector<int> expect(512, 0);
  for (int job = 0; job < 3000; ++job)
    for (int64_t i = 0; i < 1 + (job * 37) % 512; ++i) expect[size_t(i)] += job % 2 == 0 ? 1 : -1;
  for (size_t i = 0; i < 512; ++i) ASSERT_EQ(hits[i].load(), expect[i]) << i;
}

TEST(ThreadPool, AfterRunsOncePerTakingThreadAfterItsRanges) {
  // `after` runs on each thread that ran ranges, once, after its last range, before parallel_for
  // returns; threads that ran nothing do not run it (a late worker must not touch a finished job).
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 2, 7, 300}) {
      for (int rep = 0; rep < 50; ++rep) {
        std::mutex mu;
        std::vector<int> ranges_of(size_t(threads), 0), afters_of(size_t(threads), 0);
        bool range_after_after = false;
        const ThreadPool::AfterFn after = [&](int t) {
          std::lock_guard<std::mutex> lock(mu);
          ++afters_of[size_t(t)];
          return ThreadPool::WarmSpan{};
        };
        pool.parallel_for(
            n,
            [&](int64_t, int64_t, int t) {
              std::lock_guard<std::mutex> lock(mu);
              ++ranges_of[size_t(t)];
              if (afters_of[size_t(t)] > 0) range_after_after = true;
            },
            1, &after);
        ASSERT_FALSE(range_after_after) << "threads " << threads << " n " << n;
        for (int t = 0; t < threads; ++t)
          ASSERT_EQ(afters_of[size_t(t)], ranges_of[size_t(t)] > 0 ? 1 : 0) << "thread " << t << " n " << n;
      }
    }
  }
}

TEST(ThreadPool, FirstIndexIsTheStartOfEachThreadsSegment) {
  // Segments are as equal as can be, the longer ones first; a thread with none starts at n.
  ThreadPool pool(3);
  EXPECT_EQ(pool.first_index(10, 0), 0);
  EXPECT_EQ(pool.first_index(10, 1), 4);
  EXPECT_EQ(pool.first_index(10, 2), 7);
  EXPECT_EQ(pool.first_index(2, 2), 2);
  // With a slow caller, a worker's first range in its own segment begins at the segment's start.
  for (int64_t n : {3, 12, 100}) {
    std::mutex mu;
    std::vector<int64_t> first(3, -1);
    pool.parallel_for(n, [&](int64_t b, int64_t, int t) {
      {
        std::lock_guard<std::mutex> lock(mu);
        if (first[size_t(t)] < 0) first[size_t(t)] = b;
      }
      if (t == 0) std::this_thread::sleep_for(std::chrono::milliseconds(30));
    });
    // (A worker that woke to an empty segment steals elsewhere first: only a first range inside
    // its own segment is checked.)
    for (int t = 1; t < 3; ++t) {
      const int64_t own_end = t + 1 < 3 ? pool.first_index(n, t + 1) : n;
      if (first[size_t(t)] >= pool.first_index(n, t) && first[size_t(t)] < own_end) {
        EXPECT_EQ(first[size_t(t)], pool.first_index(n, t)) << "n " << n << " thread " << t;
      }
    }
  }
}

// interleave_in_proportion: a permutation of [0, a + b) that keeps each kind in its order and
// holds, in every prefix, the first kind's share within one task.
TEST(InterleaveInProportion, EachKindInOrderAndEveryPrefixInProportion) {
  for (auto [a, b] : {std::pair<int64_t, int64_t>{0, 0},
                      {0, 5},
                      {5, 0},
                      {1, 1},
                      {1, 9},
                      {9, 1},
                      {3, 7},
                      {2310, 5679},
                      {330, 5697},
                      {96, 1536}}) {
    const std::vector<int32_t> order = interleave_in_proportion(a, b);
    ASSERT_EQ(int64_t(order.size()), a + b);
    int64_t firsts = 0, seconds = 0;
    for (size_t k = 0; k < order.size(); ++k) {
      if (order[k] < a) {
        ASSERT_EQ(order[k], firsts) << "first kind out of order, a " << a << " b " << b;
        ++firsts;
      } else {
        ASSERT_EQ(order[k], a + seconds) << "second kind out of order, a " << a << " b " << b;
        ++seconds;
      }
      const double share = double(k + 1) * double(a) / double(a + b);
      ASSERT_LE(std::fabs(double(firsts) - share), 1.0) << "a " << a << " b " << b << " prefix " << k + 1;
    }
    EXPECT_EQ(firsts, a);
    EXPECT_EQ(seconds, b);
  }
}

}  // namespace
}  // namespace kvserve
