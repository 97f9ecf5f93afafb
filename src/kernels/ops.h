// Element-wise and row f32 operations of the transformer forward pass.
// All pointers are to contiguous f32 arrays; `out` may alias an input unless stated otherwise.
// Numerics follow the reference engine where it matters for golden logits (sums of squares and
// softmax denominators in double; expf/cosf/sinf in float).
#pragma once

#include <cstdint>

namespace kvserve {

// out[i] = x[i] / sqrt(mean(x^2) + eps) * weight[i]. weight may be null (no gain).
void rmsnorm(const float* x, const float* weight, int64_t n, float eps, float* out);

// out[i] = x[i] / (1 + exp(-x[i])).
void silu(const float* x, int64_t n, float* out);
// out[i] = silu(gate[i]) * up[i]  (the SwiGLU feed-forward gate).
void swiglu(const float* gate, const float* up, int64_t n, float* out);
// swiglu over 16-value chunks whose gate and up halves alternate, as a GEMM over gate's and up's
// rows interleaved 16 at a time writes them: out[16 c + j] = silu(y[32 c + j]) * y[32 c + 16 + j]
// for c in [0, chunks), j in [0, 16), bit for bit swiglu's value for that pair. out must not alias y.
void swiglu_pairs16(const float* y, int64_t chunks, float* out);

// out[i] = a[i] + b[i].
void add(const float* a, const float* b, int64_t n, float* out);
// out[i] = x[i] * s.
void scale(const float* x, float s, int64_t n, float* out);

// x = exp(x - max) / sum(exp(x - max)), in place. n >= 1.
void softmax(float* x, int64_t n);

// Inverse frequencies for rotary embeddings, folded with position scaling:
//   inv_freq[i] = freq_scale * base^(-2i/rope_dim) / factors[i]   for i in [0, rope_dim/2)
// base^(-2i/d) is built in float by repeated multiplication with base^(-2/d), as the reference
// engine does. freq_scale is the linear-scaling factor (1 / context-extension ratio);
// factors may be null (Llama-3 "rope_freqs" tensor otherwise, length rope_dim/2).
void rope_inv_freq(float freq_base, float freq_scale, const float* factors, int rope_dim, float* inv_freq);

// Rotates the first rope_dim dimensions of each head of x ([n_heads][head_dim]) by
// theta_i = pos * inv_freq[i]:
//   normal (neox = false): pairs (x[2i], x[2i+1]);   neox: pairs (x[i], x[i + rope_dim/2]).
// (a, b) -> (a cos - b sin, a sin + b cos). Dimensions >= rope_dim are left as they are.
void apply_rope(float* x, int n_heads, int head_dim, int rope_dim, int pos, const float* inv_freq, bool neox);

// Reference-exact angles for one position (preferred over inv_freq when matching golden logits):
//   theta_i = freq_scale * ((pos * s^i) / factors[i]),   s = base^(-2/rope_dim),
// where pos * s^i is formed by repeated f32 multiplication starting from pos, in the reference
// engine's order, so the angles agree bit for bit rather than within a few ulps. (With the inv_freq
// form, ulp-level angle differences occasionally flip an 8-bit activation rounding downstream:
// on tiny-llama-q4_k_m that alone moved the golden NMSE from 3e-14 to 8e-5.)
// cos_t, sin_t: [rope_dim/2]. factors may be null.
void rope_cos_sin(int pos, float freq_base, float freq_scale, const float* factors, int rope_dim, float* cos_t,
                  float* sin_t);
// apply_rope with angles from rope_cos_sin (compute them once per position for both q and k).
void apply_rope_cos_sin(float* x, int n_heads, int head_dim, int rope_dim, const float* cos_t, const float* sin_t,
                        bool neox);

}  // namespace kvserve
