// Internal to the packed-GEMM files: the repacked layout of the legacy quants (Q8_0, Q4_0,
// Q5_0) and of their rearranged q8_0 activation rows, and of F16/F32 weights, which every
// instruction set's packed GEMM reads (gemm_packed_{,float_}avx512.cpp, gemm_packed_{,float_}avx2.cpp;
// the k-quants' is packed_kquant_layout.h),
// plus the activation-row tiling of a packed GEMM call with the tile width (1..8) as a
// compile-time constant so that register tiles are unrolled per width.
//
// Packed weights, per group of 16 rows (rows 16g .. 16g+15), nb = cols / 32 blocks, in one of two
// arrangements (GroupLayout, chosen per format by F::kPaired):
//   paired (Q8_0): the blocks two at a time (a pair; the last is half empty when nb is odd),
//     pair p: codes  [2][kCodeBytes]  unsigned codes q + kBias of blocks 2p, 2p+1, as the format says
//             high   [2][kHighBytes]  fifth bits (none for Q8_0)
//             scales [2][16] f16      [i][r] = d of row r, block 2p+i
//     a whole number of cache lines (Q8_0: 17), so a group read front to back is one sequential
//     stream that the hardware prefetchers follow on their own;
//   split (Q4_0, Q5_0): codes [nb][kCodeBytes] | fifth bits [nb][kHighBytes] | scales [nb][16] f16,
//     rounded up to 64 bytes: two streams per group, which the kernels hint ahead themselves.
// The groups follow one another. Why two arrangements (smollm-135m decode on the Zen 4 VM, two
// builds taking turns, medians of 12-20 alternations): read with no arithmetic at all, in split
// order without hints the weights streamed at ~186 tok/s, front to back at ~320. Paired Q8_0
// decodes ~23% faster than split Q8_0 did (batch 1, context 16); paired Q4_0 and Q5_0 measured
// 2-10% slower than split with hints, whatever the hint distance (none, 4, 8 or 16 KiB), so they
// stay split.
//
// Nothing here needs more than the baseline flags (AVX2): the anonymous namespace gives every
// including file its own copy (internal linkage), so code compiled with wider flags in one file
// is never handed by the linker to another.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/vec_dot.h"
#include "tensor/block_formats.h"
#include "util/half.h"

