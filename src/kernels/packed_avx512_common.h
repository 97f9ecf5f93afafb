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

// Q5_0: one masked byte add of 16 per vector for the fifth bits.
inline void unpack_codes(PackQ5_0, const uint8_t* codes, const uint8_t* high, __m512i v[8]) {
  unpack_nibbles(codes, v);
  for (int j = 0; j < 8; ++j) {
    uint64_t bits;
    std::memcpy(&bits, high + 8 * j, 8);
    v[j] = _mm512_mask_add_epi8(v[j], _cvtu64_mask64(bits), v[j], _mm512_set1_epi8(16));
  }
}

}  // namespace
}  // namespace kvserve
