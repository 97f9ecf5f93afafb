// Internal to src/kernels: the wide-ISA paths of attention_partial (attention.h), one per file
// compiled with that ISA's flags, called by attention.cpp only where attention_isa() allows.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "kernels/attention.h"
#include "kernels/kv_tiles.h"
#include "util/status.h"

namespace kvserve::detail {

// `static`: every kernel file (each compiled with its own ISA flags) gets its own copy, so the
// linker can never hand an AVX2-only CPU the copy compiled for AVX-512.

// Row of (block, slot, kv_head) in a plane whose block 0 starts at plane0 (paged_kv_view layout).
static inline const uint8_t* row_ptr(const uint8_t* plane0, const PagedKvView& kv, size_t row_bytes, int32_t block,
                                     int slot, int kv_head) {
  const size_t rows = size_t(slot) * size_t(kv.num_kv_heads) + size_t(kv_head);
  return plane0 + size_t(block) * kv.block_stride + rows * row_bytes;
}

// Positions ahead of the current tile whose K and V rows are hinted into cache. A sequence's blocks
// of one layer are scattered over the arena in 16-slot pieces, too short for the hardware
// prefetchers to ramp up on, so without hints the loop waits on memory at every block; two
// 16-position tiles ahead covers the latency (decode step's attention at context 2048, one
// thread: ~5.3 -> ~4.4 ms in kvs_microbench; distances 1..4 measured, 2 best).
constexpr int64_t kPrefetchAhead = 32;

// prefetcht1 (into L2) or, with kL1, prefetcht0 (into L1) of p's cache line; attention_l1_hints()
// picks per CPU. L2 on the Zen 4 VM: smollm decode at context 2048 (q8_0 K/V) went from ~140 to
// ~165 tok/s at batch 1 and from ~260 to ~375 at batch 8 against L1 hints (three alternations; 16
// and 48 positions ahead no better), like the packed GEMMs' weight hint (packed_layout.h). L1 on
// the Zen 5 VM: `kvserve bench --cache-compare`, six alternations per K/V type, the extra time of
// a context-2048 token over a context-128 one fell by 15% (q8_0 K/V, 1.88 -> 1.61 ms median) and
// 24% (q4_0, 1.68 -> 1.28 ms); `BM_decode_step_cold/512/3/1` ~860 -> ~700 us (the AVX-512 path;
// the AVX2 path follows the same choice, unmeasured). Other CPUs are untested and keep L2. Inline asm, not __builtin_prefetch / _mm_prefetch: GCC 12 deems a function
// whose only effects are prefetches pure and deletes calls to it (checked: the AVX-512 attention
// object held no prefetch at all), so the hint must be a volatile side effect.
template <bool kL1>
static inline void prefetch_line(const uint8_t* p) {
  if constexpr (kL1) {
    asm volatile("prefetcht0 %0" : : "m"(*p));
  } else {
    asm volatile("prefetcht1 %0" : : "m"(*p));
  }
}

// Whether the wide attention paths (the row kernels and the tiled one) hint K/V into L1
// (prefetch_line<true>) on this CPU: AMD family 0x1A (Zen 5), where it was measured faster; L2
// elsewhere. Read once.
bool attention_l1_hints();

// Hints the rows of up to `count` positions from `pos` (clipped to its block and to `end`).
template <bool kL1 = false>
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
    for (size_t o = 0; o < k_row; o += 64) prefetch_line<kL1>(kr + o);
    for (size_t o = 0; o < v_row; o += 64) prefetch_line<kL1>(vr + o);
  }
}

// Hints whole slots - the rows of KV heads [kv_head0, kv_head0 + nheads), contiguous in a slot -
// of up to `count` positions from `pos` (clipped to its block and to `end`).
template <bool kL1>
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
    for (size_t o = 0; o < kb; o += 64) prefetch_line<kL1>(kr + o);
    for (size_t o = 0; o < vb; o += 64) prefetch_line<kL1>(vr + o);
  }
}

// The first kPrefetchAhead positions of [begin, end), hinted together before a kernel's first
// tile: the loop hints kPrefetchAhead positions ahead of each tile, so without this a range's
// first positions would be demand misses one after another (a decode chunk starts
// cold every time; smollm q8_0 K/V at context 2016: +3-8%).
template <bool kL1>
static inline void prefetch_first_positions(const PagedKvView& kv, size_t k_row, size_t v_row, int64_t begin,
                                            int64_t end, int kv_head0, int nheads) {
  constexpr int kStep = 16;  // positions per call; prefetch_slots clips each to its block
  for (int64_t p = begin; p < std::min(end, begin + kPrefetchAhead); p += kStep)
    prefetch_slots<kL1>(kv, k_row, v_row, p, kStep, end, kv_head0, nheads);
}

