// Internal to gemm_packed_avx2.cpp and gemm_packed_avxvnni.cpp: the GEMM over repacked
// legacy-quant weights (Q8_0, Q4_0, Q5_0) of the AVX2 and AVX-VNNI tables (KernelTable::packed):
// the baseline every target machine has, so a machine without AVX-512 gets the same layout's
// benefits (packed_layout.h; the same bytes as the AVX-512 table's packing). Templated on kVnni:
// the integer products through AVX-VNNI's 256-bit vpdpbusd (only instantiated in the file
// compiled with -mavxvnni) or through maddubs + madd. Internal linkage: each including file gets
// its own copy, compiled with its own flags.
//
// Why: the row-major AVX2 kernels (vec_dot_avx2.cpp) end every 32-element block of every (weight
// row, activation row) pair with f32 work (convert, scale product, fma) and a horizontal sum per
// output. Here one 256-bit half of a code vector holds 4 consecutive elements of 8 weight rows,
// so the integer multiply-adds against a broadcast 4-byte group of activations advance 8 outputs
// at once, and a block ends in one convert, one multiply and one fma per 8 outputs.
//
// Integer arithmetic per (half code vector, activation row), exact:
//   Q8_0: the codes are q + 128; v = codes ^ 0x80 = q (s8). maddubs needs one unsigned operand,
//         so it takes |q| (u8, <= 128) against x * sign(q) (|x| <= 127: q8_0 activations never
//         hold -128): pairs <= 2 * 128 * 127 < 2^15, no saturation; then madd with ones -> int32.
//   Q4_0, Q5_0: the codes (q + 8, q + 16 <= 31) are already unsigned: maddubs(codes, x), pairs
//         <= 2 * 31 * 127; four of them add in int16 (<= 31,496 < 2^15) before one madd, and the
//         block's sum starts at -kBias * sum(x) to undo the bias.
//   With kVnni the same operands go through vpdpbusd (u8 x s8, four products summed into each
//   int32 lane): the same exact sums, so the two variants are bit-identical.
// Then per block acc = fma(d[r][b] * dx[k][b], float(isum), acc), in that order for every output
// whatever the tile (exact integer sums may be split differently), so results depend neither on
// the batch nor on the thread split; they differ from the row-major kernels only in f32 order.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/packed_avx2_common.h"

namespace kvserve {
namespace {

// Every format hints its stream kWeightHintBytes ahead, paired Q8_0 included: on the Zen 4 VM
// (AVX2 table) paired Q8_0 without hints decoded smollm-135m ~9% slower than with them, and with
// them as fast as the split layout did (median of 12 alternations; the AVX-512 kernel is the
// other way round, gemm_packed_avx512.cpp).
constexpr size_t kAvx2HintAhead = kWeightHintBytes;

// Half h (weight rows 8h .. 8h+7) of code vector j of a block: elements 4j .. 4j+3 of those rows.
// Q8_0 gives signed q, the others unsigned codes. One vector at a time, so that a tile of four
// activation rows keeps its accumulators in registers.
inline __m256i code_vector(PackQ8_0, const uint8_t* codes, const uint8_t*, int h, int j) {
  return _mm256_xor_si256(load256(codes + 64 * j + 32 * h), _mm256_set1_epi8(char(0x80)));
}

inline __m256i code_vector(PackQ4_0, const uint8_t* codes, const uint8_t*, int h, int j) {
  return nibble_half(codes, h, j);
}

// Q5_0: the nibbles plus vector j's fifth bits (packed_layout.h).
inline __m256i code_vector(PackQ5_0, const uint8_t* codes, const uint8_t* high, int h, int j) {
  return or_high_bit<4>(nibble_half(codes, h, j), load256(high + 32 * h), j);
}

// The exact integer sums of block b for NC activation rows against half h of its codes (cb, hb):
// s[k] (8 int32 lanes, one per weight row of the half). hint(j) runs once per code vector j (0..7),
// for the caller's spread stream hints.
// The loops over code vectors, halves and activation rows are unrolled by pragma (not the block
// loop, nor the VNNI branch's, which GCC unrolls well by itself: pragmas there made Q5_0 at 8-64
// rows ~5% slower): GCC left the non-VNNI Q4_0 / Q5_0 loops rolled, with the int16 pair sums and
// the accumulators on the stack, and one activation row streamed 9-11 GB/s per core instead of
// ~30-35 (BM_matmul/{2,6}/1/1 with KVSERVE_KERNELS=avx2 on the Zen 5 VM; smollm-135m Q4_K_M,
// mostly Q5_0, decoded ~2.3x faster with the AVX2 table; docs/benchmarks.md "Unrolled AVX2
// legacy GEMV").
template <typename F, int NC, bool kVnni, typename Hint>
inline void block_sums(const uint8_t* cb, const uint8_t* hb, int h, const Q8ActRow* a, int64_t b,
                       __m256i s[NC], Hint&& hint) {
  const __m256i ones = _mm256_set1_epi16(1);
  if constexpr (F::kBias == 128) {  // Q8_0: signed codes, |q| against x * sign(q)
#pragma GCC unroll 16
    for (int k = 0; k < NC; ++k) s[k] = _mm256_setzero_si256();
#pragma GCC unroll 16
    for (int j = 0; j < 8; ++j) {
      hint(j);
      const __m256i v = code_vector(F{}, cb, hb, h, j);
      const __m256i u = _mm256_sign_epi8(v, v);
#pragma GCC unroll 16
      for (int k = 0; k < NC; ++k) {
        const __m256i x = _mm256_sign_epi8(broadcast4(a[k].q + b * kQK + 4 * j), v);
        if constexpr (kVnni) {
          s[k] = _mm256_dpbusd_avx_epi32(s[k], u, x);
        } else {
          s[k] = _mm256_add_epi32(s[k], _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), ones));
        }
      }
    }
  } else if constexpr (kVnni) {  // unsigned codes straight into vpdpbusd
    for (int k = 0; k < NC; ++k) s[k] = _mm256_set1_epi32(-F::kBias * a[k].sum[b]);
    for (int j = 0; j < 8; ++j) {
      hint(j);
      const __m256i v = code_vector(F{}, cb, hb, h, j);
      for (int k = 0; k < NC; ++k)
        s[k] = _mm256_dpbusd_avx_epi32(s[k], v, broadcast4(a[k].q + b * kQK + 4 * j));
    }
  } else {  // unsigned codes <= 31: four pair sums add in int16
#pragma GCC unroll 16
    for (int k = 0; k < NC; ++k) s[k] = _mm256_set1_epi32(-F::kBias * a[k].sum[b]);
#pragma GCC unroll 16
    for (int j0 = 0; j0 < 8; j0 += 4) {
      __m256i p[NC] = {};  // (set at j0: the initializer only quiets -Wmaybe-uninitialized)
#pragma GCC unroll 16
      for (int j = j0; j < j0 + 4; ++j) {
        hint(j);
        const __m256i v = code_vector(F{}, cb, hb, h, j);
#pragma GCC unroll 16
        for (int k = 0; k < NC; ++k) {
          const __m256i m = _mm256_maddubs_epi16(v, broadcast4(a[k].q + b * kQK + 4 * j));
          p[k] = j == j0 ? m : _mm256_add_epi16(p[k], m);
        }
      }
#pragma GCC unroll 16
      for (int k = 0; k < NC; ++k) s[k] = _mm256_add_epi32(s[k], _mm256_madd_epi16(p[k], ones));
    }
  }
}

