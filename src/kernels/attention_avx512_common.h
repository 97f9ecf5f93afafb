// Internal to the AVX-512 kernel files that use it (attention_avx512.cpp,
// attention_tiled_avx512.cpp, ops_avx512.cpp), all compiled with AVX-512 flags. The anonymous
// namespace gives each its own copy (internal linkage), so no code built with these flags is
// handed to a file built without them.
#pragma once

#include <immintrin.h>

namespace kvserve::detail {
namespace {

// x = n ln2 + r with n = round(x / ln2) (returned in *n) and |r| <= ln2 / 2 (ln2 in two parts,
// so r keeps its bits).
inline __m512 split_ln2(__m512 x, __m512* n) {
  *n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 r = _mm512_fnmadd_ps(*n, _mm512_set1_ps(0.693359375f), x);
  return _mm512_fnmadd_ps(*n, _mm512_set1_ps(-2.12194440e-4f), r);
}

// e^r for |r| <= ln2 / 2: the Taylor polynomial of degree D (<= 7) in Horner form.
template <int D>
inline __m512 exp_taylor(__m512 r) {
  constexpr float kInvFactorial[] = {1.0f,      1.0f,       0.5f,       1.0f / 6,
                                     1.0f / 24, 1.0f / 120, 1.0f / 720, 1.0f / 5040};
  static_assert(D >= 1 && D <= 7);
  __m512 p = _mm512_set1_ps(kInvFactorial[D]);
  for (int k = D - 1; k >= 0; --k) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kInvFactorial[k]));
  return p;
}

// e^x for 16 floats: the AVX2 path's method (attention.cpp, simd_avx2.h) in 16 lanes: x = n ln2 + r,
// a degree-7 polynomial for e^r, 2^n in the exponent bits; below the smallest normal (and for
// -inf) the result is 0.
inline __m512 exp512(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-87.33654f), hi = _mm512_set1_ps(88.72283f);
  const __mmask16 underflow = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
  x = _mm512_min_ps(_mm512_max_ps(x, lo), hi);
  __m512 n;
  const __m512 p = exp_taylor<7>(split_ln2(x, &n));
  const __m512i ni = _mm512_cvtps_epi32(n);
  const __m512i half = _mm512_srai_epi32(ni, 1);
  const __m512 s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(half, _mm512_set1_epi32(127)), 23));
  const __m512 s2 = _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_add_epi32(_mm512_sub_epi32(ni, half), _mm512_set1_epi32(127)), 23));
  return _mm512_maskz_mov_ps(__mmask16(~underflow), _mm512_mul_ps(_mm512_mul_ps(p, s1), s2));
}

// e^x for x <= 0 (or -inf), clamped below at e^-87 (normal floats throughout): a degree-6
// polynomial and vscalefps for 2^n, half exp512's instructions at ~3e-7 relative error (the
// tiled kernel's softmax weights, whose callers zero masked lanes themselves).
inline __m512 exp_nonpositive(__m512 x) {
  __m512 n;
  const __m512 p = exp_taylor<6>(split_ln2(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), &n));
  return _mm512_scalef_ps(p, n);
}

// One 32-value group x[0..32) rounded to integers of at most `levels` in magnitude, as
// attention_round_query does: returns max |x| and writes round-to-nearest-even(x * levels / max |x|)
// as int32, values 0..15 to *lo and 16..31 to *hi (all 0 for an all-zero group).
inline float group_codes(const float* x, float levels, __m512i* lo, __m512i* hi) {
  const __m512 a = _mm512_loadu_ps(x), b = _mm512_loadu_ps(x + 16);
  const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b)));
  const __m512 id = _mm512_set1_ps(amax > 0 ? levels / amax : 0.0f);
  *lo = _mm512_cvtps_epi32(_mm512_mul_ps(a, id));
  *hi = _mm512_cvtps_epi32(_mm512_mul_ps(b, id));
  return amax;
}

// attention_round_query's rounding of one 32-value group x[0..32) (both AVX-512 attention
// kernels): returns d = max |x| / 32767 and writes the codes x / d, rounded to nearest even and
// saturated to int16, values 0..15 to *lo and 16..31 to *hi.
inline float round_query_group(const float* x, __m256i* lo, __m256i* hi) {
  __m512i a, b;
  const float amax = group_codes(x, 32767.0f, &a, &b);
  *lo = _mm512_cvtsepi32_epi16(a);
  *hi = _mm512_cvtsepi32_epi16(b);
  return amax / 32767.0f;
}

}  // namespace
}  // namespace kvserve::detail
