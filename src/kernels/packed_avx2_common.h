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

// v | (bit j of each byte of h, moved to bit kBit): half of code vector j plus its extra high bit
// (Q5_0's and Q5_K's fifth, Q3_K's third), h being the matching half of a 64-byte vector whose
// byte b holds those bits of byte b of 8 code vectors. A bit that a 16-bit shift carries into the
// neighbouring byte never lands on bit kBit there.
template <int kBit>
inline __m256i or_high_bit(__m256i v, __m256i h, int j) {
  const __m256i at = j < kBit ? _mm256_slli_epi16(h, kBit - j) : _mm256_srli_epi16(h, j - kBit);
  return _mm256_or_si256(v, _mm256_and_si256(at, _mm256_set1_epi8(char(1 << kBit))));
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
