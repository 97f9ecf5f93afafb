// Repacked k-quant weights (Q4_K, Q5_K, Q6_K) and their AVX-512 VNNI GEMMs (KernelTable::packed):
// the 16-row interleave of gemm_packed_avx512.cpp (see its comment for why) applied per 256-column
// super-block, with the sub-block scales applied to exact integer sub-block sums.
//
// Like the other AVX-512 files: no inline functions from shared headers, only intrinsics, this
// file's anonymous namespace and packed_avx512_common.h (internal linkage).
#include "kernels/packed_avx512_common.h"

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
// Q5_K is the same with a fifth bit per code (q <= 31): after the codes, [8 sub-blocks][8 code
// vectors] 64-bit masks of the fifth bits (512 bytes; one masked byte add per vector, as Q5_0),
// 3,008 bytes per super-block (+12 per row over the file's 176). Its activations are Q4_K's.

constexpr int kSubBlocks = kQK_K / kQK;  // 8 sub-blocks of 32 per super-block
constexpr size_t kKCodeBytes = 256 * size_t(kSubBlocks);  // 2048

template <typename B>
constexpr bool kFifth = std::is_same_v<B, BlockQ5_K>;
template <typename B>
constexpr size_t kHighBytes = kFifth<B> ? 512 : 0;
template <typename B>
constexpr size_t kKSuperBytes = kKCodeBytes + kHighBytes<B> + 128 + 256 + 64;
constexpr size_t kKActBytes = kQK_K + 4 + 16;  // per super-block of an activation row
constexpr int kKMaxTileCols = 4;               // 4 registers per activation row: fits 32

