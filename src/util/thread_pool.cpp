#include "util/thread_pool.h"

#include <algorithm>
#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace kvserve {

namespace {

// How long an idle worker keeps polling before it sleeps: longer than the gap between two ops of
// one forward pass (rmsnorm, rope, ... take microseconds), short enough not to burn a core
// between requests.
constexpr auto kSpin = std::chrono::microseconds(300);
// How long the caller polls for chunks still running elsewhere before it yields its core.
constexpr auto kCallerSpin = std::chrono::microseconds(50);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

inline void chunk_of(int64_t n, int64_t parts, int64_t i, int64_t* b, int64_t* e) {
  int64_t per = n / parts, rem = n % parts;
  *b = i * per + std::min<int64_t>(i, rem);
  *e = *b + per + (i < rem ? 1 : 0);
}

}  // namespace

int ThreadPool::default_threads() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : int(n);
}

ThreadPool::ThreadPool(int num_threads)
    : num_threads_(num_threads > 0 ? num_threads : default_threads()) {
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_chunks(int thread_index) {
  uint64_t w = claim_.load(std::memory_order_acquire);
  for (;;) {
    const int64_t chunks = int64_t((w >> 16) & 0xFFFF), c = int64_t(w & 0xFFFF);
    if (c >= chunks) return;
    // Read before the claim; valid when the claim succeeds on this same w: the caller rewrites
    // them only after every chunk of the job in w was claimed, which changes claim_.
    const auto* fn = job_fn_.load(std::memory_order_relaxed);
    const int64_t n = job_n_.load(std::memory_order_relaxed);
    if (!claim_.compare_exchange_weak(w, w + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
    int64_t b, e;
    chunk_of(n, chunks, c, &b, &e);
    (*fn)(b, e, thread_index);
    done_chunks_.fetch_add(1, std::memory_order_release);
    w = claim_.load(std::memory_order_acquire);
  }
}

// Default chunks per thread (kDefaultChunksPerThread): enough that a descheduled thread's share is
// taken over by the others, few enough that the per-chunk cost (one compare-exchange, one
// std::function call, one done count) stays negligible.
void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn,
                              int chunks_per_thread) {
  if (n <= 0) return;
  if (num_threads_ <= 1 || n == 1) {
    fn(0, n, 0);
    return;
  }
  const int64_t per_thread = std::max(1, chunks_per_thread);
  const int64_t chunks = std::min<int64_t>({n, int64_t(num_threads_) * per_thread, 0xFFFF});
  job_fn_.store(&fn, std::memory_order_relaxed);
  job_n_.store(n, std::memory_order_relaxed);
  done_chunks_.store(0, std::memory_order_relaxed);
  ++job_number_;
  claim_.store(uint64_t(job_number_) << 32 | uint64_t(chunks) << 16, std::memory_order_release);
  // seq_cst pair with the sleepers_ increment in worker(): either we see the sleeper and wake it,
  // or it sees the new generation before it blocks.
  generation_.fetch_add(1);
  if (sleepers_.load() > 0) generation_.notify_all();

  run_chunks(0);

  const auto t0 = std::chrono::steady_clock::now();
  for (int spins = 0; done_chunks_.load(std::memory_order_acquire) != chunks; ++spins) {
    if ((spins & 63) == 63 && std::chrono::steady_clock::now() - t0 > kCallerSpin)
      std::this_thread::yield();
    else
      cpu_relax();
  }
}

void ThreadPool::worker(int index) {
  uint32_t seen = 0;
  for (;;) {
    // Wait for a generation other than `seen`: poll first, then sleep.
    uint32_t g = generation_.load(std::memory_order_acquire);
    if (g == seen) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int spins = 0; (g = generation_.load(std::memory_order_acquire)) == seen; ++spins) {
        if ((spins & 63) == 63 && std::chrono::steady_clock::now() - t0 > kSpin) break;
        cpu_relax();
      }
      while (g == seen) {
        sleepers_.fetch_add(1);
        generation_.wait(seen);
        sleepers_.fetch_sub(1);
        g = generation_.load(std::memory_order_acquire);
      }
    }
    seen = g;
    if (stop_.load()) return;
    run_chunks(index);
  }
}

}  // namespace kvserve
