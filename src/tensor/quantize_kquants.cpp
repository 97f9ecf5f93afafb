// Weight quantizers for Q4_K, Q5_K and Q6_K.
//
// Two stages per super-block of 256:
//  1. For each sub-block, search a (scale, min) pair (Q4_K/Q5_K: x ~ scale * q - min, q >= 0) or a
//     signed scale (Q6_K: x ~ scale * q) that minimises the squared error. The search tries a few
//     quantization grids around the obvious one (range / levels); for each grid it rounds, then
//     refits scale (and min) by least squares for the codes it got, which is what recovers most of
//     the error a plain min/max grid leaves.
//  2. The sub-block scales are quantized to 6 bits (8 bits for Q6_K) against the super-block
//     factors, and the codes are recomputed against the scales as they will be decoded.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "tensor/quants.h"
#include "util/half.h"

namespace kvserve {

namespace {

constexpr int kSearchSteps = 10;  // grids tried on each side of the plain one, 0.1 level apart

inline int clamp_int(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }
// Round half away from zero, like std::lround, but inline: std::lround is a library call, and the
// grid search below rounds every element ~20 times, which made it the bulk of `kvserve synth` /
// `quantize` time for k-quant models. (Differs from lround only for values within an ulp of a
// half-integer, where either code is as good.) Callers clamp the result; |v| stays far below 2^31
// for any finite weight because the grids scale by at most the level count over the range.
inline int round_int(float v) {
  v = v > 1e9f ? 1e9f : (v < -1e9f ? -1e9f : v);  // keep the int conversion defined
  return int(v + (v >= 0.0f ? 0.5f : -0.5f));
}

// x ~ scale * q - min with q in [0, nmax], scale >= 0, min >= 0 (the format subtracts mins only).
struct AffineFit {
  float scale;
  float min;
};

// The grid searches below round every element of a sub-block once per candidate grid (21 grids),
// which made them the bulk of `kvserve synth` / `quantize` time for k-quant models. They work on
// 8 floats at a time (AVX2 is the baseline ISA) and expand the squared error in closed form, so
// each grid costs one pass over the codes: sums of q, q^2 and x q (q, q^2 exact in f32: integers
// below 2^24).
inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

constexpr int kMaxFitVectors = 4;  // sub-blocks of up to 32 elements

// Sums over one candidate grid: q = clamp(floor(iscale * (x - origin) + 0.5), qlo, qhi).
struct GridSums {
  float sq, sqq, sxq;
};

inline GridSums grid_sums(const __m256* xv, int nv, float iscale, float origin, float qlo, float qhi) {
  const __m256 is = _mm256_set1_ps(iscale), o = _mm256_set1_ps(origin), half = _mm256_set1_ps(0.5f);
  const __m256 lo = _mm256_set1_ps(qlo), hi = _mm256_set1_ps(qhi);
  __m256 sq = _mm256_setzero_ps(), sqq = _mm256_setzero_ps(), sxq = _mm256_setzero_ps();
  for (int v = 0; v < nv; ++v) {
    __m256 q = _mm256_floor_ps(_mm256_add_ps(_mm256_mul_ps(is, _mm256_sub_ps(xv[v], o)), half));
    q = _mm256_min_ps(_mm256_max_ps(q, lo), hi);
    sq = _mm256_add_ps(sq, q);
    sqq = _mm256_fmadd_ps(q, q, sqq);
    sxq = _mm256_fmadd_ps(xv[v], q, sxq);
  }
  return {hsum8(sq), hsum8(sqq), hsum8(sxq)};
}

// n: a multiple of 8, at most 32.
AffineFit fit_affine(const float* x, int n, int nmax) {
  float lo = 0.0f, hi = 0.0f;
  double sx = 0, sxx = 0;
  for (int i = 0; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
    sx += x[i];
    sxx += double(x[i]) * x[i];
  }
  const float range = hi - lo;
  if (range <= 0.0f) return {0.0f, -lo};
  __m256 xv[kMaxFitVectors];
  for (int v = 0; v < n / 8; ++v) xv[v] = _mm256_loadu_ps(x + 8 * v);
  AffineFit best{range / float(nmax), -lo};
  double best_err = INFINITY;
  for (int k = -kSearchSteps; k <= kSearchSteps; ++k) {
    const float iscale = (float(nmax) + 0.1f * float(k)) / range;
    const GridSums g = grid_sums(xv, n / 8, iscale, lo, 0.0f, float(nmax));
    const double sq = g.sq, sqq = g.sqq, sxq = g.sxq;
    const double det = n * sqq - sq * sq;
    if (det <= 0) continue;
    double a = (n * sxq - sq * sx) / det;
    double b = (sqq * sx - sq * sxq) / det;  // x ~ a * q + b
    if (b > 0) {  // a positive offset cannot be stored: fit the scale alone
      b = 0;
      a = sxq / sqq;
    }
    if (a < 0) continue;
    // sum (a q + b - x)^2, expanded.
    const double err = a * a * sqq + 2 * a * b * sq + n * b * b - 2 * a * sxq - 2 * b * sx + sxx;
    if (err < best_err) {
      best_err = err;
      best = {float(a), float(-b)};
    }
  }
  return best;
}

// x ~ scale * q with q in [-nmax, nmax - 1]; the returned scale may be negative.
// n: a multiple of 8, at most 32.
float fit_symmetric(const float* x, int n, int nmax) {
  float amax = 0.0f, max = 0.0f;
  double sxx = 0;
  for (int i = 0; i < n; ++i) {
    sxx += double(x[i]) * x[i];
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  if (amax == 0.0f) return 0.0f;
  __m256 xv[kMaxFitVectors];
  for (int v = 0; v < n / 8; ++v) xv[v] = _mm256_loadu_ps(x + 8 * v);
  float best = max / -float(nmax);
  double best_err = INFINITY;
  for (int k = -kSearchSteps; k <= kSearchSteps; ++k) {
    const float iscale = -(float(nmax) + 0.1f * float(k)) / max;
    const GridSums g = grid_sums(xv, n / 8, iscale, 0.0f, -float(nmax), float(nmax - 1));
    if (g.sqq <= 0) continue;
    const double a = double(g.sxq) / g.sqq;
    const double err = sxx - a * g.sxq;  // residual of the least-squares fit
    if (err < best_err) {
      best_err = err;
      best = float(a);
    }
  }
  return best;
}

// Stage 2 for the affine formats: 6-bit sub-block scales/mins, f16 super-block factors, codes.
// codes receives 256 values in [0, nmax].
void quantize_affine_superblock(const float* x, int nmax, uint16_t* d_out, uint16_t* dmin_out,
                                uint8_t packed[kKScaleBytes], uint8_t codes[kQK_K]) {
  AffineFit fits[8];
  float max_scale = 0.0f, max_min = 0.0f;
  for (int j = 0; j < 8; ++j) {
    fits[j] = fit_affine(x + 32 * j, 32, nmax);
    max_scale = std::max(max_scale, fits[j].scale);
    max_min = std::max(max_min, fits[j].min);
  }
  *d_out = f32_to_f16(max_scale / 63.0f);
  *dmin_out = f32_to_f16(max_min / 63.0f);
  const float d = f16_to_f32(*d_out), dmin = f16_to_f32(*dmin_out);
  uint8_t ls[8], lm[8];
  for (int j = 0; j < 8; ++j) {
    ls[j] = uint8_t(d > 0 ? clamp_int(round_int(fits[j].scale / d), 0, 63) : 0);
    lm[j] = uint8_t(dmin > 0 ? clamp_int(round_int(fits[j].min / dmin), 0, 63) : 0);
  }
  std::memset(packed, 0, kKScaleBytes);
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      packed[j] |= ls[j];
      packed[j + 4] |= lm[j];
    } else {
      packed[j + 4] = uint8_t((ls[j] & 15) | ((lm[j] & 15) << 4));
      packed[j - 4] |= uint8_t((ls[j] >> 4) << 6);
      packed[j] |= uint8_t((lm[j] >> 4) << 6);
    }
  }
  for (int j = 0; j < 8; ++j) {
    const float dl = d * float(ls[j]), ml = dmin * float(lm[j]);
    for (int i = 0; i < 32; ++i) {
      const int q = dl > 0 ? round_int((x[32 * j + i] + ml) / dl) : 0;
      codes[32 * j + i] = uint8_t(clamp_int(q, 0, nmax));
    }
  }
}

}  // namespace

