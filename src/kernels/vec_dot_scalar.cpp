// Portable reference dot products (the definition the SIMD kernels are tested against).
// Each weight block is decoded to its integer codes in element order, dotted with the int8
// activations exactly, and the block scales are applied in f32 the way the reference engine does:
//   legacy:  sum += float(isum) * (dw * dx)            (+ mw * sx for the _1 formats)
//   k-quant: sum += dw * dx * isum - dminw * dx * msum (msum = sub-block mins x bsums)
#include <cstring>

#include "kernels/vec_dot.h"
#include "tensor/block_formats.h"
#include "util/half.h"

namespace kvserve {

namespace {

float dot_f32(int64_t n, const void* w, const void* x) {
  const float* a = static_cast<const float*>(w);
  const float* b = static_cast<const float*>(x);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// f16 weights against f32 activations.
float dot_f16(int64_t n, const void* w, const void* x) {
  const uint16_t* a = static_cast<const uint16_t*>(w);
  const float* b = static_cast<const float*>(x);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += f16_to_f32(a[i]) * b[i];
  return sum;
}

float dot_bf16(int64_t n, const void* w, const void* x) {
  const uint16_t* a = static_cast<const uint16_t*>(w);
  const uint16_t* b = static_cast<const uint16_t*>(x);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += bf16_to_f32(a[i]) * bf16_to_f32(b[i]);
  return sum;
}

inline int dot_codes(const int8_t* a, const int8_t* b, int n) {
  int s = 0;
  for (int i = 0; i < n; ++i) s += int(a[i]) * int(b[i]);
  return s;
}

inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// ---- legacy formats: codes of one 32-element block ----
void codes_q4(const uint8_t* qs, int offset, int8_t* q) {
  for (int j = 0; j < 16; ++j) {
    q[j] = int8_t((qs[j] & 15) - offset);
    q[j + 16] = int8_t((qs[j] >> 4) - offset);
  }
}
void codes_q5(const uint8_t* qs, const uint8_t* qh_bytes, int offset, int8_t* q) {
  const uint32_t qh = load_u32(qh_bytes);
  for (int j = 0; j < 16; ++j) {
    q[j] = int8_t(((qs[j] & 15) | (((qh >> j) & 1) << 4)) - offset);
    q[j + 16] = int8_t(((qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - offset);
  }
}

// One legacy (32-element) block format against its q8 activation blocks: `decode` turns a
// weight block into its 32 integer codes; formats with a min (_1) add mw * sx per block.
template <typename WBlock, typename XBlock, typename Decode>
float dot_legacy(int64_t n, const void* w, const void* x, Decode decode) {
  const WBlock* a = static_cast<const WBlock*>(w);
  const XBlock* b = static_cast<const XBlock*>(x);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int8_t q[kQK];
    decode(a[i], q);
    float block = float(dot_codes(q, b[i].qs, kQK)) * (f16_to_f32(a[i].d) * f16_to_f32(b[i].d));
    if constexpr (requires { a[i].m; }) block += f16_to_f32(a[i].m) * f16_to_f32(b[i].s);
    sum += block;
  }
  return sum;
}

float dot_q4_0(int64_t n, const void* w, const void* x) {
  return dot_legacy<BlockQ4_0, BlockQ8_0>(n, w, x, [](const BlockQ4_0& blk, int8_t* q) { codes_q4(blk.qs, 8, q); });
}

float dot_q4_1(int64_t n, const void* w, const void* x) {
  return dot_legacy<BlockQ4_1, BlockQ8_1>(n, w, x, [](const BlockQ4_1& blk, int8_t* q) { codes_q4(blk.qs, 0, q); });
}

float dot_q5_0(int64_t n, const void* w, const void* x) {
  return dot_legacy<BlockQ5_0, BlockQ8_0>(n, w, x,
                                          [](const BlockQ5_0& blk, int8_t* q) { codes_q5(blk.qs, blk.qh, 16, q); });
}

float dot_q5_1(int64_t n, const void* w, const void* x) {
  return dot_legacy<BlockQ5_1, BlockQ8_1>(n, w, x,
                                          [](const BlockQ5_1& blk, int8_t* q) { codes_q5(blk.qs, blk.qh, 0, q); });
}

float dot_q8_0(int64_t n, const void* w, const void* x) {
  const BlockQ8_0* a = static_cast<const BlockQ8_0*>(w);
  const BlockQ8_0* b = static_cast<const BlockQ8_0*>(x);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK; ++i)
    sum += float(dot_codes(a[i].qs, b[i].qs, kQK)) * (f16_to_f32(a[i].d) * f16_to_f32(b[i].d));
  return sum;
}

// ---- k-quants: codes of one 256-element super-block, in element order ----

// Q2_K / Q3_K low bits: element 128h + 32s + l is bits 2s.. of qs[32h + l].
inline int low2(const uint8_t* qs, int e) {
  const int h = e / 128, s = (e % 128) / 32, l = e % 32;
  return (qs[32 * h + l] >> (2 * s)) & 3;
}

float dot_q2_k(int64_t n, const void* w, const void* x) {
  const BlockQ2_K* a = static_cast<const BlockQ2_K*>(w);
  const BlockQ8_K* b = static_cast<const BlockQ8_K*>(x);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int8_t q[kQK_K];
    for (int e = 0; e < kQK_K; ++e) q[e] = int8_t(low2(a[i].qs, e));
    int isum = 0, msum = 0;
    for (int j = 0; j < 16; ++j) {
      isum += (a[i].scales[j] & 15) * dot_codes(q + 16 * j, b[i].qs + 16 * j, 16);
      msum += (a[i].scales[j] >> 4) * b[i].bsums[j];
    }
    const float dall = b[i].d * f16_to_f32(a[i].d), dmin = b[i].d * f16_to_f32(a[i].dmin);
    sum += dall * float(isum) - dmin * float(msum);
  }
  return sum;
}

float dot_q3_k(int64_t n, const void* w, const void* x) {
  const BlockQ3_K* a = static_cast<const BlockQ3_K*>(w);
  const BlockQ8_K* b = static_cast<const BlockQ8_K*>(x);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int8_t q[kQK_K];
    for (int e = 0; e < kQK_K; ++e) {
      const int h = e / 128, s = (e % 128) / 32, l = e % 32;
      const bool high = (a[i].hmask[l] >> (4 * h + s)) & 1;
      q[e] = int8_t(low2(a[i].qs, e) - (high ? 0 : 4));
    }
    int8_t sc[16];
    unpack_scales_q3_k(a[i].scales, sc);
    int isum = 0;
    for (int j = 0; j < 16; ++j) isum += sc[j] * dot_codes(q + 16 * j, b[i].qs + 16 * j, 16);
    sum += b[i].d * f16_to_f32(a[i].d) * float(isum);
  }
  return sum;
}

// Shared by Q4_K and Q5_K once the codes are decoded: 8 sub-blocks of 32.
inline float finish_k4(const uint8_t* packed, uint16_t d16, uint16_t dmin16, const int8_t* q,
                       const BlockQ8_K& b) {
  int isum = 0, msum = 0;
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    unpack_scale_min_k4(j, packed, &sc, &m);
    isum += sc * dot_codes(q + 32 * j, b.qs + 32 * j, 32);
    msum += m * (b.bsums[2 * j] + b.bsums[2 * j + 1]);
  }
  const float d = b.d * f16_to_f32(d16), dmin = b.d * f16_to_f32(dmin16);
  return d * float(isum) - dmin * float(msum);
}

