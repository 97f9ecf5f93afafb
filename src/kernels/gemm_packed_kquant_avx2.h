// Internal to gemm_packed_kquant_avx2.cpp and gemm_packed_avxvnni.cpp (internal linkage: each
// gets its own copy, compiled with its own flags). Repacked k-quant weights (Q2_K .. Q6_K)
// and their GEMMs for the AVX2 and AVX-VNNI tables (KernelTable::packed): the layout of
// packed_kquant_layout.h (the same bytes as the AVX-512 table's), read as two 8-row halves per
// group as gemm_packed_legacy_avx2.h reads the legacy quants (see its comment for why and for the
// maddubs arithmetic).
//
// Integer sums, exact: codes are unsigned (Q2_K <= 3, Q3_K <= 7, Q4_K <= 15, Q5_K <= 31, Q6_K <= 63) against s8
// activations, so maddubs (u8 x s8 -> int16 pairs) never saturates a single product pair
// (<= 2 * 63 * 127); pair sums are added in int16 only as far as they provably fit (four for
// Q4_K/Q5_K, two for the 16-element chunks of Q6_K, Q3_K and Q2_K) before madd widens them to int32. Sub-block (chunk) sums are then
// scaled by their integer scales in int32 (vpmulld) and the f32 steps follow per super-block in
// the layout's order, the same for every output whatever the tile. With kVnni (the file compiled
// with -mavxvnni) each 4-byte product group goes through one vpdpbusd into int32 instead: the
// same exact sums, bit-identical results.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/packed_avx2_common.h"
#include "kernels/packed_kquant_layout.h"

