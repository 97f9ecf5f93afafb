// The AVX-512 vector path of attention_partial (see attention.h; attention.cpp holds the AVX2
// path, the scalar reference and the dispatch). Compiled with AVX-512 F/BW/VL flags; called only
// where attention_isa() is kAvx512.
//
// Why a second path: at long contexts decode is bound by attention, and the AVX2 path spends most
// of its time outside the FMAs (scalar max and exp per tile, eight-lane reductions, a dequantized
// copy of every row). Here, per span of up to kSpan = 64 consecutive positions (any blocks):
//   1. per tile of kTile = 16 positions, K rows are read two at a time into registers
//      (dequantized there, never copied); q[g] * K[j] lane-wise (hd / 16 FMAs per row and head),
//      folded once per pair of rows, and one transposing reduction turns a head's 8 pair vectors
//      into one vector of its 16 scores; against q8_0 or q4_0 K (head_dim 64 or 128) the
//      products are integer instead (tile_scores_int: a 16-bit query, exact sums per group);
//   2. the online softmax runs once per span on its tiles' score vectors: masked lanes (past the
//      end) are -inf, the running max moves by vector maxes, e^(score - m) is one vector exp per
//      tile, and the running sum stays a vector (reduced once at the end). One update per 64
//      positions rather than per 16 overlaps four tiles' exps and pays the serial
//      max -> rescale chain a quarter as often (in-cache kernel ~20% faster, prefill at 2000
//      positions ~1,000 -> ~1,350 tok/s);
//   3. acc[g] = acc[g] * c[g] + sum_j p[g][j] V[j], with the rescale folded into the load of the
//      accumulators, G x NCC accumulators kept in registers and V dequantized in registers.
// Kernels are templated on the K type and head dim (scores) and on the V type and group
// (accumulate), picked once per call.
// Every head's arithmetic is the same whatever heads share its call (the batched prefill relies on
// that), and the order of operations is fixed, so results do not depend on thread count.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/attention_avx512_common.h"
#include "kernels/attention_impl.h"

namespace kvserve::detail {

namespace {

constexpr int kTile = 16;     // positions per tile: one zmm of scores
constexpr int kSpan = 64;     // positions per softmax update: kSpan / kTile tiles
constexpr int kSubGroup = 8;  // query heads per pass (larger groups are split by the caller)
constexpr int kMaxHeads = 4;  // KV heads per pass (more are split by the caller)

// Lane j of the result = the sum of the 16 lanes of the j-th dot product, from t[8] where t[i]
// holds positions 2i and 2i+1 already folded once (tile_scores): per 128-bit lane
// [a0+a2, b0+b2, a1+a3, b1+b3] of a = dot(2i), b = dot(2i+1).
inline __m512 reduce_pairs(const __m512* t) {
  __m512 r[4];
  for (int i = 0; i < 4; ++i)  // per 128-bit lane: that lane's sums of dots 4i .. 4i+3
    r[i] = _mm512_add_ps(_mm512_shuffle_ps(t[2 * i], t[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(t[2 * i], t[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  // Fold the four 128-bit lanes: 0x88 picks lanes (0, 2) of each operand, 0xDD lanes (1, 3).
  const __m512 a = _mm512_add_ps(_mm512_shuffle_f32x4(r[0], r[1], 0x88), _mm512_shuffle_f32x4(r[0], r[1], 0xDD));
  const __m512 b = _mm512_add_ps(_mm512_shuffle_f32x4(r[2], r[3], 0x88), _mm512_shuffle_f32x4(r[2], r[3], 0xDD));
  return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x88), _mm512_shuffle_f32x4(a, b, 0xDD));
}

inline __m512 f16_scale(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _mm512_cvtph_ps(_mm256_set1_epi16(int16_t(h)));
}

// The unscaled codes of a quantized 32-value group g as f32, 16 values per half h (0 or 1):
// q8_0 groups are [f16 d][32 x int8]; q4_0 groups [f16 d][16 bytes], values 0..15 in the low
// nibbles and 16..31 in the high ones, stored with +8 (b: the group's bytes widened, q4_bytes).
inline __m512 q8_codes(const uint8_t* g, int h) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + 2 + 16 * h))));
}
inline __m512i q4_bytes(const uint8_t* g) {
  return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + 2)));
}
inline __m512 q4_codes(__m512i b, int h) {
  const __m512i n = h ? _mm512_srli_epi32(b, 4) : _mm512_and_si512(b, _mm512_set1_epi32(0x0F));
  return _mm512_cvtepi32_ps(_mm512_sub_epi32(n, _mm512_set1_epi32(8)));
}

