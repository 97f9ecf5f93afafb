// Internal to src/kernels: the wide-ISA paths of attention_partial (attention.h), one per file
// compiled with that ISA's flags, called by attention.cpp only where attention_isa() allows.
#pragma once

#include <cstdint>

#include "kernels/attention.h"

namespace kvserve::detail {

// attention_partial's contract on AVX-512 F/BW/VL. Returns false (and writes nothing) where this
// path does not handle the shape: head_dim % 16 != 0 or > 128 (two K rows must fit in
// registers), or a q8_0/q4_0 plane with head_dim % 32 != 0.
bool attention_partial_avx512(const PagedKvView& kv, int64_t begin, int64_t end, int kv_head, const float* q,
                              int group, float scale, float* partial);

}  // namespace kvserve::detail
