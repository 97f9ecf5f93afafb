// Rotary position embeddings.
#include <cmath>

#include "kernels/ops.h"

namespace kvserve {

void rope_inv_freq(float freq_base, float freq_scale, const float* factors, int rope_dim, float* inv_freq) {
  // The reference multiplies theta by base^(-2/d) once per pair in float; building the powers the
  // same way keeps our angles within an ulp or two of its angles.
  const float step = std::pow(freq_base, -2.0f / float(rope_dim));
  float f = 1.0f;
  for (int i = 0; i < rope_dim / 2; ++i) {
    float v = f;
    if (factors != nullptr) v /= factors[i];
    inv_freq[i] = v * freq_scale;
    f *= step;
  }
}

void rope_cos_sin(int pos, float freq_base, float freq_scale, const float* factors, int rope_dim, float* cos_t,
                  float* sin_t) {
  const float step = std::pow(freq_base, -2.0f / float(rope_dim));
  float theta = float(pos);
  for (int i = 0; i < rope_dim / 2; ++i) {
    const float extrapolated = factors != nullptr ? theta / factors[i] : theta;
    const float t = freq_scale * extrapolated;
    cos_t[i] = std::cos(t);
    sin_t[i] = std::sin(t);
    theta *= step;
  }
}

void apply_rope_cos_sin(float* x, int n_heads, int head_dim, int rope_dim, const float* cos_t, const float* sin_t,
                        bool neox) {
  const int half = rope_dim / 2;
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + int64_t(h) * head_dim;
    for (int i = 0; i < half; ++i) {
      const int ia = neox ? i : 2 * i;
      const int ib = neox ? i + half : 2 * i + 1;
      const float a = v[ia], b = v[ib];
      v[ia] = a * cos_t[i] - b * sin_t[i];
      v[ib] = a * sin_t[i] + b * cos_t[i];
    }
  }
}

void apply_rope(float* x, int n_heads, int head_dim, int rope_dim, int pos, const float* inv_freq, bool neox) {
  // Angles are shared by all heads: compute them once per chunk of pairs (a stack buffer, so any
  // rope_dim works without allocating).
  constexpr int kChunk = 256;
  float cos_t[kChunk], sin_t[kChunk];
  const int half = rope_dim / 2;
  for (int i0 = 0; i0 < half; i0 += kChunk) {
    const int i1 = half < i0 + kChunk ? half : i0 + kChunk;
    for (int i = i0; i < i1; ++i) {
      const float theta = float(pos) * inv_freq[i];
      cos_t[i - i0] = std::cos(theta);
      sin_t[i - i0] = std::sin(theta);
    }
    for (int h = 0; h < n_heads; ++h) {
      float* v = x + int64_t(h) * head_dim;
      for (int i = i0; i < i1; ++i) {
        const int ia = neox ? i : 2 * i;
        const int ib = neox ? i + half : 2 * i + 1;
        const float a = v[ia], b = v[ib];
        v[ia] = a * cos_t[i - i0] - b * sin_t[i - i0];
        v[ib] = a * sin_t[i - i0] + b * cos_t[i - i0];
      }
    }
  }
}

}  // namespace kvserve