// Chunk c (values 16c .. 16c+15) of a stored row as f32, dequantized in registers, bit for bit as
// kv_dequantize_row_scalar (each value d * q rounded once). No copy of the row is written: stores
// are what limited the first version of this kernel (a dequantized tile costs as many 64-byte
// stores as it has chunks, and a core retires one per cycle).
template <KvElem T>
inline __m512 chunk(const uint8_t* row, int c) {
  if constexpr (T == KvElem::F32) {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + 16 * c);
  } else if constexpr (T == KvElem::F16) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 32 * c)));
  } else if constexpr (T == KvElem::BF16) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 32 * c)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  } else if constexpr (T == KvElem::Q8_0) {
    const uint8_t* g = row + 34 * (c / 2);
    return _mm512_mul_ps(f16_scale(g), q8_codes(g, c % 2));
  } else {
    const uint8_t* g = row + 18 * (c / 2);
    return _mm512_mul_ps(f16_scale(g), q4_codes(q4_bytes(g), c % 2));
  }
}

// Chunks c and c + 1 (c even) of a stored row, as chunk<T> gives them (bit for bit). For the
// quantized types the two share one group: its scale is converted once (and Q4_0's code bytes
// loaded once), which chunk<T> called twice cannot do when c is not a compile-time constant
// (accumulate_pass: 4 of ~42 instructions per position for q8_0 V; one head group over 2048
// L2-resident positions, kvs_microbench BM_paged_attention_group3/2048: q8_0 36.3 -> 35.2 us,
// q4_0 39.1 -> 37.0; batch-8 decode at context 512 within noise, +0-2%).
template <KvElem T>
inline void chunk_pair(const uint8_t* row, int c, __m512* lo, __m512* hi) {
  if constexpr (T == KvElem::Q8_0) {
    const uint8_t* g = row + 34 * (c / 2);
    const __m512 d = f16_scale(g);
    *lo = _mm512_mul_ps(d, q8_codes(g, 0));
    *hi = _mm512_mul_ps(d, q8_codes(g, 1));
  } else if constexpr (T == KvElem::Q4_0) {
    const uint8_t* g = row + 18 * (c / 2);
    const __m512 d = f16_scale(g);
    const __m512i b = q4_bytes(g);
    *lo = _mm512_mul_ps(d, q4_codes(b, 0));
    *hi = _mm512_mul_ps(d, q4_codes(b, 1));
  } else {
    *lo = chunk<T>(row, c);
    *hi = chunk<T>(row, c + 1);
  }
}

// One KV head's queries, [G][hd], as each scores kernel reads them: f for the float kernels
// (64-byte aligned: split loads cost a third more in tile_scores), and for q8_0 K
// (tile_scores_int) the same queries as 16-bit integers with one f32 scale d per 32-value group:
// per 64-value piece (groups 2i and 2i + 1) two vectors of 32, [group 2i values 0..15, group
// 2i + 1 values 0..15] and [group 2i values 16..31, group 2i + 1 values 16..31], the order in
// which tile_scores_int widens a K row's codes.
// bias8: per piece, the 16 lanes of the integer products' start for q4_0 K, whose codes are
// stored + 8: lane l = -8 * (the two codes of lane l in each of the piece's two vectors).
struct HeadQuery {
  alignas(64) float f[kSubGroup * kMaxVectorHeadDim];
  alignas(64) int16_t c[kSubGroup][kMaxVectorHeadDim];
  alignas(64) int32_t bias8[kSubGroup][kMaxVectorHeadDim / 4];
  float d[kSubGroup][kMaxVectorHeadDim / 32];
};

