// ops.h's swiglu in 16 lanes (ops_impl.h): per element the AVX2 body's operations (exp512 is
// simd_avx2.h's exp in 16 lanes, then one exact division and one multiplication), so the result
// is bit for bit the AVX2 one, at half the instructions. The SwiGLU gate is the largest
// element-wise pass of a decode step: 8 rows of smollm-135m's 1536 took 9.5 us per layer in 8
// lanes on the Intel Xeon VM, ~0.28 ms of a batch-8 step.
#include <immintrin.h>

#include "kernels/attention_avx512_common.h"
#include "kernels/ops_impl.h"

namespace kvserve::detail {

namespace {
// silu(x) * u in 16 lanes.
inline __m512 swiglu16(__m512 x, __m512 u) {
  const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
  const __m512 silu = _mm512_div_ps(x, _mm512_add_ps(one, exp512(_mm512_sub_ps(zero, x))));
  return _mm512_mul_ps(silu, u);
}
}  // namespace

void swiglu_avx512(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; i += 16) {
    // The tail as masked lanes (zeros in, nothing stored): every element sees the same arithmetic.
    const __mmask16 m = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
    const __m512 x = _mm512_maskz_loadu_ps(m, gate + i), u = _mm512_maskz_loadu_ps(m, up + i);
    _mm512_mask_storeu_ps(out + i, m, swiglu16(x, u));
  }
}

void swiglu_pairs16_avx512(const float* y, int64_t chunks, float* out) {
  for (int64_t c = 0; c < chunks; ++c)
    _mm512_storeu_ps(out + 16 * c, swiglu16(_mm512_loadu_ps(y + 32 * c), _mm512_loadu_ps(y + 32 * c + 16)));
}

}  // namespace kvserve::detail
