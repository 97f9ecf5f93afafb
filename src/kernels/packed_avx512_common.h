// Internal to the packed-GEMM files (gemm_packed_*_avx512.cpp, all compiled with AVX-512
// flags): the pieces they share, and the activation-row tiling of a packed GEMM call with the
// tile width (1..8) as a compile-time constant so that register tiles are unrolled per width.
//
// The anonymous namespace gives every including file its own copy (internal linkage): a shared
// inline copy could be handed by the linker to code that runs on CPUs without AVX-512.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/vec_dot.h"
#include "tensor/block_formats.h"

namespace kvserve {
namespace {

constexpr int kRows = kPackedRows;                      // 16 weight rows per group = zmm lanes
constexpr size_t kScaleBytes = size_t(kRows) * 2;       // 32: one block of a group's f16 scales
constexpr int64_t kMaxCols = int64_t(1) << 16;          // wider quantized rows stay in the file layout

inline size_t round64(size_t v) { return (v + 63) & ~size_t(63); }

inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

inline int32_t load_i32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// prefetcht0 of p's line. Inline asm because GCC may delete a __builtin_prefetch it deems pure
// (kernels/attention_impl.h).
inline void prefetch_line(const uint8_t* p) { asm volatile("prefetcht0 %0" : : "m"(*p)); }

// Code vector j (j = 0..7) of a block of 32 columns is the zmm whose byte 4r + i is the code of
// row r, element 4j + i; vpdpbusd of it against the broadcast activation codes 4j..4j+3 advances
// all 16 rows.
struct PackQ4_0 {
  using Block = BlockQ4_0;
  static constexpr int kBias = 8;
  static constexpr size_t kCodeBytes = 256, kHighBytes = 0;
  static uint8_t code(const Block& b, int e) { return e < 16 ? (b.qs[e] & 0x0F) : (b.qs[e - 16] >> 4); }
  static void store(uint8_t* codes, uint8_t*, int j, int byte, uint8_t c) {
    codes[64 * (j / 2) + byte] |= uint8_t(c << (4 * (j % 2)));
  }
  static void unpack(const uint8_t* codes, const uint8_t*, __m512i v[8]) {
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    for (int i = 0; i < 4; ++i) {
      const __m512i both = _mm512_loadu_si512(codes + 64 * i);
      v[2 * i] = _mm512_and_si512(both, low4);
      v[2 * i + 1] = _mm512_and_si512(_mm512_srli_epi16(both, 4), low4);
    }
  }
};

// Q5_0: Q4_0's nibbles plus, per code vector, a 64-bit mask of the fifth bits (64 bytes),
// code = q + 16 (nibble + 16 * fifth bit), one masked byte add per vector.

template <typename Fn>
inline void with_tile_width(int nc, Fn&& fn) {
  switch (nc) {
    case 1: return fn(std::integral_constant<int, 1>{});
    case 2: return fn(std::integral_constant<int, 2>{});
    case 3: return fn(std::integral_constant<int, 3>{});
    case 4: return fn(std::integral_constant<int, 4>{});
    case 5: return fn(std::integral_constant<int, 5>{});
    case 6: return fn(std::integral_constant<int, 6>{});
    case 7: return fn(std::integral_constant<int, 7>{});
    default: return fn(std::integral_constant<int, 8>{});
  }
}

// Cuts nx activation rows (x + k * x_stride) into tiles of at most kMax rows and calls
// fn(width, rows, y_tile) per tile: width an integral_constant, rows[0..width) the tile's rows,
// y_tile its first output row (y + k0 * y_stride).
template <int kMax, typename Fn>
inline void for_each_tile(const void* x, size_t x_stride, int64_t nx, float* y, size_t y_stride, Fn&& fn) {
  for (int64_t k0 = 0; k0 < nx; k0 += kMax) {
    const int nc = int(nx - k0 < kMax ? nx - k0 : kMax);
    const uint8_t* rows[kMax];
    for (int k = 0; k < nc; ++k) rows[k] = static_cast<const uint8_t*>(x) + size_t(k0 + k) * x_stride;
    float* yk = y + size_t(k0) * y_stride;
    with_tile_width(nc, [&](auto width) {
      if constexpr (decltype(width)::value <= kMax) fn(width, rows, yk);
    });
  }
}

}  // namespace
}  // namespace kvserve
