// KV row quantization (see kv_quant.h; byte layout in kvcache/kv_layout.h).
#include "kernels/kv_quant.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "util/half.h"
#include "util/status.h"

namespace kvserve {
namespace {

inline void put_f16(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}

inline float get_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// One q8_0 group of g values: [d f16][g int8]. Rounding as the GGUF reference: d = amax / 127,
// q = round(x / d) (ties away from zero).
void quantize_group_q8_0(const float* x, int g, uint8_t* dst) {
  float amax = 0.0f;
  for (int i = 0; i < g; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  put_f16(dst, d);
  int8_t* q = reinterpret_cast<int8_t*>(dst + 2);
  for (int i = 0; i < g; ++i) q[i] = int8_t(std::lround(x[i] * id));
}

// One q4_0 group of g values: [d f16][ceil(g/2) bytes]. As the GGUF reference: the value of
// largest magnitude (with its sign) maps to -8, d = max / -8, nibble = min(15, trunc(x / d + 8.5)).
// Byte j: value j in the low nibble, value j + h in the high one (h = ceil(g/2); 8 = zero pads).
void quantize_group_q4_0(const float* x, int g, uint8_t* dst) {
  float amax = 0.0f, vmax = 0.0f;
  for (int i = 0; i < g; ++i)
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      vmax = x[i];
    }
  const float d = vmax / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  put_f16(dst, d);
  const int h = (g + 1) / 2;
  auto nib = [&](int i) -> uint8_t {
    if (i >= g) return 8;
    return uint8_t(std::min(15, int(int8_t(x[i] * id + 8.5f))));
  };
  for (int j = 0; j < h; ++j) dst[2 + j] = uint8_t(nib(j) | (nib(j + h) << 4));
}

void dequantize_group_q8_0(const uint8_t* src, int g, float* y) {
  const float d = get_f16(src);
  const int8_t* q = reinterpret_cast<const int8_t*>(src + 2);
  for (int i = 0; i < g; ++i) y[i] = d * float(q[i]);
}

void dequantize_group_q4_0(const uint8_t* src, int g, float* y) {
  const float d = get_f16(src);
  const int h = (g + 1) / 2;
  for (int j = 0; j < h; ++j) {
    const uint8_t b = src[2 + j];
    y[j] = d * float(int(b & 0x0F) - 8);
    if (j + h < g) y[j + h] = d * float(int(b >> 4) - 8);
  }
}

size_t group_bytes(KvElem type, int g) { return type == KvElem::Q8_0 ? 2 + size_t(g) : 2 + size_t(g + 1) / 2; }

// AVX2 row dequantizers for full groups (n % 32 == 0).
void dequantize_q8_0_avx2(const uint8_t* src, int n, float* y) {
  for (int b = 0; b < n / kKvGroup; ++b, src += 34, y += 32) {
    const __m256 d = _mm256_set1_ps(get_f16(src));
    for (int i = 0; i < 32; i += 8) {
      const __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + 2 + i)));
      _mm256_storeu_ps(y + i, _mm256_mul_ps(d, _mm256_cvtepi32_ps(q)));
    }
  }
}

void dequantize_q4_0_avx2(const uint8_t* src, int n, float* y) {
  const __m128i mask = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
  for (int b = 0; b < n / kKvGroup; ++b, src += 18, y += 32) {
    const __m256 d = _mm256_set1_ps(get_f16(src));
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2));
    const __m128i lo = _mm_sub_epi8(_mm_and_si128(raw, mask), eight);                     // values 0..15
    const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(raw, 4), mask), eight);  // values 16..31
    const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
    for (int i = 0; i < 4; ++i)
      _mm256_storeu_ps(y + 8 * i, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(parts[i]))));
  }
}


// AVX2 row quantizers for full groups, byte for byte the scalar ones: the same amax, the same
// d = amax / 127 (q4_0: d = vmax / -8) and 1 / d, the same product x * id per value, and the same
// rounding, done exactly in 8 lanes. Why: the engine thread stores every new token's K and V rows
// serially between two parallel passes, and at batch 8 the scalar lround loop was ~5% of a decode
// step (the other thread idling meanwhile).

// Lane-wise maximum of |x| over 32 values, then over the 8 lanes.
inline float amax32_avx2(const float* x) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 m = _mm256_and_ps(_mm256_loadu_ps(x), abs_mask);
  for (int i = 8; i < 32; i += 8) m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(x + i), abs_mask));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

// round(v) with ties away from zero (std::lround's rule), exactly: t = trunc(v); v - t is exact
// for |v| < 2^23, and one more unit of v's sign is added where |v - t| >= 0.5.
inline __m256i round_away_avx2(__m256 v) {
  const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 sign = _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(int(0x80000000u))));
  const __m256 frac = _mm256_andnot_ps(sign, _mm256_sub_ps(v, t));  // |v - t|
  const __m256 up = _mm256_and_ps(_mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ),
                                  _mm256_or_ps(sign, _mm256_set1_ps(1.0f)));
  return _mm256_cvttps_epi32(_mm256_add_ps(t, up));
}

// 32 int32 lanes (four vectors, values 0..31 in order) -> 32 bytes, saturating (values fit).
inline __m256i pack_bytes_avx2(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);  // lanes interleaved per 128
  const __m256i bytes = _mm256_packs_epi16(ab, cd);
  // packs works within 128-bit halves: the dwords (4 values each) come out as a0 b0 c0 d0 a1 b1 c1 d1
  // (x0 = values 0-3 of x, x1 = values 4-7); the permutation puts them back in order.
  return _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

