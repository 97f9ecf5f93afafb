// A persistent pool of worker threads for data-parallel loops (no thread creation per op).
//
// parallel_for is tuned for the many short jobs of a decode step (~30 layers x ~8 ops per token,
// each tens of microseconds): a mutex + condition-variable hand-off costs 10-50 us per op in
// wake-ups alone, so workers instead spin on a generation counter for a while after each job
// (kSpin in the .cpp) and only then sleep on it (C++20 atomic wait, a futex on Linux). The caller
// wakes sleepers only when there are any, so the hot path makes no system call.
//
// Work split: [0, n) is cut into up to chunks_per_thread (default 4) chunks per thread, claimed one at a time
// through one atomic word by whichever threads are running (the caller included, as thread 0).
// The caller waits for the chunks, not for the workers: a worker that the OS has not scheduled yet
// simply finds nothing left to claim, so on a busy machine one descheduled thread does not stall
// every op. Callers must not rely on which thread runs which chunk; thread_index is unique among
// the concurrently running calls of fn.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace kvserve {

class ThreadPool {
 public:
  // num_threads <= 0 means the number of online cores.
  explicit ThreadPool(int num_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Calls fn(begin, end, thread_index) over disjoint chunks covering [0, n). Blocks until all
  // chunks are done. Not reentrant: call from one thread at a time.
  // chunks_per_thread (default kDefaultChunksPerThread) sets how finely [0, n) is cut: 1 gives
  // every thread one chunk of equal size, the least claiming and waiting for short ops whose
  // threads all run (a chunk whose thread is late is still claimed by whoever is free, the caller
  // included); more chunks balance better when threads are descheduled or chunks are uneven.
  static constexpr int kDefaultChunksPerThread = 4;
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn,
                    int chunks_per_thread = kDefaultChunksPerThread);

  static int default_threads();

 private:
  void worker(int index);
  // Claims and runs chunks of the current job until none are left.
  void run_chunks(int thread_index);

  int num_threads_;
  std::vector<std::thread> workers_;

  // The current job. Written (relaxed) by the caller before it publishes claim_ (release); a
  // worker reads them after loading claim_ and trusts them only if its claim on that same claim_
  // value succeeds (see run_chunks), so a worker late from an earlier job never runs a chunk with
  // the wrong function or bounds.
  std::atomic<const std::function<void(int64_t, int64_t, int)>*> job_fn_{nullptr};
  std::atomic<int64_t> job_n_{0};

  // Claim word: bits 63..32 job number, 31..16 chunk count, 15..0 next unclaimed chunk. A chunk
  // is claimed by a compare-exchange to next + 1, which fails once a newer job was published.
  alignas(64) std::atomic<uint64_t> claim_{0};
  alignas(64) std::atomic<int64_t> done_chunks_{0};  // finished chunks of the current job
  alignas(64) std::atomic<uint32_t> generation_{0};  // bumped per job and on shutdown; workers wait on it
  alignas(64) std::atomic<int> sleepers_{0};         // workers blocked in generation_.wait
  uint32_t job_number_ = 0;                          // caller side only
  std::atomic<bool> stop_{false};
};

}  // namespace kvserve
