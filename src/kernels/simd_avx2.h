// Small AVX2 building blocks shared by the AVX2 kernels (internal to src/kernels).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace kvserve::avx2 {

// Sum of the 8 floats.
inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Sum of the 8 int32.
inline int hsum(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
  return _mm_cvtsi128_si32(s);
}

// Largest of the 8 floats.
inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// x[0..32) rounded to 16-bit codes against their largest magnitude amax (the attention query's
// rounding, attention_round_query with code_max 32767): c[i] = round-to-nearest-even(x[i] *
// (32767 / amax)), saturated to int16 (only a rounding at the max could pass it), 0 when amax is
// 0. c is 32-byte aligned. Returns amax.
inline float round_codes16(const float* x, int16_t* c) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  __m256 v[4];
  __m256 mx = _mm256_setzero_ps();
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm256_loadu_ps(x + 8 * i);
    mx = _mm256_max_ps(mx, _mm256_and_ps(v[i], abs_mask));
  }
  const float amax = hmax(mx);
  const __m256 id = _mm256_set1_ps(amax > 0 ? 32767.0f / amax : 0.0f);
  for (int i = 0; i < 4; i += 2) {
    const __m256i lo = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], id));
    const __m256i hi = _mm256_cvtps_epi32(_mm256_mul_ps(v[i + 1], id));
    // packs works per 128-bit lane: [lo 0-3, hi 0-3 | lo 4-7, hi 4-7]; 0xD8 restores order.
    _mm256_store_si256(reinterpret_cast<__m256i*>(c + 8 * i),
                       _mm256_permute4x64_epi64(_mm256_packs_epi32(lo, hi), 0xD8));
  }
  return amax;
}

// 8 int32 lanes, each the sum of 4 adjacent products u[i] * s[i] of unsigned and signed bytes.
// Exact while 2 * max|u * s| fits int16 (u <= 128 with |s| <= 127).
inline __m256i dot_u8s8(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

// As dot_u8s8 for two signed vectors; b must not hold -128 (activations never do).
inline __m256i dot_s8s8(__m256i a, __m256i b) {
  return dot_u8s8(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
}

// 16 int16 pair sums of u * s weighted by one int16 scale for bytes 0..15 and another for bytes
// 16..31, summed into 8 int32 lanes: lo_scale * dot(first 16) + hi_scale * dot(last 16).
inline __m256i dot_u8s8_scaled(__m256i u, __m256i s, int lo_scale, int hi_scale) {
  const __m256i sc = _mm256_set_m128i(_mm_set1_epi16(int16_t(hi_scale)), _mm_set1_epi16(int16_t(lo_scale)));
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), sc);
}

inline __m256i load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// 16 packed bytes -> 32 bytes: low nibbles first (bytes 0..15), then high nibbles (16..31).
inline __m256i unpack_nibbles(const uint8_t* p) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(v, 4), v);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

// 32 bits -> 32 bytes, byte j = 0xFF where bit j is set, else 0.
inline __m256i expand_bits(const uint8_t* p) {
  uint32_t bits;
  std::memcpy(&bits, p, 4);
  const __m256i pick = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                                        2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(int(bits)), pick);
  const __m256i mask = _mm256_set1_epi64x(int64_t(0x8040201008040201ULL));
  return _mm256_cmpeq_epi8(_mm256_and_si256(v, mask), mask);
}

// e^x for 8 floats, within ~2 ulp of expf over the normal range: x = n ln2 + r with |r| <= ln2/2,
// e^r by a degree-7 Taylor polynomial (truncation error < 1e-8 relative), times 2^n built in the
// exponent bits. Results below the smallest normal flush to 0 (so exp(-inf) = 0, as softmax
// masking needs); above ~88.7 the input is clamped (a huge finite value instead of inf).
inline __m256 exp(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.33654f), hi = _mm256_set1_ps(88.72283f);
  const __m256 underflow = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);  // ln2 split in two parts
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.0f / 5040);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  // n in [-126, 128]: 2^n as (n + 127) << 23, split as two factors so n = 128 stays finite.
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i half = _mm256_srai_epi32(ni, 1);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(half, _mm256_set1_epi32(127)), 23));
  const __m256 s2 = _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, half), _mm256_set1_epi32(127)), 23));
  const __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
  return _mm256_andnot_ps(underflow, y);
}

}  // namespace kvserve::avx2