// Scale and min of sub-block j of a Q4_K block (the layout comment of BlockQ4_K; local, see the
// file comment).
void q4k_scale_min(const uint8_t* q, int j, uint8_t* sc, uint8_t* mn) {
  if (j < 4) {
    *sc = q[j] & 63;
    *mn = q[j + 4] & 63;
  } else {
    *sc = uint8_t((q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4));
    *mn = uint8_t((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

template <typename B>
size_t q4k_group_bytes(int64_t cols) {
  if (cols <= 0 || cols % kQK_K != 0 || cols > kMaxCols) return 0;
  return round64(size_t(cols / kQK_K) * kKSuperBytes<B>);
}

template <typename B>
void q4k_pack(const void* w, size_t row_bytes, int64_t rows, int64_t cols, void* dst) {
  const int64_t ns = cols / kQK_K;
  const size_t gb = q4k_group_bytes<B>(cols);
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t g = 0; g < rows / kRows; ++g, out += gb) {
    std::memset(out, 0, gb);
    for (int r = 0; r < kRows; ++r) {
      const auto* src = reinterpret_cast<const B*>(static_cast<const uint8_t*>(w) + size_t(g * kRows + r) * row_bytes);
      for (int64_t b = 0; b < ns; ++b) {
        uint8_t* sb = out + size_t(b) * kKSuperBytes<B>;
        uint8_t* high = sb + kKCodeBytes;
        uint8_t* sc = high + kHighBytes<B>;
        auto* mins = reinterpret_cast<int16_t*>(sc + 128);
        uint8_t* dd = sc + 128 + 256;
        std::memcpy(dd + 2 * r, &src[b].d, 2);
        std::memcpy(dd + 32 + 2 * r, &src[b].dmin, 2);
        for (int j = 0; j < kSubBlocks; ++j) {
          uint8_t s6, m6;
          q4k_scale_min(src[b].scales, j, &s6, &m6);
          sc[16 * j + r] = s6;
          mins[(j / 2) * 32 + 2 * r + (j % 2)] = int16_t(m6);
          for (int e = 0; e < kQK; ++e) {
            const uint8_t both = src[b].qs[32 * (j / 2) + e];
            const uint8_t q = (j % 2) ? uint8_t(both >> 4) : uint8_t(both & 0x0F);
            const int byte = 4 * r + e % 4;
            PackQ4_0::store(sb + 256 * size_t(j), nullptr, e / 4, byte, q);
            if constexpr (kFifth<B>) {
              if ((src[b].qh[e] >> j) & 1) high[64 * j + 8 * (e / 4) + byte / 8] |= uint8_t(1u << (byte % 8));
            }
          }
        }
      }
    }
  }
}

size_t q4k_act_bytes(int64_t cols) { return round64(size_t(cols / kQK_K) * kKActBytes); }

void q4k_pack_acts(const void* x, size_t x_stride, int64_t m, int64_t cols, void* dst, size_t dst_stride) {
  const int64_t ns = cols / kQK_K;
  for (int64_t k = 0; k < m; ++k) {
    const auto* src = reinterpret_cast<const BlockQ8_K*>(static_cast<const uint8_t*>(x) + size_t(k) * x_stride);
    uint8_t* row = static_cast<uint8_t*>(dst) + size_t(k) * dst_stride;
    for (int64_t b = 0; b < ns; ++b) {
      uint8_t* o = row + size_t(b) * kKActBytes;
      std::memcpy(o, src[b].qs, kQK_K);
      std::memcpy(o + kQK_K, &src[b].d, 4);
      int16_t pairs[8];
      for (int j = 0; j < kSubBlocks; ++j) pairs[j] = int16_t(src[b].bsums[2 * j] + src[b].bsums[2 * j + 1]);
      std::memcpy(o + kQK_K + 4, pairs, 16);
    }
    std::memset(row + size_t(ns) * kKActBytes, 0, dst_stride - size_t(ns) * kKActBytes);
  }
}

template <typename B, int NC>
void q4k_group_tile(int64_t ns, const uint8_t* w, const uint8_t* const* x, float* y, size_t ys) {
  constexpr size_t kSuper = kKSuperBytes<B>;
  constexpr int kChains = NC <= 2 ? 2 : 1;
  __m512 acc[NC];
  for (int k = 0; k < NC; ++k) acc[k] = _mm512_setzero_ps();
  for (int64_t b = 0; b < ns; ++b) {
    const uint8_t* sb = w + size_t(b) * kSuper;
    for (size_t o = 0; o < kSuper; o += 64) prefetch_line(sb + 2 * kSuper + o);
    const uint8_t* high = sb + kKCodeBytes;
    const uint8_t* sc = high + kHighBytes<B>;
    const uint8_t* mins = sc + 128;
    const uint8_t* dd = mins + 256;
    __m512i isum[NC], msum[NC];
    for (int k = 0; k < NC; ++k) isum[k] = msum[k] = _mm512_setzero_si512();
    for (int j = 0; j < kSubBlocks; ++j) {
      __m512i v[8];
      unpack_nibbles(sb + 256 * size_t(j), v);
      if constexpr (kFifth<B>) {
        for (int i = 0; i < 8; ++i) {
          uint64_t bits;
          std::memcpy(&bits, high + 64 * j + 8 * i, 8);
          v[i] = _mm512_mask_add_epi8(v[i], _cvtu64_mask64(bits), v[i], _mm512_set1_epi8(16));
        }
      }
      const __m512i scale = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc + 16 * j)));
      for (int k = 0; k < NC; ++k) {
        const int8_t* xq = reinterpret_cast<const int8_t*>(x[k] + size_t(b) * kKActBytes) + kQK * j;
        __m512i s[kChains];
        for (int c = 0; c < kChains; ++c) s[c] = _mm512_setzero_si512();
        for (int e = 0; e < 8; ++e)
          s[e % kChains] = _mm512_dpbusd_epi32(s[e % kChains], v[e], _mm512_set1_epi32(load_i32(xq + 4 * e)));
        __m512i t = s[0];
        if constexpr (kChains == 2) t = _mm512_add_epi32(t, s[1]);
        isum[k] = _mm512_add_epi32(isum[k], _mm512_mullo_epi32(t, scale));
      }
    }
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(dd)));
    const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(dd + 32)));
    for (int k = 0; k < NC; ++k) {
      const uint8_t* a = x[k] + size_t(b) * kKActBytes;
      for (int p = 0; p < kSubBlocks / 2; ++p) {
        int32_t pair;
        std::memcpy(&pair, a + kQK_K + 4 + 4 * p, 4);
        msum[k] = _mm512_dpwssd_epi32(msum[k], _mm512_loadu_si512(mins + 64 * p), _mm512_set1_epi32(pair));
      }
      float dx;
      std::memcpy(&dx, a + kQK_K, 4);
      const __m512 vdx = _mm512_set1_ps(dx);
      acc[k] = _mm512_fmadd_ps(_mm512_mul_ps(d, vdx), _mm512_cvtepi32_ps(isum[k]), acc[k]);
      acc[k] = _mm512_fnmadd_ps(_mm512_mul_ps(dmin, vdx), _mm512_cvtepi32_ps(msum[k]), acc[k]);
    }
  }
  for (int k = 0; k < NC; ++k) _mm512_storeu_ps(y + size_t(k) * ys, acc[k]);
}

