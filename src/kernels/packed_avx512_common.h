// Internal to the AVX-512 packed-GEMM files (gemm_packed_*_avx512.cpp and gemm_packed_amx.cpp,
// all compiled with AVX-512 flags): the shared layout (packed_layout.h) and the AVX-512 pieces they share.
//
// The anonymous namespace gives every including file its own copy (internal linkage): a shared
// inline copy could be handed by the linker to code that runs on CPUs without AVX-512.
#pragma once

#include <immintrin.h>

#include "kernels/packed_layout.h"

namespace kvserve {
namespace {

// Code vectors 0..7 of a PackQ4_0 block (256 bytes: vectors 2i and 2i+1 as the low and high
// nibbles of bytes 64i ..), one zmm each.
inline void unpack_nibbles(const uint8_t* codes, __m512i v[8]) {
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  for (int i = 0; i < 4; ++i) {
    const __m512i both = _mm512_loadu_si512(codes + 64 * i);
    v[2 * i] = _mm512_and_si512(both, low4);
    v[2 * i + 1] = _mm512_and_si512(_mm512_srli_epi16(both, 4), low4);
  }
}

// The 8 code vectors of a block (packed_layout.h) as zmm registers of unsigned codes, for each
// legacy format (codes: the block's code bytes; high: its fifth bits, Q5_0 only).
inline void unpack_codes(PackQ8_0, const uint8_t* codes, const uint8_t*, __m512i v[8]) {
  for (int j = 0; j < 8; ++j) v[j] = _mm512_loadu_si512(codes + 64 * j);
}

inline void unpack_codes(PackQ4_0, const uint8_t* codes, const uint8_t*, __m512i v[8]) { unpack_nibbles(codes, v); }

// v | (bit j of each byte of h, moved to bit kBit): the extra high bit of code vector j (Q5_0's
// and Q5_K's fifth, Q3_K's third) from a 64-byte vector whose byte b holds those bits of byte b of
// 8 code vectors. One 16-bit shift and one ternary-logic op: a bit that a 16-bit shift carries
// into the neighbouring byte never lands on bit kBit there.
template <int kBit>
inline __m512i or_high_bit(__m512i v, __m512i h, int j) {
  const __m512i at = j < kBit ? _mm512_slli_epi16(h, unsigned(kBit - j)) : _mm512_srli_epi16(h, unsigned(j - kBit));
  return _mm512_ternarylogic_epi32(v, at, _mm512_set1_epi8(char(1 << kBit)), 0xF8);  // v | (at & bit)
}

// Q5_0: the nibbles plus the fifth bits (packed_layout.h).
inline void unpack_codes(PackQ5_0, const uint8_t* codes, const uint8_t* high, __m512i v[8]) {
  unpack_nibbles(codes, v);
  const __m512i h = _mm512_loadu_si512(high);
  for (int j = 0; j < 8; ++j) v[j] = or_high_bit<4>(v[j], h, j);
}

}  // namespace
}  // namespace kvserve