// Halves h0 .. h0 + H - 1 of one group of 16 weight rows (w) times NC activation rows:
// y[k * ys + 8 (h - h0) + r] for row r of half h (see for_each_group_halves).
template <typename F, int NC, int H, bool kVnni>
void halves_tile(int64_t nb, const uint8_t* w, int h0, const Q8ActRow* a, float* y, size_t ys) {
  using L = GroupLayout<F>;
  __m256 acc[H][NC];
#pragma GCC unroll 16
  for (int h = 0; h < H; ++h)
#pragma GCC unroll 16
    for (int k = 0; k < NC; ++k) acc[h][k] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    // The pass that streams the group from memory hints it ahead, one line per code vector of
    // the first half (GroupLayout::hint_line: spread, not at once).
    const int hint_lines = h0 == 0 ? L::hint_lines(nb, b) : 0;
    for (int j = 8; j < hint_lines; ++j) L::template hint_line<kAvx2HintAhead>(w, nb, b, j);
#pragma GCC unroll 16
    for (int h = 0; h < H; ++h) {
      __m256i s[NC];
      block_sums<F, NC, kVnni>(L::codes(w, nb, b), L::high(w, nb, b), h0 + h, a, b, s, [&](int j) {
        if (h == 0 && j < hint_lines) L::template hint_line<kAvx2HintAhead>(w, nb, b, j);
      });
      const __m256 dw = _mm256_cvtph_ps(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(L::scales(w, nb, b) + 16 * size_t(h0 + h))));
#pragma GCC unroll 16
      for (int k = 0; k < NC; ++k)
        acc[h][k] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(a[k].dx[b])), _mm256_cvtepi32_ps(s[k]),
                                    acc[h][k]);
    }
  }
#pragma GCC unroll 16
  for (int h = 0; h < H; ++h)
#pragma GCC unroll 16
    for (int k = 0; k < NC; ++k) _mm256_storeu_ps(y + size_t(k) * ys + 8 * h, acc[h][k]);
}

template <typename F, bool kVnni>
void gemm(int64_t cols, const void* w, size_t gb, int64_t ng, const void* x, size_t xs, int64_t nx, float* y,
          size_t ys) {
  const auto* wb = static_cast<const uint8_t*>(w);
  for_each_q8_tile<kMaxTileCols>(cols, x, xs, nx, y, ys, [&](auto width, const Q8ActRow* a, float* yk) {
    constexpr int kNC = decltype(width)::value;
    for_each_group_halves<kNC>(ng, wb, gb, yk, [&](auto halves, const uint8_t* wg, int h0, float* yh) {
      halves_tile<F, kNC, decltype(halves)::value, kVnni>(cols / kQK, wg, h0, a, yh, ys);
    });
  });
}

}  // namespace
}  // namespace kvserve