template <typename B>
void q4k_gemm(int64_t cols, const void* w, size_t gb, int64_t ng, const void* x, size_t xs, int64_t nx, float* y,
              size_t ys) {
  const int64_t ns = cols / kQK_K;
  const auto* wb = static_cast<const uint8_t*>(w);
  for_each_tile<kKMaxTileCols>(x, xs, nx, y, ys, [&](auto width, const uint8_t* const* rows, float* yk) {
    for (int64_t g = 0; g < ng; ++g) q4k_group_tile<B, decltype(width)::value>(ns, wb + size_t(g) * gb, rows, yk + g * kRows, ys);
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

uint8_t q6k_code(const BlockQ6_K& b, int e) {
  const int h = e / 128, r = e % 128, quarter = r / 32, l = r % 32;
  const uint8_t lq = b.ql[64 * h + l + (quarter % 2) * 32];
  const uint8_t low = quarter >= 2 ? uint8_t(lq >> 4) : uint8_t(lq & 0x0F);
  return uint8_t(low | (((b.qh[32 * h + l] >> (2 * quarter)) & 3) << 4));
}

size_t q6k_group_bytes(int64_t cols) {
  if (cols <= 0 || cols % kQK_K != 0 || cols > kMaxCols) return 0;
  return round64(size_t(cols / kQK_K) * kQ6SuperBytes);
}

void q6k_pack(const void* w, size_t row_bytes, int64_t rows, int64_t cols, void* dst) {
  const int64_t ns = cols / kQK_K;
  const size_t gb = q6k_group_bytes(cols);
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t g = 0; g < rows / kRows; ++g, out += gb) {
    std::memset(out, 0, gb);
    for (int r = 0; r < kRows; ++r) {
      const auto* src = reinterpret_cast<const BlockQ6_K*>(static_cast<const uint8_t*>(w) + size_t(g * kRows + r) * row_bytes);
      for (int64_t b = 0; b < ns; ++b) {
        uint8_t* nib = out + size_t(b) * kQ6SuperBytes;
        uint8_t* hi = nib + 2048;
        auto* sc = reinterpret_cast<int8_t*>(hi + 1024);
        std::memcpy(hi + 1024 + 256 + 2 * r, &src[b].d, 2);
        for (int i = 0; i < kChunks6; ++i) sc[16 * i + r] = src[b].scales[i];
        for (int e = 0; e < kQK_K; ++e) {
          const uint8_t q = q6k_code(src[b], e);
          const int v = e / 4, byte = 4 * r + e % 4;  // code vector v, byte within it
          nib[64 * (v / 2) + byte] |= uint8_t((q & 0x0F) << (4 * (v % 2)));
          hi[64 * (v / 4) + byte] |= uint8_t((q >> 4) << (2 * (v % 4)));
        }
      }
    }
  }
}

size_t q6k_act_bytes(int64_t cols) { return round64(size_t(cols / kQK_K) * kQ6ActBytes); }

void q6k_pack_acts(const void* x, size_t x_stride, int64_t m, int64_t cols, void* dst, size_t dst_stride) {
  const int64_t ns = cols / kQK_K;
  for (int64_t k = 0; k < m; ++k) {
    const auto* src = reinterpret_cast<const BlockQ8_K*>(static_cast<const uint8_t*>(x) + size_t(k) * x_stride);
    uint8_t* row = static_cast<uint8_t*>(dst) + size_t(k) * dst_stride;
    for (int64_t b = 0; b < ns; ++b) {
      uint8_t* o = row + size_t(b) * kQ6ActBytes;
      std::memcpy(o, src[b].qs, kQK_K);
      std::memcpy(o + kQK_K, &src[b].d, 4);
      int32_t corr[kChunks6];
      for (int i = 0; i < kChunks6; ++i) corr[i] = 32 * int32_t(src[b].bsums[i]);
      std::memcpy(o + kQK_K + 4, corr, sizeof corr);
    }
    std::memset(row + size_t(ns) * kQ6ActBytes, 0, dst_stride - size_t(ns) * kQ6ActBytes);
  }
}

template <int NC>
void q6k_group_tile(int64_t ns, const uint8_t* w, const uint8_t* const* x, float* y, size_t ys) {
  const __m512i low4 = _mm512_set1_epi8(0x0F), top2 = _mm512_set1_epi8(0x30);
  __m512 acc[NC];
  for (int k = 0; k < NC; ++k) acc[k] = _mm512_setzero_ps();
  for (int64_t b = 0; b < ns; ++b) {
    const uint8_t* nib = w + size_t(b) * kQ6SuperBytes;
    for (size_t o = 0; o < kQ6SuperBytes; o += 64) prefetch_line(nib + 2 * kQ6SuperBytes + o);
    const uint8_t* hi = nib + 2048;
    const uint8_t* sc = hi + 1024;
    __m512i isum[NC];
    for (int k = 0; k < NC; ++k) isum[k] = _mm512_setzero_si512();
    for (int i = 0; i < kChunks6; ++i) {
      const __m512i n0 = _mm512_loadu_si512(nib + 128 * i), n1 = _mm512_loadu_si512(nib + 128 * i + 64);
      const __m512i h = _mm512_loadu_si512(hi + 64 * i);
      // Code vector 4i + j: its nibbles | its two top bits moved to bits 4-5.
      const __m512i v[4] = {
          _mm512_or_si512(_mm512_and_si512(n0, low4), _mm512_and_si512(_mm512_slli_epi16(h, 4), top2)),
          _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(n0, 4), low4), _mm512_and_si512(_mm512_slli_epi16(h, 2), top2)),
          _mm512_or_si512(_mm512_and_si512(n1, low4), _mm512_and_si512(h, top2)),
          _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(n1, 4), low4), _mm512_and_si512(_mm512_srli_epi16(h, 2), top2))};
      const __m512i scale = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc + 16 * i)));
      for (int k = 0; k < NC; ++k) {
        const uint8_t* a = x[k] + size_t(b) * kQ6ActBytes;
        const int8_t* xq = reinterpret_cast<const int8_t*>(a) + 16 * i;
        int32_t corr;
        std::memcpy(&corr, a + kQK_K + 4 + 4 * i, 4);
        __m512i t = _mm512_set1_epi32(-corr);
        for (int j = 0; j < 4; ++j) t = _mm512_dpbusd_epi32(t, v[j], _mm512_set1_epi32(load_i32(xq + 4 * j)));
        isum[k] = _mm512_add_epi32(isum[k], _mm512_mullo_epi32(t, scale));
      }
    }
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sc + 256)));
    for (int k = 0; k < NC; ++k) {
      float dx;
      std::memcpy(&dx, x[k] + size_t(b) * kQ6ActBytes + kQK_K, 4);
      acc[k] = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(dx)), _mm512_cvtepi32_ps(isum[k]), acc[k]);
    }
  }
  for (int k = 0; k < NC; ++k) _mm512_storeu_ps(y + size_t(k) * ys, acc[k]);
}

