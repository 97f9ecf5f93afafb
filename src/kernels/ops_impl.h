// Internal to src/kernels: the per-ISA bodies of ops.h's functions that have more than one
// (ops.cpp picks by active_kernels(); each is bit for bit the others' result).
#pragma once

#include <cstdint>

namespace kvserve::detail {

// swiglu (ops.h) in 8 lanes (AVX2 + FMA; ops.cpp) and in 16 (AVX-512 F, ops_avx512.cpp: only
// where isa_supported(Isa::kAvx512)). The same operations per element, so the same results.
void swiglu_avx2(const float* gate, const float* up, int64_t n, float* out);
void swiglu_avx512(const float* gate, const float* up, int64_t n, float* out);
// swiglu_pairs16 (ops.h) in 16 lanes, each chunk swiglu_avx512's arithmetic.
void swiglu_pairs16_avx512(const float* y, int64_t chunks, float* out);

}  // namespace kvserve::detail