namespace kvserve {
namespace {

// 8 bytes -> 8 int32 lanes, unsigned or signed.
inline __m256i widen_u8(const uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}
inline __m256i widen_s8(const uint8_t* p) {
  return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

inline __m256 load_f16x8(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Half h of code vector i of a Q4_K/Q5_K sub-block (its 256 nibble bytes at codes, the 64-byte
// vector of its 8 code vectors' fifth bits at high): elements 4i .. 4i+3 of the half's 8 rows.
template <typename B>
inline __m256i q4k_code_vector(const uint8_t* codes, const uint8_t* high, int h, int i) {
  const __m256i v = nibble_half(codes, h, i);
  if constexpr (kFifth<B>) return or_high_bit<4>(v, load256(high + 32 * h), i);
  return v;
}

// Halves h0 .. h0 + H - 1 (rows 8h .. 8h+7 each) of one group of a Q4_K/Q5_K matrix times NC
// activation rows: y[k * ys + 8 (h - h0) + r] (H = 2 for decode: one pass over the codes).
template <typename B, int NC, int H, bool kVnni>
void q4k_tile(int64_t ns, const uint8_t* w, int h0, const uint8_t* const* x, float* y, size_t ys) {
  constexpr size_t kSuper = kKSuperBytes<B>;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[H][NC];
  for (int h = 0; h < H; ++h)
    for (int k = 0; k < NC; ++k) acc[h][k] = _mm256_setzero_ps();
  for (int64_t b = 0; b < ns; ++b) {
    const uint8_t* sb = w + size_t(b) * kSuper;
    const uint8_t* high = sb + kKCodeBytes;
    const uint8_t* sc = high + kHighBytes<B>;
    const uint8_t* mins = sc + 128;
    const uint8_t* dd = mins + 256;
    for (int hh = 0; hh < H; ++hh) {
      const int h = h0 + hh;
      __m256i isum[NC];
      for (int k = 0; k < NC; ++k) isum[k] = _mm256_setzero_si256();
      for (int j = 0; j < kSubBlocks; ++j) {
        // The pass that streams the super-block from memory hints its lines kWeightHintBytes
        // ahead, an eighth per sub-block (spread: packed_layout.h).
        if (h == 0) hint_weights_share(sb + kWeightHintBytes, kSuper, j, kSubBlocks);
        __m256i t[NC];
        if constexpr (kVnni) {
          for (int k = 0; k < NC; ++k) t[k] = _mm256_setzero_si256();
          for (int i = 0; i < 8; ++i) {
            const __m256i v = q4k_code_vector<B>(sb + 256 * size_t(j), high + 64 * j, h, i);
            for (int k = 0; k < NC; ++k) {
              const int8_t* xq =
                  reinterpret_cast<const int8_t*>(x[k] + size_t(b) * kKActBytes) + kQK * j + 4 * i;
              t[k] = _mm256_dpbusd_avx_epi32(t[k], v, broadcast4(xq));
            }
          }
        } else {
          for (int i0 = 0; i0 < 8; i0 += 4) {
            __m256i p[NC];
            for (int i = i0; i < i0 + 4; ++i) {
              const __m256i v = q4k_code_vector<B>(sb + 256 * size_t(j), high + 64 * j, h, i);
              for (int k = 0; k < NC; ++k) {
                const int8_t* xq =
                    reinterpret_cast<const int8_t*>(x[k] + size_t(b) * kKActBytes) + kQK * j + 4 * i;
                const __m256i m = _mm256_maddubs_epi16(v, broadcast4(xq));
                p[k] = i == i0 ? m : _mm256_add_epi16(p[k], m);
              }
            }
            for (int k = 0; k < NC; ++k) {
              const __m256i s = _mm256_madd_epi16(p[k], ones);
              t[k] = i0 == 0 ? s : _mm256_add_epi32(t[k], s);
            }
          }
        }
        const __m256i scale = widen_u8(sc + 16 * j + 8 * h);
        for (int k = 0; k < NC; ++k) isum[k] = _mm256_add_epi32(isum[k], _mm256_mullo_epi32(t[k], scale));
      }
      const __m256 d = load_f16x8(dd + 16 * h), dmin = load_f16x8(dd + 32 + 16 * h);
      for (int k = 0; k < NC; ++k) {
        const uint8_t* a = x[k] + size_t(b) * kKActBytes;
        __m256i msum = _mm256_setzero_si256();
        for (int p = 0; p < kSubBlocks / 2; ++p)  // (min 2p, min 2p+1) . (xsum 2p, xsum 2p+1) per row
          msum = _mm256_add_epi32(
              msum, _mm256_madd_epi16(load256(mins + 64 * p + 32 * h),
                                      _mm256_set1_epi32(int32_t(load_u32(a + kQK_K + 4 + 4 * p)))));
        float dx;
        std::memcpy(&dx, a + kQK_K, 4);
        const __m256 vdx = _mm256_set1_ps(dx);
        acc[hh][k] = _mm256_fmadd_ps(_mm256_mul_ps(d, vdx), _mm256_cvtepi32_ps(isum[k]), acc[hh][k]);
        acc[hh][k] = _mm256_fnmadd_ps(_mm256_mul_ps(dmin, vdx), _mm256_cvtepi32_ps(msum), acc[hh][k]);
      }
    }
  }
  for (int h = 0; h < H; ++h)
    for (int k = 0; k < NC; ++k) _mm256_storeu_ps(y + size_t(k) * ys + 8 * h, acc[h][k]);
}

// The chunked k-quants (16 chunks of 16 per super-block, packed_kquant_layout.h), read by halves:
// where a super-block's scales start, and half h of chunk i's 4 code vectors as unsigned codes.
struct Q6Chunks {
  static constexpr size_t kSuper = kQ6SuperBytes, kScales = 2048 + 1024;
  static constexpr bool kMins = false;
  // Nibbles | the two top bits moved to bits 4-5.
  static void codes(const uint8_t* sb, int i, int h, __m256i v[4]) {
    const __m256i low4 = _mm256_set1_epi8(0x0F), top2 = _mm256_set1_epi8(0x30);
    const __m256i n0 = load256(sb + 128 * i + 32 * h), n1 = load256(sb + 128 * i + 64 + 32 * h);
    const __m256i hb = load256(sb + 2048 + 64 * i + 32 * h);
    v[0] = _mm256_or_si256(_mm256_and_si256(n0, low4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), top2));
    v[1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(n0, 4), low4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), top2));
    v[2] = _mm256_or_si256(_mm256_and_si256(n1, low4), _mm256_and_si256(hb, top2));
    v[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(n1, 4), low4), _mm256_and_si256(_mm256_srli_epi16(hb, 2), top2));
  }
  static __m256i scale(const uint8_t* sc) { return widen_s8(sc); }
  static __m256i mins(const uint8_t*) { return _mm256_setzero_si256(); }
};

// Q3_K and Q2_K: the two-bit fields of one 32-byte half, plus (Q3_K) the third bits at bit 2.
template <typename B>
struct LowBitsChunks {
  static constexpr size_t kSuper = kLowSuperBytes<B>, kScales = kLowScaleOffset<B>;
  static constexpr bool kMins = !kThirdBit<B>;
  static void codes(const uint8_t* sb, int i, int h, __m256i v[4]) {
    const __m256i two = _mm256_set1_epi8(0x03);
    const __m256i lo = load256(sb + 64 * i + 32 * h);
    v[0] = _mm256_and_si256(lo, two);
    v[1] = _mm256_and_si256(_mm256_srli_epi16(lo, 2), two);
    v[2] = _mm256_and_si256(_mm256_srli_epi16(lo, 4), two);
    v[3] = _mm256_and_si256(_mm256_srli_epi16(lo, 6), two);
    if constexpr (kThirdBit<B>)
      for (int j = 0; j < 4; ++j)  // code vectors 4i + j: bits 4 (i % 2) + j of the (i / 2)-th vector
        v[j] = or_high_bit<2>(v[j], load256(sb + kLowCodeBytes + 64 * (i / 2) + 32 * h), 4 * (i % 2) + j);
  }
  static __m256i scale(const uint8_t* sc) {
    if constexpr (kThirdBit<B>) return widen_s8(sc);
    return _mm256_and_si256(widen_u8(sc), _mm256_set1_epi32(15));
  }
  static __m256i mins(const uint8_t* sc) { return _mm256_srli_epi32(widen_u8(sc), 4); }
};

// Halves h0 .. h0 + H - 1 of one group of a chunked k-quant matrix times NC activation rows (as
// q4k_tile; the arithmetic of the AVX-512 chunk_group_tile, packed_kquant_layout.h).
template <typename C, int NC, int H, bool kVnni>
void chunk_tile(int64_t ns, const uint8_t* w, int h0, const uint8_t* const* x, float* y, size_t ys) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[H][NC];
  for (int h = 0; h < H; ++h)
    for (int k = 0; k < NC; ++k) acc[h][k] = _mm256_setzero_ps();
  for (int64_t b = 0; b < ns; ++b) {
    const uint8_t* sb = w + size_t(b) * C::kSuper;
    const uint8_t* sc = sb + C::kScales;
    for (int hh = 0; hh < H; ++hh) {
      const int h = h0 + hh;
      __m256i isum[NC], msum[NC];
      for (int k = 0; k < NC; ++k) isum[k] = msum[k] = _mm256_setzero_si256();
      for (int i = 0; i < kChunks6; ++i) {
        if (h == 0) hint_weights_share(sb + kWeightHintBytes, C::kSuper, i, kChunks6);  // as above
        __m256i v[4];
        C::codes(sb, i, h, v);
        const __m256i scale = C::scale(sc + 16 * i + 8 * h);
        const __m256i mins = C::mins(sc + 16 * i + 8 * h);
        for (int k = 0; k < NC; ++k) {
          const uint8_t* a = x[k] + size_t(b) * kQ6ActBytes;
          const int8_t* xq = reinterpret_cast<const int8_t*>(a) + 16 * i;
          const int32_t corr = int32_t(load_u32(a + kQK_K + 4 + 4 * i));
          __m256i t = C::kMins ? _mm256_setzero_si256() : _mm256_set1_epi32(-corr);
          if constexpr (kVnni) {
            for (int j = 0; j < 4; ++j) t = _mm256_dpbusd_avx_epi32(t, v[j], broadcast4(xq + 4 * j));
          } else {
            // Two pair sums fit int16 (<= 2 * 16,002 for Q6_K's codes), four would not.
            const __m256i p01 = _mm256_add_epi16(_mm256_maddubs_epi16(v[0], broadcast4(xq)),
                                                 _mm256_maddubs_epi16(v[1], broadcast4(xq + 4)));
            const __m256i p23 = _mm256_add_epi16(_mm256_maddubs_epi16(v[2], broadcast4(xq + 8)),
                                                 _mm256_maddubs_epi16(v[3], broadcast4(xq + 12)));
            t = _mm256_add_epi32(
                t, _mm256_add_epi32(_mm256_madd_epi16(p01, ones), _mm256_madd_epi16(p23, ones)));
          }
          isum[k] = _mm256_add_epi32(isum[k], _mm256_mullo_epi32(t, scale));
          if constexpr (C::kMins) msum[k] = _mm256_add_epi32(msum[k], _mm256_mullo_epi32(mins, _mm256_set1_epi32(corr)));
        }
      }
      const __m256 d = load_f16x8(sc + 256 + 16 * h);
      const __m256 dmin = C::kMins ? load_f16x8(sc + 256 + 32 + 16 * h) : d;
      for (int k = 0; k < NC; ++k) {
        float dx;
        std::memcpy(&dx, x[k] + size_t(b) * kQ6ActBytes + kQK_K, 4);
        const __m256 vdx = _mm256_set1_ps(dx);
        acc[hh][k] = _mm256_fmadd_ps(_mm256_mul_ps(d, vdx), _mm256_cvtepi32_ps(isum[k]), acc[hh][k]);
        if constexpr (C::kMins)
          acc[hh][k] = _mm256_fnmadd_ps(_mm256_mul_ps(dmin, vdx), _mm256_cvtepi32_ps(msum[k]), acc[hh][k]);
      }
    }
  }
  for (int h = 0; h < H; ++h)
    for (int k = 0; k < NC; ++k) _mm256_storeu_ps(y + size_t(k) * ys + 8 * h, acc[h][k]);
}