void q6k_gemm(int64_t cols, const void* w, size_t gb, int64_t ng, const void* x, size_t xs, int64_t nx, float* y,
              size_t ys) {
  const int64_t ns = cols / kQK_K;
  const auto* wb = static_cast<const uint8_t*>(w);
  for_each_tile<kKMaxTileCols>(x, xs, nx, y, ys, [&](auto width, const uint8_t* const* rows, float* yk) {
    for (int64_t g = 0; g < ng; ++g) q6k_group_tile<decltype(width)::value>(ns, wb + size_t(g) * gb, rows, yk + g * kRows, ys);
  });
}

}  // namespace

void fill_avx512_packed_kquant_kernels(KernelTable* t) {
  t->packed[int(GgmlType::Q4_K)] = PackedKernels{q4k_group_bytes<BlockQ4_K>, q4k_pack<BlockQ4_K>, q4k_act_bytes,
                                                 q4k_pack_acts, q4k_gemm<BlockQ4_K>};
  t->packed[int(GgmlType::Q5_K)] = PackedKernels{q4k_group_bytes<BlockQ5_K>, q4k_pack<BlockQ5_K>, q4k_act_bytes,
                                                 q4k_pack_acts, q4k_gemm<BlockQ5_K>};
  t->packed[int(GgmlType::Q6_K)] = PackedKernels{q6k_group_bytes, q6k_pack, q6k_act_bytes, q6k_pack_acts, q6k_gemm};
}

}  // namespace kvserve