// Row pointers of KV head kv_head0 for the T positions from p0 (any blocks; a block run at a
// time): krow[j], vrow[j] for position p0 + j.
static inline void span_rows(const PagedKvView& kv, size_t k_row, size_t v_row, int64_t p0, int T, int kv_head0,
                             const uint8_t** krow, const uint8_t** vrow) {
  const int bs = kv.block_size;
  for (int j = 0; j < T;) {
    const int64_t pos = p0 + j;
    const int32_t block = kv.table[size_t(pos / bs)];
    const int slot0 = int(pos % bs);
    const int n = std::min(T - j, bs - slot0);
    for (int r = 0; r < n; ++r) {
      krow[j + r] = row_ptr(kv.k0, kv, k_row, block, slot0 + r, kv_head0);
      vrow[j + r] = row_ptr(kv.v0, kv, v_row, block, slot0 + r, kv_head0);
    }
    j += n;
  }
}

// The rows of the h-th head after kv_head0 (h rows further in each slot) from span_rows' output;
// K rows past T up to `padded` repeat the first (scored, then masked by the caller).
static inline void head_rows(const uint8_t* const* krow, const uint8_t* const* vrow, int T, int padded, int h,
                             size_t k_row, size_t v_row, const uint8_t** kh, const uint8_t** vh) {
  for (int j = 0; j < T; ++j) {
    kh[j] = krow[j] + size_t(h) * k_row;
    vh[j] = vrow[j] + size_t(h) * v_row;
  }
  for (int j = T; j < padded; ++j) kh[j] = kh[0];
}

// Whether both vector paths score K rows of type t as integers against a rounded query
// (attention_rounds_query, attention.h: their tile_scores_int).
static inline bool integer_scores(KvElem t, int hd) {
  return (t == KvElem::Q8_0 || t == KvElem::Q4_0) && (hd == 64 || hd == 128);
}

// pick(std::integral_constant<KvElem, t>{}): a kernel template's instance for a run-time type.
template <typename Pick>
static inline auto with_kv_elem(KvElem t, Pick&& pick) {
  switch (t) {
    case KvElem::F16: return pick(std::integral_constant<KvElem, KvElem::F16>{});
    case KvElem::BF16: return pick(std::integral_constant<KvElem, KvElem::BF16>{});
    case KvElem::Q8_0: return pick(std::integral_constant<KvElem, KvElem::Q8_0>{});
    case KvElem::Q4_0: return pick(std::integral_constant<KvElem, KvElem::Q4_0>{});
    case KvElem::F32: break;
  }
  return pick(std::integral_constant<KvElem, KvElem::F32>{});
}

// attention_partial_heads cut into the passes a kernel takes: at most max_heads KV heads and
// sub_group query heads per attend(h0, H, q, q_stride, G, g0, partial, partial_stride) call (the
// layout of attention_partial_heads: head h's queries group * hd floats apart, states pf apart).
template <typename Attend>
static inline void split_heads(int nheads, int group, int hd, int max_heads, int sub_group, const float* q,
                               float* partials, Attend&& attend) {
  const size_t q_stride = size_t(group) * size_t(hd), pf = attention_partial_floats(group, hd);
  for (int h0 = 0; h0 < nheads; h0 += max_heads) {
    const int H = std::min(max_heads, nheads - h0);
    for (int g0 = 0; g0 < group; g0 += sub_group)
      attend(h0, H, q + size_t(h0) * q_stride + size_t(g0) * hd, q_stride, std::min(sub_group, group - g0), g0,
             partials + size_t(h0) * pf, pf);
  }
}

