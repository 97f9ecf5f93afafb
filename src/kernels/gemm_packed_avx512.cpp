// Repacked legacy-quant weights (Q8_0, Q4_0, Q5_0) and their AVX-512 VNNI GEMM
// (KernelTable::packed).
//
// Why: in the file's layout each weight row keeps its blocks together, so the row-major kernels
// (gemm_avx512.cpp) end every 32-element block of every (weight row, activation row) pair with f32
// work of their own: a convert, a scale product and an fma per vpdpbusd, then a horizontal sum.
// Interleaving 16 weight rows so that one zmm holds 4 consecutive elements of each of the 16 rows
// lets one vpdpbusd against a broadcast 4-byte group of activations advance 16 outputs at once: a
// block costs 8 vpdpbusd, then one convert, one multiply and one fma for 16 outputs, and the 16
// lanes are the 16 outputs (no horizontal sum). The weight bytes read are the same as the file's
// (the 4- and 5-bit formats stay nibble-packed; see the Pack* formats in packed_layout.h).
//
// The packed layout and the rearranged activation rows are described in packed_layout.h.
//
// Arithmetic per output (weight row r, activation row k), whatever the tile:
//   for each block b in order: isum = -kBias * sum_e x[k][e] + sum_e (q[r][e] + kBias) * x[k][e]
//   (exact int32: |isum| <= 32 * 255 * 127), then acc = fma(d[r][b] * dx[k][b], float(isum), acc).
// Integer partial sums may be split across registers (exact), the f32 steps never are, so an
// output depends neither on which activation rows share its tile nor on the thread split.
//
// This file follows gemm_avx512.cpp's rule: nothing from a shared header's inline functions, only
// intrinsics and this file's anonymous namespace (it is compiled with AVX-512 flags).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/packed_avx512_common.h"
#include "kernels/q8_0_block_avx512.h"

namespace kvserve {

namespace {

constexpr int kMaxTileCols = 8;                         // activation rows per register tile

// ---- the GEMM ----

// Decode streams every weight byte from memory once. The kernels hint the stream kWeightHintBytes
// ahead (packed_layout.h; on the Zen 5 VM, batch-8 decode at context 128 went from ~820 tok/s
// without a hint to ~1,150 with one), except paired Q8_0 with one activation row where
// paired_single_row_hints() says no: that is one sequential stream read at full speed, which on
// AMD the hardware prefetchers follow better on their own (the Zen 4 VM: paired Q8_0 with hints
// decoded smollm-135m batch 1 no faster than split Q8_0, median ratio 0.99 of 20 alternations,
// without them 9-23% faster; the Zen 5 VM: hints 0.94, 6 alternations). On an Intel Xeon VM
// (2026-12-06) the same stream without hints reached ~200 tok/s and ~300 with them (three
// alternations of `kvserve bench --prompt 16 --gen 128 --batch 1 --kv-type f16`). Batch 8
// without hints lost ~9% on Zen 5, so from two rows up the kernel hints everywhere.
template <typename F, int NC, bool kSingleRowHints>
constexpr size_t kHintAhead = F::kPaired && NC == 1 && !kSingleRowHints ? 0 : kWeightHintBytes;

// One group of 16 weight rows (w) times NC activation rows: y[k * ys + r]. Each block's integer
// sum starts at -kBias * (sum of the activation codes), which undoes the weight codes' bias. With
// one or two activation rows (decode) the 8 vpdpbusd of a block are split over two integer
// chains per row so that the chain latency does not bound a memory-streaming loop (exact).
// Acts: the rows themselves (Q8Rows) or an interleaved tile (Q8Tile, packed_layout.h), the same
// values: tiles of 4-8 rows read the tile, through one pointer (through Q8ActRow's 24 pointers
// GCC spilled them and the accumulators: with 8 rows in L1/L2 on the Zen 5 VM ~250 G
// multiply-adds per second per core against ~305 through the tile, BM_packed_kernel).
template <typename F, int NC, bool kSingleRowHints, typename Acts>
void group_tile(int64_t nb, const uint8_t* w, const Acts& a, float* y, size_t ys) {
  constexpr int kChains = NC <= 2 ? 2 : 1;
  using L = GroupLayout<F>;
  __m512 acc[NC];
#pragma GCC unroll 16
  for (int k = 0; k < NC; ++k) acc[k] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m512i s[kChains][NC];
#pragma GCC unroll 16
    for (int k = 0; k < NC; ++k) {
      s[0][k] = _mm512_set1_epi32(a.bias(k, b));
      if constexpr (kChains == 2) s[1][k] = _mm512_setzero_si512();
    }
    // The stream hint's lines spread over the block's code vectors (GroupLayout::hint_line).
    constexpr size_t kAhead = kHintAhead<F, NC, kSingleRowHints>;
    const int hint_lines = kAhead > 0 ? L::hint_lines(nb, b) : 0;
    __m512i v[8];
    unpack_codes(F{}, L::codes(w, nb, b), L::high(w, nb, b), v);
#pragma GCC unroll 16
    for (int j = 0; j < 8; ++j) {
      if (j < hint_lines) L::template hint_line<kAhead>(w, nb, b, j);
#pragma GCC unroll 16
      for (int k = 0; k < NC; ++k)
        s[j % kChains][k] =
            _mm512_dpbusd_epi32(s[j % kChains][k], v[j], _mm512_set1_epi32(load_i32(a.q(k, b) + 4 * j)));
    }
#pragma GCC unroll 16
    for (int j = 8; j < hint_lines; ++j) L::template hint_line<kAhead>(w, nb, b, j);
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(L::scales(w, nb, b))));
#pragma GCC unroll 16
    for (int k = 0; k < NC; ++k) {
      __m512i isum = s[0][k];
      if constexpr (kChains == 2) isum = _mm512_add_epi32(isum, s[1][k]);
      acc[k] =
          _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(a.dx(k, b))), _mm512_cvtepi32_ps(isum), acc[k]);
    }
  }