float dot_q4_k(int64_t n, const void* w, const void* x) {
  const BlockQ4_K* a = static_cast<const BlockQ4_K*>(w);
  const BlockQ8_K* b = static_cast<const BlockQ8_K*>(x);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int8_t q[kQK_K];
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l) {
        q[64 * c + l] = int8_t(a[i].qs[32 * c + l] & 15);
        q[64 * c + 32 + l] = int8_t(a[i].qs[32 * c + l] >> 4);
      }
    sum += finish_k4(a[i].scales, a[i].d, a[i].dmin, q, b[i]);
  }
  return sum;
}

float dot_q5_k(int64_t n, const void* w, const void* x) {
  const BlockQ5_K* a = static_cast<const BlockQ5_K*>(w);
  const BlockQ8_K* b = static_cast<const BlockQ8_K*>(x);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int8_t q[kQK_K];
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l) {
        const uint8_t h = a[i].qh[l];
        q[64 * c + l] = int8_t((a[i].qs[32 * c + l] & 15) | (((h >> (2 * c)) & 1) << 4));
        q[64 * c + 32 + l] = int8_t((a[i].qs[32 * c + l] >> 4) | (((h >> (2 * c + 1)) & 1) << 4));
      }
    sum += finish_k4(a[i].scales, a[i].d, a[i].dmin, q, b[i]);
  }
  return sum;
}

float dot_q6_k(int64_t n, const void* w, const void* x) {
  const BlockQ6_K* a = static_cast<const BlockQ6_K*>(w);
  const BlockQ8_K* b = static_cast<const BlockQ8_K*>(x);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int8_t q[kQK_K];
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = a[i].ql + 64 * h;
      const uint8_t* qh = a[i].qh + 32 * h;
      int8_t* o = q + 128 * h;
      for (int l = 0; l < 32; ++l) {
        o[l] = int8_t(((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4)) - 32);
        o[l + 32] = int8_t(((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32);
        o[l + 64] = int8_t(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
        o[l + 96] = int8_t(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
      }
    }
    int isum = 0;
    for (int j = 0; j < 16; ++j) isum += a[i].scales[j] * dot_codes(q + 16 * j, b[i].qs + 16 * j, 16);
    sum += b[i].d * f16_to_f32(a[i].d) * float(isum);
  }
  return sum;
}

}  // namespace

void fill_scalar_kernels(KernelTable* t) {
  auto set = [t](GgmlType type, VecDotFn f) { t->vec_dot[int(type)] = f; };
  set(GgmlType::F32, dot_f32);
  set(GgmlType::F16, dot_f16);
  set(GgmlType::BF16, dot_bf16);
  set(GgmlType::Q4_0, dot_q4_0);
  set(GgmlType::Q4_1, dot_q4_1);
  set(GgmlType::Q5_0, dot_q5_0);
  set(GgmlType::Q5_1, dot_q5_1);
  set(GgmlType::Q8_0, dot_q8_0);
  set(GgmlType::Q2_K, dot_q2_k);
  set(GgmlType::Q3_K, dot_q3_k);
  set(GgmlType::Q4_K, dot_q4_k);
  set(GgmlType::Q5_K, dot_q5_k);
  set(GgmlType::Q6_K, dot_q6_k);
}

}  // namespace kvserve