void quantize_row_q4_k(const float* x, BlockQ4_K* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    uint8_t codes[kQK_K];
    quantize_affine_superblock(x, 15, &y[b].d, &y[b].dmin, y[b].scales, codes);
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l)
        y[b].qs[32 * c + l] = uint8_t(codes[64 * c + l] | (codes[64 * c + 32 + l] << 4));
  }
}

void quantize_row_q5_k(const float* x, BlockQ5_K* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    uint8_t codes[kQK_K];
    quantize_affine_superblock(x, 31, &y[b].d, &y[b].dmin, y[b].scales, codes);
    std::memset(y[b].qh, 0, sizeof(y[b].qh));
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t lo = codes[64 * c + l], hi = codes[64 * c + 32 + l];
        y[b].qs[32 * c + l] = uint8_t((lo & 15) | ((hi & 15) << 4));
        y[b].qh[l] |= uint8_t(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
      }
    }
  }
}

void quantize_row_q6_k(const float* x, BlockQ6_K* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    float scales[16];
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 16; ++j) {
      scales[j] = fit_symmetric(x + 16 * j, 16, 32);
      if (std::fabs(scales[j]) > amax) {
        amax = std::fabs(scales[j]);
        max = scales[j];
      }
    }
    uint8_t codes[kQK_K];
    if (amax == 0.0f) {
      y[b].d = 0;
      std::memset(y[b].scales, 0, sizeof(y[b].scales));
      std::memset(codes, 32, sizeof(codes));
    } else {
      const float iscale = -128.0f / max;
      y[b].d = f32_to_f16(1.0f / iscale);
      const float d = f16_to_f32(y[b].d);
      for (int j = 0; j < 16; ++j) {
        y[b].scales[j] = int8_t(clamp_int(round_int(iscale * scales[j]), -128, 127));
        const float dl = d * float(y[b].scales[j]);
        for (int i = 0; i < 16; ++i) {
          const int q = dl != 0.0f ? round_int(x[16 * j + i] / dl) : 0;
          codes[16 * j + i] = uint8_t(clamp_int(q, -32, 31) + 32);
        }
      }
    }
    for (int h = 0; h < 2; ++h) {
      const uint8_t* c = codes + 128 * h;
      for (int l = 0; l < 32; ++l) {
        y[b].ql[64 * h + l] = uint8_t((c[l] & 15) | ((c[l + 64] & 15) << 4));
        y[b].ql[64 * h + 32 + l] = uint8_t((c[l + 32] & 15) | ((c[l + 96] & 15) << 4));
        y[b].qh[32 * h + l] = uint8_t((c[l] >> 4) | ((c[l + 32] >> 4) << 2) | ((c[l + 64] >> 4) << 4) |
                                      ((c[l + 96] >> 4) << 6));
      }
    }
  }
}

}  // namespace kvserve
