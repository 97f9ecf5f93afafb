// KV row quantization: exact row sizes, round trips per type within each format's error bound,
// full groups byte-identical to the GGUF blocks (tensor/ quantizers), short last groups (head
// dims not a multiple of 32, such as stories260K's 8), and AVX2 quantization and dequantization equal to
// scalar, byte for byte (rounding ties and extreme values included).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/kv_quant.h"
#include "tensor/quants.h"

namespace kvserve {
namespace {

std::vector<float> randn(int n, uint32_t seed, float sd = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, sd);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = g(rng);
  return x;
}

TEST(KvQuant, RowBytes) {
  EXPECT_EQ(kv_row_bytes(KvElem::F32, 64), 256u);
  EXPECT_EQ(kv_row_bytes(KvElem::F16, 64), 128u);
  EXPECT_EQ(kv_row_bytes(KvElem::BF16, 8), 16u);
  EXPECT_EQ(kv_row_bytes(KvElem::Q8_0, 64), 68u);
  EXPECT_EQ(kv_row_bytes(KvElem::Q4_0, 64), 36u);
  EXPECT_EQ(kv_row_bytes(KvElem::Q8_0, 8), 10u);
  EXPECT_EQ(kv_row_bytes(KvElem::Q4_0, 8), 6u);
  EXPECT_EQ(kv_row_bytes(KvElem::Q4_0, 5), 5u);
  EXPECT_EQ(kv_row_bytes(KvElem::Q8_0, 80), 86u);
  EXPECT_EQ(kv_row_bytes(KvElem::Q4_0, 80), 46u);
}

// Per-value error bounds: half a step of each format (plus the f16 rounding of the scale).
TEST(KvQuant, RoundTripWithinHalfAStep) {
  for (int n : {1, 5, 8, 12, 31, 32, 33, 64, 80, 128, 256}) {
    const auto x = randn(n, uint32_t(n));
    for (KvElem t : {KvElem::F32, KvElem::F16, KvElem::BF16, KvElem::Q8_0, KvElem::Q4_0}) {
      std::vector<uint8_t> row(kv_row_bytes(t, n) + 1, 0xEE);  // one guard byte
      kv_quantize_row(t, x.data(), n, row.data());
      EXPECT_EQ(row.back(), 0xEE) << "wrote past the row, n " << n;
      std::vector<float> y(static_cast<size_t>(n));
      kv_dequantize_row_scalar(t, row.data(), n, y.data());
      for (int g0 = 0; g0 < n; g0 += kKvGroup) {
        const int g1 = std::min(n, g0 + kKvGroup);
        float amax = 0;
        for (int i = g0; i < g1; ++i) amax = std::max(amax, std::fabs(x[size_t(i)]));
        for (int i = g0; i < g1; ++i) {
          const float xi = x[size_t(i)], yi = y[size_t(i)];
          double bound = 0;
          switch (t) {
            case KvElem::F32: bound = 0; break;
            case KvElem::F16: bound = std::fabs(xi) * 0x1p-11 + 1e-7; break;
            case KvElem::BF16: bound = std::fabs(xi) * 0x1p-8 + 1e-30; break;
            case KvElem::Q8_0: bound = amax / 127.0 * (0.5 + 1e-3) + amax * 1e-3; break;
            // The extreme maps to -8 and the other side stops at +7 steps: values beyond
            // +7 steps are clipped, up to one step off; the rest are within half a step.
            case KvElem::Q4_0: bound = amax / 8.0 + amax * 2e-3; break;
          }
          ASSERT_LE(std::fabs(yi - xi), bound) << "n " << n << " i " << i << " type " << int(t);
        }
      }
    }
  }
}

// Zeros stay zeros, a group's extreme value comes back to within the f16 rounding of its scale
// (exactly for q4_0 when the scale is a power of two), in full and short groups alike.
TEST(KvQuant, ExactPoints) {
  std::vector<float> x(40, 0.0f);
  x[3] = -2.0f;
  x[35] = 1.5f;  // second, short group of 8
  for (KvElem t : {KvElem::Q8_0, KvElem::Q4_0}) {
    std::vector<uint8_t> row(kv_row_bytes(t, 40));
    kv_quantize_row(t, x.data(), 40, row.data());
    std::vector<float> y(40);
    kv_dequantize_row_scalar(t, row.data(), 40, y.data());
    EXPECT_NEAR(y[3], -2.0f, 2.0f * 0x1p-11);
    EXPECT_NEAR(y[35], 1.5f, 1.5f * 0x1p-11);
    if (t == KvElem::Q4_0) {
      EXPECT_EQ(y[3], -2.0f);  // d = 0.25
    }
    for (int i : {0, 1, 31, 32, 39}) EXPECT_EQ(y[size_t(i)], 0.0f) << i;
  }
}

// Full groups are the GGUF blocks: the same bytes as the weight quantizers of tensor/.
TEST(KvQuant, FullGroupsAreGgufBlocks) {
  const int n = 128;
  const auto x = randn(n, 42, 3.0f);
  std::vector<uint8_t> ours(kv_row_bytes(KvElem::Q8_0, n)), theirs(ours.size());
  kv_quantize_row(KvElem::Q8_0, x.data(), n, ours.data());
  static_assert(sizeof(BlockQ8_0) == 34);
  quantize_row_q8_0(x.data(), reinterpret_cast<BlockQ8_0*>(theirs.data()), n);
  EXPECT_EQ(ours, theirs);
  std::vector<uint8_t> ours4(kv_row_bytes(KvElem::Q4_0, n)), theirs4(ours4.size());
  kv_quantize_row(KvElem::Q4_0, x.data(), n, ours4.data());
  static_assert(sizeof(BlockQ4_0) == 18);
  quantize_row_q4_0(x.data(), reinterpret_cast<BlockQ4_0*>(theirs4.data()), n);
  EXPECT_EQ(ours4, theirs4);
}

TEST(KvQuant, VectorDequantizeEqualsScalar) {
  for (int n : {8, 16, 32, 64, 96, 128, 256, 12, 40}) {
    const auto x = randn(n, uint32_t(100 + n), 2.0f);
    for (KvElem t : {KvElem::F32, KvElem::F16, KvElem::BF16, KvElem::Q8_0, KvElem::Q4_0}) {
      std::vector<uint8_t> row(kv_row_bytes(t, n));
      kv_quantize_row(t, x.data(), n, row.data());
      std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
      kv_dequantize_row(t, row.data(), n, a.data());
      kv_dequantize_row_scalar(t, row.data(), n, b.data());
      ASSERT_EQ(a, b) << "n " << n << " type " << int(t);
    }
  }
}

// The AVX2 quantizers write the scalar reference's bytes: random rows of several scales, rows
// built so that x / d lands exactly on .5 (q8_0's ties round away from zero; q4_0's x / d + 8.5
// lands on integers), all-zero rows, a row whose largest magnitude appears twice with both signs
// (q4_0 keeps the first), and widths that leave a short last group (scalar tail).
TEST(KvQuant, VectorQuantizeEqualsScalar) {
  std::vector<std::vector<float>> rows;
  for (int n : {8, 16, 32, 64, 96, 128, 256, 12, 40})
    for (float sd : {1e-3f, 1.0f, 300.0f}) rows.push_back(randn(n, uint32_t(7 * n + int(sd)), sd));
  std::vector<float> ties(64);
  for (int i = 0; i < 64; ++i) ties[size_t(i)] = float(i % 32 - 16) + 0.5f;  // q8_0: d = 1 (127 below)
  ties[5] = 127.0f;
  ties[40] = -127.0f;
  rows.push_back(ties);
  std::vector<float> ties4(32);
  for (int i = 0; i < 32; ++i) ties4[size_t(i)] = float(i % 16 - 8) + 0.5f;  // q4_0: d = 1 (-8 below)
  ties4[3] = -8.0f;
  rows.push_back(ties4);
  rows.push_back(std::vector<float>(64, 0.0f));
  std::vector<float> twin = randn(32, 5);
  twin[2] = 9.0f;
  twin[20] = -9.0f;
  rows.push_back(twin);
  for (const auto& x : rows) {
    const int n = int(x.size());
    for (KvElem t : {KvElem::F32, KvElem::F16, KvElem::BF16, KvElem::Q8_0, KvElem::Q4_0}) {
      std::vector<uint8_t> vec(kv_row_bytes(t, n)), ref(vec.size());
      kv_quantize_row(t, x.data(), n, vec.data());
      kv_quantize_row_scalar(t, x.data(), n, ref.data());
      ASSERT_EQ(vec, ref) << "n " << n << " type " << int(t) << " x[0] " << x[0];
    }
  }
}

}  // namespace
}  // namespace kvserve