void quantize_q8_0_avx2(const float* x, int n, uint8_t* dst) {
  for (int b = 0; b < n / kKvGroup; ++b, x += 32, dst += 34) {
    const float d = amax32_avx2(x) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    put_f16(dst, d);
    const __m256 idv = _mm256_set1_ps(id);
    __m256i q[4];
    for (int i = 0; i < 4; ++i) q[i] = round_away_avx2(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * i), idv));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 2), pack_bytes_avx2(q[0], q[1], q[2], q[3]));
  }
}

void quantize_q4_0_avx2(const float* x, int n, uint8_t* dst) {
  for (int b = 0; b < n / kKvGroup; ++b, x += 32, dst += 18) {
    // The value of largest magnitude, the first one on ties (as the scalar scan keeps it).
    const float amax = amax32_avx2(x);
    float vmax = 0.0f;
    for (int i = 0; i < 32; ++i)
      if (std::fabs(x[i]) == amax) {
        vmax = x[i];
        break;
      }
    const float d = vmax / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    put_f16(dst, d);
    const __m256 idv = _mm256_set1_ps(id), half8 = _mm256_set1_ps(8.5f);
    __m256i q[4];  // min(15, trunc(x * id + 8.5)): the scalar's int8_t conversion truncates too
    for (int i = 0; i < 4; ++i)
      q[i] = _mm256_min_epi32(_mm256_cvttps_epi32(_mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * i), idv), half8)),
                              _mm256_set1_epi32(15));
    const __m256i bytes = pack_bytes_avx2(q[0], q[1], q[2], q[3]);  // values 0..31, one per byte
    const __m128i lo = _mm256_castsi256_si128(bytes), hi = _mm256_extracti128_si256(bytes, 1);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2), _mm_or_si128(lo, _mm_slli_epi16(hi, 4)));
  }
}

}  // namespace

size_t kv_row_bytes(KvElem type, int64_t n) {
  const size_t full = size_t(n) / kKvGroup, rest = size_t(n) % kKvGroup;
  switch (type) {
    case KvElem::F32:
      return 4 * size_t(n);
    case KvElem::F16:
    case KvElem::BF16:
      return 2 * size_t(n);
    case KvElem::Q8_0:
    case KvElem::Q4_0:
      return full * group_bytes(type, kKvGroup) + (rest ? group_bytes(type, int(rest)) : 0);
  }
  KVS_ASSERT(false, "bad KvElem");
  return 0;
}

void kv_quantize_row_scalar(KvElem type, const float* x, int n, uint8_t* dst) {
  switch (type) {
    case KvElem::F32:
      std::memcpy(dst, x, size_t(n) * 4);
      return;
    case KvElem::F16:
      for (int i = 0; i < n; ++i) put_f16(dst + 2 * i, x[i]);
      return;
    case KvElem::BF16:
      for (int i = 0; i < n; ++i) {
        const uint16_t h = f32_to_bf16(x[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    case KvElem::Q8_0:
    case KvElem::Q4_0:
      for (int i = 0; i < n; i += kKvGroup) {
        const int g = std::min(kKvGroup, n - i);
        if (type == KvElem::Q8_0)
          quantize_group_q8_0(x + i, g, dst);
        else
          quantize_group_q4_0(x + i, g, dst);
        dst += group_bytes(type, g);
      }
      return;
  }
}

void kv_quantize_row(KvElem type, const float* x, int n, uint8_t* dst) {
  switch (type) {
    case KvElem::F32:
    case KvElem::BF16:
      break;  // a copy / the scalar bit manipulation
    case KvElem::F16:
      if (n % 8 != 0) break;
      for (int i = 0; i < n; i += 8)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
      return;
    case KvElem::Q8_0:
      if (n % kKvGroup != 0) break;
      quantize_q8_0_avx2(x, n, dst);
      return;
    case KvElem::Q4_0:
      if (n % kKvGroup != 0) break;
      quantize_q4_0_avx2(x, n, dst);
      return;
  }
  kv_quantize_row_scalar(type, x, n, dst);
}

void kv_dequantize_row_scalar(KvElem type, const uint8_t* src, int n, float* y) {
  switch (type) {
    case KvElem::F32:
      std::memcpy(y, src, size_t(n) * 4);
      return;
    case KvElem::F16:
      for (int i = 0; i < n; ++i) y[i] = get_f16(src + 2 * i);
      return;
    case KvElem::BF16:
      for (int i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        y[i] = bf16_to_f32(h);
      }
      return;
    case KvElem::Q8_0:
    case KvElem::Q4_0:
      for (int i = 0; i < n; i += kKvGroup) {
        const int g = std::min(kKvGroup, n - i);
        if (type == KvElem::Q8_0)
          dequantize_group_q8_0(src, g, y + i);
        else
          dequantize_group_q4_0(src, g, y + i);
        src += group_bytes(type, g);
      }
      return;
  }
}

void kv_dequantize_row(KvElem type, const uint8_t* src, int n, float* y) {
  switch (type) {
    case KvElem::F32:
      break;  // a plain copy: the scalar version's
    case KvElem::F16:
      if (n % 8 != 0) break;
      for (int i = 0; i < n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i))));
      return;
    case KvElem::BF16:
      if (n % 8 != 0) break;
      for (int i = 0; i < n; i += 8) {
        const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i)));
        _mm256_storeu_ps(y + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
      }
      return;
    case KvElem::Q8_0:
      if (n % kKvGroup != 0) break;
      dequantize_q8_0_avx2(src, n, y);
      return;
    case KvElem::Q4_0:
      if (n % kKvGroup != 0) break;
      dequantize_q4_0_avx2(src, n, y);
      return;
  }
  kv_dequantize_row_scalar(type, src, n, y);
}

}  // namespace kvserve
