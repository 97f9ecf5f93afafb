// Weight quantizers for the legacy 32-element formats, and the quantize_row dispatcher.
//
// Q4_0/Q5_0 use the format's natural choice: the element of largest magnitude maps exactly onto the
// most negative code (-8 or -16), which keeps its sign and gives one more level on that side.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tensor/quants.h"
#include "util/half.h"

namespace kvserve {

namespace {

// The signed element of largest magnitude in x[0..n).
float signed_absmax(const float* x, int n) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

// Codes 0..levels-1 for a block where value = d * (code - levels / 2).
void quantize_symmetric_block32(const float* x, int levels, uint16_t* d_out, uint8_t* codes) {
  const float max = signed_absmax(x, kQK);
  const float d = max / -float(levels / 2);
  *d_out = f32_to_f16(d);
  // Quantize against the stored (rounded) scale so the codes fit what dequantization sees.
  const float ds = f16_to_f32(*d_out);
  const float id = ds != 0.0f ? 1.0f / ds : 0.0f;
  for (int j = 0; j < kQK; ++j) {
    int q = int(std::floor(x[j] * id + float(levels / 2) + 0.5f));
    codes[j] = uint8_t(q < 0 ? 0 : (q > levels - 1 ? levels - 1 : q));
  }
}

}  // namespace

void quantize_row_q4_0(const float* x, BlockQ4_0* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    uint8_t codes[kQK];
    quantize_symmetric_block32(x, 16, &y[b].d, codes);
    for (int j = 0; j < kQK / 2; ++j) y[b].qs[j] = uint8_t(codes[j] | (codes[j + kQK / 2] << 4));
  }
}

void quantize_row_q5_0(const float* x, BlockQ5_0* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    uint8_t codes[kQK];
    quantize_symmetric_block32(x, 32, &y[b].d, codes);
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      y[b].qs[j] = uint8_t((codes[j] & 15) | ((codes[j + kQK / 2] & 15) << 4));
      qh |= uint32_t(codes[j] >> 4) << j;
      qh |= uint32_t(codes[j + kQK / 2] >> 4) << (j + kQK / 2);
    }
    std::memcpy(y[b].qh, &qh, 4);
  }
}

bool can_quantize_to(GgmlType t) {
  switch (t) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16: case GgmlType::Q8_0:
    case GgmlType::Q4_0: case GgmlType::Q5_0: case GgmlType::Q4_K: case GgmlType::Q5_K:
    case GgmlType::Q6_K:
      return true;
    default:
      return false;
  }
}

void quantize_row(GgmlType t, const float* src, void* dst, int64_t n) {
  switch (t) {
    case GgmlType::F32: std::memcpy(dst, src, size_t(n) * sizeof(float)); return;
    case GgmlType::F16: {
      uint16_t* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = f32_to_f16(src[i]);
      return;
    }
    case GgmlType::BF16: {
      uint16_t* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = f32_to_bf16(src[i]);
      return;
    }
    case GgmlType::Q8_0: return quantize_row_q8_0(src, static_cast<BlockQ8_0*>(dst), n);
    case GgmlType::Q4_0: return quantize_row_q4_0(src, static_cast<BlockQ4_0*>(dst), n);
    case GgmlType::Q5_0: return quantize_row_q5_0(src, static_cast<BlockQ5_0*>(dst), n);
    case GgmlType::Q4_K: return quantize_row_q4_k(src, static_cast<BlockQ4_K*>(dst), n);
    case GgmlType::Q5_K: return quantize_row_q5_k(src, static_cast<BlockQ5_K*>(dst), n);
    case GgmlType::Q6_K: return quantize_row_q6_k(src, static_cast<BlockQ6_K*>(dst), n);
    default:
      std::fprintf(stderr, "kvserve: quantize_row: cannot encode %s\n", ggml_type_name(t));
      std::abort();
  }
}

}  // namespace kvserve
