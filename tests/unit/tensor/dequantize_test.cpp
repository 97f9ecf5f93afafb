// Decoding of hand-built blocks: each expectation is worked out from the documented layout, not
// from the decoder, so a mistake in bit positions shows up here.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "tensor/quants.h"
#include "util/half.h"

namespace kvserve {
namespace {

TEST(Dequantize, BlockSizesMatchTypeTable) {
  EXPECT_EQ(sizeof(BlockQ4_0), ggml_type_size(GgmlType::Q4_0));
  EXPECT_EQ(sizeof(BlockQ4_1), ggml_type_size(GgmlType::Q4_1));
  EXPECT_EQ(sizeof(BlockQ5_0), ggml_type_size(GgmlType::Q5_0));
  EXPECT_EQ(sizeof(BlockQ5_1), ggml_type_size(GgmlType::Q5_1));
  EXPECT_EQ(sizeof(BlockQ8_0), ggml_type_size(GgmlType::Q8_0));
  EXPECT_EQ(sizeof(BlockQ8_1), ggml_type_size(GgmlType::Q8_1));
  EXPECT_EQ(sizeof(BlockQ2_K), ggml_type_size(GgmlType::Q2_K));
  EXPECT_EQ(sizeof(BlockQ3_K), ggml_type_size(GgmlType::Q3_K));
  EXPECT_EQ(sizeof(BlockQ4_K), ggml_type_size(GgmlType::Q4_K));
  EXPECT_EQ(sizeof(BlockQ5_K), ggml_type_size(GgmlType::Q5_K));
  EXPECT_EQ(sizeof(BlockQ6_K), ggml_type_size(GgmlType::Q6_K));
  EXPECT_EQ(sizeof(BlockQ8_K), ggml_type_size(GgmlType::Q8_K));
}

TEST(Dequantize, SupportedTypes) {
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_1,
                     GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q2_K, GgmlType::Q3_K,
                     GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K})
    EXPECT_TRUE(is_supported_weight_type(t)) << ggml_type_name(t);
  EXPECT_FALSE(is_supported_weight_type(GgmlType::IQ2_XXS));
  EXPECT_FALSE(is_supported_weight_type(GgmlType::Q8_K));
  EXPECT_FALSE(is_supported_weight_type(GgmlType::I32));
}

std::vector<float> decode(GgmlType t, const void* block, int64_t n) {
  std::vector<float> y(size_t(n), -999.0f);
  dequantize_row(t, block, y.data(), n);
  return y;
}

TEST(Dequantize, F16AndBf16) {
  const uint16_t h[3] = {0x3C00, 0xC000, 0x3800};  // 1, -2, 0.5
  auto y = decode(GgmlType::F16, h, 3);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], -2.0f);
  EXPECT_EQ(y[2], 0.5f);
  const uint16_t b[2] = {0x3F80, 0xC040};  // 1, -3
  y = decode(GgmlType::BF16, b, 2);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], -3.0f);
}

TEST(Dequantize, Q4_0) {
  BlockQ4_0 b{};
  b.d = 0x3800;  // 0.5
  for (int j = 0; j < 16; ++j) b.qs[j] = uint8_t(j | ((15 - j) << 4));
  auto y = decode(GgmlType::Q4_0, &b, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], (j - 8) * 0.5f) << j;
    EXPECT_EQ(y[j + 16], (7 - j) * 0.5f) << j;
  }
}

TEST(Dequantize, Q4_1) {
  BlockQ4_1 b{};
  b.d = 0x3400;  // 0.25
  b.m = 0xBC00;  // -1
  for (int j = 0; j < 16; ++j) b.qs[j] = uint8_t(j | ((15 - j) << 4));
  auto y = decode(GgmlType::Q4_1, &b, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], j * 0.25f - 1.0f);
    EXPECT_EQ(y[j + 16], (15 - j) * 0.25f - 1.0f);
  }
}

TEST(Dequantize, Q5_0) {
  BlockQ5_0 b{};
  b.d = 0x3C00;
  const uint32_t qh = 0x80000001u;  // fifth bit of elements 0 and 31
  std::memcpy(b.qh, &qh, 4);
  b.qs[15] = 0x30;  // element 31 low bits = 3
  auto y = decode(GgmlType::Q5_0, &b, 32);
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[1], -16.0f);
  EXPECT_EQ(y[16], -16.0f);
  EXPECT_EQ(y[31], 3.0f);
}

TEST(Dequantize, Q5_1) {
  BlockQ5_1 b{};
  b.d = 0x3C00;
  b.m = 0x3800;  // 0.5
  const uint32_t qh = (1u << 3) | (1u << 19);
  std::memcpy(b.qh, &qh, 4);
  b.qs[3] = 0x21;
  auto y = decode(GgmlType::Q5_1, &b, 32);
  EXPECT_EQ(y[3], 17.5f);
  EXPECT_EQ(y[19], 18.5f);
  EXPECT_EQ(y[0], 0.5f);
}

