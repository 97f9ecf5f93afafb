// The packed GEMM kernel alone: one thread, weights and activations already in L1/L2, no
// activation conversion and no pool. What a batch-decode matmul could reach per core if nothing
// but the kernel's own arithmetic counted (compare BM_matmul/8/8/1 and the engine's passes).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "bench_util.h"
#include "kernels/vec_dot.h"
#include "tensor/quants.h"

namespace kvserve {
namespace {

// args: {ggml type id, groups, activation rows}; cols from KVS_BENCH_COLS (default 576, smollm's
// hidden size), rounded up to whole blocks of the type (768 for the k-quants).
void BM_packed_kernel(benchmark::State& state) {
  const auto t = GgmlType(state.range(0));
  const int64_t ng = state.range(1), m = state.range(2);
  const int64_t cols = whole_blocks(t, env_int("KVS_BENCH_COLS", 576));
  const KernelTable& k = active_kernels();
  const PackedKernels& pk = k.packed[int(t)];
  if (pk.gemm == nullptr || pk.group_bytes(cols) == 0) {
    state.SkipWithError("no packed layout for this type and width on this CPU");
    return;
  }
  const int64_t rows = ng * kPackedRows;
  const size_t rb = ggml_row_size(t, cols);
  std::vector<uint8_t> file(rb * size_t(rows));
  std::vector<float> row(static_cast<size_t>(cols)), x(static_cast<size_t>(m * cols)),
      y(static_cast<size_t>(m * rows));
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 0.02f);
  for (int64_t r = 0; r < rows; ++r) {
    for (auto& v : row) v = dist(rng);
    quantize_row(t, row.data(), file.data() + size_t(r) * rb, cols);
  }
  for (auto& v : x) v = dist(rng);
  const size_t gb = pk.group_bytes(cols);
  std::vector<uint8_t> wbuf(gb * size_t(ng) + 64);
  uint8_t* wp = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(wbuf.data()) + 63) & ~uintptr_t(63));
  pk.pack(file.data(), rb, rows, cols, wp);
  const size_t xs = activation_row_bytes(t, cols), ps = pk.act_bytes(cols);
  std::vector<uint8_t> xq(xs * size_t(m)), xp(ps * size_t(m));
  for (int64_t i = 0; i < m; ++i) convert_activation_row(t, &x[size_t(i * cols)], &xq[size_t(i) * xs], cols);
  pk.pack_acts(xq.data(), xs, m, cols, xp.data(), ps);
  for (auto _ : state) {
    pk.gemm(cols, wp, gb, ng, xp.data(), ps, m, y.data(), size_t(rows));
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["macs"] =
      benchmark::Counter(double(m * rows * cols) * double(state.iterations()), benchmark::Counter::kIsRate);
  state.SetLabel(std::string(ggml_type_name(t)) + " " + std::to_string(cols) + " cols");
}
BENCHMARK(BM_packed_kernel)
    ->ArgsProduct({{int64_t(GgmlType::Q8_0), int64_t(GgmlType::Q4_0), int64_t(GgmlType::Q4_K)},
                   {1, 2, 4, 36},
                   {1, 4, 8}});

}  // namespace
}  // namespace kvserve
