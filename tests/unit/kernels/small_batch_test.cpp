// Decode-sized matmuls (1 to 3 activation rows) and the wide activation quantizers:
//  - KernelTable::quantize_act equals convert_activation_row bit for bit (the golden logits depend
//    on the exact rounding), including all-zero blocks, ties for the largest magnitude and
//    values that round exactly half-way;
//  - matmul_multi equals one matmul per matrix, bit for bit;
//  - matmuls of 1..3 rows give the same bits with 1, 2 and 3 threads (even split, one chunk per
//    thread) as without a pool, and the same as each row computed alone.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/vec_dot.h"
#include "tensor/quants.h"
#include "util/half.h"
#include "util/thread_pool.h"

namespace kvserve {
namespace {

// One row of n floats with the awkward cases planted in its blocks (block size 32 or 256):
// block 0 all zero, block 1 a tie between +a and -a for the largest magnitude (the first wins in
// q8_K), block 2 a tie in the other order, block 3 integers that land on .5 after scaling.
std::vector<float> awkward_row(int64_t n, int64_t block, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = g(rng);
  const int64_t nb = n / block;
  if (nb > 0) std::fill(x.begin(), x.begin() + block, 0.0f);
  if (nb > 1) {
    x[size_t(block + 3)] = 5.0f;
    x[size_t(block + 9)] = -5.0f;
  }
  if (nb > 2) {
    x[size_t(2 * block + 1)] = -7.0f;
    x[size_t(2 * block + 2)] = 7.0f;
  }
  if (nb > 3) {
    // amax 127 -> scale 1: every v + 0.5 is a tie that must round to even.
    for (int64_t j = 0; j < block; ++j) x[size_t(3 * block + j)] = float(j % 7) - 3.5f;
    x[size_t(3 * block)] = 127.0f;
  }
  return x;
}

TEST(QuantizeAct, WideQuantizersMatchReferenceBitForBit) {
  int checked = 0;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512, Isa::kAmx}) {
    if (!isa_supported(isa)) continue;
    const KernelTable& k = kernel_table(isa);
    // A representative weight type per activation encoding.
    for (GgmlType wt : {GgmlType::Q8_0, GgmlType::Q4_K}) {
      const GgmlType at = activation_type(wt);
      const QuantizeActFn q = k.quantize_act[int(at)];
      if (q == nullptr) continue;
      const int64_t block = ggml_block_size(at);
      for (int64_t n : {block, 4 * block, 6 * block, int64_t(1536)}) {
        if (n % block != 0) continue;
        for (uint32_t seed = 1; seed <= 20; ++seed) {
          auto x = awkward_row(n, block, seed);
          if (seed > 10) for (auto& v : x) v *= 1e-3f * float(seed);  // other exponents
          const size_t bytes = activation_row_bytes(wt, n);
          std::vector<uint8_t> want(bytes, 0xAA), got(bytes, 0x55);
          convert_activation_row(wt, x.data(), want.data(), n);
          q(x.data(), got.data(), n);
          ASSERT_EQ(0, std::memcmp(want.data(), got.data(), bytes))
              << k.name << " " << ggml_type_name(at) << " n " << n << " seed " << seed;
          ++checked;
        }
      }
    }
  }
  if (checked == 0) GTEST_SKIP() << "no table has a wide activation quantizer on this CPU";
}

std::vector<uint8_t> quantized_weights(GgmlType t, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 0.05f);
  std::vector<float> row(static_cast<size_t>(cols));
  std::vector<uint8_t> bytes(ggml_row_size(t, cols) * size_t(rows));
  for (int64_t r = 0; r < rows; ++r) {
    for (auto& v : row) v = g(rng);
    quantize_row(t, row.data(), bytes.data() + size_t(r) * ggml_row_size(t, cols), cols);
  }
  return bytes;
}

