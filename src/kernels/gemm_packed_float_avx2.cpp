// Repacked F16, BF16 and F32 weights and their AVX2 GEMM (KernelTable::packed[F16 / BF16 / F32] of the AVX2
// table): the layout of packed_layout.h ([cols][16] elements per group of 16 rows, the same bytes
// as the AVX-512 table's), read as two 8-row halves: one load (and, for f16, one vcvtph2ps) of a
// column's 8 elements, then one FMA per activation row against the broadcast x[c], advances 8
// outputs (see gemm_packed_float_avx512.cpp for why).
//
// Arithmetic per output, whatever the tile: the AVX-512 file's two chains (even columns, odd
// columns, each fma(w, x, acc) in column order) summed at the end.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/packed_avx2_common.h"

namespace kvserve {

namespace {


// 8 elements (one half of a column) as f32.
struct LoadF16 {
  static __m256 load(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
};
struct LoadBF16 {
  static __m256 load(const uint8_t* p) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
};
struct LoadF32 {
  static __m256 load(const uint8_t* p) { return _mm256_loadu_ps(reinterpret_cast<const float*>(p)); }
};

// Halves h0 .. h0 + H - 1 of one group (w) times NC activation rows x[k] (f32):
// y[k * ys + 8 (h - h0) + r]. H = 2 (one pass over the columns) for one or two rows.
template <typename E, typename L, int NC, int H>
void halves_tile(int64_t cols, const uint8_t* w, int h0, const float* const* x, float* y, size_t ys) {
  constexpr size_t kStep = kRows * sizeof(E);  // bytes per column of the group
  constexpr size_t kHalf = kStep / 2;
  __m256 a0[H][NC], a1[H][NC];
  for (int h = 0; h < H; ++h)
    for (int k = 0; k < NC; ++k) a0[h][k] = a1[h][k] = _mm256_setzero_ps();
  int64_t c = 0;
  for (; c + 2 <= cols; c += 2) {
    const uint8_t* p = w + size_t(c) * kStep;
    if (h0 == 0) {  // the pass that streams the group from memory (packed_layout.h's hint)
      hint_weights(p + kWeightHintBytes);
      if constexpr (kStep == 64) hint_weights(p + kWeightHintBytes + 64);
    }
    for (int h = 0; h < H; ++h) {
      const __m256 w0 = L::load(p + kHalf * size_t(h0 + h)), w1 = L::load(p + kStep + kHalf * size_t(h0 + h));
      for (int k = 0; k < NC; ++k) {
        a0[h][k] = _mm256_fmadd_ps(w0, _mm256_set1_ps(x[k][c]), a0[h][k]);
        a1[h][k] = _mm256_fmadd_ps(w1, _mm256_set1_ps(x[k][c + 1]), a1[h][k]);
      }
    }
  }
  if (c < cols)
    for (int h = 0; h < H; ++h) {
      const __m256 w0 = L::load(w + size_t(c) * kStep + kHalf * size_t(h0 + h));
      for (int k = 0; k < NC; ++k) a0[h][k] = _mm256_fmadd_ps(w0, _mm256_set1_ps(x[k][c]), a0[h][k]);
    }
  for (int h = 0; h < H; ++h)
    for (int k = 0; k < NC; ++k) _mm256_storeu_ps(y + size_t(k) * ys + 8 * h, _mm256_add_ps(a0[h][k], a1[h][k]));
}

template <typename E, typename L>
void gemm(int64_t cols, const void* w, size_t gb, int64_t ng, const void* x, size_t xs, int64_t nx, float* y,
          size_t ys) {
  const auto* wb = static_cast<const uint8_t*>(w);
  for_each_float_tile<kMaxTileCols>(x, xs, nx, y, ys, [&](auto width, const float* const* xr, float* yk) {
    constexpr int kNC = decltype(width)::value;
    for_each_group_halves<kNC>(ng, wb, gb, yk, [&](auto halves, const uint8_t* wg, int h0, float* yh) {
      halves_tile<E, L, kNC, decltype(halves)::value>(cols, wg, h0, xr, yh, ys);
    });
  });
}

}  // namespace

void fill_avx2_packed_float_kernels(KernelTable* t) {
  t->packed[int(GgmlType::F16)] = float_packed_kernels<uint16_t, gemm<uint16_t, LoadF16>>();
  t->packed[int(GgmlType::F32)] = float_packed_kernels<float, gemm<float, LoadF32>>();
  t->packed[int(GgmlType::BF16)] = bf16_packed_kernels<gemm<uint16_t, LoadBF16>>();
}

}  // namespace kvserve