// hq's integer fields from its G x hd floats f (hd % 64 == 0): per group d = max |x| / 32767 and
// the codes x / d rounded to nearest, so a code's error is at most 2^-16 of the group's largest
// value (an f16 K row's rounding is 2^-11 of each value).
void quantize_query(HeadQuery* hq, int G, int hd) {
  for (int g = 0; g < G; ++g) {
    const float* x = hq->f + size_t(g) * hd;
    for (int b = 0; b < hd / 32; ++b) {
      __m256i lo, hi;
      hq->d[g][b] = round_query_group(x + 32 * b, &lo, &hi);
      int16_t* piece = &hq->c[g][64 * (b / 2)] + 16 * (b % 2);
      _mm256_store_si256(reinterpret_cast<__m256i*>(piece), lo);
      _mm256_store_si256(reinterpret_cast<__m256i*>(piece + 32), hi);
    }
    for (int p = 0; p < hd / 64; ++p) {
      const __m512i ones = _mm512_set1_epi16(1);
      const __m512i pairs = _mm512_add_epi32(_mm512_madd_epi16(_mm512_load_si512(&hq->c[g][64 * p]), ones),
                                             _mm512_madd_epi16(_mm512_load_si512(&hq->c[g][64 * p + 32]), ones));
      _mm512_store_si512(&hq->bias8[g][16 * p], _mm512_mullo_epi32(pairs, _mm512_set1_epi32(-8)));
    }
  }
}

// reduce_pairs on integer lane sums, stopping before its last fold: lane j of *s0 (*s1) = the sum
// of lanes 0..7 (8..15) of the j-th dot product - its first (second) 32-value group.
inline void reduce_pairs_groups(const __m512i* t, __m512i* s0, __m512i* s1) {
  auto shuffle = [](__m512i a, __m512i b, auto imm) {
    return _mm512_castps_si512(_mm512_shuffle_ps(_mm512_castsi512_ps(a), _mm512_castsi512_ps(b), decltype(imm)::value));
  };
  using Lo = std::integral_constant<int, _MM_SHUFFLE(1, 0, 1, 0)>;
  using Hi = std::integral_constant<int, _MM_SHUFFLE(3, 2, 3, 2)>;
  __m512i r[4];
  for (int i = 0; i < 4; ++i)
    r[i] = _mm512_add_epi32(shuffle(t[2 * i], t[2 * i + 1], Lo{}), shuffle(t[2 * i], t[2 * i + 1], Hi{}));
  // 128-bit lanes 0 and 1 of r[i] come from the first group's lanes, 2 and 3 from the second's.
  const __m512i a = _mm512_add_epi32(_mm512_shuffle_i32x4(r[0], r[1], 0x88), _mm512_shuffle_i32x4(r[0], r[1], 0xDD));
  const __m512i b = _mm512_add_epi32(_mm512_shuffle_i32x4(r[2], r[3], 0x88), _mm512_shuffle_i32x4(r[2], r[3], 0xDD));
  *s0 = _mm512_shuffle_i32x4(a, b, 0x88);
  *s1 = _mm512_shuffle_i32x4(a, b, 0xDD);
}

