#include "util/thread_pool.h"

#include <algorithm>

namespace kvserve {

int ThreadPool::default_threads() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : int(n);
}

ThreadPool::ThreadPool(int num_threads)
    : num_threads_(num_threads > 0 ? num_threads : default_threads()) {
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_start_.notify_all();
  for (auto& t : workers_) t.join();
}

static inline void chunk_of(int64_t n, int parts, int i, int64_t* b, int64_t* e) {
  int64_t per = n / parts, rem = n % parts;
  *b = i * per + std::min<int64_t>(i, rem);
  *e = *b + per + (i < rem ? 1 : 0);
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn) {
  if (n <= 0) return;
  int parts = int(std::min<int64_t>(num_threads_, n));
  if (parts <= 1) {
    fn(0, n, 0);
    return;
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    job_ = &fn;
    job_n_ = n;
    pending_ = num_threads_ - 1;
    ++generation_;
  }
  cv_start_.notify_all();
  int64_t b, e;
  chunk_of(n, num_threads_, 0, &b, &e);
  if (b < e) fn(b, e, 0);
  std::unique_lock<std::mutex> lk(mu_);
  cv_done_.wait(lk, [this] { return pending_ == 0; });
  job_ = nullptr;
}

void ThreadPool::worker(int index) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int64_t, int64_t, int)>* job;
    int64_t n;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_start_.wait(lk, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
      n = job_n_;
    }
    int64_t b, e;
    chunk_of(n, num_threads_, index, &b, &e);
    if (b < e) (*job)(b, e, index);
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (--pending_ == 0) cv_done_.notify_one();
    }
  }
}

}  // namespace kvserve
