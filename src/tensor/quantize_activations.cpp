// Activation quantizers used inside the matmul: f32 rows -> q8_0 / q8_1 / q8_K.
//
// These must round exactly like the reference engine's CPU backend, because the golden logits were
// produced with its integer dot products:
//  - q8_0/q8_1 follow its AVX2 path (the one an x86 reference run takes): multiply by 127/amax and
//    round half to even (not x / d with round-half-away as in its portable C fallback).
//  - q8_K follows its only x86 implementation: scale by -127/max where max is the signed element of
//    largest magnitude, round half to even, clamp at 127.
#include <cmath>
#include <cstring>

#include "tensor/quants.h"
#include "util/half.h"

namespace kvserve {

namespace {

// Round half to even under the default FP environment (the reference uses vroundps / the
// 1.5*2^23 trick, both of which round half to even).
inline int round_even(float v) { return int(std::nearbyint(v)); }

// amax of 32 floats and the q values; returns the unrounded scale d = amax / 127.
inline float quantize_block32(const float* x, int8_t* q) {
  float amax = 0.0f;
  // A plain comparison (not std::fmax, which GCC leaves as a libm call): same result for finite
  // values, and the loop vectorizes.
  for (int j = 0; j < kQK; ++j) {
    const float a = std::fabs(x[j]);
    amax = a > amax ? a : amax;
  }
  const float d = amax / 127.0f;
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  for (int j = 0; j < kQK; ++j) q[j] = int8_t(round_even(x[j] * id));
  return d;
}

}  // namespace

void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) y[b].d = f32_to_f16(quantize_block32(x, y[b].qs));
}

void quantize_row_q8_1(const float* x, BlockQ8_1* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    const float d = quantize_block32(x, y[b].qs);
    int sum = 0;
    for (int j = 0; j < kQK; ++j) sum += y[b].qs[j];
    y[b].d = f32_to_f16(d);
    y[b].s = f32_to_f16(d * float(sum));
  }
}

void quantize_row_q8_K(const float* x, BlockQ8_K* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kQK_K; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) {
        amax = ax;
        max = x[j];
      }
    }
    if (amax == 0.0f) {
      std::memset(&y[b], 0, sizeof(BlockQ8_K));
      continue;
    }
    const float iscale = -127.0f / max;
    for (int j = 0; j < kQK_K; ++j) {
      const int v = round_even(iscale * x[j]);
      y[b].qs[j] = int8_t(v < 127 ? v : 127);
    }
    for (int g = 0; g < kQK_K / 16; ++g) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += y[b].qs[16 * g + j];
      y[b].bsums[g] = int16_t(sum);
    }
    y[b].d = 1.0f / iscale;
  }
}

}  // namespace kvserve
