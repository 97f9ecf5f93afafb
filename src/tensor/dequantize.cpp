// Decoders of the ggml block formats into f32 (layouts documented in block_formats.h).
// These are the scalar definitions of what each encoding means; the matmul kernels compute the
// same values with integer arithmetic and tests compare the two.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tensor/quants.h"
#include "util/half.h"

namespace kvserve {

void dequantize_row_q4_0(const BlockQ4_0* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
    const float d = f16_to_f32(x[b].d);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = d * float((x[b].qs[j] & 15) - 8);
      y[j + kQK / 2] = d * float((x[b].qs[j] >> 4) - 8);
    }
  }
}

void dequantize_row_q4_1(const BlockQ4_1* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
    const float d = f16_to_f32(x[b].d), m = f16_to_f32(x[b].m);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = d * float(x[b].qs[j] & 15) + m;
      y[j + kQK / 2] = d * float(x[b].qs[j] >> 4) + m;
    }
  }
}

static inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

void dequantize_row_q5_0(const BlockQ5_0* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
    const float d = f16_to_f32(x[b].d);
    const uint32_t qh = load_u32(x[b].qh);
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = (x[b].qs[j] & 15) | int(((qh >> j) & 1) << 4);
      const int hi = (x[b].qs[j] >> 4) | int(((qh >> (j + 16)) & 1) << 4);
      y[j] = d * float(lo - 16);
      y[j + kQK / 2] = d * float(hi - 16);
    }
  }
}

void dequantize_row_q5_1(const BlockQ5_1* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
    const float d = f16_to_f32(x[b].d), m = f16_to_f32(x[b].m);
    const uint32_t qh = load_u32(x[b].qh);
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = (x[b].qs[j] & 15) | int(((qh >> j) & 1) << 4);
      const int hi = (x[b].qs[j] >> 4) | int(((qh >> (j + 16)) & 1) << 4);
      y[j] = d * float(lo) + m;
      y[j + kQK / 2] = d * float(hi) + m;
    }
  }
}

void dequantize_row_q8_0(const BlockQ8_0* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
    const float d = f16_to_f32(x[b].d);
    for (int j = 0; j < kQK; ++j) y[j] = d * float(x[b].qs[j]);
  }
}

void dequantize_row_q8_1(const BlockQ8_1* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
    const float d = f16_to_f32(x[b].d);
    for (int j = 0; j < kQK; ++j) y[j] = d * float(x[b].qs[j]);
  }
}

void dequantize_row_q2_k(const BlockQ2_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float d = f16_to_f32(x[b].d), dmin = f16_to_f32(x[b].dmin);
    for (int h = 0; h < 2; ++h) {
      const uint8_t* q = x[b].qs + 32 * h;
      for (int s = 0; s < 4; ++s) {
        for (int half = 0; half < 2; ++half) {
          const uint8_t sc = x[b].scales[8 * h + 2 * s + half];
          const float dl = d * float(sc & 15), ml = dmin * float(sc >> 4);
          for (int l = 16 * half; l < 16 * half + 16; ++l) *y++ = dl * float((q[l] >> (2 * s)) & 3) - ml;
        }
      }
    }
  }
}

void dequantize_row_q3_k(const BlockQ3_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float d = f16_to_f32(x[b].d);
    int8_t sc[16];
    unpack_scales_q3_k(x[b].scales, sc);
    for (int h = 0; h < 2; ++h) {
      const uint8_t* q = x[b].qs + 32 * h;
      for (int s = 0; s < 4; ++s) {
        const uint8_t mask = uint8_t(1u << (4 * h + s));
        for (int half = 0; half < 2; ++half) {
          const float dl = d * float(sc[8 * h + 2 * s + half]);
          for (int l = 16 * half; l < 16 * half + 16; ++l) {
            const int q3 = ((q[l] >> (2 * s)) & 3) - ((x[b].hmask[l] & mask) ? 0 : 4);
            *y++ = dl * float(q3);
          }
        }
      }
    }
  }
}

void dequantize_row_q4_k(const BlockQ4_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float d = f16_to_f32(x[b].d), dmin = f16_to_f32(x[b].dmin);
    for (int c = 0; c < 4; ++c) {
      const uint8_t* q = x[b].qs + 32 * c;
      uint8_t sc, m;
      unpack_scale_min_k4(2 * c, x[b].scales, &sc, &m);
      const float d1 = d * float(sc), m1 = dmin * float(m);
      unpack_scale_min_k4(2 * c + 1, x[b].scales, &sc, &m);
      const float d2 = d * float(sc), m2 = dmin * float(m);
      for (int l = 0; l < 32; ++l) *y++ = d1 * float(q[l] & 15) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * float(q[l] >> 4) - m2;
    }
  }
}