template <typename B, bool kVnni>
void q4k_gemm(int64_t cols, const void* w, size_t gb, int64_t ng, const void* x, size_t xs, int64_t nx,
              float* y, size_t ys) {
  for_each_tile<kMaxTileCols>(x, xs, nx, y, ys, [&](auto width, const uint8_t* const* rows, float* yk) {
    constexpr int kNC = decltype(width)::value;
    for_each_group_halves<kNC>(
        ng, static_cast<const uint8_t*>(w), gb, yk, [&](auto halves, const uint8_t* wg, int h0, float* yh) {
          q4k_tile<B, kNC, decltype(halves)::value, kVnni>(cols / kQK_K, wg, h0, rows, yh, ys);
        });
  });
}

template <typename C, bool kVnni>
void chunk_gemm(int64_t cols, const void* w, size_t gb, int64_t ng, const void* x, size_t xs, int64_t nx,
                float* y, size_t ys) {
  for_each_tile<kMaxTileCols>(x, xs, nx, y, ys, [&](auto width, const uint8_t* const* rows, float* yk) {
    constexpr int kNC = decltype(width)::value;
    for_each_group_halves<kNC>(
        ng, static_cast<const uint8_t*>(w), gb, yk, [&](auto halves, const uint8_t* wg, int h0, float* yh) {
          chunk_tile<C, kNC, decltype(halves)::value, kVnni>(cols / kQK_K, wg, h0, rows, yh, ys);
        });
  });
}

// The table entries of the k-quants for the AVX2 (kVnni false) and AVX-VNNI tables.
template <bool kVnni>
void fill_packed_kquant_kernels(KernelTable* t) {
  t->packed[int(GgmlType::Q4_K)] = q4k_packed_kernels<BlockQ4_K, q4k_gemm<BlockQ4_K, kVnni>>();
  t->packed[int(GgmlType::Q5_K)] = q4k_packed_kernels<BlockQ5_K, q4k_gemm<BlockQ5_K, kVnni>>();
  t->packed[int(GgmlType::Q6_K)] = q6k_packed_kernels<chunk_gemm<Q6Chunks, kVnni>>();
  t->packed[int(GgmlType::Q3_K)] = low_bits_packed_kernels<BlockQ3_K, chunk_gemm<LowBitsChunks<BlockQ3_K>, kVnni>>();
  t->packed[int(GgmlType::Q2_K)] = low_bits_packed_kernels<BlockQ2_K, chunk_gemm<LowBitsChunks<BlockQ2_K>, kVnni>>();
}

}  // namespace
}  // namespace kvserve
