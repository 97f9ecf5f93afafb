// Repacked BF16 weights and their AVX512-BF16 GEMM (KernelTable::packed[BF16] on CPUs with
// avx512_bf16; elsewhere the AVX-512 table keeps the widening float kernel of
// gemm_packed_float_avx512.cpp).
//
// BF16 weights meet bf16-rounded activations (vec_dot.h). The float kernel widens both to f32 and
// spends one FMA per weight and activation row, plus a widen and a shift per 16 weights.
// vdpbf16ps multiplies bf16 pairs and adds both products to an f32 lane, so one instruction does
// two columns of 16 rows against one activation row: half the FMAs and no widening. The products
// of two bf16 values are exact in f32, so this is the float kernel's arithmetic in another order.
//
// Layout, per group of 16 weight rows (rows 16g .. 16g+15):
//   [ceil(cols / 2)][16 rows][2] bf16: column pair p holds, for each row r, columns 2p and 2p+1
//   side by side (64 bytes per pair, one zmm); an odd last column is paired with a zero.
// Activation rows: the converted bf16 row with a zero appended when cols is odd, read as one
// 32-bit pair per column pair and broadcast.
//
// Arithmetic per output (row r, activation row k), whatever the tile: two f32 chains, acc0 over
// the even column pairs and acc1 over the odd ones, each a sequence of vdpbf16ps in pair order
// (per pair: acc + w[2p+1] x[2p+1], then + w[2p] x[2p], each rounded to nearest even, with
// denormal inputs and results flushed to zero as the instruction defines), then acc0 + acc1. The
// same for every tile width and thread split, so results depend on neither.
//
// Compiled with AVX-512 F/BW/VL and BF16 flags; fill_avx512_bf16_packed_kernels runs only where
// dispatch.cpp found avx512_bf16.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/packed_avx512_common.h"

namespace kvserve {

namespace {

constexpr int kMaxTileCols = 8;      // activation rows per register tile (2 x 8 accumulators)
constexpr size_t kPairBytes = 64;    // one column pair of a group: 16 rows x 2 bf16

int64_t num_pairs(int64_t cols) { return (cols + 1) / 2; }

size_t bf16_pair_group_bytes(int64_t cols) {
  if (cols <= 0 || cols > kMaxFloatCols) return 0;
  return size_t(num_pairs(cols)) * kPairBytes;
}

void bf16_pair_pack(const void* w, size_t row_bytes, int64_t rows, int64_t cols, void* dst) {
  // for_each_packed_row zeroes each group first: an odd last column's partner stays 0.
  for_each_packed_row<uint16_t>(w, row_bytes, rows, bf16_pair_group_bytes(cols), dst,
                                [&](uint8_t* group, int r, const uint16_t* src) {
                                  auto* cells = reinterpret_cast<uint16_t*>(group);
                                  for (int64_t c = 0; c < cols; ++c)
                                    cells[size_t(c / 2) * 2 * kRows + 2 * size_t(r) + size_t(c % 2)] = src[c];
                                });
}

size_t bf16_pair_act_bytes(int64_t cols) { return size_t(num_pairs(cols)) * 4; }

void bf16_pair_pack_acts(const void* x, size_t x_stride, int64_t m, int64_t cols, void* dst, size_t dst_stride) {
  // for_each_act_row zeroes the bytes past `used`: the odd column's partner is 0.
  for_each_act_row<uint16_t>(x, x_stride, m, dst, dst_stride, size_t(cols) * 2,
                             [&](const uint16_t* src, uint8_t* row) { std::memcpy(row, src, size_t(cols) * 2); });
}

inline __m512 dot_pair(__m512 acc, __m512i w, uint32_t x) {
  return _mm512_dpbf16_ps(acc, reinterpret_cast<__m512bh>(w), reinterpret_cast<__m512bh>(_mm512_set1_epi32(int(x))));
}

// One group (w) times NC activation rows x[k] (pairs of bf16 as uint32): y[k * ys + r].
// (The pragmas: see group_tile in gemm_packed_float_avx512.cpp.)
template <int NC, bool kSingleRowHints>
void group_tile(int64_t pairs, const uint8_t* w, const uint32_t* const* x, float* y, size_t ys) {
  __m512 a0[NC], a1[NC];
#pragma GCC unroll 16
  for (int k = 0; k < NC; ++k) a0[k] = a1[k] = _mm512_setzero_ps();
  int64_t p = 0;
  for (; p + 2 <= pairs; p += 2) {
    const uint8_t* at = w + size_t(p) * kPairBytes;
    // As the float kernel hints (gemm_packed_float_avx512.cpp): two 64-byte lines per step here.
    if constexpr (NC > 1 || kSingleRowHints) {
      hint_weights(at + kWeightHintBytes);
      hint_weights(at + kWeightHintBytes + 64);
    }
    const __m512i w0 = _mm512_loadu_si512(at), w1 = _mm512_loadu_si512(at + kPairBytes);
#pragma GCC unroll 16
    for (int k = 0; k < NC; ++k) {
      a0[k] = dot_pair(a0[k], w0, x[k][p]);
      a1[k] = dot_pair(a1[k], w1, x[k][p + 1]);
    }
  }
  if (p < pairs) {
    const __m512i w0 = _mm512_loadu_si512(w + size_t(p) * kPairBytes);
#pragma GCC unroll 16
    for (int k = 0; k < NC; ++k) a0[k] = dot_pair(a0[k], w0, x[k][p]);
  }
#pragma GCC unroll 16
  for (int k = 0; k < NC; ++k) _mm512_storeu_ps(y + size_t(k) * ys, _mm512_add_ps(a0[k], a1[k]));
}

template <bool kSingleRowHints>
void gemm(int64_t cols, const void* w, size_t gb, int64_t ng, const void* x, size_t xs, int64_t nx, float* y,
          size_t ys) {
  const auto* wb = static_cast<const uint8_t*>(w);
  const int64_t pairs = num_pairs(cols);
  for_each_tile<kMaxTileCols>(x, xs, nx, y, ys, [&](auto width, const uint8_t* const* rows, float* yk) {
    constexpr int NC = decltype(width)::value;
    const uint32_t* xr[NC];
#pragma GCC unroll 16
    for (int k = 0; k < NC; ++k) xr[k] = reinterpret_cast<const uint32_t*>(rows[k]);
    for (int64_t g = 0; g < ng; ++g)
      group_tile<NC, kSingleRowHints>(pairs, wb + size_t(g) * gb, xr, yk + g * kRows, ys);
  });
}

template <bool kSingleRowHints>
PackedKernels bf16_pair_kernels() {
  return PackedKernels{bf16_pair_group_bytes, bf16_pair_pack,        bf16_pair_act_bytes,
                       bf16_pair_pack_acts,   gemm<kSingleRowHints>, nullptr};
}

}  // namespace

void fill_avx512_bf16_packed_kernels(KernelTable* t) {
  t->packed[int(GgmlType::BF16)] = single_stream_hints() ? bf16_pair_kernels<true>() : bf16_pair_kernels<false>();
}

}  // namespace kvserve