#pragma GCC unroll 16
  for (int k = 0; k < NC; ++k) _mm512_storeu_ps(y + size_t(k) * ys, acc[k]);
}

template <typename F, int NC, bool kSingleRowHints, typename Acts>
void groups(int64_t nb, const uint8_t* w, size_t gb, int64_t ng, const Acts& a, float* y, size_t ys) {
  for (int64_t g = 0; g < ng; ++g) group_tile<F, NC, kSingleRowHints>(nb, w + size_t(g) * gb, a, y + g * kRows, ys);
}

template <typename F, bool kSingleRowHints = true>
void gemm(int64_t cols, const void* w, size_t gb, int64_t ng, const void* x, size_t xs, int64_t nx, float* y,
          size_t ys) {
  const int64_t nb = cols / kQK;
  for_each_q8_tile<kMaxTileCols>(cols, x, xs, nx, y, ys, [&](auto width, const Q8ActRow* a, float* yk) {
    constexpr int NC = decltype(width)::value;
    // The interleave costs about what one group's pass saves (BM_packed_kernel, 8 rows, in L1/L2
    // on the Zen 5 VM: at 1,536 columns 1 group 926 against 760 ns, 2 groups 1,578 against 1,593,
    // 4 groups 2,887 against 3,134), so a call of one group keeps the rows as they are.
    const auto* wb = static_cast<const uint8_t*>(w);
    if constexpr (NC >= 4) {
      if (ng >= 2) {
        with_q8_tile<F, NC>(nb, a, [&](const Q8Tile<NC>& tile) {
          groups<F, NC, kSingleRowHints>(nb, wb, gb, ng, tile, yk, ys);
        });
        return;
      }
    }
    groups<F, NC, kSingleRowHints>(nb, wb, gb, ng, Q8Rows<F>{a}, yk, ys);
  });
}

