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
#include <algorithm>
#include <cmath>
#include <cstring>

#include "tensor/quants.h"
#include "util/half.h"

namespace kvserve {

namespace {

constexpr int kSearchSteps = 10;  // grids tried on each side of the plain one, 0.1 level apart

inline int clamp_int(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }
inline int round_int(float v) { return int(std::lround(v)); }

// x ~ scale * q - min with q in [0, nmax], scale >= 0, min >= 0 (the format subtracts mins only).
struct AffineFit {
  float scale;
  float min;
};

AffineFit fit_affine(const float* x, int n, int nmax) {
  float lo = 0.0f, hi = 0.0f;
  for (int i = 0; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  const float range = hi - lo;
  if (range <= 0.0f) return {0.0f, -lo};
  AffineFit best{range / float(nmax), -lo};
  double best_err = INFINITY;
  int q[kQK_K];
  for (int k = -kSearchSteps; k <= kSearchSteps; ++k) {
    const float iscale = (float(nmax) + 0.1f * float(k)) / range;
    double sq = 0, sqq = 0, sx = 0, sxq = 0;
    for (int i = 0; i < n; ++i) {
      q[i] = clamp_int(round_int(iscale * (x[i] - lo)), 0, nmax);
      sq += q[i];
      sqq += double(q[i]) * q[i];
      sx += x[i];
      sxq += double(x[i]) * q[i];
    }
    const double det = n * sqq - sq * sq;
    if (det <= 0) continue;
    double a = (n * sxq - sq * sx) / det;
    double b = (sqq * sx - sq * sxq) / det;  // x ~ a * q + b
    if (b > 0) {  // a positive offset cannot be stored: fit the scale alone
      b = 0;
      a = sxq / sqq;
    }
    if (a < 0) continue;
    double err = 0;
    for (int i = 0; i < n; ++i) {
      const double e = a * q[i] + b - x[i];
      err += e * e;
    }
    if (err < best_err) {
      best_err = err;
      best = {float(a), float(-b)};
    }
  }
  return best;
}

// x ~ scale * q with q in [-nmax, nmax - 1]; the returned scale may be negative.
float fit_symmetric(const float* x, int n, int nmax) {
  float amax = 0.0f, max = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  if (amax == 0.0f) return 0.0f;
  float best = max / -float(nmax);
  double best_err = INFINITY;
  for (int k = -kSearchSteps; k <= kSearchSteps; ++k) {
    const float iscale = -(float(nmax) + 0.1f * float(k)) / max;
    double sxq = 0, sqq = 0, sxx = 0;
    for (int i = 0; i < n; ++i) {
      const int q = clamp_int(round_int(iscale * x[i]), -nmax, nmax - 1);
      sxq += double(x[i]) * q;
      sqq += double(q) * q;
      sxx += double(x[i]) * x[i];
    }
    if (sqq <= 0) continue;
    const double a = sxq / sqq;
    const double err = sxx - a * sxq;  // residual of the least-squares fit
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
