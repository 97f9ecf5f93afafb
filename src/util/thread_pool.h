// A persistent pool of worker threads for data-parallel loops (no thread creation per op).
//
// parallel_for is tuned for the many short jobs of a decode step (~30 layers x ~5 pool jobs per
// token, each tens of microseconds): a mutex + condition-variable hand-off costs 10-50 us per op
// in wake-ups alone, so workers instead spin on a generation counter for a while after each job
// (kSpin in the .cpp) and only then sleep on it (C++20 atomic wait, a futex on Linux). The caller
// wakes sleepers only when there are any, so the hot path makes no system call.
//
// Work split: [0, n) is cut into one contiguous segment per thread (the caller is thread 0). Each
// thread claims its own segment from the front, half of what is left at a time, so a thread that
// runs alone streams its range in a few long calls; a thread whose segment is used up steals half
// of what is left of another's from the back. Why: cores do not run at one speed (on the 2-vCPU
// development VM one of them was measured ~30% slower at streaming weights, which side varies from
// run to run), and a thread the OS has not scheduled yet must not stall the job - a fixed equal
// split left the faster thread idle for a quarter of every decode matmul. A claim on a thread's own
// segment touches only that thread's cache line; lines move between cores only when one steals.
// The caller waits for the work, not for the workers: a worker that wakes late finds nothing left.
// Callers must not rely on which thread runs which range, nor on how [0, n) is cut into calls;
// thread_index is unique among the concurrently running calls of fn.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

namespace kvserve {

// The most worker threads any flag or config key may ask for: far past any core count, and a
// bound that keeps a typo (-t 100000) from ending in a failed thread creation.
constexpr int kMaxThreads = 1024;

class ThreadPool {
 public:
  // num_threads <= 0 means the number of online cores.
  explicit ThreadPool(int num_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  using RangeFn = std::function<void(int64_t, int64_t, int)>;
  // Calls fn(begin, end, thread_index) over disjoint, non-empty ranges covering [0, n) exactly once.
  // Blocks until all are done. Not reentrant: call from one thread at a time. A claim takes at
  // least `grain` indices where that many are left (for work whose cost per call falls with the
  // range's length, such as a prefill GEMM that re-reads its activations once per call).
  // `after`, when given, runs once on each thread that ran part of the job, after its last range,
  // and names memory that thread is expected to read first in the next job (see first_index). The
  // pool hints it into L2 once the thread's ranges count as done, so the caller never waits on a
  // worker's hints (a 16 KiB hint stalls its core ~1 us while the misses queue); the span must
  // outlive the job (weights do), `after` itself need not.
  struct WarmSpan {
    const void* data = nullptr;
    size_t bytes = 0;
  };
  using AfterFn = std::function<WarmSpan(int)>;
  void parallel_for(int64_t n, const RangeFn& fn, int64_t grain = 1, const AfterFn* after = nullptr);

  // The first index thread `thread` claims of a job of n indices when it takes part (the start of
  // its own segment). Only a hint: which thread runs what is not guaranteed.
  int64_t first_index(int64_t n, int thread) const {
    const int64_t per = n / num_threads_, rem = n % num_threads_;
    return thread * per + std::min<int64_t>(thread, rem);
  }

  // One per CPU this process may use (util/cpu_budget.h: affinity mask, cgroup CPU limit).
  static int default_threads();

 private:
  void worker(int index);
  // Claims and runs ranges of the current job, own segment first, then stolen ones, until none
  // are left; then runs the job's `after`, counts what it ran as done, and warms after's span.
  // Returns the generation of the job it ran ranges of (*ran false when none): a worker that was
  // a job behind may have run the newer job's ranges, and must not enter that job a second time.
  uint32_t run_ranges(int thread_index, bool* ran);
  uint32_t claim_size(uint32_t next, uint32_t end) const;

  int num_threads_;
  std::vector<std::thread> workers_;

  // The current job's function, written by the caller before it publishes the segments. A thread reads them
  // only after a successful claim: a segment holds unclaimed work only while its job is live, and
  // the caller rewrites it only after every unit of that job is done, so whatever job a claim
  // took units of is the one it belongs to (no tag needed, even for a worker late by many jobs).
  std::atomic<const RangeFn*> job_fn_{nullptr};
  std::atomic<const AfterFn*> job_after_{nullptr};
  std::atomic<uint32_t> job_generation_{0};  // the value generation_ takes when the job is published
  std::atomic<uint32_t> job_grain_{1};

  // One per thread, a cache line each: bits 63..32 the next unclaimed index, 31..0 the end of
  // the unclaimed part (indices into [0, n), so n < 2^32). The owner claims from the front, others
  // from the back, both by compare-exchange.
  struct alignas(64) Segment {
    std::atomic<uint64_t> word{0};
  };
  std::unique_ptr<Segment[]> segments_;

  alignas(64) std::atomic<int64_t> done_{0};         // indices of the current job run to the end
  alignas(64) std::atomic<uint32_t> generation_{0};  // bumped per job and on shutdown; workers wait on it
  alignas(64) std::atomic<int> sleepers_{0};         // workers blocked in generation_.wait
  std::atomic<bool> stop_{false};
};

// A task order for parallel_for over two kinds of tasks of unequal cost: a tasks of the first
// kind (numbered 0 .. a - 1) and b of the second (a .. a + b - 1), each kind in its own order,
// first-kind task i before second-kind task j when i / a <= j / b, so that every prefix of the
// order holds its share of each kind within one task. A thread's first claim is half of its
// segment: with all the costly tasks first, that claim can hold most of the job's work while the
// other threads, done with their cheap tasks, find nothing left to take.
std::vector<int32_t> interleave_in_proportion(int64_t a, int64_t b);

}  // namespace kvserve
