// What one ThreadPool::parallel_for costs beyond its work: the hand-off to the workers, the
// claims and the wait for the last thread. A decode step of smollm-135m at batch 8 runs ~150
// pool jobs (4 matmul passes and an attention pass per layer), each of 10-60 us of work, so a
// few microseconds per job are a visible share of the step (docs/benchmarks.md).
#include <benchmark/benchmark.h>

#include <atomic>
#include <chrono>
#include <cstdint>

#include "bench_util.h"
#include "util/thread_pool.h"

namespace kvserve {
namespace {

// Busy work of about `ns` nanoseconds (a clock poll loop: the same on every thread).
void spin_for_ns(int64_t ns) {
  if (ns <= 0) return;
  const auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(ns);
  while (std::chrono::steady_clock::now() < until) {
  }
}

// One job of `units` indices, each `work_ns` of busy work, per iteration; the time per job minus
// units * work_ns / threads is the pool's own cost. args: {units, work_ns}
void BM_pool_job(benchmark::State& state) {
  const int64_t units = state.range(0), work_ns = state.range(1);
  ThreadPool& p = bench_pool();
  std::atomic<int64_t> done{0};
  for (auto _ : state) {
    p.parallel_for(units, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) spin_for_ns(work_ns);
      done.fetch_add(e - b, std::memory_order_relaxed);
    });
  }
  benchmark::DoNotOptimize(done.load());
  state.counters["ideal_us"] =
      double(units) * double(work_ns) / 1e3 / double(p.num_threads());  // the work alone, perfectly split
  state.SetLabel(std::to_string(p.num_threads()) + " threads");
}

BENCHMARK(BM_pool_job)->ArgsProduct({{2, 36}, {0, 500}})->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace kvserve