// Scores against q8_0 or q4_0 K rows in integers: per 64-value piece of a row (two groups), its
// codes widened to 16 bits in the order of hq.c (group 2i's values 0..15 beside group 2i + 1's,
// then 16..31 likewise: for q4_0 the low nibbles, then the high ones) and multiplied by a head's
// 16-bit query codes with two vpdpwssd, so lanes 0..7 sum the first group and 8..15 the second
// (exact in int32: |sum| <= 32 * 32767 * 127; q4_0's sums start at hq.bias8, which removes the
// codes' +8). reduce_pairs_groups gives each position's two group sums, which take the product
// of the K and query scales in f32. Against tile_scores<Q8_0> a row costs two widening loads per
// piece instead of a widen, a convert and a scale product per 16 values, and a head two vpdpwssd
// per piece instead of four FMAs; the query's rounding (2^-16 of its group's largest value) is
// far below the K row's own (q8_0: 2^-8).
template <KvElem KT, int NP>
void tile_scores_int(const uint8_t* const* krow, const HeadQuery& hq, int G, __m512* out) {
  constexpr size_t kGroup = KT == KvElem::Q8_0 ? 34 : 18;  // bytes per 32-value group
  for (int piece = 0; piece < NP; ++piece) {
    const size_t off = size_t(piece) * 2 * kGroup;
    // The 16 positions' group scales, in position order.
    alignas(32) uint16_t d0[kTile], d1[kTile];
    for (int j = 0; j < kTile; ++j) {
      std::memcpy(&d0[j], krow[j] + off, 2);
      std::memcpy(&d1[j], krow[j] + off + kGroup, 2);
    }
    const __m512 k0 = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(d0)));
    const __m512 k1 = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(d1)));
    __m512i t[kSubGroup][kTile / 2];
    // Values 0..15 (*v0) and 16..31 (*v1) of both groups, widened: [first group's | second's].
    auto codes = [off](const uint8_t* row, __m512i* v0, __m512i* v1) {
      auto both = [&](size_t at) {
        const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + off + 2 + at));
        const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + off + kGroup + 2 + at));
        return _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
      };
      if constexpr (KT == KvElem::Q8_0) {
        *v0 = _mm512_cvtepi8_epi16(both(0));
        *v1 = _mm512_cvtepi8_epi16(both(16));
      } else {
        const __m256i b = both(0), low4 = _mm256_set1_epi8(0x0F);
        *v0 = _mm512_cvtepu8_epi16(_mm256_and_si256(b, low4));
        *v1 = _mm512_cvtepu8_epi16(_mm256_and_si256(_mm256_srli_epi16(b, 4), low4));
      }
    };
    for (int j = 0; j < kTile; j += 2) {
      __m512i a0, a1, b0, b1;
      codes(krow[j], &a0, &a1);
      codes(krow[j + 1], &b0, &b1);
      for (int g = 0; g < G; ++g) {
        const __m512i q0 = _mm512_load_si512(&hq.c[g][64 * piece]);
        const __m512i q1 = _mm512_load_si512(&hq.c[g][64 * piece + 32]);
        __m512i a, b;
        if constexpr (KT == KvElem::Q8_0) {
          a = _mm512_madd_epi16(a0, q0);
          b = _mm512_madd_epi16(b0, q0);
        } else {
          const __m512i bias = _mm512_load_si512(&hq.bias8[g][16 * piece]);
          a = _mm512_dpwssd_epi32(bias, a0, q0);
          b = _mm512_dpwssd_epi32(bias, b0, q0);
        }
        a = _mm512_dpwssd_epi32(a, a1, q1);
        b = _mm512_dpwssd_epi32(b, b1, q1);
        t[g][j / 2] = _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
      }
    }
    for (int g = 0; g < G; ++g) {
      __m512i s0, s1;
      reduce_pairs_groups(t[g], &s0, &s1);
      const __m512 x0 = _mm512_mul_ps(k0, _mm512_set1_ps(hq.d[g][2 * piece]));
      const __m512 x1 = _mm512_mul_ps(k1, _mm512_set1_ps(hq.d[g][2 * piece + 1]));
      const __m512 v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1), x1, _mm512_mul_ps(_mm512_cvtepi32_ps(s0), x0));
      out[g] = piece == 0 ? v : _mm512_add_ps(out[g], v);
    }
  }
}

// The 16 scores of rows krow[0..16) (see reduce_pairs): each K row is loaded (and dequantized)
// once for all G heads, two rows at a time.
template <KvElem KT, int NC>
void tile_scores(const uint8_t* const* krow, const HeadQuery& hq, int G, __m512* out) {
  const float* q = hq.f;
  __m512 t[kSubGroup][kTile / 2];
  for (int j = 0; j < kTile; j += 2) {
    __m512 k0[NC], k1[NC];
    for (int c = 0; c < NC; ++c) {
      k0[c] = chunk<KT>(krow[j], c);
      k1[c] = chunk<KT>(krow[j + 1], c);
    }
    for (int g = 0; g < G; ++g) {
      // q is 64-byte aligned (attend_subgroup copies it): split loads cost a third more here.
      // Even and odd chunks go to separate sums, halving the chain of dependent FMAs.
      const float* qg = q + size_t(g) * 16 * NC;
      __m512 a = _mm512_mul_ps(_mm512_load_ps(qg), k0[0]);
      __m512 b = _mm512_mul_ps(_mm512_load_ps(qg), k1[0]);
      if constexpr (NC == 1) {
        t[g][j / 2] = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
      } else {
        __m512 a2 = _mm512_mul_ps(_mm512_load_ps(qg + 16), k0[1]);
        __m512 b2 = _mm512_mul_ps(_mm512_load_ps(qg + 16), k1[1]);
        for (int c = 2; c < NC; c += 2) {
          a = _mm512_fmadd_ps(_mm512_load_ps(qg + 16 * c), k0[c], a);
          b = _mm512_fmadd_ps(_mm512_load_ps(qg + 16 * c), k1[c], b);
          if (c + 1 < NC) {
            a2 = _mm512_fmadd_ps(_mm512_load_ps(qg + 16 * (c + 1)), k0[c + 1], a2);
            b2 = _mm512_fmadd_ps(_mm512_load_ps(qg + 16 * (c + 1)), k1[c + 1], b2);
          }
        }
        a = _mm512_add_ps(a, a2);
        b = _mm512_add_ps(b, b2);
        t[g][j / 2] = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
      }
    }
  }
  for (int g = 0; g < G; ++g) out[g] = reduce_pairs(t[g]);
}

