// IEEE half (f16) and bfloat16 conversions, bit-exact with the usual round-to-nearest-even.
// Used by the GGUF weight formats (tensor/) and the f16 KV cache (kvcache/), so it lives in util.
#pragma once

#include <cstdint>
#include <cstring>
#include <immintrin.h>

namespace kvserve {

inline float f16_to_f32(uint16_t h) { return _cvtsh_ss(h); }
inline uint16_t f32_to_f16(float f) { return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT); }

inline float bf16_to_f32(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even; NaN stays NaN (quiet bit forced).
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffff) > 0x7f800000) return uint16_t((u >> 16) | 64);
  return uint16_t((u + (0x7fff + ((u >> 16) & 1))) >> 16);
}

}  // namespace kvserve