void dequantize_row_q5_k(const BlockQ5_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float d = f16_to_f32(x[b].d), dmin = f16_to_f32(x[b].dmin);
    for (int c = 0; c < 4; ++c) {
      const uint8_t* q = x[b].qs + 32 * c;
      const uint8_t bit_lo = uint8_t(1u << (2 * c)), bit_hi = uint8_t(1u << (2 * c + 1));
      uint8_t sc, m;
      unpack_scale_min_k4(2 * c, x[b].scales, &sc, &m);
      const float d1 = d * float(sc), m1 = dmin * float(m);
      unpack_scale_min_k4(2 * c + 1, x[b].scales, &sc, &m);
      const float d2 = d * float(sc), m2 = dmin * float(m);
      for (int l = 0; l < 32; ++l) *y++ = d1 * float((q[l] & 15) + ((x[b].qh[l] & bit_lo) ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * float((q[l] >> 4) + ((x[b].qh[l] & bit_hi) ? 16 : 0)) - m2;
    }
  }
}

void dequantize_row_q6_k(const BlockQ6_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float d = f16_to_f32(x[b].d);
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = x[b].ql + 64 * h;
      const uint8_t* qh = x[b].qh + 32 * h;
      const int8_t* sc = x[b].scales + 8 * h;
      for (int l = 0; l < 32; ++l) {
        const int sub = l / 16;
        const int q1 = ((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * float(sc[sub + 0]) * float(q1);
        y[l + 32] = d * float(sc[sub + 2]) * float(q2);
        y[l + 64] = d * float(sc[sub + 4]) * float(q3);
        y[l + 96] = d * float(sc[sub + 6]) * float(q4);
      }
      y += 128;
    }
  }
}

void dequantize_row_q8_k(const BlockQ8_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, y += kQK_K)
    for (int j = 0; j < kQK_K; ++j) y[j] = x[b].d * float(x[b].qs[j]);
}

bool is_supported_weight_type(GgmlType t) {
  switch (t) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16:
    case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q5_0: case GgmlType::Q5_1:
    case GgmlType::Q8_0: case GgmlType::Q2_K: case GgmlType::Q3_K: case GgmlType::Q4_K:
    case GgmlType::Q5_K: case GgmlType::Q6_K:
      return true;
    default:
      return false;
  }
}

void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n) {
  switch (t) {
    case GgmlType::F32: std::memcpy(dst, src, size_t(n) * sizeof(float)); return;
    case GgmlType::F16: {
      const uint16_t* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(h[i]);
      return;
    }
    case GgmlType::BF16: {
      const uint16_t* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(h[i]);
      return;
    }
    case GgmlType::Q4_0: return dequantize_row_q4_0(static_cast<const BlockQ4_0*>(src), dst, n);
    case GgmlType::Q4_1: return dequantize_row_q4_1(static_cast<const BlockQ4_1*>(src), dst, n);
    case GgmlType::Q5_0: return dequantize_row_q5_0(static_cast<const BlockQ5_0*>(src), dst, n);
    case GgmlType::Q5_1: return dequantize_row_q5_1(static_cast<const BlockQ5_1*>(src), dst, n);
    case GgmlType::Q8_0: return dequantize_row_q8_0(static_cast<const BlockQ8_0*>(src), dst, n);
    case GgmlType::Q8_1: return dequantize_row_q8_1(static_cast<const BlockQ8_1*>(src), dst, n);
    case GgmlType::Q2_K: return dequantize_row_q2_k(static_cast<const BlockQ2_K*>(src), dst, n);
    case GgmlType::Q3_K: return dequantize_row_q3_k(static_cast<const BlockQ3_K*>(src), dst, n);
    case GgmlType::Q4_K: return dequantize_row_q4_k(static_cast<const BlockQ4_K*>(src), dst, n);
    case GgmlType::Q5_K: return dequantize_row_q5_k(static_cast<const BlockQ5_K*>(src), dst, n);
    case GgmlType::Q6_K: return dequantize_row_q6_k(static_cast<const BlockQ6_K*>(src), dst, n);
    case GgmlType::Q8_K: return dequantize_row_q8_k(static_cast<const BlockQ8_K*>(src), dst, n);
    default:
      std::fprintf(stderr, "kvserve: dequantize_row: unsupported type %s\n", ggml_type_name(t));
      std::abort();
  }
}

}  // namespace kvserve
