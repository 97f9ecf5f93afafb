// The register-tiled GEMM kernels (KernelTable::gemm) against their own table's vec_dot, bit for
// bit, over every tile shape and remainder (weight rows and activation rows not multiples of the
// tile, odd block counts that leave a lone last block), and against the scalar reference within
// f32 reordering noise. Each instruction set runs only where the CPU has it (GTEST_SKIP otherwise).
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/vec_dot.h"
#include "tensor/quants.h"
#include "util/half.h"

namespace kvserve {
namespace {

// Random bytes for every code and scale bit, then sane f16 scales (random f16 bits can be inf/nan).
std::vector<uint8_t> random_rows(GgmlType t, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> bytes(ggml_row_size(t, cols) * size_t(rows));
  for (auto& b : bytes) b = uint8_t(rng());
  std::uniform_real_distribution<float> u(0.001f, 0.02f);
  const size_t bs = ggml_type_size(t);
  // Byte offsets of the f16 scale fields: d (and dmin) first in the legacy formats and Q4_K, d
  // last in Q6_K.
  std::vector<size_t> fields = {0};
  if (t == GgmlType::Q4_K) fields = {0, 2};
  if (t == GgmlType::Q6_K) fields = {offsetof(BlockQ6_K, d)};
  for (size_t off = 0; off < bytes.size(); off += bs)
    for (size_t f : fields) {
      const uint16_t d = f32_to_f16((t != GgmlType::Q4_K && (rng() & 1)) ? -u(rng) : u(rng));
      std::memcpy(bytes.data() + off + f, &d, 2);
    }
  return bytes;
}

std::vector<float> random_activations(int64_t m, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(size_t(m * cols));
  for (auto& v : x) v = g(rng);
  return x;
}

const GgmlType kGemmTypes[] = {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::Q4_K, GgmlType::Q6_K};

class GemmTest : public ::testing::TestWithParam<Isa> {};

TEST_P(GemmTest, TilesAreBitIdenticalToVecDot) {
  const Isa isa = GetParam();
  if (!isa_supported(isa)) GTEST_SKIP() << "CPU lacks this instruction set";
  const KernelTable& k = kernel_table(isa);
  int checked = 0;
  for (GgmlType t : kGemmTypes) {
    if (k.gemm[int(t)] == nullptr) continue;
    for (int64_t cols : {32, 96, 576, 800, 256, 1536, 6176}) {  // legacy: 1, 3, 18, 25, 193 blocks
      if (cols % ggml_block_size(t) != 0) continue;
      // 13 weight rows: 8 + 4 + 1 (the decode tiles) and every shorter remainder; 7 activation
      // rows: a 4-row group plus 1..3 (the small-batch path).
      const int64_t rows = 13, m = 7;
      const auto w = random_rows(t, rows, cols, uint32_t(cols) + uint32_t(t));
      const auto x = random_activations(m, cols, uint32_t(cols));
      const size_t xs = activation_row_bytes(t, cols), ws = ggml_row_size(t, cols);
      std::vector<uint8_t> xq(xs * size_t(m));
      for (int64_t i = 0; i < m; ++i) convert_activation_row(t, x.data() + i * cols, xq.data() + size_t(i) * xs, cols);
      // Every sub-block shape from 1 x 1 to rows x m, so every tile and remainder path runs.
      for (int64_t nw = 1; nw <= rows; ++nw) {
        for (int64_t nx = 1; nx <= m; ++nx) {
          std::vector<float> y(size_t(nx * rows), NAN);
          k.gemm[int(t)](cols, w.data(), ws, nw, xq.data(), xs, nx, y.data(), size_t(rows));
          for (int64_t i = 0; i < nx; ++i)
            for (int64_t r = 0; r < nw; ++r) {
              const float want = k.vec_dot[int(t)](cols, w.data() + size_t(r) * ws, xq.data() + size_t(i) * xs);
              const float got = y[size_t(i * rows + r)];
              ASSERT_EQ(0, std::memcmp(&want, &got, sizeof(float)))
                  << k.name << " " << ggml_type_name(t) << " cols " << cols << " tile " << nw << "x" << nx
                  << " out " << r << "," << i << ": " << got << " vs " << want;
              ++checked;
            }
        }
      }
    }
  }
  if (checked == 0) GTEST_SKIP() << k.name << " has no GEMM kernels";
}

// Odd block counts through matmul: the wide kernels against the scalar reference.
TEST_P(GemmTest, OddBlockCountsMatchScalar) {
  const Isa isa = GetParam();
  if (!isa_supported(isa)) GTEST_SKIP() << "CPU lacks this instruction set";
  for (GgmlType t : kGemmTypes) {
    for (int64_t cols : {32, 96, 800, 256, 768}) {
      if (cols % ggml_block_size(t) != 0) continue;
      const int64_t rows = 13, m = 6;
      auto w = random_rows(t, rows, cols, 5u + uint32_t(t));
      const WeightMatrix wm{t, w.data(), rows, cols, ggml_row_size(t, cols)};
      const auto x = random_activations(m, cols, 9u);
      std::vector<float> ref(size_t(m * rows)), got(ref.size());
      matmul_with_kernels(kernel_table(Isa::kScalar), wm, x.data(), m, ref.data(), nullptr);
      matmul_with_kernels(kernel_table(isa), wm, x.data(), m, got.data(), nullptr);
      std::vector<float> wrow(static_cast<size_t>(cols));
      for (int64_t r = 0; r < rows; ++r) {
        dequantize_row(t, w.data() + size_t(r) * wm.row_bytes, wrow.data(), cols);
        for (int64_t i = 0; i < m; ++i) {
          double mag = 0;
          for (int64_t c = 0; c < cols; ++c) mag += std::fabs(double(wrow[size_t(c)]) * x[size_t(i * cols + c)]);
          const size_t idx = size_t(i * rows + r);
          ASSERT_NEAR(got[idx], ref[idx], 1e-5 * mag) << ggml_type_name(t) << " cols " << cols;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isas, GemmTest, ::testing::Values(Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAmx),
                         [](const ::testing::TestParamInfo<Isa>& info) {
                           switch (info.param) {
                                   case Isa::kScalar: return std::string("scalar");
                                   case Isa::kAvx2: return std::string("avx2");
                                   case Isa::kAvxVnni: return std::string("avxvnni");
                                   case Isa::kAvx512: return std::string("avx512");
                                   case Isa::kAmx: return std::string("amx");
                                 }
                                 return std::string("unknown");
                         });

}  // namespace
}  // namespace kvserve