TEST(Dequantize, Q8_0) {
  BlockQ8_0 b{};
  b.d = 0x4000;  // 2
  for (int j = 0; j < 32; ++j) b.qs[j] = int8_t(j - 16);
  auto y = decode(GgmlType::Q8_0, &b, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], 2.0f * (j - 16));
}

TEST(Dequantize, Q2_K) {
  BlockQ2_K b{};
  b.d = 0x3C00;     // 1
  b.dmin = 0x3800;  // 0.5
  b.scales[5] = 0x23;  // sub-block 5: scale 3, min 2
  b.scales[13] = 0x01; // sub-block 13: scale 1, min 0
  b.qs[20] = 0x30;      // half 0, shift 4 (s = 2), l = 20 -> element 84 = 3
  b.qs[32 + 17] = 0x20; // half 1, s = 2, l = 17 -> element 209 = 2
  auto y = decode(GgmlType::Q2_K, &b, 256);
  for (int e = 0; e < 256; ++e) {
    float want = 0.0f;
    if (e >= 80 && e < 96) want = -1.0f;
    if (e == 84) want = 8.0f;
    if (e == 209) want = 2.0f;
    EXPECT_EQ(y[e], want) << e;
  }
}

TEST(Dequantize, Q3_K) {
  BlockQ3_K b{};
  b.d = 0x3800;  // 0.5
  // Every scale: low nibble 0, high bits 2 -> stored 32 -> 0; scale 10 gets low nibble 5 -> 5.
  const uint8_t scales[12] = {0, 0, 0x50, 0, 0, 0, 0, 0, 0xAA, 0xAA, 0xAA, 0xAA};
  std::memcpy(b.scales, scales, 12);
  b.qs[33] = 0x0C;       // half 1, s = 1, l = 1 -> element 161 low bits 3
  b.hmask[1] = 1u << 5;  // its high bit (bit 4h + s)
  auto y = decode(GgmlType::Q3_K, &b, 256);
  for (int e = 0; e < 256; ++e) {
    float want = 0.0f;
    if (e >= 160 && e < 176) want = -10.0f;  // 0.5 * 5 * (0 - 4)
    if (e == 161) want = 7.5f;               // 0.5 * 5 * 3
    EXPECT_EQ(y[e], want) << e;
  }
}

TEST(Dequantize, Q4_KAndQ5_K) {
  BlockQ4_K b{};
  b.d = 0x3C00;
  b.dmin = 0x3C00;
  b.scales[1] = 2;     // sub-block 1 scale
  b.scales[5] = 1;     // sub-block 1 min
  b.scales[10] = 0x23; // sub-block 6: scale low 3, min low 2
  b.scales[2] = 0x40;  // sub-block 6 scale high bits 1 -> 19
  b.qs[3] = 0x50;      // element 35 (chunk 0, high nibble) = 5
  b.qs[96 + 5] = 0x07; // element 197 (chunk 3, low nibble) = 7
  auto y = decode(GgmlType::Q4_K, &b, 256);
  for (int e = 0; e < 256; ++e) {
    float want = 0.0f;
    if (e >= 32 && e < 64) want = -1.0f;
    if (e == 35) want = 9.0f;
    if (e >= 192 && e < 224) want = -2.0f;
    if (e == 197) want = 131.0f;
    EXPECT_EQ(y[e], want) << e;
  }

  BlockQ5_K c{};
  c.d = b.d;
  c.dmin = b.dmin;
  std::memcpy(c.scales, b.scales, 12);
  std::memcpy(c.qs, b.qs, 128);
  c.qh[3] = 0x02;  // element 35: chunk 0 high half -> bit 1
  c.qh[5] = 0x40;  // element 197: chunk 3 low half -> bit 6
  y = decode(GgmlType::Q5_K, &c, 256);
  EXPECT_EQ(y[35], 41.0f);
  EXPECT_EQ(y[197], 435.0f);
  EXPECT_EQ(y[36], -1.0f);
  EXPECT_EQ(y[0], 0.0f);
}

TEST(Dequantize, Q6_K) {
  BlockQ6_K b{};
  b.d = 0x3400;  // 0.25
  for (int j = 0; j < 16; ++j) b.scales[j] = int8_t(j - 8);
  b.ql[84] = 0xA0;  // element 212 = 128 + 64 + 20: high nibble of ql[64 + 20]
  b.qh[52] = 0x30;  // and bits 4..5 of qh[32 + 20]
  b.ql[33] = 0x01;  // element 33 = 32 + 1: low nibble of ql[32 + 1]
  b.qh[1] = 0x04;   // and bits 2..3 of qh[1]
  auto y = decode(GgmlType::Q6_K, &b, 256);
  EXPECT_EQ(y[212], 0.25f * 5 * 26);
  EXPECT_EQ(y[33], 0.25f * -6 * -15);
  EXPECT_EQ(y[0], 0.25f * -8 * -32);
  EXPECT_EQ(y[100], 0.25f * -2 * -32);
  EXPECT_EQ(y[255], 0.25f * 7 * -32);
}

}  // namespace
}  // namespace kvserve
