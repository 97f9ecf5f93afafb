// Repacked F16, BF16 and F32 weights and their AVX-512 GEMM (KernelTable::packed[F16 / BF16 / F32];
// BF16 only on CPUs without avx512_bf16, whose vdpbf16ps kernel is gemm_packed_bf16_avx512.cpp).
//
// F16 and F32 weights meet f32 activations (vec_dot.h), so a dot product is plain FMAs; the
// row-major AVX2 kernels still end each (weight row, activation row) pair in a horizontal sum and
// load every activation vector once per weight row. Interleaving 16 weight rows per element
// (the same idea as gemm_packed_avx512.cpp) makes one zmm hold element e of 16 rows: one load
// (and, for f16, one vcvtph2ps) then one FMA per activation row against the broadcast x[e]
// advances 16 outputs, and the lanes are the outputs.
//
// The packed layout ([cols][16] elements per group of 16 rows) is described in packed_layout.h.
//
// Arithmetic per output (row r, activation row k), whatever the tile: two f32 chains,
// acc0 over the even columns and acc1 over the odd ones, each a sequence of fma(w, x, acc) in
// column order, then acc0 + acc1 (a remainder column goes to acc0). The same for every tile
// width, so results depend neither on the batch nor on the thread split.
//
// Like the other AVX-512 files: no inline functions from shared headers, only intrinsics and
// this file's anonymous namespace.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/packed_avx512_common.h"

namespace kvserve {

namespace {

constexpr int kMaxTileCols = 8;                 // activation rows per register tile (2 x 8 accumulators)

struct PackF16 {
  using Elem = uint16_t;
  static __m512 load(const uint8_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
};

struct PackBF16 {
  using Elem = uint16_t;
  static __m512 load(const uint8_t* p) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  }
};

struct PackF32 {
  using Elem = float;
  static __m512 load(const uint8_t* p) { return _mm512_loadu_ps(p); }
};

// One group (w) times NC activation rows x[k] (f32): y[k * ys + r].
// The loops over activation rows are unrolled by pragma: without it GCC kept a0/a1 in memory as
// well (zeroed by `rep stos`) and stored all 2 * NC accumulators back every column pair, which
// made 4-64 rows 2-2.6x slower (BM_matmul/{0,1,30}/{4,8,64}/1 on the Zen 5 VM; smollm-135m F16
// prefill 512 and batch-8 decode ~2x faster with it, docs/benchmarks.md "Unrolled AVX-512 float
// GEMM"). gemm_packed_bf16_avx512.cpp's kernel had the same trouble and the same cure.
template <typename F, int NC, bool kSingleRowHints>
void group_tile(int64_t cols, const uint8_t* w, const float* const* x, float* y, size_t ys) {
  constexpr size_t kStep = kRows * sizeof(typename F::Elem);  // bytes per column of the group
  __m512 a0[NC], a1[NC];
#pragma GCC unroll 16
  for (int k = 0; k < NC; ++k) a0[k] = a1[k] = _mm512_setzero_ps();
  int64_t c = 0;
  for (; c + 2 <= cols; c += 2) {
    const uint8_t* p = w + size_t(c) * kStep;
    // The decode-sized case streams the group from memory (packed_layout.h's hint; on the Zen 5 VM
    // a hint 2 KiB ahead was too short to cover the latency: smollm F16 batch 8 ~790 -> ~940 tok/s
    // at 8 KiB). A single row reads the group as one sequential stream, which on the Zen 4 VM ran
    // faster without hints: smollm decode F16 +28% and F32 +19% (median ratios of 10 and 8
    // alternations, `--prompt 16 --gen 32 --batch 1 --kv-type f16`); on the Zen 5 VM with them:
    // F16 +22% (6 alternations, `--gen 64`). single_stream_hints() picks per CPU. BF16 shares the
    // kernel where the CPU lacks avx512_bf16 (not measured; gemm_packed_bf16_avx512.cpp elsewhere).
    if constexpr (NC > 1 || kSingleRowHints) {
      hint_weights(p + kWeightHintBytes);
      if constexpr (kStep == 64) hint_weights(p + kWeightHintBytes + 64);
    }
    const __m512 w0 = F::load(p), w1 = F::load(p + kStep);
#pragma GCC unroll 16
    for (int k = 0; k < NC; ++k) {
      a0[k] = _mm512_fmadd_ps(w0, _mm512_set1_ps(x[k][c]), a0[k]);
      a1[k] = _mm512_fmadd_ps(w1, _mm512_set1_ps(x[k][c + 1]), a1[k]);
    }
  }
  if (c < cols) {
    const __m512 w0 = F::load(w + size_t(c) * kStep);
#pragma GCC unroll 16
    for (int k = 0; k < NC; ++k) a0[k] = _mm512_fmadd_ps(w0, _mm512_set1_ps(x[k][c]), a0[k]);
  }
#pragma GCC unroll 16
  for (int k = 0; k < NC; ++k) _mm512_storeu_ps(y + size_t(k) * ys, _mm512_add_ps(a0[k], a1[k]));
}

template <typename F, int NC, bool kSingleRowHints>
void groups(int64_t cols, const uint8_t* w, size_t gb, int64_t ng, const float* const* x, float* y, size_t ys) {
  for (int64_t g = 0; g < ng; ++g) group_tile<F, NC, kSingleRowHints>(cols, w + size_t(g) * gb, x, y + g * kRows, ys);
}

template <typename F, bool kSingleRowHints>
void gemm(int64_t cols, const void* w, size_t gb, int64_t ng, const void* x, size_t xs, int64_t nx, float* y,
          size_t ys) {
  const auto* wb = static_cast<const uint8_t*>(w);
  for_each_float_tile<kMaxTileCols>(x, xs, nx, y, ys, [&](auto width, const float* const* xr, float* yk) {
    groups<F, decltype(width)::value, kSingleRowHints>(cols, wb, gb, ng, xr, yk, ys);
  });
}

// The three float formats' table entries, with or without single-row hints.
template <bool kSingleRowHints>
void fill_float_kernels(KernelTable* t) {
  t->packed[int(GgmlType::F16)] = float_packed_kernels<uint16_t, gemm<PackF16, kSingleRowHints>>();
  t->packed[int(GgmlType::F32)] = float_packed_kernels<float, gemm<PackF32, kSingleRowHints>>();
  t->packed[int(GgmlType::BF16)] = bf16_packed_kernels<gemm<PackBF16, kSingleRowHints>>();
}

}  // namespace

void fill_avx512_packed_float_kernels(KernelTable* t) {
  if (single_stream_hints()) {
    fill_float_kernels<true>(t);
  } else {
    fill_float_kernels<false>(t);
  }
}

}  // namespace kvserve
