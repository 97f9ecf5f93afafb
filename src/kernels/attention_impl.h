// Internal to src/kernels: the wide-ISA paths of attention_partial (attention.h), one per file
// compiled with that ISA's flags, called by attention.cpp only where attention_isa() allows.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/attention.h"

namespace kvserve::detail {

// `static`: every kernel file (each compiled with its own ISA flags) gets its own copy, so the
// linker can never hand an AVX2-only CPU the copy compiled for AVX-512.

// Row of (block, slot, kv_head) in a plane whose block 0 starts at plane0 (paged_kv_view layout).
static inline const uint8_t* row_ptr(const uint8_t* plane0, const PagedKvView& kv, size_t row_bytes, int32_t block,
                                     int slot, int kv_head) {
  const size_t rows = size_t(slot) * size_t(kv.num_kv_heads) + size_t(kv_head);
  return plane0 + size_t(block) * kv.block_stride + rows * row_bytes;
}

// Positions ahead of the current tile whose K and V rows are hinted into L1. A sequence's blocks
// of one layer are scattered over the arena in 16-slot pieces, too short for the hardware
// prefetchers to ramp up on, so without hints the loop waits on memory at every block; two
// 16-position tiles ahead covers the latency (decode step's attention at context 2048, one
// thread: ~5.3 -> ~4.4 ms in kvs_microbench; distances 1..4 measured, 2 best).
constexpr int64_t kPrefetchAhead = 32;

// prefetcht0 of p's cache line. Inline asm, not __builtin_prefetch / _mm_prefetch: GCC 12 deems a
// function whose only effects are prefetches pure and deletes calls to it (checked: the AVX-512
// attention object held no prefetch at all), so the hint must be a volatile side effect.
static inline void prefetch_line(const uint8_t* p) { asm volatile("prefetcht0 %0" : : "m"(*p)); }

// Hints the rows of up to `count` positions from `pos` (clipped to its block and to `end`).
static inline void prefetch_positions(const PagedKvView& kv, size_t k_row, size_t v_row, int64_t pos, int count,
                                      int64_t end, int kv_head) {
  if (pos >= end) return;
  const int bs = kv.block_size;
  const int32_t block = kv.table[size_t(pos / bs)];
  const int slot0 = int(pos % bs);
  const int64_t n = std::min<int64_t>({int64_t(count), int64_t(bs - slot0), end - pos});
  for (int j = 0; j < n; ++j) {
    const uint8_t* kr = row_ptr(kv.k0, kv, k_row, block, slot0 + j, kv_head);
    const uint8_t* vr = row_ptr(kv.v0, kv, v_row, block, slot0 + j, kv_head);
    for (size_t o = 0; o < k_row; o += 64) prefetch_line(kr + o);
    for (size_t o = 0; o < v_row; o += 64) prefetch_line(vr + o);
  }
}

// Hints whole slots - the rows of KV heads [kv_head0, kv_head0 + nheads), contiguous in a slot -
// of up to `count` positions from `pos` (clipped to its block and to `end`).
static inline void prefetch_slots(const PagedKvView& kv, size_t k_row, size_t v_row, int64_t pos, int count,
                                  int64_t end, int kv_head0, int nheads) {
  if (pos >= end) return;
  const int bs = kv.block_size;
  const int32_t block = kv.table[size_t(pos / bs)];
  const int slot0 = int(pos % bs);
  const int64_t n = std::min<int64_t>({int64_t(count), int64_t(bs - slot0), end - pos});
  const size_t kb = k_row * size_t(nheads), vb = v_row * size_t(nheads);
  for (int j = 0; j < n; ++j) {
    const uint8_t* kr = row_ptr(kv.k0, kv, k_row, block, slot0 + j, kv_head0);
    const uint8_t* vr = row_ptr(kv.v0, kv, v_row, block, slot0 + j, kv_head0);
    for (size_t o = 0; o < kb; o += 64) prefetch_line(kr + o);
    for (size_t o = 0; o < vb; o += 64) prefetch_line(vr + o);
  }
}

// attention_partial's contract on AVX-512 F/BW/VL. Returns false (and writes nothing) where this
// path does not handle the shape: head_dim % 16 != 0 or > 128 (two K rows must fit in
// registers), or a q8_0/q4_0 plane with head_dim % 32 != 0.
bool attention_partial_avx512(const PagedKvView& kv, int64_t begin, int64_t end, int kv_head, const float* q,
                              int group, float scale, float* partial);
// attention_partial_heads's contract on AVX-512 (same conditions).
bool attention_partial_heads_avx512(const PagedKvView& kv, int64_t begin, int64_t end, int kv_head0, int nheads,
                                    const float* q, int group, float scale, float* partials);

}  // namespace kvserve::detail