// The tiled kernels' shared bookkeeping (attention_tiled_avx512.cpp, attention_tiled_avx2.cpp).
// pass(std::integral_constant<int, G>{}) for a subgroup of n query heads, 1 <= n <= 4 (a kernel
// templated on G takes at most 4 per pass).
template <typename Pass>
static inline void with_subgroup_size(int n, Pass&& pass) {
  switch (n) {
    case 1:
      pass(std::integral_constant<int, 1>{});
      break;
    case 2:
      pass(std::integral_constant<int, 2>{});
      break;
    case 3:
      pass(std::integral_constant<int, 3>{});
      break;
    default:
      pass(std::integral_constant<int, 4>{});
      break;
  }
}
// The empty states (m = -inf, acc = 0; s is written at the end) of nheads heads' groups.
static inline void reset_partials(float* partials, int nheads, int group, int hd) {
  const size_t pf = attention_partial_floats(group, hd);
  for (int h = 0; h < nheads; ++h) {
    float* part = partials + size_t(h) * pf;
    std::fill(part, part + group, -std::numeric_limits<float>::infinity());
    std::fill(part + 2 * group, part + pf, 0.0f);
  }
}
// Both tiled kernels' entry: false (nothing written) unless kv is tiled with head_dim
// kKvTiledKernelHeadDim in planes kv_tiles_supported takes; else run(K4, V4, kL1), each a
// std::integral_constant<bool>: whether K and V are q4_0 (else q8_0) and attention_l1_hints(), and
// true. kQ8Bytes / kQ4Bytes: the kernel's compile-time tile-head sizes, checked once per process
// against kv_tiles.h's.
template <size_t kQ8Bytes, size_t kQ4Bytes, typename Run>
static inline bool run_tiled_kernel(const PagedKvView& kv, Run&& run) {
  if (!kv.tiled || kv.head_dim != kKvTiledKernelHeadDim ||
      !kv_tiles_supported(kv.k_type, kv.v_type, kv.head_dim, kv.block_size))
    return false;
  static const bool sizes_agree = kQ8Bytes == kv_tile_head_bytes(KvElem::Q8_0, kKvTiledKernelHeadDim) &&
                                  kQ4Bytes == kv_tile_head_bytes(KvElem::Q4_0, kKvTiledKernelHeadDim);
  KVS_ASSERT(sizes_agree, "a tiled attention kernel and kv_tiles.h disagree on a tile's size");
  auto with_l1 = [&](auto k4, auto v4) {
    if (attention_l1_hints())
      run(k4, v4, std::true_type{});
    else
      run(k4, v4, std::false_type{});
  };
  const bool k4 = kv.k_type == KvElem::Q4_0, v4 = kv.v_type == KvElem::Q4_0;
  if (k4 && v4)
    with_l1(std::true_type{}, std::true_type{});
  else if (k4)
    with_l1(std::true_type{}, std::false_type{});
  else if (v4)
    with_l1(std::false_type{}, std::true_type{});
  else
    with_l1(std::false_type{}, std::false_type{});
  return true;
}
// range(cb, ce, states) for [begin, end) whole into states, or with `chunked` for each of its
// attention chunks c into states + c * nheads * pf (attention_partial_heads_chunks' layout).
template <typename Range>
static inline void for_each_state_range(int64_t begin, int64_t end, bool chunked, int nheads, int group,
                                        int hd, float* states, Range&& range) {
  const size_t all = attention_partial_floats(group, hd) * size_t(nheads);
  const int64_t chunks = chunked ? attention_num_chunks(begin, end) : 1;
  for (int64_t c = 0; c < chunks; ++c)
    range(chunked ? attention_chunk_begin(begin, c) : begin,
          chunked ? attention_chunk_end(begin, end, c) : end, states + size_t(c) * all);
}

// attention_partial's contract on AVX-512 F/BW/VL. Returns false (and writes nothing) where this
// path does not handle the shape: head_dim % 16 != 0 or > 128 (two K rows must fit in
// registers), or a q8_0/q4_0 plane with head_dim % 32 != 0.
bool attention_partial_avx512(const PagedKvView& kv, int64_t begin, int64_t end, int kv_head, const float* q,
                              int group, float scale, float* partial);
// attention_partial_heads's contract on AVX2 + FMA + F16C (attention_avx2.cpp). Returns false
// (and writes nothing) for head_dim % 8 != 0 or > 128, or a q8_0/q4_0 plane with
// head_dim % 32 != 0.
bool attention_partial_heads_avx2(const PagedKvView& kv, int64_t begin, int64_t end, int kv_head0, int nheads,
                                  const float* q, int group, float scale, float* partials);
// attention_partial_heads's contract on AVX-512 (same conditions).
bool attention_partial_heads_avx512(const PagedKvView& kv, int64_t begin, int64_t end, int kv_head0, int nheads,
                                    const float* q, int group, float scale, float* partials);

// The tiled kernels (kernels/kv_tiles.h) for head_dim 64 and q8_0 or q4_0 K and V, on AVX-512 VNNI
// (attention_tiled_avx512.cpp) and on AVX2 (attention_tiled_avx2.cpp): attention_partial_heads's
// contract into `out` (hint_end as its), or with `chunked` attention_partial_heads_chunks's.
// Return false (and write nothing) for any other view.
bool attention_tiled_heads_avx512(const PagedKvView& kv, int64_t begin, int64_t end, int kv_head0, int nheads,
                                  const float* q, int group, float scale, float* out, int64_t hint_end,
                                  bool chunked);
bool attention_tiled_heads_avx2(const PagedKvView& kv, int64_t begin, int64_t end, int kv_head0, int nheads,
                                const float* q, int group, float scale, float* out, int64_t hint_end,
                                bool chunked);

}  // namespace kvserve::detail
