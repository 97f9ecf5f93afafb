// Repacked k-quant weights (Q2_K .. Q6_K) and their AVX-512 VNNI GEMMs (KernelTable::packed):
// the 16-row interleave of gemm_packed_avx512.cpp (see its comment for why) applied per 256-column
// super-block, with the sub-block scales applied to exact integer sub-block sums. The layout and
// the arithmetic per output are described in packed_kquant_layout.h.
//
// Like the other AVX-512 files: no inline functions from shared headers, only intrinsics, this
// file's anonymous namespace and the packed_*.h headers (internal linkage).
#include "kernels/packed_avx512_common.h"
#include "kernels/packed_kquant_layout.h"

namespace kvserve {

namespace {

constexpr int kKMaxTileCols = 4;  // 4 registers per activation row: fits 32

// Whether Q4_K's single-row pass hints its super-blocks (one sequential stream) ahead: the best
// choice differs between microarchitectures (single_stream_hints() picks per CPU).
// Zen 4 VM (AMD family 0x19): llama-3.2-1b Q4_K_M decoded ~20% faster without (median ratio
// 1.20-1.21 of two runs of 8 alternations, `--prompt 16 --gen 32 --batch 1 --kv-type f16`;
// qwen2.5-0.5b, mostly Q5_0, +3%), as paired Q8_0 does (gemm_packed_avx512.cpp). Zen 5 VM (family
// 0x1A): the same command ~28% faster with them (median ratio 1.28 of 6 alternations). Q6_K
// without hints lost on both (0.96 on Zen 4, 0.90 on Zen 5), so it and Q5_K (not measured) keep
// theirs, as do calls of two rows and more.
template <typename B, int NC, bool kSingleRowHints>
constexpr bool kQ4kHints = NC > 1 || kFifth<B> || kSingleRowHints;

template <typename B, int NC, bool kSingleRowHints>
void q4k_group_tile(int64_t ns, const uint8_t* w, const uint8_t* const* x, float* y, size_t ys) {
  constexpr size_t kSuper = kKSuperBytes<B>;
  constexpr int kChains = NC <= 2 ? 2 : 1;
  __m512 acc[NC];
  for (int k = 0; k < NC; ++k) acc[k] = _mm512_setzero_ps();
  for (int64_t b = 0; b < ns; ++b) {
    const uint8_t* sb = w + size_t(b) * kSuper;
    const uint8_t* high = sb + kKCodeBytes;
    const uint8_t* sc = high + kHighBytes<B>;
    const uint8_t* mins = sc + 128;
    const uint8_t* dd = mins + 256;
    __m512i isum[NC], msum[NC];
    for (int k = 0; k < NC; ++k) isum[k] = msum[k] = _mm512_setzero_si512();
    for (int j = 0; j < kSubBlocks; ++j) {
      // The super-block's lines kWeightHintBytes ahead, an eighth per sub-block.
      if constexpr (kQ4kHints<B, NC, kSingleRowHints>)
        hint_weights_share(sb + kWeightHintBytes, kSuper, j, kSubBlocks);
      __m512i v[8];
      unpack_nibbles(sb + 256 * size_t(j), v);
      if constexpr (kFifth<B>) {
        const __m512i fifth = _mm512_loadu_si512(high + 64 * j);
        for (int i = 0; i < 8; ++i) v[i] = or_high_bit<4>(v[i], fifth, i);
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

template <typename B, bool kSingleRowHints>
void q4k_gemm(int64_t cols, const void* w, size_t gb, int64_t ng, const void* x, size_t xs, int64_t nx, float* y,
              size_t ys) {
  const int64_t ns = cols / kQK_K;
  const auto* wb = static_cast<const uint8_t*>(w);
  for_each_tile<kKMaxTileCols>(x, xs, nx, y, ys, [&](auto width, const uint8_t* const* rows, float* yk) {
    for (int64_t g = 0; g < ng; ++g) q4k_group_tile<B, decltype(width)::value, kSingleRowHints>(ns, wb + size_t(g) * gb, rows, yk + g * kRows, ys);
  });
}

// The chunked k-quants (16 chunks of 16 per super-block, packed_kquant_layout.h): where a
// super-block's scales start, and chunk i's 4 code vectors as unsigned codes.
struct Q6Chunks {
  static constexpr size_t kSuper = kQ6SuperBytes, kScales = 2048 + 1024;
  static constexpr bool kMins = false;
  // Nibbles | the two top bits moved to bits 4-5.
  static void codes(const uint8_t* sb, int i, __m512i v[4]) {
    const __m512i low4 = _mm512_set1_epi8(0x0F), top2 = _mm512_set1_epi8(0x30);
    const __m512i n0 = _mm512_loadu_si512(sb + 128 * i), n1 = _mm512_loadu_si512(sb + 128 * i + 64);
    const __m512i h = _mm512_loadu_si512(sb + 2048 + 64 * i);
    v[0] = _mm512_or_si512(_mm512_and_si512(n0, low4), _mm512_and_si512(_mm512_slli_epi16(h, 4), top2));
    v[1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(n0, 4), low4), _mm512_and_si512(_mm512_slli_epi16(h, 2), top2));
    v[2] = _mm512_or_si512(_mm512_and_si512(n1, low4), _mm512_and_si512(h, top2));
    v[3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(n1, 4), low4), _mm512_and_si512(_mm512_srli_epi16(h, 2), top2));
  }
  static __m512i scale(const uint8_t* sc) { return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc))); }
  static __m512i mins(const uint8_t*) { return _mm512_setzero_si512(); }
};

// Q3_K and Q2_K: the two-bit fields of one 64-byte vector, plus (Q3_K) the third bits at bit 2.
template <typename B>
struct LowBitsChunks {
  static constexpr size_t kSuper = kLowSuperBytes<B>, kScales = kLowScaleOffset<B>;
  static constexpr bool kMins = !kThirdBit<B>;
  static void codes(const uint8_t* sb, int i, __m512i v[4]) {
    const __m512i two = _mm512_set1_epi8(0x03);
    const __m512i lo = _mm512_loadu_si512(sb + 64 * i);
    v[0] = _mm512_and_si512(lo, two);
    v[1] = _mm512_and_si512(_mm512_srli_epi16(lo, 2), two);
    v[2] = _mm512_and_si512(_mm512_srli_epi16(lo, 4), two);
    v[3] = _mm512_and_si512(_mm512_srli_epi16(lo, 6), two);
    if constexpr (kThirdBit<B>) {  // code vectors 4i + j: bits 4 (i % 2) + j of the (i / 2)-th vector
      const __m512i third = _mm512_loadu_si512(sb + kLowCodeBytes + 64 * (i / 2));
      for (int j = 0; j < 4; ++j) v[j] = or_high_bit<2>(v[j], third, 4 * (i % 2) + j);
    }
  }
  static __m512i bytes(const uint8_t* sc) { return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc))); }
  static __m512i scale(const uint8_t* sc) {
    if constexpr (kThirdBit<B>) return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc)));
    return _mm512_and_si512(bytes(sc), _mm512_set1_epi32(15));
  }
  static __m512i mins(const uint8_t* sc) { return _mm512_srli_epi32(bytes(sc), 4); }
};

