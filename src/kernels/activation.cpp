// Conversion of f32 activation rows into the encoding each weight type is multiplied with.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kernels/vec_dot.h"
#include "tensor/quants.h"
#include "util/half.h"

namespace kvserve {

GgmlType activation_type(GgmlType weight) {
  switch (weight) {
    case GgmlType::BF16: return GgmlType::BF16;
    case GgmlType::Q4_0: case GgmlType::Q5_0: case GgmlType::Q8_0: return GgmlType::Q8_0;
    case GgmlType::Q4_1: case GgmlType::Q5_1: return GgmlType::Q8_1;
    case GgmlType::Q2_K: case GgmlType::Q3_K: case GgmlType::Q4_K: case GgmlType::Q5_K:
    case GgmlType::Q6_K: return GgmlType::Q8_K;
    default: return GgmlType::F32;
  }
}

size_t activation_row_bytes(GgmlType weight, int64_t n) { return ggml_row_size(activation_type(weight), n); }

void convert_activation_row(GgmlType weight, const float* x, void* dst, int64_t n) {
  switch (activation_type(weight)) {
    case GgmlType::BF16: {
      uint16_t* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = f32_to_bf16(x[i]);
      return;
    }
    case GgmlType::Q8_0: return quantize_row_q8_0(x, static_cast<BlockQ8_0*>(dst), n);
    case GgmlType::Q8_1: return quantize_row_q8_1(x, static_cast<BlockQ8_1*>(dst), n);
    case GgmlType::Q8_K: return quantize_row_q8_K(x, static_cast<BlockQ8_K*>(dst), n);
    default: std::memcpy(dst, x, size_t(n) * sizeof(float)); return;
  }
}

}  // namespace kvserve
