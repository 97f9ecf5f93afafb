// f32 row operations, AVX2. The reductions that decide numerics (sum of squares, softmax
// denominator) accumulate in double like the reference engine; exp is a vector polynomial within
// ~2 ulp of expf (the reference's own SIMD path is also a polynomial).
#include "kernels/ops.h"

#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "kernels/ops_impl.h"
#include "kernels/simd_avx2.h"
#include "kernels/vec_dot.h"

namespace kvserve {

namespace {

// Applies f (8 floats -> 8 floats) over [0, n) of the given streams; the tail goes through a
// zero-padded copy so every element sees the same arithmetic wherever it sits.
template <int kIn, typename F>
void map8(const float* const (&in)[kIn], int64_t n, float* out, F f) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v[kIn];
    for (int k = 0; k < kIn; ++k) v[k] = _mm256_loadu_ps(in[k] + i);
    _mm256_storeu_ps(out + i, f(v));
  }
  if (i < n) {
    const size_t rest = size_t(n - i);
    float tmp[kIn][8] = {};
    __m256 v[kIn];
    for (int k = 0; k < kIn; ++k) {
      std::memcpy(tmp[k], in[k] + i, rest * sizeof(float));
      v[k] = _mm256_loadu_ps(tmp[k]);
    }
    float res[8];
    _mm256_storeu_ps(res, f(v));
    std::memcpy(out + i, res, rest * sizeof(float));
  }
}

inline __m256 silu8(__m256 x) {
  const __m256 e = avx2::exp(_mm256_sub_ps(_mm256_setzero_ps(), x));
  return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

}  // namespace

void rmsnorm(const float* x, const float* weight, int64_t n, float eps, float* out) {
  // Squares are formed in f32 and summed in double, as the reference does; 16 double lanes keep
  // it fast (the order of double additions is far below f32 resolution: f32 squares carry 24
  // significant bits, so the double sums are exact unless the squares span more than 2^29).
  // Four chains, not one: one chain of dependent vaddpd took ~0.17 us per 576-value row, the
  // serial norms of a batch-8 decode step ~2.8 us per layer on the engine thread.
  __m256d acc4[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int k = 0; k < 4; ++k) {
      const __m128 v = _mm_loadu_ps(x + i + 4 * k);
      acc4[k] = _mm256_add_pd(acc4[k], _mm256_cvtps_pd(_mm_mul_ps(v, v)));
    }
  __m256d acc = _mm256_add_pd(_mm256_add_pd(acc4[0], acc4[1]), _mm256_add_pd(acc4[2], acc4[3]));
  for (; i + 4 <= n; i += 4) {
    const __m128 v = _mm_loadu_ps(x + i);
    acc = _mm256_add_pd(acc, _mm256_cvtps_pd(_mm_mul_ps(v, v)));
  }
  double lanes[4];
  _mm256_storeu_pd(lanes, acc);
  double sum = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  for (; i < n; ++i) sum += double(x[i] * x[i]);
  const float mean = float(sum / double(n));
  const float s = 1.0f / std::sqrt(mean + eps);
  if (weight == nullptr) {
    for (int64_t j = 0; j < n; ++j) out[j] = x[j] * s;
  } else {
    for (int64_t j = 0; j < n; ++j) out[j] = (x[j] * s) * weight[j];
  }
}

void silu(const float* x, int64_t n, float* out) {
  map8<1>({x}, n, out, [](const __m256* v) { return silu8(v[0]); });
}

void detail::swiglu_avx2(const float* gate, const float* up, int64_t n, float* out) {
  map8<2>({gate, up}, n, out, [](const __m256* v) { return _mm256_mul_ps(silu8(v[0]), v[1]); });
}

void swiglu(const float* gate, const float* up, int64_t n, float* out) {
  if (active_kernels().isa >= Isa::kAvx512) return detail::swiglu_avx512(gate, up, n, out);
  detail::swiglu_avx2(gate, up, n, out);
}

void swiglu_pairs16(const float* y, int64_t chunks, float* out) {
  if (active_kernels().isa >= Isa::kAvx512) return detail::swiglu_pairs16_avx512(y, chunks, out);
  for (int64_t c = 0; c < chunks; ++c) detail::swiglu_avx2(y + 32 * c, y + 32 * c + 16, 16, out + 16 * c);
}

void add(const float* a, const float* b, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void scale(const float* x, float s, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * s;
}

void softmax(float* x, int64_t n) {
  float max = -INFINITY;
  for (int64_t i = 0; i < n; ++i) max = std::fmax(max, x[i]);
  const __m256 vmax = _mm256_set1_ps(max);
  map8<1>({x}, n, x, [vmax](const __m256* v) { return avx2::exp(_mm256_sub_ps(v[0], vmax)); });
  // The denominator in double, as the reference accumulates it.
  __m256d acc = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) acc = _mm256_add_pd(acc, _mm256_cvtps_pd(_mm_loadu_ps(x + i)));
  double lanes[4];
  _mm256_storeu_pd(lanes, acc);
  double sum = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  for (; i < n; ++i) sum += double(x[i]);
  const float inv = float(1.0 / sum);
  for (int64_t j = 0; j < n; ++j) x[j] *= inv;
}

}  // namespace kvserve