namespace kvserve {
namespace {

constexpr int kRows = kPackedRows;                 // 16 weight rows per group = zmm lanes
constexpr size_t kScaleBytes = size_t(kRows) * 2;  // 32: one block of a group's f16 scales
constexpr int64_t kMaxCols = int64_t(1) << 16;     // wider quantized rows stay in the file layout

inline size_t round64(size_t v) { return (v + 63) & ~size_t(63); }

inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

inline int32_t load_i32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// The weight-stream hint of every packed GEMM: a decode-sized call streams each packed weight byte
// from memory once, and the kernels hint the line kWeightHintBytes ahead of the one they read
// (each block's code lines, its scale and fifth-bit lines: GroupLayout::hint_line, spread over
// the block's work; the k-quants: hint_weights_share) into L2 with
// prefetcht1 (all but the AVX-512 kernel's single-row pass over paired Q8_0, which runs faster
// without: gemm_packed_avx512.cpp).
// Why L2 and 16 KiB: on the AMD EPYC Zen 4 VM (2 vCPUs, 51 GB/s probe) the earlier hint, prefetcht0
// 8 blocks ahead (4 KiB of Q8_0 codes, chosen on a Zen 5 VM), decoded no faster than no hint at
// all, while prefetcht1 16 KiB ahead lifted smollm-135m decode batch 1 from ~155 to ~212 tok/s
// (Q8_0) and from ~200 to ~300 (Q4_K_M), AVX2 tables alike (8 KiB: the same; 32 KiB: ~5% less;
// hinting every other line: ~15% less; L1 hints 8 or 16 KiB ahead: no better than none).
// A hint past the end of the matrix lands in other weights or unmapped space: harmless, a
// prefetch never faults. Inline asm because GCC may delete a __builtin_prefetch it deems pure
// (kernels/attention_impl.h).
constexpr size_t kWeightHintBytes = 16 * 1024;
inline void hint_weights(const uint8_t* p) { asm volatile("prefetcht1 %0" : : "m"(*p)); }
// Step i of n of a hint spread over a loop (as GroupLayout::hint_line, below): the lines
// [L i / n, L (i + 1) / n) of the L = ceil(bytes / 64) lines from p.
inline void hint_weights_share(const uint8_t* p, size_t bytes, int i, int n) {
  const size_t lines = (bytes + 63) / 64;
  for (size_t l = lines * size_t(i) / size_t(n); l < lines * size_t(i + 1) / size_t(n); ++l)
    hint_weights(p + 64 * l);
}

// Walks the weight rows of a matrix being packed: each group of kRows rows gets gb zeroed bytes
// at `group`, then fn(group, r, src) runs for each of its rows r (src: that row in the file, as T).
template <typename T, typename Fn>
inline void for_each_packed_row(const void* w, size_t row_bytes, int64_t rows, size_t gb, void* dst,
                                Fn&& fn) {
  auto* group = static_cast<uint8_t*>(dst);
  for (int64_t g = 0; g < rows / kRows; ++g, group += gb) {
    std::memset(group, 0, gb);
    for (int r = 0; r < kRows; ++r)
      fn(group, r,
         reinterpret_cast<const T*>(static_cast<const uint8_t*>(w) + size_t(g * kRows + r) * row_bytes));
  }
}

// Walks m converted activation rows (x_stride bytes apart, as T) and their rearranged rows
// (dst_stride apart): fn(src, row) writes the first `used` bytes of row, the rest are zeroed.
template <typename T, typename Fn>
inline void for_each_act_row(const void* x, size_t x_stride, int64_t m, void* dst, size_t dst_stride,
                             size_t used, Fn&& fn) {
  for (int64_t k = 0; k < m; ++k) {
    uint8_t* row = static_cast<uint8_t*>(dst) + size_t(k) * dst_stride;
    fn(reinterpret_cast<const T*>(static_cast<const uint8_t*>(x) + size_t(k) * x_stride), row);
    std::memset(row + used, 0, dst_stride - used);
  }
}

// Code vector j (j = 0..7) of a block of 32 columns is the 64 bytes whose byte 4r + i is the code of
// row r, element 4j + i; a multiply-add of it against the broadcast activation codes 4j..4j+3
// advances all 16 rows (vpdpbusd on AVX-512; two 8-row halves on AVX2).

// Q8_0: the 8 code vectors as they are (512 bytes), code = q + 128.
struct PackQ8_0 {
  using Block = BlockQ8_0;
  static constexpr int kBias = 128;
  static constexpr size_t kCodeBytes = 512, kHighBytes = 0;
  static constexpr bool kPaired = true;
  static uint8_t code(const Block& b, int e) { return uint8_t(b.qs[e]) ^ 0x80; }
  static void store(uint8_t* codes, uint8_t*, int j, int byte, uint8_t c) { codes[64 * j + byte] = c; }
  static uint8_t load(const uint8_t* codes, const uint8_t*, int j, int byte) { return codes[64 * j + byte]; }
};

// Q4_0: code vectors 2i and 2i+1 share 64 bytes as low and high nibbles (256 bytes), code = q + 8
// (the stored nibble). The same bytes per row as the file's 16 nibble bytes.
struct PackQ4_0 {
  using Block = BlockQ4_0;
  static constexpr int kBias = 8;
  static constexpr size_t kCodeBytes = 256, kHighBytes = 0;
  static constexpr bool kPaired = false;
  static uint8_t code(const Block& b, int e) { return e < 16 ? (b.qs[e] & 0x0F) : (b.qs[e - 16] >> 4); }
  static void store(uint8_t* codes, uint8_t*, int j, int byte, uint8_t c) {
    codes[64 * (j / 2) + byte] |= uint8_t(c << (4 * (j % 2)));
  }
  static uint8_t load(const uint8_t* codes, const uint8_t*, int j, int byte) {
    return uint8_t((codes[64 * (j / 2) + byte] >> (4 * (j % 2))) & 0x0F);
  }
};

// Q5_0: Q4_0's nibbles plus the fifth bits as one 64-byte vector: bit j of its byte b is the fifth
// bit of byte b of code vector j (so one shift and one and put vector j's fifth bits at bit 4 of
// its bytes), code = q + 16 (nibble + 16 * fifth bit).
struct PackQ5_0 {
  using Block = BlockQ5_0;
  static constexpr int kBias = 16;
  static constexpr size_t kCodeBytes = 256, kHighBytes = 64;
  static constexpr bool kPaired = false;
  static uint8_t code(const Block& b, int e) {
    const uint8_t low = e < 16 ? (b.qs[e] & 0x0F) : (b.qs[e - 16] >> 4);
    return uint8_t(low | (((load_u32(b.qh) >> e) & 1u) << 4));
  }
  static void store(uint8_t* codes, uint8_t* high, int j, int byte, uint8_t c) {
    PackQ4_0::store(codes, nullptr, j, byte, uint8_t(c & 0x0F));
    if (c & 0x10) high[byte] |= uint8_t(1u << j);
  }
  static uint8_t load(const uint8_t* codes, const uint8_t* high, int j, int byte) {
    return uint8_t(PackQ4_0::load(codes, nullptr, j, byte) | (((high[byte] >> j) & 1) << 4));
  }
};

// Where block b's parts lie in a group of format F with nb blocks (see the top of this file).
template <typename F>
struct GroupLayout {
  static constexpr size_t kPairBytes = 2 * (F::kCodeBytes + F::kHighBytes + kScaleBytes);
  static_assert(!F::kPaired || kPairBytes % 64 == 0, "a pair must be whole cache lines");
  static size_t group_bytes(int64_t nb) {
    if constexpr (F::kPaired) return size_t((nb + 1) / 2) * kPairBytes;
    return round64(size_t(nb) * (F::kCodeBytes + F::kHighBytes + kScaleBytes));
  }
  static size_t codes_at(int64_t nb, int64_t b) {
    if constexpr (F::kPaired) return size_t(b / 2) * kPairBytes + size_t(b % 2) * F::kCodeBytes;
    return size_t(b) * F::kCodeBytes;
  }
  static size_t high_at(int64_t nb, int64_t b) {
    if constexpr (F::kPaired) return size_t(b / 2) * kPairBytes + 2 * F::kCodeBytes + size_t(b % 2) * F::kHighBytes;
    return size_t(nb) * F::kCodeBytes + size_t(b) * F::kHighBytes;
  }
  static size_t scales_at(int64_t nb, int64_t b) {
    if constexpr (F::kPaired)
      return size_t(b / 2) * kPairBytes + 2 * (F::kCodeBytes + F::kHighBytes) + size_t(b % 2) * kScaleBytes;
    return size_t(nb) * (F::kCodeBytes + F::kHighBytes) + size_t(b) * kScaleBytes;
  }
  template <typename P>
  static P* codes(P* group, int64_t nb, int64_t b) { return group + codes_at(nb, b); }
  template <typename P>
  static P* high(P* group, int64_t nb, int64_t b) { return group + high_at(nb, b); }
  template <typename P>
  static P* scales(P* group, int64_t nb, int64_t b) { return group + scales_at(nb, b); }
  // The weight-stream hint of a decode-sized call for block b, kAhead bytes ahead, one line at a
  // time so that a kernel spreads them over its work on the block: hint_lines(nb, b) of them, line
  // i hinted by hint_line<kAhead>(group, nb, b, i) at hint_line_at(nb, b, i) + kAhead (kAhead 0:
  // none). Paired: the pair's first ceil(L / 2) lines with its first block, the rest with its
  // second (L = kPairBytes / 64; all L with a last block that has no second). Split: the block's
  // code lines, its fifth-bit line, then (even blocks) its scale line. Together they are every
  // line of the group once; past the group's end a hint lands in the next group or unmapped space:
  // harmless (a prefetch never faults). Why spread (Intel Xeon VM, 2026-12-07): 17 hints at once
  // held the fill buffers the kernel's own loads then wait for; there the 8-row stream
  // (`BM_matmul_stream/8/8`) took 7.8-8.0 ms with the burst against 6.6-6.8 spread, 4 rows
  // 6.6-7.1 against 5.5-5.6.
  static constexpr int kPairLines = int(kPairBytes / 64);
  static int hint_lines(int64_t nb, int64_t b) {
    if constexpr (F::kPaired) {
      if (b % 2 != 0) return kPairLines / 2;
      return b + 1 < nb ? (kPairLines + 1) / 2 : kPairLines;
    }
    return int(F::kCodeBytes / 64) + (F::kHighBytes > 0 ? 1 : 0) + (b % 2 == 0 ? 1 : 0);
  }
  static size_t hint_line_at(int64_t nb, int64_t b, int i) {
    if constexpr (F::kPaired) {
      const int line = b % 2 == 0 ? i : (kPairLines + 1) / 2 + i;
      return size_t(b / 2) * kPairBytes + 64 * size_t(line);
    } else {
      constexpr int kCodeLines = int(F::kCodeBytes / 64);
      if (i < kCodeLines) return codes_at(nb, b) + 64 * size_t(i);
      if (F::kHighBytes > 0 && i == kCodeLines) return high_at(nb, b);
      return scales_at(nb, b);
    }
  }
  template <size_t kAhead>
  static void hint_line(const uint8_t* group, int64_t nb, int64_t b, int i) {
    if constexpr (kAhead > 0) hint_weights(group + hint_line_at(nb, b, i) + kAhead);
  }
};

template <typename F>
inline size_t packed_group_bytes(int64_t cols) {
  if (cols <= 0 || cols % kQK != 0 || cols > kMaxCols) return 0;
  return GroupLayout<F>::group_bytes(cols / kQK);
}

template <typename F>
inline void pack_rows(const void* w, size_t row_bytes, int64_t rows, int64_t cols, void* dst) {
  using L = GroupLayout<F>;
  const int64_t nb = cols / kQK;
  for_each_packed_row<typename F::Block>(
      w, row_bytes, rows, packed_group_bytes<F>(cols), dst,
      [&](uint8_t* group, int r, const typename F::Block* src) {
        for (int64_t b = 0; b < nb; ++b) {
          std::memcpy(L::scales(group, nb, b) + 2 * size_t(r), &src[b].d, 2);
          for (int e = 0; e < kQK; ++e)
            F::store(L::codes(group, nb, b), L::high(group, nb, b), e / 4, 4 * r + e % 4, F::code(src[b], e));
        }
      });
}

// Row r of a packed group back to f32: d * (code - bias), the arithmetic of dequantize_row.
template <typename F>
inline void unpack_row(const void* group_bytes, int64_t cols, int r, float* out) {
  using L = GroupLayout<F>;
  const auto* group = static_cast<const uint8_t*>(group_bytes);
  const int64_t nb = cols / kQK;
  for (int64_t b = 0; b < nb; ++b) {
    uint16_t h;
    std::memcpy(&h, L::scales(group, nb, b) + 2 * size_t(r), 2);
    const float d = f16_to_f32(h);
    const uint8_t* codes = L::codes(group, nb, b);
    const uint8_t* high = L::high(group, nb, b);
    for (int e = 0; e < kQK; ++e)
      out[b * kQK + e] = d * float(int(F::load(codes, high, e / 4, 4 * r + e % 4)) - F::kBias);
  }
}

// ---- activations ----
//
// Rearranged activation rows (the q8_0 values the row-major path uses, bit for bit):
//   codes [nb][32] s8 | dx [nb] f32 (the block's f16 scale, widened) | sum [nb] i32 (of the codes)
// row bytes = nb * 40 rounded up to 64.
inline size_t q8_act_bytes(int64_t cols) { return round64(size_t(cols / kQK) * (kQK + 8)); }

struct Q8ActRow {
  const int8_t* q;     // [nb][32]
  const float* dx;     // [nb]
  const int32_t* sum;  // [nb]
};

inline Q8ActRow q8_act_row(const uint8_t* row, int64_t nb) {
  return {reinterpret_cast<const int8_t*>(row), reinterpret_cast<const float*>(row + nb * kQK),
          reinterpret_cast<const int32_t*>(row + nb * (kQK + 4))};
}

inline void q8_pack_acts(const void* x, size_t x_stride, int64_t m, int64_t cols, void* dst,
                         size_t dst_stride) {
  const int64_t nb = cols / kQK;
  for_each_act_row<BlockQ8_0>(
      x, x_stride, m, dst, dst_stride, size_t(nb) * (kQK + 8), [&](const BlockQ8_0* src, uint8_t* row) {
        auto* dx = reinterpret_cast<float*>(row + nb * kQK);
        auto* sum = reinterpret_cast<int32_t*>(row + nb * (kQK + 4));
        for (int64_t b = 0; b < nb; ++b) {
          std::memcpy(row + b * kQK, src[b].qs, kQK);
          dx[b] = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(src[b].d)));
          // Sum of the 32 signed codes: SAD of the biased bytes against zero, minus the bias.
          const __m256i biased = _mm256_xor_si256(
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src[b].qs)), _mm256_set1_epi8(char(0x80)));
          const __m256i sad = _mm256_sad_epu8(biased, _mm256_setzero_si256());
          sum[b] = int32_t(_mm256_extract_epi64(sad, 0) + _mm256_extract_epi64(sad, 1) +
                           _mm256_extract_epi64(sad, 2) + _mm256_extract_epi64(sad, 3) - 128 * kQK);
        }
      });
}