// acc[g][c] = acc[g][c] * cs[g] + sum_{j < T} p[g][j] V[j][16c ..) for c in [c0, c0 + NCC):
// G x NCC accumulators in registers, each V chunk loaded (and dequantized) once for all heads.
template <KvElem VT, int G, int NCC>
inline void accumulate_pass(const uint8_t* const* vrow, int T, const float (*p)[kSpan], const float* cs, int hd,
                            int c0, float* acc) {
  __m512 a[G][NCC];
  for (int g = 0; g < G; ++g) {
    const __m512 c = _mm512_set1_ps(cs[g]);
    for (int k = 0; k < NCC; ++k) a[g][k] = _mm512_mul_ps(_mm512_load_ps(acc + size_t(g) * hd + 16 * (c0 + k)), c);
  }
  for (int j = 0; j < T; ++j) {
    __m512 v[NCC];
    if constexpr (NCC % 2 == 0) {  // c0 is a multiple of NCC (accumulate), so even
      for (int k = 0; k < NCC; k += 2) chunk_pair<VT>(vrow[j], c0 + k, &v[k], &v[k + 1]);
    } else {
      for (int k = 0; k < NCC; ++k) v[k] = chunk<VT>(vrow[j], c0 + k);
    }
    for (int g = 0; g < G; ++g) {
      const __m512 w = _mm512_set1_ps(p[g][j]);
      for (int k = 0; k < NCC; ++k) a[g][k] = _mm512_fmadd_ps(w, v[k], a[g][k]);
    }
  }
  for (int g = 0; g < G; ++g)
    for (int k = 0; k < NCC; ++k) _mm512_store_ps(acc + size_t(g) * hd + 16 * (c0 + k), a[g][k]);
}

// All hd / 16 chunks, NCC at a time (about 24 accumulators), the rest one at a time.
template <KvElem VT, int G>
void accumulate(const uint8_t* const* vrow, int T, const float (*p)[kSpan], const float* cs, int hd, float* acc) {
  constexpr int NCC = G <= 2 ? 8 : G <= 4 ? 4 : 2;
  const int nc = hd / 16;
  int c0 = 0;
  for (; c0 + NCC <= nc; c0 += NCC) accumulate_pass<VT, G, NCC>(vrow, T, p, cs, hd, c0, acc);
  for (; c0 < nc; ++c0) accumulate_pass<VT, G, 1>(vrow, T, p, cs, hd, c0, acc);
}

template <KvElem VT>
void accumulate_any(int G, const uint8_t* const* vrow, int T, const float (*p)[kSpan], const float* cs, int hd,
                    float* acc) {
  switch (G) {
    case 1: return accumulate<VT, 1>(vrow, T, p, cs, hd, acc);
    case 2: return accumulate<VT, 2>(vrow, T, p, cs, hd, acc);
    case 3: return accumulate<VT, 3>(vrow, T, p, cs, hd, acc);
    case 4: return accumulate<VT, 4>(vrow, T, p, cs, hd, acc);
    case 5: return accumulate<VT, 5>(vrow, T, p, cs, hd, acc);
    case 6: return accumulate<VT, 6>(vrow, T, p, cs, hd, acc);
    case 7: return accumulate<VT, 7>(vrow, T, p, cs, hd, acc);
    default: return accumulate<VT, 8>(vrow, T, p, cs, hd, acc);
  }
}

using ScoresFn = void (*)(const uint8_t* const* krow, const HeadQuery& hq, int G, __m512* out);
using AccumulateFn = void (*)(int G, const uint8_t* const* vrow, int T, const float (*p)[kSpan], const float* cs,
                              int hd, float* acc);

