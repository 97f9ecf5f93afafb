#include "util/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <limits>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "util/cpu_budget.h"
#include "util/status.h"

namespace kvserve {

namespace {

// How long an idle worker keeps polling before it sleeps: longer than the gap between two ops of
// one forward pass (rmsnorm, rope, ... take microseconds), short enough not to burn a core
// between requests.
constexpr auto kSpin = std::chrono::microseconds(300);
// How long the caller polls for ranges still running elsewhere before it yields its core.
constexpr auto kCallerSpin = std::chrono::microseconds(50);
// Indices per parallel_for round: segment bounds are 32-bit.
constexpr int64_t kMaxRound = int64_t(1) << 31;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// Into L2 (prefetcht1), as the GEMMs' own weight hints; inline asm because GCC may drop a
// __builtin_prefetch it deems pure.
void warm(const ThreadPool::WarmSpan& span) {
  const auto* p = static_cast<const char*>(span.data);
  for (size_t o = 0; o < span.bytes; o += 64) {
#if defined(__x86_64__) || defined(__i386__)
    asm volatile("prefetcht1 %0" : : "m"(p[o]));
#else
    __builtin_prefetch(p + o, 0, 2);
#endif
  }
}

inline uint64_t segment_word(uint64_t next, uint64_t end) { return next << 32 | end; }
inline uint32_t segment_next(uint64_t w) { return uint32_t(w >> 32); }
inline uint32_t segment_end(uint64_t w) { return uint32_t(w); }

}  // namespace

int ThreadPool::default_threads() { return usable_cpus(); }

ThreadPool::ThreadPool(int num_threads)
    : num_threads_(num_threads > 0 ? num_threads : default_threads()),
      segments_(std::make_unique<Segment[]>(size_t(num_threads_))) {
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

// Half of what is left, at least the grain (all that is left when less).
uint32_t ThreadPool::claim_size(uint32_t next, uint32_t end) const {
  const uint32_t left = end - next;
  return std::min(left, std::max((left + 1) / 2, job_grain_.load(std::memory_order_relaxed)));
}

uint32_t ThreadPool::run_ranges(int thread_index, bool* ran_any) {
  int64_t ran = 0;
  const RangeFn* fn = nullptr;
  const AfterFn* after = nullptr;
  uint32_t generation = 0;
  auto run = [&](uint32_t b, uint32_t e) {
    // After a successful claim the job is pinned until `ran` is counted (see job_fn_).
    if (fn == nullptr) {
      fn = job_fn_.load(std::memory_order_relaxed);
      after = job_after_.load(std::memory_order_relaxed);
      generation = job_generation_.load(std::memory_order_relaxed);
    }
    (*fn)(int64_t(b), int64_t(e), thread_index);
    ran += int64_t(e - b);
  };

  // Own segment, from the front.
  std::atomic<uint64_t>& own = segments_[size_t(thread_index)].word;
  for (uint64_t w = own.load(std::memory_order_acquire);;) {
    const uint32_t next = segment_next(w), end = segment_end(w);
    if (next >= end) break;
    const uint32_t take = claim_size(next, end);
    if (!own.compare_exchange_weak(w, segment_word(next + take, end), std::memory_order_acq_rel,
                                   std::memory_order_acquire))
      continue;
    run(next, next + take);
    w = own.load(std::memory_order_acquire);
  }
  // Then the others', from the back, until a whole pass finds nothing.
  for (bool found = true; found && num_threads_ > 1;) {
    found = false;
    for (int k = 1; k < num_threads_; ++k) {
      std::atomic<uint64_t>& seg = segments_[size_t((thread_index + k) % num_threads_)].word;
      for (uint64_t w = seg.load(std::memory_order_acquire);;) {
        const uint32_t next = segment_next(w), end = segment_end(w);
        if (next >= end) break;
        const uint32_t take = claim_size(next, end);
        if (!seg.compare_exchange_weak(w, segment_word(next, end - take), std::memory_order_acq_rel,
                                       std::memory_order_acquire))
          continue;
        run(end - take, end);
        found = true;
        w = seg.load(std::memory_order_acquire);
      }
    }
  }
  // The span first (the job, and `after` with it, may end as soon as `ran` is counted), the
  // prefetches after.
  const WarmSpan span = after != nullptr ? (*after)(thread_index) : WarmSpan{};
  if (ran > 0) done_.fetch_add(ran, std::memory_order_release);
  warm(span);
  *ran_any = ran > 0;
  return generation;
}

void ThreadPool::parallel_for(int64_t n, const RangeFn& fn, int64_t grain, const AfterFn* after) {
  if (n <= 0) return;
  if (num_threads_ <= 1 || n == 1) {
    fn(0, n, 0);
    if (after != nullptr) warm((*after)(0));
    return;
  }
  if (n > kMaxRound) {  // rounds of 32-bit indices
    for (int64_t base = 0; base < n; base += kMaxRound) {
      const RangeFn shifted = [&](int64_t b, int64_t e, int t) { fn(base + b, base + e, t); };
      parallel_for(std::min(kMaxRound, n - base), shifted, grain, base + kMaxRound >= n ? after : nullptr);
    }
    return;
  }
  job_fn_.store(&fn, std::memory_order_relaxed);
  job_after_.store(after, std::memory_order_relaxed);
  job_generation_.store(generation_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  job_grain_.store(uint32_t(std::clamp<int64_t>(grain, 1, kMaxRound)), std::memory_order_relaxed);
  done_.store(0, std::memory_order_relaxed);
  for (int i = 0; i < num_threads_; ++i) {
    const int64_t b = first_index(n, i), e = i + 1 < num_threads_ ? first_index(n, i + 1) : n;
    segments_[size_t(i)].word.store(segment_word(uint64_t(b), uint64_t(e)), std::memory_order_release);
  }
  // seq_cst pair with the sleepers_ increment in worker(): either we see the sleeper and wake it,
  // or it sees the new generation before it blocks.
  generation_.fetch_add(1);
  if (sleepers_.load() > 0) generation_.notify_all();

  bool ran = false;
  run_ranges(0, &ran);

  const auto t0 = std::chrono::steady_clock::now();
  for (int spins = 0; done_.load(std::memory_order_acquire) != n; ++spins) {
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
    bool ran = false;
    const uint32_t ran_generation = run_ranges(index, &ran);
    // A worker a job behind (it saw generation g, then claimed from the job published after it)
    // has taken part in that newer job: it waits for the one after.
    if (ran) seen = ran_generation;
  }
}

std::vector<int32_t> interleave_in_proportion(int64_t a, int64_t b) {
  KVS_ASSERT(a >= 0 && b >= 0 && a + b <= std::numeric_limits<int32_t>::max(), "task counts out of range");
  std::vector<int32_t> order;
  order.reserve(size_t(a + b));
  // First kind i goes before second kind j when i / a <= j / b.
  for (int64_t i = 0, j = 0; i + j < a + b;) {
    if (i < a && (j == b || i * b <= j * a)) {
      order.push_back(int32_t(i++));
    } else {
      order.push_back(int32_t(a + j++));
    }
  }
  return order;
}

}  // namespace kvserve