template <typename Fn>
inline void with_tile_width(int nc, Fn&& fn) {
  switch (nc) {
    case 1:
      return fn(std::integral_constant<int, 1>{});
    case 2:
      return fn(std::integral_constant<int, 2>{});
    case 3:
      return fn(std::integral_constant<int, 3>{});
    case 4:
      return fn(std::integral_constant<int, 4>{});
    case 5:
      return fn(std::integral_constant<int, 5>{});
    case 6:
      return fn(std::integral_constant<int, 6>{});
    case 7:
      return fn(std::integral_constant<int, 7>{});
    default:
      return fn(std::integral_constant<int, 8>{});
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

// for_each_tile for q8 activation rows (q8_pack_acts): fn(width, a, y_tile) with a[0..width)
// the tile's rows.
template <int kMax, typename Fn>
inline void for_each_q8_tile(int64_t cols, const void* x, size_t x_stride, int64_t nx, float* y,
                             size_t y_stride, Fn&& fn) {
  const int64_t nb = cols / kQK;
  for_each_tile<kMax>(x, x_stride, nx, y, y_stride, [&](auto width, const uint8_t* const* rows, float* yk) {
    Q8ActRow a[decltype(width)::value];
    for (int k = 0; k < decltype(width)::value; ++k) a[k] = q8_act_row(rows[k], nb);
    fn(width, static_cast<const Q8ActRow*>(a), yk);
  });
}

// ---- interleaved activation tiles ----
//
// A tile of NC rearranged activation rows (Q8ActRow) copied block by block into one buffer, for
// GEMM kernels that would otherwise hold three pointers per row (codes, scales, sums): with a
// tile of 8 rows GCC spilled those 24 pointers and kept the accumulators in memory
// (gemm_packed_avx512.cpp, docs/benchmarks.md "Interleaved activation tiles"). Per block b, at
// b * q8_tile_block_bytes<NC>():
//   q [NC][32] s8 | bias [NC] i32 (-F::kBias * the block's code sum) | dx [NC] f32
template <int NC>
constexpr size_t q8_tile_block_bytes() {
  return size_t(NC) * (kQK + 8);
}

// A kernel's view of activation rows: row k's codes, its block bias (-F::kBias * sum) and scale
// for block b; Q8Rows through the rows themselves (three pointers per row), Q8Tile through an
// interleaved tile (one pointer and constant offsets).
template <typename F>
struct Q8Rows {
  const Q8ActRow* a;
  const int8_t* q(int k, int64_t b) const { return a[k].q + b * kQK; }
  int32_t bias(int k, int64_t b) const { return -F::kBias * a[k].sum[b]; }
  float dx(int k, int64_t b) const { return a[k].dx[b]; }
};

template <int NC>
struct Q8Tile {
  const uint8_t* t;
  const uint8_t* block(int64_t b) const { return t + size_t(b) * q8_tile_block_bytes<NC>(); }
  const int8_t* q(int k, int64_t b) const { return reinterpret_cast<const int8_t*>(block(b) + k * kQK); }
  int32_t bias(int k, int64_t b) const {
    int32_t v;
    std::memcpy(&v, block(b) + NC * kQK + 4 * k, 4);
    return v;
  }
  float dx(int k, int64_t b) const {
    float v;
    std::memcpy(&v, block(b) + NC * (kQK + 4) + 4 * k, 4);
    return v;
  }
};

// This thread's tile buffer, one per including file for every format and width (grows to the
// widest tile seen, never shrinks).
inline std::vector<uint8_t>& q8_tile_scratch() {
  thread_local std::vector<uint8_t> buf;
  return buf;
}

// fn(Q8Tile<NC>) over the NC rows a[0..NC) of nb blocks interleaved into q8_tile_scratch()
// ([nb][q8_tile_block_bytes<NC>()]).
template <typename F, int NC, typename Fn>
inline void with_q8_tile(int64_t nb, const Q8ActRow* a, Fn&& fn) {
  std::vector<uint8_t>& buf = q8_tile_scratch();
  if (buf.size() < size_t(nb) * q8_tile_block_bytes<NC>()) buf.resize(size_t(nb) * q8_tile_block_bytes<NC>());
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* blk = buf.data() + size_t(b) * q8_tile_block_bytes<NC>();
    for (int k = 0; k < NC; ++k) {
      std::memcpy(blk + k * kQK, a[k].q + b * kQK, kQK);
      const int32_t bias = -F::kBias * a[k].sum[b];
      std::memcpy(blk + NC * kQK + 4 * k, &bias, 4);
      std::memcpy(blk + NC * (kQK + 4) + 4 * k, &a[k].dx[b], 4);
    }
  }
  fn(Q8Tile<NC>{buf.data()});
}

// The table entry of a legacy quant format F with its GEMM.
template <typename F, auto Gemm>
PackedKernels legacy_packed_kernels() {
  return PackedKernels{packed_group_bytes<F>, pack_rows<F>, q8_act_bytes, q8_pack_acts, Gemm, unpack_row<F>};
}

// ---- F16 / F32 ----
//
// Packed weights, per group of 16 rows (rows 16g .. 16g+15): [cols][16] elements of the weight
// type E (f16: 32 bytes per column, f32: 64), float_group_bytes = cols * 16 * sizeof(E) rounded
// up to 64. Activations are the f32 rows themselves (no rearrangement; matmul passes them in place).
constexpr int64_t kMaxFloatCols = int64_t(1) << 20;  // wider rows stay in the file layout

template <typename E>
inline size_t float_group_bytes(int64_t cols) {
  if (cols <= 0 || cols > kMaxFloatCols) return 0;
  return round64(size_t(cols) * kRows * sizeof(E));
}

template <typename E>
inline void float_pack(const void* w, size_t row_bytes, int64_t rows, int64_t cols, void* dst) {
  for_each_packed_row<E>(w, row_bytes, rows, float_group_bytes<E>(cols), dst,
                         [&](uint8_t* group, int r, const E* src) {
                           auto* cells = reinterpret_cast<E*>(group);
                           for (int64_t c = 0; c < cols; ++c) cells[size_t(c) * kRows + size_t(r)] = src[c];
                         });
}

// Row r of a packed F32 / F16 / BF16 group back to f32 (as dequantize_row widens each element).
template <typename E, float (*kWiden)(E)>
inline void float_unpack_row(const void* group, int64_t cols, int r, float* out) {
  const auto* cells = static_cast<const E*>(group);
  for (int64_t c = 0; c < cols; ++c) out[c] = kWiden(cells[size_t(c) * kRows + size_t(r)]);
}
inline float widen_f32(float v) { return v; }

// f32 activation rows. float_pack_acts is never called: F16/F32 weights take f32 activations,
// which matmul passes in place.
inline size_t float_act_bytes(int64_t cols) { return size_t(cols) * sizeof(float); }
inline void float_pack_acts(const void* x, size_t x_stride, int64_t m, int64_t cols, void* dst,
                            size_t dst_stride) {
  for (int64_t k = 0; k < m; ++k)
    std::memcpy(static_cast<uint8_t*>(dst) + size_t(k) * dst_stride,
                static_cast<const uint8_t*>(x) + size_t(k) * x_stride, size_t(cols) * sizeof(float));
}

// BF16 weights take the same layout (E = uint16_t). They meet bf16-rounded activations
// (vec_dot.h); the packed GEMM widens both to f32 (exactly: a bf16 is the top half of an f32) and
// runs the float kernel, so pack_acts widens the converted bf16 rows to f32 rows.
inline void bf16_pack_acts(const void* x, size_t x_stride, int64_t m, int64_t cols, void* dst,
                           size_t dst_stride) {
  for_each_act_row<uint16_t>(x, x_stride, m, dst, dst_stride, size_t(cols) * 4,
                             [&](const uint16_t* src, uint8_t* row) {
                               auto* out = reinterpret_cast<uint32_t*>(row);
                               for (int64_t c = 0; c < cols; ++c) out[c] = uint32_t(src[c]) << 16;
                             });
}

// for_each_tile for f32 activation rows: fn(width, xr, y_tile) with xr[0..width) the tile's rows.
template <int kMax, typename Fn>
inline void for_each_float_tile(const void* x, size_t x_stride, int64_t nx, float* y, size_t y_stride,
                                Fn&& fn) {
  for_each_tile<kMax>(x, x_stride, nx, y, y_stride, [&](auto width, const uint8_t* const* rows, float* yk) {
    const float* xr[decltype(width)::value];
    for (int k = 0; k < decltype(width)::value; ++k) xr[k] = reinterpret_cast<const float*>(rows[k]);
    fn(width, static_cast<const float* const*>(xr), yk);
  });
}

// E: float (F32 weights) or uint16_t (F16).
template <typename E, auto Gemm>
PackedKernels float_packed_kernels() {
  constexpr float (*widen)(E) = [] {
    if constexpr (std::is_same_v<E, float>)
      return widen_f32;
    else
      return f16_to_f32;
  }();
  return PackedKernels{float_group_bytes<E>, float_pack<E>, float_act_bytes,
                       float_pack_acts,      Gemm,          float_unpack_row<E, widen>};
}

template <auto Gemm>
PackedKernels bf16_packed_kernels() {
  return PackedKernels{float_group_bytes<uint16_t>,
                       float_pack<uint16_t>,
                       float_act_bytes,
                       bf16_pack_acts,
                       Gemm,
                       float_unpack_row<uint16_t, bf16_to_f32>};
}

}  // namespace
}  // namespace kvserve
