// Internal to the AVX-512 kernel files (gemm_avx512.cpp's activation quantizer and
// gemm_packed_avx512.cpp's one-pass quantize-and-rearrange): one q8_0 block of 32 floats, as
// tensor/quants.h's quantize_row_q8_0 computes it, bit for bit (why: gemm_avx512.cpp, above its
// quantizers). The anonymous namespace gives each including file its own copy, so the linker never
// hands this AVX-512 code to a caller on another CPU.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace kvserve {
namespace {

// The block's codes as int32 lanes (elements 0..15 in lo, 16..31 in hi, each in [-127, 127] for
// finite input; narrow them with _mm512_cvtsepi32_epi8) and its scale d rounded to f16 bits.
struct Q8_0Block {
  __m512i lo, hi;
  uint16_t d;
};

inline Q8_0Block quantize_q8_0_block(const float* x) {
  const __m512 lo = _mm512_loadu_ps(x), hi = _mm512_loadu_ps(x + 16);
  const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(lo), _mm512_abs_ps(hi)));
  const float d = amax / 127.0f;
  const __m512 id = _mm512_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
  return {_mm512_cvtps_epi32(_mm512_mul_ps(lo, id)), _mm512_cvtps_epi32(_mm512_mul_ps(hi, id)),
          uint16_t(_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(d), _MM_FROUND_TO_NEAREST_INT), 0))};
}

}  // namespace
}  // namespace kvserve
