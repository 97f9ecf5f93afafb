// Activation quantizers (exact reference rounding) and weight quantizer round trips.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "tensor/quants.h"
#include "util/half.h"

namespace kvserve {
namespace {

TEST(QuantizeActivations, Q8_0RoundsHalfToEven) {
  float x[32] = {};
  x[0] = 127.0f;  // amax 127 -> scale 1, so the codes are the values rounded
  x[1] = 2.5f;
  x[2] = -3.5f;
  x[3] = 0.5f;
  x[4] = 1.5f;
  x[5] = -0.49f;
  BlockQ8_0 b;
  quantize_row_q8_0(x, &b, 32);
  EXPECT_EQ(f16_to_f32(b.d), 1.0f);
  EXPECT_EQ(b.qs[0], 127);
  EXPECT_EQ(b.qs[1], 2);
  EXPECT_EQ(b.qs[2], -4);
  EXPECT_EQ(b.qs[3], 0);
  EXPECT_EQ(b.qs[4], 2);
  EXPECT_EQ(b.qs[5], 0);
}

TEST(QuantizeActivations, Q8_0ScalesByAmax) {
  float x[64];
  for (int j = 0; j < 64; ++j) x[j] = (j % 2 ? -1.0f : 1.0f) * float(j) * 0.01f;
  BlockQ8_0 b[2];
  quantize_row_q8_0(x, b, 64);
  for (int k = 0; k < 2; ++k) {
    const float amax = 0.01f * float(32 * k + 31);
    EXPECT_EQ(b[k].d, f32_to_f16(amax / 127.0f));
    for (int j = 0; j < 32; ++j) EXPECT_EQ(b[k].qs[j], int(std::nearbyint(x[32 * k + j] * (127.0f / amax))));
  }
  float zeros[32] = {};
  quantize_row_q8_0(zeros, b, 32);
  EXPECT_EQ(b[0].d, 0);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(b[0].qs[j], 0);
}

TEST(QuantizeActivations, Q8_1CarriesScaledSum) {
  float x[32];
  for (int j = 0; j < 32; ++j) x[j] = float(j) - 10.0f;
  BlockQ8_1 b;
  quantize_row_q8_1(x, &b, 32);
  int sum = 0;
  for (int j = 0; j < 32; ++j) sum += b.qs[j];
  const float d = 21.0f / 127.0f;
  EXPECT_EQ(b.d, f32_to_f16(d));
  EXPECT_EQ(b.s, f32_to_f16(d * float(sum)));
  EXPECT_EQ(b.qs[31], 127);
}

TEST(QuantizeActivations, Q8_KUsesSignedMax) {
  std::vector<float> x(256, 0.0f);
  x[7] = -254.0f;  // largest magnitude, negative: iscale = -127 / -254 = 0.5
  x[0] = 5.0f;     // 2.5 -> 2
  x[1] = 7.0f;     // 3.5 -> 4
  x[2] = 253.0f;   // 126.5 -> 126
  x[20] = -3.0f;   // -1.5 -> -2
  BlockQ8_K b;
  quantize_row_q8_K(x.data(), &b, 256);
  EXPECT_EQ(b.d, 2.0f);
  EXPECT_EQ(b.qs[7], -127);
  EXPECT_EQ(b.qs[0], 2);
  EXPECT_EQ(b.qs[1], 4);
  EXPECT_EQ(b.qs[2], 126);
  EXPECT_EQ(b.qs[20], -2);
  EXPECT_EQ(b.bsums[0], -127 + 2 + 4 + 126);
  EXPECT_EQ(b.bsums[1], -2);
  for (int g = 2; g < 16; ++g) EXPECT_EQ(b.bsums[g], 0);

  x[7] = 254.0f;  // positive max: iscale = -0.5, the codes flip sign and d is negative
  quantize_row_q8_K(x.data(), &b, 256);
  EXPECT_EQ(b.d, -2.0f);
  EXPECT_EQ(b.qs[7], -127);
  EXPECT_EQ(b.qs[2], -126);
  EXPECT_EQ(b.qs[0], -2);

  std::vector<float> zeros(256, 0.0f);
  quantize_row_q8_K(zeros.data(), &b, 256);
  EXPECT_EQ(b.d, 0.0f);
  for (int g = 0; g < 16; ++g) EXPECT_EQ(b.bsums[g], 0);
}

// Relative RMS error of quantize -> dequantize on gaussian data with a few outliers.
double round_trip_error(GgmlType t, const std::vector<float>& x) {
  std::vector<uint8_t> q(ggml_row_size(t, int64_t(x.size())));
  quantize_row(t, x.data(), q.data(), int64_t(x.size()));
  std::vector<float> y(x.size());
  dequantize_row(t, q.data(), y.data(), int64_t(x.size()));
  double err = 0, ref = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    err += (double(y[i]) - x[i]) * (double(y[i]) - x[i]);
    ref += double(x[i]) * x[i];
  }
  return std::sqrt(err / ref);
}

std::vector<float> test_data(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 0.02f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = g(rng);
  for (int64_t i = 0; i < n; i += 97) x[size_t(i)] *= 6.0f;  // occasional outliers, as in real weights
  return x;
}

struct RoundTripCase {
  GgmlType type;
  double max_rel_rmse;
};

TEST(QuantizeWeights, RoundTripErrorBounds) {
  // Bounds sit a little above what these quantizers reach; the format limits for gaussian data
  // are roughly 2^-bits * 2.
  const RoundTripCase cases[] = {
      {GgmlType::F32, 0.0},       {GgmlType::F16, 1e-3},      {GgmlType::BF16, 5e-3},
      {GgmlType::Q8_0, 0.01},     {GgmlType::Q6_K, 0.035},    {GgmlType::Q5_K, 0.06},
      {GgmlType::Q5_0, 0.08},     {GgmlType::Q4_K, 0.11},     {GgmlType::Q4_0, 0.16},
  };
  const auto x = test_data(8192, 1);
  for (const auto& c : cases) {
    ASSERT_TRUE(can_quantize_to(c.type));
    const double e = round_trip_error(c.type, x);
    EXPECT_LE(e, c.max_rel_rmse) << ggml_type_name(c.type);
    std::printf("  %-5s rel rmse %.5f\n", ggml_type_name(c.type), e);
  }
}

TEST(QuantizeWeights, MoreBitsNeverWorse) {
  const auto x = test_data(4096, 2);
  EXPECT_LT(round_trip_error(GgmlType::Q5_K, x), round_trip_error(GgmlType::Q4_K, x));
  EXPECT_LT(round_trip_error(GgmlType::Q6_K, x), round_trip_error(GgmlType::Q5_K, x));
  EXPECT_LT(round_trip_error(GgmlType::Q5_0, x), round_trip_error(GgmlType::Q4_0, x));
  EXPECT_LT(round_trip_error(GgmlType::Q8_0, x), round_trip_error(GgmlType::Q6_K, x));
}

TEST(QuantizeWeights, HandlesZerosConstantsAndOneSignedBlocks) {
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::Q4_K, GgmlType::Q5_K,
                     GgmlType::Q6_K}) {
    for (float fill : {0.0f, 0.5f, -0.25f}) {
      std::vector<float> x(512, fill);
      std::vector<uint8_t> q(ggml_row_size(t, 512));
      quantize_row(t, x.data(), q.data(), 512);
      std::vector<float> y(512);
      dequantize_row(t, q.data(), y.data(), 512);
      for (int i = 0; i < 512; ++i) ASSERT_NEAR(y[i], fill, std::fabs(fill) * 0.02 + 1e-6) << ggml_type_name(t) << " " << i;
    }
    std::vector<float> pos(256);
    for (int i = 0; i < 256; ++i) pos[i] = 1.0f + float(i % 13) * 0.1f;
    std::vector<uint8_t> q(ggml_row_size(t, 256));
    quantize_row(t, pos.data(), q.data(), 256);
    std::vector<float> y(256);
    dequantize_row(t, q.data(), y.data(), 256);
    for (int i = 0; i < 256; ++i) ASSERT_NEAR(y[i], pos[i], 0.15) << ggml_type_name(t) << " " << i;
  }
}

}  // namespace
}  // namespace kvserve