// Lanes 0..7 of the result reduce (op) lanes j and j + 8 of a, lanes 8..15 those of b; then, per
// level, each vector's lane groups halve: after four levels over 16 vectors v[0..15], lane i holds
// the reduction of all 16 lanes of v[i]. Why: a horizontal reduction per block (_mm512_reduce_*)
// is ~8 shuffles and maxima or adds in one dependent chain; reducing 16 blocks together costs ~3
// operations per block.
template <typename Op>
inline __m512i reduce16_epi32(__m512i (&v)[16], Op op) {
  // idx_lo / idx_hi at level L take, from each of the two inputs, the first / second half of
  // every group of 2^(4-L) lanes.
  alignas(64) static constexpr int32_t kLo[4][16] = {
      {0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23},
      {0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27},
      {0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29},
      {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30}};
  alignas(64) static constexpr int32_t kHi[4][16] = {
      {8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31},
      {4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31},
      {2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31},
      {1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31}};
  int n = 16;
  for (int level = 0; level < 4; ++level, n /= 2) {
    const __m512i lo = _mm512_load_si512(kLo[level]), hi = _mm512_load_si512(kHi[level]);
    for (int i = 0; i < n / 2; ++i)
      v[i] = op(_mm512_permutex2var_epi32(v[2 * i], lo, v[2 * i + 1]),
                _mm512_permutex2var_epi32(v[2 * i], hi, v[2 * i + 1]));
  }
  return v[0];
}

// Blocks [b0, b0 + 16) of row xr into q8_quantize_pack's row layout, bit for bit what
// quantize_q8_0_block and the per-block steps give for finite input: the maxima are exact in any order, d =
// amax / 127 and its inverse are the same IEEE divisions in 16 lanes, and the codes' sums are exact integers.
inline void q8_quantize_16_blocks(const float* xr, int64_t b0, uint8_t* codes, float* dx, int32_t* sum) {
  __m512i v[16];
  for (int b = 0; b < 16; ++b) {
    const float* p = xr + (b0 + b) * kQK;
    v[b] = _mm512_castps_si512(
        _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(p)), _mm512_abs_ps(_mm512_loadu_ps(p + 16))));
  }
  // |x| as integers order as the floats do (both non-negative), so the integer maximum is exact.
  const __m512 amax =
      _mm512_castsi512_ps(reduce16_epi32(v, [](__m512i a, __m512i b) { return _mm512_max_epu32(a, b); }));
  const __m512 d = _mm512_div_ps(amax, _mm512_set1_ps(127.0f));
  const __mmask16 nonzero = _mm512_cmp_ps_mask(amax, _mm512_setzero_ps(), _CMP_NEQ_OQ);
  const __m512 id = _mm512_maskz_div_ps(nonzero, _mm512_set1_ps(127.0f), amax);
  _mm512_storeu_ps(dx + b0,
                   _mm512_cvtph_ps(_mm512_cvtps_ph(d, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
  const __m512i lim_lo = _mm512_set1_epi32(-128), lim_hi = _mm512_set1_epi32(127);
  for (int b = 0; b < 16; ++b) {
    const float* p = xr + (b0 + b) * kQK;
    const __m512 idb = _mm512_permutexvar_ps(_mm512_set1_epi32(b), id);
    const __m512i lo = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(p), idb));
    const __m512i hi = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(p + 16), idb));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + (b0 + b) * kQK), _mm512_cvtsepi32_epi8(lo));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + (b0 + b) * kQK + 16), _mm512_cvtsepi32_epi8(hi));
    v[b] = _mm512_add_epi32(_mm512_max_epi32(_mm512_min_epi32(lo, lim_hi), lim_lo),
                            _mm512_max_epi32(_mm512_min_epi32(hi, lim_hi), lim_lo));
  }
  _mm512_storeu_si512(sum + b0,
                      reduce16_epi32(v, [](__m512i a, __m512i b) { return _mm512_add_epi32(a, b); }));
}

