// One head row of the KV cache in its stored element type: quantize on write, dequantize on read.
//
// Kept free of the KV-cache types (kernels sit below kvcache in the module graph): KvElem mirrors
// kvcache's KvDType and model/paged_attention.cpp maps one to the other. The byte layout of a row
// is the one documented in kvcache/kv_layout.h: float types are plain elements; q8_0/q4_0 rows are
// groups of 32 values (the last one shorter when n % 32 != 0), each [f16 scale][values], a full
// group being byte for byte the GGUF block_q8_0 / block_q4_0 with the same rounding.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvserve {

enum class KvElem : uint8_t { F32, F16, BF16, Q8_0, Q4_0 };

constexpr int kKvGroup = 32;  // values per quantization group

// Exact bytes of a row of n values (must equal kvcache's kv_dtype_row_bytes).
size_t kv_row_bytes(KvElem type, int64_t n);

// dst[kv_row_bytes(type, n)] = x[0..n) in `type` (scales computed per group). Scalar reference,
// any n.
void kv_quantize_row_scalar(KvElem type, const float* x, int n, uint8_t* dst);
// The same with AVX2 where the type and n allow it (q8_0/q4_0: n % 32 == 0; f16: n % 8 == 0),
// else the scalar version; the bytes are identical to the scalar reference's.
void kv_quantize_row(KvElem type, const float* x, int n, uint8_t* dst);

// y[0..n) = the values of a stored row. Scalar reference, any n.
void kv_dequantize_row_scalar(KvElem type, const uint8_t* src, int n, float* y);
// The same with AVX2 where the type and n allow it (q8_0/q4_0: n % 32 == 0; floats: n % 8 == 0),
// else the scalar version. Results are identical to the scalar reference (the same products
// d * q, each rounded once).
void kv_dequantize_row(KvElem type, const uint8_t* src, int n, float* y);

}  // namespace kvserve
