// matmul per weight encoding at the two shapes that matter: decode (m = 1 activation row, bound
// by reading the weights) and prefill (m = 64 rows, bound by arithmetic). The matrix is
// SmolLM-135M's FFN up-projection (1536 x 576) scaled up 2x in each direction so that it does not
// sit in L2: 3072 x 1152 (13.5 MiB as f32, 2 MiB as q4_K).
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "kernels/matmul.h"
#include "tensor/quants.h"
#include "util/thread_pool.h"

namespace kvserve {
namespace {

constexpr int64_t kRows = 3072;
constexpr int64_t kCols = 1152;  // k-quant types use 1280, the nearest multiple of 256
static_assert(kCols % 32 == 0);

ThreadPool& pool() {
  static ThreadPool p(0);
  return p;
}

struct Weights {
  std::vector<uint8_t> bytes;
  WeightMatrix w;
};

Weights make_weights(GgmlType t, int64_t cols) {
  std::mt19937 rng(42);
  std::normal_distribution<float> dist(0.0f, 0.02f);
  std::vector<float> row(static_cast<size_t>(cols));
  Weights out;
  const size_t rb = ggml_row_size(t, cols);
  out.bytes.resize(rb * size_t(kRows));
  for (int64_t r = 0; r < kRows; ++r) {
    for (auto& v : row) v = dist(rng);
    quantize_row(t, row.data(), out.bytes.data() + size_t(r) * rb, cols);
  }
  out.w = {t, out.bytes.data(), kRows, cols, rb};
  return out;
}

// args: {ggml type id, m}
void BM_matmul(benchmark::State& state) {
  const auto t = GgmlType(state.range(0));
  const int64_t m = state.range(1);
  // k-quants need whole 256-element super-blocks.
  const int64_t cols = ggml_block_size(t) == 256 ? 1280 : kCols;
  Weights w = make_weights(t, cols);
  std::vector<float> x(size_t(m * cols)), y(size_t(m * kRows));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (auto& v : x) v = dist(rng);
  for (auto _ : state) {
    matmul(w.w, x.data(), m, y.data(), &pool());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetLabel(ggml_type_name(t));
  // Bytes of weights read per call: the decode figure of merit (compare with the machine's GB/s).
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(w.bytes.size()));
  state.counters["flops"] = benchmark::Counter(double(2 * m * kRows * cols) * double(state.iterations()),
                                               benchmark::Counter::kIsRate);
}

void matmul_args(benchmark::internal::Benchmark* b) {
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0,
                     GgmlType::Q5_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K})
    for (int64_t m : {1, 64}) b->Args({int64_t(t), m});
}

BENCHMARK(BM_matmul)->Apply(matmul_args)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace kvserve