// One group of a chunked k-quant matrix times NC activation rows. Per chunk the 4 vpdpbusd start
// from -(the activations' code-offset correction) (Q6_K, Q3_K) or from 0 with the correction
// feeding the min term instead (Q2_K); chunk sums are scaled in int32, the f32 steps follow per
// super-block (packed_kquant_layout.h).
template <typename C, int NC>
void chunk_group_tile(int64_t ns, const uint8_t* w, const uint8_t* const* x, float* y, size_t ys) {
  __m512 acc[NC];
  for (int k = 0; k < NC; ++k) acc[k] = _mm512_setzero_ps();
  for (int64_t b = 0; b < ns; ++b) {
    const uint8_t* sb = w + size_t(b) * C::kSuper;
    const uint8_t* sc = sb + C::kScales;
    __m512i isum[NC], msum[NC];
    for (int k = 0; k < NC; ++k) isum[k] = msum[k] = _mm512_setzero_si512();
    for (int i = 0; i < kChunks6; ++i) {
      hint_weights_share(sb + kWeightHintBytes, C::kSuper, i, kChunks6);  // a sixteenth per chunk
      __m512i v[4];
      C::codes(sb, i, v);
      const __m512i scale = C::scale(sc + 16 * i);
      const __m512i mins = C::mins(sc + 16 * i);
      for (int k = 0; k < NC; ++k) {
        const uint8_t* a = x[k] + size_t(b) * kQ6ActBytes;
        const int8_t* xq = reinterpret_cast<const int8_t*>(a) + 16 * i;
        int32_t corr;
        std::memcpy(&corr, a + kQK_K + 4 + 4 * i, 4);
        __m512i t = C::kMins ? _mm512_setzero_si512() : _mm512_set1_epi32(-corr);
        for (int j = 0; j < 4; ++j) t = _mm512_dpbusd_epi32(t, v[j], _mm512_set1_epi32(load_i32(xq + 4 * j)));
        isum[k] = _mm512_add_epi32(isum[k], _mm512_mullo_epi32(t, scale));
        if constexpr (C::kMins) msum[k] = _mm512_add_epi32(msum[k], _mm512_mullo_epi32(mins, _mm512_set1_epi32(corr)));
      }
    }
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sc + 256)));
    const __m512 dmin =
        C::kMins ? _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sc + 256 + 32))) : d;
    for (int k = 0; k < NC; ++k) {
      float dx;
      std::memcpy(&dx, x[k] + size_t(b) * kQ6ActBytes + kQK_K, 4);
      const __m512 vdx = _mm512_set1_ps(dx);
      acc[k] = _mm512_fmadd_ps(_mm512_mul_ps(d, vdx), _mm512_cvtepi32_ps(isum[k]), acc[k]);
      if constexpr (C::kMins) acc[k] = _mm512_fnmadd_ps(_mm512_mul_ps(dmin, vdx), _mm512_cvtepi32_ps(msum[k]), acc[k]);
    }
  }
  for (int k = 0; k < NC; ++k) _mm512_storeu_ps(y + size_t(k) * ys, acc[k]);
}