TEST(SmallBatch, ThreadCountsAndBatchMatesDoNotChangeBits) {
  const GgmlType types[] = {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::Q4_K, GgmlType::Q6_K};
  ThreadPool pool2(2), pool3(3);
  for (Isa isa : {Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512, Isa::kAmx}) {
    if (!isa_supported(isa)) continue;
    const KernelTable& k = kernel_table(isa);
    for (GgmlType t : types) {
      // 1003 rows: above the threading threshold, not a multiple of 8 or of any thread count.
      const int64_t rows = 1003, cols = 768;
      const auto bytes = quantized_weights(t, rows, cols, 3u + uint32_t(t));
      const WeightMatrix w{t, bytes.data(), rows, cols, ggml_row_size(t, cols)};
      std::mt19937 rng(5);
      std::normal_distribution<float> g(0.0f, 1.0f);
      std::vector<float> x(size_t(3 * cols));
      for (auto& v : x) v = g(rng);
      for (int64_t m = 1; m <= 3; ++m) {
        std::vector<float> solo(size_t(m * rows)), y2(solo.size()), y3(solo.size()), alone(static_cast<size_t>(rows));
        matmul_with_kernels(k, w, x.data(), m, solo.data(), nullptr);
        matmul_with_kernels(k, w, x.data(), m, y2.data(), &pool2);
        matmul_with_kernels(k, w, x.data(), m, y3.data(), &pool3);
        ASSERT_EQ(0, std::memcmp(solo.data(), y2.data(), solo.size() * sizeof(float)))
            << k.name << " " << ggml_type_name(t) << " m " << m << " 2 threads";
        ASSERT_EQ(0, std::memcmp(solo.data(), y3.data(), solo.size() * sizeof(float)))
            << k.name << " " << ggml_type_name(t) << " m " << m << " 3 threads";
        for (int64_t i = 0; i < m; ++i) {
          matmul_with_kernels(k, w, x.data() + i * cols, 1, alone.data(), &pool2);
          ASSERT_EQ(0, std::memcmp(alone.data(), solo.data() + i * rows, size_t(rows) * sizeof(float)))
              << k.name << " " << ggml_type_name(t) << " m " << m << " row " << i;
        }
      }
    }
  }
}

// matmul_multi: several matrices on one input in one pool pass equal one matmul each, bit for
// bit, whether the matrices share an activation encoding (one fused pass, chunks spanning matrix
// boundaries) or not (the per-matrix fallback).
TEST(MatmulMulti, EqualsOneMatmulPerMatrix) {
  struct Shape {
    GgmlType type;
    int64_t rows;
  };
  const std::vector<std::vector<Shape>> groups = {
      {{GgmlType::Q8_0, 576}, {GgmlType::Q8_0, 192}, {GgmlType::Q8_0, 197}},  // wq, wk, wv (odd tail)
      {{GgmlType::Q5_0, 576}, {GgmlType::Q5_0, 192}, {GgmlType::Q8_0, 192}},  // q4_k_m's: q8_0 activations
      {{GgmlType::Q4_K, 1536}, {GgmlType::Q6_K, 1531}},                      // gate/up in k-quants
      {{GgmlType::Q8_0, 300}, {GgmlType::Q4_K, 300}},                        // mixed encodings: fallback
      {{GgmlType::F16, 77}, {GgmlType::F16, 129}},                           // no GEMM kernel: single-row units
  };
  const int64_t cols = 768;
  ThreadPool pool2(2), pool3(3);
  for (size_t g = 0; g < groups.size(); ++g) {
    std::vector<std::vector<uint8_t>> bytes;
    std::vector<WeightMatrix> ws;
    for (const Shape& sh : groups[g]) {
      bytes.push_back(quantized_weights(sh.type, sh.rows, cols, uint32_t(7 * g + ws.size())));
      ws.push_back({sh.type, bytes.back().data(), sh.rows, cols, ggml_row_size(sh.type, cols)});
    }
    for (int64_t m : {1, 3, 8}) {
      std::mt19937 rng{uint32_t(m)};
      std::normal_distribution<float> gauss(0.0f, 1.0f);
      std::vector<float> x(size_t(m * cols));
      for (auto& v : x) v = gauss(rng);
      for (ThreadPool* pool : {&pool2, &pool3}) {
        std::vector<std::vector<float>> want, got;
        std::vector<float*> yp;
        for (const auto& w : ws) {
          want.emplace_back(static_cast<size_t>(m * w.rows));
          got.emplace_back(static_cast<size_t>(m * w.rows), NAN);
          matmul(w, x.data(), m, want.back().data(), nullptr);
        }
        for (auto& v : got) yp.push_back(v.data());
        matmul_multi(ws.data(), int(ws.size()), x.data(), m, yp.data(), pool);
        for (size_t j = 0; j < ws.size(); ++j)
          ASSERT_EQ(0, std::memcmp(want[j].data(), got[j].data(), want[j].size() * sizeof(float)))
              << "group " << g << " matrix " << j << " m " << m << " threads " << pool->num_threads();
      }
    }
  }
}

}  // namespace
}  // namespace kvserve
