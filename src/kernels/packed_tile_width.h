// Internal to the packed-GEMM files (gemm_packed_*_avx512.cpp): calls fn with the tile width
// 1..8 as a compile-time constant, so the register tiles are unrolled per width.
//
// The anonymous namespace gives every including file its own copy (internal linkage): these
// files are compiled with AVX-512 flags, and a shared inline copy could be handed by the linker
// to code that runs on CPUs without AVX-512.
#pragma once

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

}  // namespace
}  // namespace kvserve