template <typename C>
void chunk_gemm(int64_t cols, const void* w, size_t gb, int64_t ng, const void* x, size_t xs, int64_t nx, float* y,
                size_t ys) {
  const int64_t ns = cols / kQK_K;
  const auto* wb = static_cast<const uint8_t*>(w);
  for_each_tile<kKMaxTileCols>(x, xs, nx, y, ys, [&](auto width, const uint8_t* const* rows, float* yk) {
    for (int64_t g = 0; g < ng; ++g)
      chunk_group_tile<C, decltype(width)::value>(ns, wb + size_t(g) * gb, rows, yk + g * kRows, ys);
  });
}

}  // namespace

void fill_avx512_packed_kquant_kernels(KernelTable* t) {
  t->packed[int(GgmlType::Q4_K)] = single_stream_hints()
                                       ? q4k_packed_kernels<BlockQ4_K, q4k_gemm<BlockQ4_K, true>>()
                                       : q4k_packed_kernels<BlockQ4_K, q4k_gemm<BlockQ4_K, false>>();
  t->packed[int(GgmlType::Q5_K)] = q4k_packed_kernels<BlockQ5_K, q4k_gemm<BlockQ5_K, true>>();
  t->packed[int(GgmlType::Q6_K)] = q6k_packed_kernels<chunk_gemm<Q6Chunks>>();
  t->packed[int(GgmlType::Q3_K)] = low_bits_packed_kernels<BlockQ3_K, chunk_gemm<LowBitsChunks<BlockQ3_K>>>();
  t->packed[int(GgmlType::Q2_K)] = low_bits_packed_kernels<BlockQ2_K, chunk_gemm<LowBitsChunks<BlockQ2_K>>>();
}

}  // namespace kvserve
