// Conversions between f32 and the ggml tensor encodings (block layouts in block_formats.h).
//
// Three families:
//  - dequantize_row: any supported weight encoding -> f32 (weights, embeddings, tests).
//  - activation quantizers (q8_0, q8_1, q8_K): what the matmul kernels turn an f32 activation row
//    into before the integer dot products. They reproduce the reference engine's rounding exactly
//    (llama.cpp CPU), because the golden logits depend on it.
//  - weight quantizers (quantize_row): f32 -> q8_0, q4_0, q5_0, q4_K, q5_K, q6_K for `kvserve
//    quantize`. Simple but sound; they do not try to reproduce the reference's choices bit for bit.
// n is always the number of elements; it must be a multiple of the type's block size.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gguf/types.h"
#include "tensor/block_formats.h"

namespace kvserve {

// True for the encodings dequantize_row and the matmul kernels accept:
// F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K.
bool is_supported_weight_type(GgmlType t);

// dst[0..n) = decoded src. Aborts (KVS_ASSERT-style) on an unsupported type.
void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n);

// Per-type decoders, also used directly by tests.
void dequantize_row_q4_0(const BlockQ4_0* x, float* y, int64_t n);
void dequantize_row_q4_1(const BlockQ4_1* x, float* y, int64_t n);
void dequantize_row_q5_0(const BlockQ5_0* x, float* y, int64_t n);
void dequantize_row_q5_1(const BlockQ5_1* x, float* y, int64_t n);
void dequantize_row_q8_0(const BlockQ8_0* x, float* y, int64_t n);
void dequantize_row_q8_1(const BlockQ8_1* x, float* y, int64_t n);
void dequantize_row_q2_k(const BlockQ2_K* x, float* y, int64_t n);
void dequantize_row_q3_k(const BlockQ3_K* x, float* y, int64_t n);
void dequantize_row_q4_k(const BlockQ4_K* x, float* y, int64_t n);
void dequantize_row_q5_k(const BlockQ5_K* x, float* y, int64_t n);
void dequantize_row_q6_k(const BlockQ6_K* x, float* y, int64_t n);
void dequantize_row_q8_k(const BlockQ8_K* x, float* y, int64_t n);

// ---- Activation quantizers (reference-exact) ----
// q8_0: per 32: amax = max|x|, d = amax / 127 stored as f16, q = round_half_even(x * (127 / amax)).
void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t n);
// q8_1: as q8_0, plus s = f16(d * sum(q)) with d the unrounded f32 scale.
void quantize_row_q8_1(const float* x, BlockQ8_1* y, int64_t n);
// q8_K: per 256: max = the signed element of largest magnitude, iscale = -127 / max,
// q = min(127, round_half_even(iscale * x)), d = 1 / iscale (f32), bsums = sums of each 16.
// (The reference engine switched from -128 to -127 long ago; -127 is what the golden files used.)
void quantize_row_q8_K(const float* x, BlockQ8_K* y, int64_t n);

// ---- Weight quantizers ----
// True for the types quantize_row can produce: Q8_0, Q4_0, Q5_0, Q4_K, Q5_K, Q6_K (and F32, F16,
// BF16 as plain conversions).
bool can_quantize_to(GgmlType t);
// Encodes n floats into ggml_row_size(t, n) bytes at dst. Aborts on a type can_quantize_to rejects.
void quantize_row(GgmlType t, const float* src, void* dst, int64_t n);

void quantize_row_q4_0(const float* x, BlockQ4_0* y, int64_t n);
void quantize_row_q5_0(const float* x, BlockQ5_0* y, int64_t n);
void quantize_row_q4_k(const float* x, BlockQ4_K* y, int64_t n);
void quantize_row_q5_k(const float* x, BlockQ5_K* y, int64_t n);
void quantize_row_q6_k(const float* x, BlockQ6_K* y, int64_t n);

}  // namespace kvserve