// quantize_q8_0 (gemm_avx512.cpp) then q8_pack_acts (packed_layout.h) in one pass: per block the
// same quantize_q8_0_block and saturating narrowing, so the codes are the same bytes; dx is the f16 d widened
// back (as q8_pack_acts reads it) and sum the codes' sum, taken from the int32 codes clamped as the narrowing
// clamps them. It skips the q8_0 blocks in between: at 8 rows the two steps cost ~2 us per matmul call on the
// calling thread while the other threads wait (docs/benchmarks.md). Runs of 16 blocks go through
// q8_quantize_16_blocks: 3.4-3.6 ns per block against 6.2-6.5 one block at a time (8 rows of 576 or 1,536
// columns, one Zen 5 vCPU, a scratch timer over this function), which at batch 8 is ~2.3 us per layer.
void q8_quantize_pack(const float* x, int64_t m, int64_t cols, void* dst, size_t dst_stride) {
  const int64_t nb = cols / kQK;
  const size_t used = size_t(nb) * (kQK + 8);
  for (int64_t k = 0; k < m; ++k) {
    const float* xr = x + k * cols;
    uint8_t* row = static_cast<uint8_t*>(dst) + size_t(k) * dst_stride;
    auto* dx = reinterpret_cast<float*>(row + nb * kQK);
    auto* sum = reinterpret_cast<int32_t*>(row + nb * (kQK + 4));
    int64_t b = 0;
    for (; b + 16 <= nb; b += 16) q8_quantize_16_blocks(xr, b, row, dx, sum);
    for (; b < nb; ++b) {
      const Q8_0Block q = quantize_q8_0_block(xr + b * kQK);  // q8_0_block_avx512.h
      _mm_storeu_si128(reinterpret_cast<__m128i*>(row + b * kQK), _mm512_cvtsepi32_epi8(q.lo));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(row + b * kQK + 16), _mm512_cvtsepi32_epi8(q.hi));
      const __m512i lim_lo = _mm512_set1_epi32(-128), lim_hi = _mm512_set1_epi32(127);
      const __m512i clo = _mm512_max_epi32(_mm512_min_epi32(q.lo, lim_hi), lim_lo);
      const __m512i chi = _mm512_max_epi32(_mm512_min_epi32(q.hi, lim_hi), lim_lo);
      sum[b] = _mm512_reduce_add_epi32(_mm512_add_epi32(clo, chi));
      dx[b] = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(q.d)));
    }
    std::memset(row + used, 0, dst_stride - used);
  }
}

}  // namespace

void fill_avx512_packed_kernels(KernelTable* t) {
  t->packed[int(GgmlType::Q8_0)] = paired_single_row_hints()
                                       ? legacy_packed_kernels<PackQ8_0, gemm<PackQ8_0, true>>()
                                       : legacy_packed_kernels<PackQ8_0, gemm<PackQ8_0, false>>();
  t->packed[int(GgmlType::Q4_0)] = legacy_packed_kernels<PackQ4_0, gemm<PackQ4_0>>();
  t->packed[int(GgmlType::Q5_0)] = legacy_packed_kernels<PackQ5_0, gemm<PackQ5_0>>();
  for (GgmlType type : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q5_0}) {
    t->packed[int(type)].quantize_pack_acts = q8_quantize_pack;
    // A call of 4-8 rows interleaves its rows once (with_q8_tile), whatever its groups.
    t->packed[int(type)].whole_range_rows = kMaxTileCols;
    // Longer calls (prefill) interleave each 8-row tile once per tile of groups, so tiles larger
    // than matmul's 48 KiB default pay: smollm-135m Q8_0 prefill 512 2,702-2,733 -> 2,852-2,910
    // tok/s with 128 KiB (three alternations, Zen 5 VM); the kernel reads the tile's weights from
    // L2 at ~16 bytes per cycle, well within what L2 delivers.
    t->packed[int(type)].tile_bytes = 128 * 1024;
  }
}

}  // namespace kvserve
