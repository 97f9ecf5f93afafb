// Internal to the packed-GEMM files: the repacked layout of the k-quants (Q2_K .. Q6_K) and
// of their rearranged q8_K activation rows, read by every instruction set's k-quant GEMM
// (gemm_packed_kquant_avx512.cpp, gemm_packed_kquant_avx2.cpp): the 16-row interleave of
// packed_layout.h applied per 256-column super-block, with the sub-block scales kept apart so
// that they multiply exact integer sub-block sums. Baseline flags only; internal linkage (see
// packed_layout.h).
#pragma once

#include "kernels/packed_layout.h"

namespace kvserve {
namespace {

// ---- Q4_K ----
//
// A super-block (256 columns) of a group of 16 rows, 2,496 bytes (the file's 144 per row plus 12:
// the 6-bit scales are widened to bytes and the mins to 16-bit pairs):
//   codes [8 sub-blocks][256]  each sub-block's 32 x 16 nibbles as PackQ4_0 stores a block
//   sc    [8][16] u8           scale of sub-block j, row r
//   mins  [4][16][2] i16       (min of sub-block 2p, min of 2p + 1) of row r: vpdpwssd pairs
//   d     [16] f16, dmin [16] f16
// Arithmetic per output, per super-block in order (exact int32 until the two f32 steps):
//   isum = sum_j sc_j * (sum_{e in j} q_e * x_e)          (0 <= q <= 15, no bias)
//   msum = sum_j min_j * (sum_{e in j} x_e)
//   acc = fma(d * dx, float(isum), acc); acc = fnmadd(dmin * dx, float(msum), acc)
// (|isum| <= 8 * 63 * 32 * 15 * 127 < 2^31.) Activations: q8_K rows rearranged per super-block as
// codes [256] s8 | dx f32 | xsum pairs [4] (two i16: sums of sub-blocks 2p and 2p + 1).

//
// Q5_K is the same with a fifth bit per code (q <= 31): after the codes, per sub-block the 64-byte
// vector of its 8 code vectors' fifth bits as Q5_0 stores a block's (bit i of byte b: code vector
// i, byte b; 512 bytes),
// 3,008 bytes per super-block (+12 per row over the file's 176). Its activations are Q4_K's.

constexpr int kSubBlocks = kQK_K / kQK;                   // 8 sub-blocks of 32 per super-block
constexpr size_t kKCodeBytes = 256 * size_t(kSubBlocks);  // 2048

template <typename B>
constexpr bool kFifth = std::is_same_v<B, BlockQ5_K>;
template <typename B>
constexpr size_t kHighBytes = kFifth<B> ? 512 : 0;
template <typename B>
constexpr size_t kKSuperBytes = kKCodeBytes + kHighBytes<B> + 128 + 256 + 64;
constexpr size_t kKActBytes = kQK_K + 4 + 16;  // per super-block of an activation row

// Scale and min of sub-block j of a Q4_K block (the layout comment of BlockQ4_K).
inline void q4k_scale_min(const uint8_t* q, int j, uint8_t* sc, uint8_t* mn) {
  if (j < 4) {
    *sc = q[j] & 63;
    *mn = q[j + 4] & 63;
  } else {
    *sc = uint8_t((q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4));
    *mn = uint8_t((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// Bytes of a group of 16 rows of `cols` columns, super_bytes per super-block (0: not packable);
// kquant_group_bytes_of<S> is the PackedKernels::group_bytes of a layout of S bytes per super-block.
inline size_t kquant_group_bytes(int64_t cols, size_t super_bytes) {
  if (cols <= 0 || cols % kQK_K != 0 || cols > kMaxCols) return 0;
  return round64(size_t(cols / kQK_K) * super_bytes);
}

template <size_t kSuperBytes>
inline size_t kquant_group_bytes_of(int64_t cols) {
  return kquant_group_bytes(cols, kSuperBytes);
}

// Walks a k-quant matrix being packed super-block by super-block: fn(sb, r, block) for each row r
// of each group and each of its super-blocks (sb: where that super-block of the group starts,
// super_bytes long; block: the row's super-block in the file).
template <typename B, typename Fn>
inline void for_each_packed_super_block(const void* w, size_t row_bytes, int64_t rows, int64_t cols,
                                        size_t super_bytes, void* dst, Fn&& fn) {
  const int64_t ns = cols / kQK_K;
  for_each_packed_row<B>(w, row_bytes, rows, kquant_group_bytes(cols, super_bytes), dst,
                         [&](uint8_t* out, int r, const B* src) {
                           for (int64_t b = 0; b < ns; ++b) fn(out + size_t(b) * super_bytes, r, src[b]);
                         });
}

template <typename B>
inline void q4k_pack(const void* w, size_t row_bytes, int64_t rows, int64_t cols, void* dst) {
  for_each_packed_super_block<B>(w, row_bytes, rows, cols, kKSuperBytes<B>, dst, [&](uint8_t* sb, int r, const B& blk) {
    uint8_t* high = sb + kKCodeBytes;
    uint8_t* sc = high + kHighBytes<B>;
    auto* mins = reinterpret_cast<int16_t*>(sc + 128);
    uint8_t* dd = sc + 128 + 256;
    std::memcpy(dd + 2 * r, &blk.d, 2);
    std::memcpy(dd + 32 + 2 * r, &blk.dmin, 2);
    for (int j = 0; j < kSubBlocks; ++j) {
      uint8_t s6, m6;
      q4k_scale_min(blk.scales, j, &s6, &m6);
      sc[16 * j + r] = s6;
      mins[(j / 2) * 32 + 2 * r + (j % 2)] = int16_t(m6);
      for (int e = 0; e < kQK; ++e) {
        const uint8_t both = blk.qs[32 * (j / 2) + e];
        const uint8_t q = (j % 2) ? uint8_t(both >> 4) : uint8_t(both & 0x0F);
        const int byte = 4 * r + e % 4;
        PackQ4_0::store(sb + 256 * size_t(j), nullptr, e / 4, byte, q);
        if constexpr (kFifth<B>) {
          if ((blk.qh[e] >> j) & 1) high[64 * j + byte] |= uint8_t(1u << (e / 4));
        }
      }
    }
  });
}

inline size_t q4k_act_bytes(int64_t cols) { return round64(size_t(cols / kQK_K) * kKActBytes); }

// Rearranges m q8_K activation rows: per super-block, block_bytes bytes starting with its 256
// codes and its f32 scale d; tail(src_block, dst) writes the format's correction terms after them.
template <typename Tail>
inline void kquant_pack_acts(const void* x, size_t x_stride, int64_t m, int64_t cols, void* dst, size_t dst_stride,
                             size_t block_bytes, Tail&& tail) {
  const int64_t ns = cols / kQK_K;
  for_each_act_row<BlockQ8_K>(x, x_stride, m, dst, dst_stride, size_t(ns) * block_bytes,
                              [&](const BlockQ8_K* src, uint8_t* row) {
                                for (int64_t b = 0; b < ns; ++b) {
                                  uint8_t* o = row + size_t(b) * block_bytes;
                                  std::memcpy(o, src[b].qs, kQK_K);
                                  std::memcpy(o + kQK_K, &src[b].d, 4);
                                  tail(src[b], o + kQK_K + 4);
                                }
                              });
}

// Q4_K/Q5_K's tail: the 8 sub-block sums of the activation codes (pairs of q8_K's 16-element
// bsums), int16, for the mins term.
inline void q4k_pack_acts(const void* x, size_t x_stride, int64_t m, int64_t cols, void* dst,
                          size_t dst_stride) {
  kquant_pack_acts(x, x_stride, m, cols, dst, dst_stride, kKActBytes, [](const BlockQ8_K& src, uint8_t* o) {
    int16_t pairs[8];
    for (int j = 0; j < kSubBlocks; ++j) pairs[j] = int16_t(src.bsums[2 * j] + src.bsums[2 * j + 1]);
    std::memcpy(o, pairs, 16);
  });
}

// ---- Q6_K ----
//
// A super-block (256 columns) of a group of 16 rows, 3,360 bytes (the file's 210 per row):
//   nib   [32][64]  code vectors 2p (low nibbles) and 2p + 1 (high) of the low 4 bits
//   hi    [16][64]  the top 2 bits of code vectors 4i .. 4i+3 (vector 4i + j in bits 2j, 2j + 1)
//   sc    [16][16]  i8 scale of 16-element chunk i, row r
//   d     [16] f16
// Codes are q6 in 0..63 (= value / scale + 32). Arithmetic per output, per super-block in order:
//   isum = sum_i sc_i * (sum_{e in chunk i} q_e * x_e - 32 * sum_{e in chunk i} x_e)   (exact:
//   |isum| <= 16 * 128 * 16 * 63 * 127 < 2^31), then acc = fma(d * dx, float(isum), acc).
// Activations: q8_K rows rearranged per super-block as codes [256] s8 | dx f32 | 32 * bsums [16] i32.

constexpr int kChunks6 = kQK_K / 16;  // 16 scale chunks of 16 per super-block
constexpr size_t kQ6SuperBytes = 2048 + 1024 + 256 + 32;
constexpr size_t kQ6ActBytes = kQK_K + 4 + 4 * kChunks6;

inline uint8_t q6k_code(const BlockQ6_K& b, int e) {
  const int h = e / 128, r = e % 128, quarter = r / 32, l = r % 32;
  const uint8_t lq = b.ql[64 * h + l + (quarter % 2) * 32];
  const uint8_t low = quarter >= 2 ? uint8_t(lq >> 4) : uint8_t(lq & 0x0F);
  return uint8_t(low | (((b.qh[32 * h + l] >> (2 * quarter)) & 3) << 4));
}

inline void q6k_pack(const void* w, size_t row_bytes, int64_t rows, int64_t cols, void* dst) {
  for_each_packed_super_block<BlockQ6_K>(
      w, row_bytes, rows, cols, kQ6SuperBytes, dst, [&](uint8_t* nib, int r, const BlockQ6_K& blk) {
        uint8_t* hi = nib + 2048;
        auto* sc = reinterpret_cast<int8_t*>(hi + 1024);
        std::memcpy(hi + 1024 + 256 + 2 * r, &blk.d, 2);
        for (int i = 0; i < kChunks6; ++i) sc[16 * i + r] = blk.scales[i];
        for (int e = 0; e < kQK_K; ++e) {
          const uint8_t q = q6k_code(blk, e);
          const int v = e / 4, byte = 4 * r + e % 4;  // code vector v, byte within it
          nib[64 * (v / 2) + byte] |= uint8_t((q & 0x0F) << (4 * (v % 2)));
          hi[64 * (v / 4) + byte] |= uint8_t((q >> 4) << (2 * (v % 4)));
        }
      });
}

inline size_t q6k_act_bytes(int64_t cols) { return round64(size_t(cols / kQK_K) * kQ6ActBytes); }

// The tail of the chunked k-quants (Q6_K, Q3_K, Q2_K): per 16-element chunk, kFactor x the sum of
// its activation codes (int32): 32 and 4 undo Q6_K's and Q3_K's code offsets, 1 is Q2_K's min term.
template <int kFactor>
inline void chunk_pack_acts(const void* x, size_t x_stride, int64_t m, int64_t cols, void* dst, size_t dst_stride) {
  kquant_pack_acts(x, x_stride, m, cols, dst, dst_stride, kQ6ActBytes, [](const BlockQ8_K& src, uint8_t* o) {
    int32_t corr[kChunks6];
    for (int i = 0; i < kChunks6; ++i) corr[i] = kFactor * int32_t(src.bsums[i]);
    std::memcpy(o, corr, sizeof corr);
  });
}

// ---- Q3_K and Q2_K ----
//
// A super-block (256 columns) of a group of 16 rows:
//   lo  [16][64]  the low two bits of code vectors 4i .. 4i+3 (vector 4i + j in bits 2j, 2j + 1,
//                 as Q6_K's top bits)
//   hb  [8][64]   Q3_K only: the third bits of code vectors 8k .. 8k+7 as Q5_0 stores fifth bits
//                 (bit j of byte b: code vector 8k + j, byte b)
//   sc  [16][16]  chunk i, row r: Q3_K's signed scale (the 6-bit value minus 32), Q2_K's byte
//                 as the file has it (4-bit scale | 4-bit min << 4)
//   d   [16] f16, then Q2_K's dmin [16] f16
// Q3_K: 1,824 bytes (the file's 110 per row plus 4). Codes are q3 + 4 (0..7) and the arithmetic
// is Q6_K's with 4 for 32: isum = sum_i sc_i * (sum_{e in chunk i} q_e x_e - 4 sum_{e in chunk i} x_e),
// acc = fma(d * dx, float(isum), acc).
// Q2_K: 1,344 bytes (the file's 84 per row). Codes 0..3:
//   isum = sum_i sc_i * (sum_{e in chunk i} q_e x_e), msum = sum_i min_i * (sum_{e in chunk i} x_e),
//   acc = fma(d * dx, float(isum), acc); acc = fnmadd(dmin * dx, float(msum), acc).
// (|isum|, |msum| <= 16 * 63 * 16 * 7 * 128 < 2^31.) Activations: Q6_K's rearrangement with the
// chunk sums times 4 (Q3_K) or 1 (Q2_K).

template <typename B>
constexpr bool kThirdBit = std::is_same_v<B, BlockQ3_K>;
constexpr size_t kLowCodeBytes = 1024;
template <typename B>
constexpr size_t kLowScaleOffset = kLowCodeBytes + (kThirdBit<B> ? 512 : 0);
template <typename B>
constexpr size_t kLowSuperBytes = kLowScaleOffset<B> + 256 + (kThirdBit<B> ? 32 : 64);

template <typename B>
inline void low_bits_pack(const void* w, size_t row_bytes, int64_t rows, int64_t cols, void* dst) {
  for_each_packed_super_block<B>(w, row_bytes, rows, cols, kLowSuperBytes<B>, dst, [&](uint8_t* lo, int r, const B& blk) {
    uint8_t* hb = lo + kLowCodeBytes;
    uint8_t* sc = lo + kLowScaleOffset<B>;
    uint8_t* dd = sc + 256;
    std::memcpy(dd + 2 * r, &blk.d, 2);
    if constexpr (kThirdBit<B>) {
      int8_t s[kChunks6];
      unpack_scales_q3_k(blk.scales, s);
      for (int i = 0; i < kChunks6; ++i) sc[16 * i + r] = uint8_t(s[i]);
    } else {
      std::memcpy(dd + 32 + 2 * r, &blk.dmin, 2);
      for (int i = 0; i < kChunks6; ++i) sc[16 * i + r] = blk.scales[i];
    }
    for (int e = 0; e < kQK_K; ++e) {
      // Element 128h + 32s + l: bits 2s.. of qs[32h + l]; Q3_K's third bit is bit 4h + s of hmask[l].
      const int h = e / 128, s2 = (e % 128) / 32, l = e % 32;
      const int v = e / 4, byte = 4 * r + e % 4;  // code vector v, byte within it
      lo[64 * (v / 4) + byte] |= uint8_t(((blk.qs[32 * h + l] >> (2 * s2)) & 3) << (2 * (v % 4)));
      if constexpr (kThirdBit<B>) {
        if ((blk.hmask[l] >> (4 * h + s2)) & 1) hb[64 * (v / 8) + byte] |= uint8_t(1u << (v % 8));
      }
    }
  });
}

// The table entries of the k-quants with their GEMMs.
template <typename B, auto Gemm>
PackedKernels q4k_packed_kernels() {
  return PackedKernels{
      kquant_group_bytes_of<kKSuperBytes<B>>, q4k_pack<B>, q4k_act_bytes, q4k_pack_acts, Gemm, nullptr};
}

template <auto Gemm>
PackedKernels q6k_packed_kernels() {
  return PackedKernels{
      kquant_group_bytes_of<kQ6SuperBytes>, q6k_pack, q6k_act_bytes, chunk_pack_acts<32>, Gemm, nullptr};
}

template <typename B, auto Gemm>
PackedKernels low_bits_packed_kernels() {
  constexpr int kChunk = kThirdBit<B> ? 4 : 1;
  return PackedKernels{kquant_group_bytes_of<kLowSuperBytes<B>>,
                       low_bits_pack<B>,
                       q6k_act_bytes,
                       chunk_pack_acts<kChunk>,
                       Gemm,
                       nullptr};
}

}  // namespace
}  // namespace kvserve