template <KvElem KT>
ScoresFn scores_for(int hd) {
  switch (hd / 16) {
    case 1: return tile_scores<KT, 1>;
    case 2: return tile_scores<KT, 2>;
    case 3: return tile_scores<KT, 3>;
    case 4: return tile_scores<KT, 4>;
    case 5: return tile_scores<KT, 5>;
    case 6: return tile_scores<KT, 6>;
    case 7: return tile_scores<KT, 7>;
    case 8: return tile_scores<KT, 8>;
    default: return nullptr;  // wider heads would not fit two rows in registers
  }
}

ScoresFn scores_fn(KvElem t, int hd) {
  if (integer_scores(t, hd)) {
    if (t == KvElem::Q8_0) return hd == 64 ? tile_scores_int<KvElem::Q8_0, 1> : tile_scores_int<KvElem::Q8_0, 2>;
    return hd == 64 ? tile_scores_int<KvElem::Q4_0, 1> : tile_scores_int<KvElem::Q4_0, 2>;
  }
  return with_kv_elem(t, [hd](auto kt) { return scores_for<decltype(kt)::value>(hd); });
}

AccumulateFn accumulate_fn(KvElem t) {
  return with_kv_elem(t, [](auto vt) -> AccumulateFn { return accumulate_any<decltype(vt)::value>; });
}


// The states of [begin, end) for `nheads` <= kMaxHeads consecutive KV heads from kv_head0, each
// with G <= kSubGroup query heads: head h's queries at q + h * q_stride ([G][hd]), its state
// written into partial + h * partial_stride as heads g0 .. g0 + G of a group of `group` (layout
// of attention.h). Each head's arithmetic is exactly what a call for that head alone does (the
// heads only share the walk over positions): spans of kSpan positions, every head in turn per
// span, so a span's blocks are read once for all heads while they sit in L1/L2, and the hints
// cover whole slots (every head's rows, contiguous in a slot) ahead of the span.
// kL1: hint K/V into L1 rather than L2 (attention_l1_hints, attention_impl.h).
template <bool kL1>
void attend_heads(const PagedKvView& kv, ScoresFn scores, AccumulateFn accumulate, int64_t begin, int64_t end,
                  int kv_head0, int nheads, const float* q, size_t q_stride, int G, float scale, int group, int g0,
                  float* partial, size_t partial_stride) {
  const int hd = kv.head_dim;
  const size_t k_row = kv_row_bytes(kv.k_type, hd), v_row = kv_row_bytes(kv.v_type, hd);
  alignas(64) float acc[kMaxHeads][kSubGroup * kMaxVectorHeadDim];  // [head][G][hd]
  alignas(64) HeadQuery qa[kMaxHeads];                              // the heads' queries
  alignas(64) float p[kMaxHeads][kSubGroup][kSpan];                 // e^(score - m) of the span
  alignas(64) __m512 tile[kSubGroup];                               // a tile's unscaled scores
  alignas(64) __m512 sc[kMaxHeads][kSubGroup][kSpan / kTile];       // scaled scores of the span's tiles
  float m[kMaxHeads][kSubGroup], cs[kMaxHeads][kSubGroup];
  __m512 sum[kMaxHeads][kSubGroup];  // running sums of e^(score - m), lane-wise
  for (int h = 0; h < nheads; ++h) {
    std::fill(acc[h], acc[h] + size_t(G) * hd, 0.0f);
    std::memcpy(qa[h].f, q + size_t(h) * q_stride, size_t(G) * size_t(hd) * sizeof(float));
    if (integer_scores(kv.k_type, hd)) quantize_query(&qa[h], G, hd);
    for (int g = 0; g < G; ++g) {
      m[h][g] = -std::numeric_limits<float>::infinity();
      sum[h][g] = _mm512_setzero_ps();
    }
  }
  const __m512 sv = _mm512_set1_ps(scale);
  const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  const uint8_t* krow[kSpan];  // kv_head0's rows; head h's are h rows further (a slot is [heads] rows)
  const uint8_t* vrow[kSpan];
  const uint8_t* kh[kSpan];
  const uint8_t* vh[kSpan];
  prefetch_first_positions<kL1>(kv, k_row, v_row, begin, end, kv_head0, nheads);
  // One softmax update per span of up to kSpan positions (any blocks): the running maximum, its
  // rescale and the exps of a span's tiles are independent of each other, so the latency chain
  // reduce -> max -> exp is paid once per kSpan positions instead of once per tile.
  for (int64_t p0 = begin; p0 < end;) {
    const int T = int(std::min<int64_t>(int64_t(kSpan), end - p0));
    span_rows(kv, k_row, v_row, p0, T, kv_head0, krow, vrow);
    const int tiles = (T + kTile - 1) / kTile;
    for (int h = 0; h < nheads; ++h) {
      head_rows(krow, vrow, T, tiles * kTile, h, k_row, v_row, kh, vh);
      for (int i = 0; i < tiles; ++i) {
        if (h == 0) prefetch_slots<kL1>(kv, k_row, v_row, p0 + kPrefetchAhead + i * kTile, kTile, end, kv_head0, nheads);
        scores(kh + i * kTile, qa[h], G, tile);
        const int left = T - i * kTile;
        const __mmask16 valid = left >= kTile ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1);
        for (int g = 0; g < G; ++g)
          sc[h][g][i] = _mm512_mask_mov_ps(neg_inf, valid, _mm512_mul_ps(tile[g], sv));
      }
      for (int g = 0; g < G; ++g) {
        __m512 mx = sc[h][g][0];
        for (int i = 1; i < tiles; ++i) mx = _mm512_max_ps(mx, sc[h][g][i]);
        const float m_new = std::max(m[h][g], _mm512_reduce_max_ps(mx));
        // 0 on the first span (m = -inf); exactly 1 while the maximum stays.
        cs[h][g] = m_new > m[h][g] ? std::exp(m[h][g] - m_new) : 1.0f;
        m[h][g] = m_new;
        const __m512 mv = _mm512_set1_ps(m_new);
        __m512 e = exp512(_mm512_sub_ps(sc[h][g][0], mv));
        _mm512_store_ps(p[h][g], e);
        sum[h][g] = _mm512_fmadd_ps(sum[h][g], _mm512_set1_ps(cs[h][g]), e);
        for (int i = 1; i < tiles; ++i) {
          e = exp512(_mm512_sub_ps(sc[h][g][i], mv));
          _mm512_store_ps(p[h][g] + i * kTile, e);
          sum[h][g] = _mm512_add_ps(sum[h][g], e);
        }
      }
      accumulate(G, vh, T, p[h], cs[h], hd, acc[h]);
    }
    p0 += T;
  }
  for (int h = 0; h < nheads; ++h) {
    float* out = partial + size_t(h) * partial_stride;
    for (int g = 0; g < G; ++g) {
      out[g0 + g] = m[h][g];
      out[group + g0 + g] = _mm512_reduce_add_ps(sum[h][g]);
      std::memcpy(out + 2 * group + size_t(g0 + g) * hd, acc[h] + size_t(g) * hd, size_t(hd) * sizeof(float));
    }
  }
}

}  // namespace

