// Internal to the packed-GEMM files (gemm_packed_*_avx512.cpp): the activation-row tiling of a
// packed GEMM call, with the tile width (1..8) as a compile-time constant so that the register
// tiles are unrolled per width.
//
// The anonymous namespace gives every including file its own copy (internal linkage): these
// files are compiled with AVX-512 flags, and a shared inline copy could be handed by the linker
// to code that runs on CPUs without AVX-512.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace kvserve {
namespace {

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
