// A persistent pool of worker threads for data-parallel loops (no thread creation per op).
// parallel_for splits [0, n) into one contiguous chunk per thread; the calling thread
// takes chunk 0, so a pool of N threads has N-1 workers.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
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
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn);

  static int default_threads();

 private:
  void worker(int index);

  int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_start_;
  std::condition_variable cv_done_;
  const std::function<void(int64_t, int64_t, int)>* job_ = nullptr;
  int64_t job_n_ = 0;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

}  // namespace kvserve