bool attention_partial_avx512(const PagedKvView& kv, int64_t begin, int64_t end, int kv_head, const float* q,
                              int group, float scale, float* partial) {
  return attention_partial_heads_avx512(kv, begin, end, kv_head, 1, q, group, scale, partial);
}

bool attention_partial_heads_avx512(const PagedKvView& kv, int64_t begin, int64_t end, int kv_head0, int nheads,
                                    const float* q, int group, float scale, float* partials) {
  const int hd = kv.head_dim;
  auto quantized = [](KvElem t) { return t == KvElem::Q8_0 || t == KvElem::Q4_0; };
  if (hd % 16 != 0 || hd > kMaxVectorHeadDim) return false;
  if ((quantized(kv.k_type) || quantized(kv.v_type)) && hd % 32 != 0) return false;
  const ScoresFn scores = scores_fn(kv.k_type, hd);
  const AccumulateFn accumulate = accumulate_fn(kv.v_type);
  if (scores == nullptr || accumulate == nullptr) return false;
  const bool l1_hints = attention_l1_hints();
  split_heads(nheads, group, hd, kMaxHeads, kSubGroup, q, partials,
              [&](int h0, int H, const float* qh, size_t q_stride, int G, int g0, float* ph, size_t pf) {
                (l1_hints ? attend_heads<true> : attend_heads<false>)(kv, scores, accumulate, begin, end, kv_head0 + h0,
                                                                      H, qh, q_stride, G, scale, group, g0, ph, pf);
              });
  return true;
}

}  // namespace kvserve::detail
