// Internal to the AVX2 packed-GEMM kernels (gemm_packed_legacy_avx2.h, gemm_packed_kquant_avx2.h): the
// shared layout (packed_layout.h) read as two 256-bit halves per 64-byte code vector (weight rows
// 8h .. 8h+7 for half h). Internal linkage, as packed_layout.h explains.
#pragma once

#include <immintrin.h>

#include "kernels/packed_layout.h"

namespace kvserve {
namespace {

constexpr int kMaxTileCols = 4;  // activation rows per register tile (16 ymm registers)

inline __m256i load256(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// The 4 activation bytes at p in every 32-bit lane.
inline __m256i broadcast4(const int8_t* p) { return _mm256_set1_epi32(load_i32(p)); }

// Half h of code vector j of a block stored as PackQ4_0 stores one (vectors 2i and 2i+1 as the
// low and high nibbles of bytes 64i ..): unsigned codes 0..15.
inline __m256i nibble_half(const uint8_t* codes, int h, int j) {
  const __m256i both = load256(codes + 64 * (j / 2) + 32 * h);
  return _mm256_and_si256(j % 2 ? _mm256_srli_epi16(both, 4) : both, _mm256_set1_epi8(0x0F));
}

// v + add where a mask bit is set (Q5_0/Q5_K's fifth bits: 16; Q3_K's third bits: 4): half h of
// a code vector whose 64-bit mask is at mask (bits 32h .. 32h+31 belong to the half, byte b
// taking bit b). Each 128-bit lane holds the half's 4 mask bytes; lane 0's bytes take mask bytes
// 0 and 1, lane 1's take 2 and 3, then each byte keeps its own bit.
inline __m256i add_where_set(__m256i v, const uint8_t* mask, int h, char add) {
  const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                                          2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i bit = _mm256_set1_epi64x(int64_t(0x8040201008040201ULL));
  const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(int32_t(load_u32(mask + 4 * h))), spread);
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
  return _mm256_add_epi8(v, _mm256_and_si256(set, _mm256_set1_epi8(add)));
}

// Every group of a packed matrix (ng groups, gb bytes apart from w) for one tile of NC
// activation rows: tile(halves, group, h0, y_half) covers halves h0 .. h0 + halves - 1 (an
// integral_constant) of the group and writes their outputs from y_half. One or two activation
// rows (decode) take both halves in one pass, so each code is read once; wider tiles take one
// half per pass (registers), the second finding the codes the first pulled into cache.
template <int NC, typename Tile>
inline void for_each_group_halves(int64_t ng, const uint8_t* w, size_t gb, float* y, Tile&& tile) {
  for (int64_t g = 0; g < ng; ++g) {
    if constexpr (NC <= 2) {
      tile(std::integral_constant<int, 2>{}, w + size_t(g) * gb, 0, y + g * kRows);
    } else {
      for (int h = 0; h < 2; ++h) tile(std::integral_constant<int, 1>{}, w + size_t(g) * gb, h, y + g * kRows + 8 * h);
    }
  }
}

}  // namespace
}  // namespace kvserve
