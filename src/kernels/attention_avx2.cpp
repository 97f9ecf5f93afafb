// The AVX2 vector path of attention_partial_heads (see attention.h; attention.cpp dispatches): the
// AVX-512 kernel's design (attention_avx512.cpp) in 8 lanes, for machines without AVX-512.
//
// Why not attention.cpp's tile loop: that one dequantizes every non-f32 row of a tile into a
// stack copy and then reads the copy (one code path for all types), and updates the online
// softmax once per 16 positions with scalar max/exp; the copy stores and the serial
// max -> exp chain per tile made it 1.5-2.4x slower than the AVX-512 kernel per position. Here,
// per span of up to kSpan = 64 positions (any blocks), every KV head in turn:
//   1. per tile of kTile = 8 positions, each K row is loaded (and dequantized) in registers, once
//      for all G query heads of its KV head; q[g] * K[j] lane-wise is kept per (head, row), and one
//      hsum8 per (head, tile) turns the 8 row vectors into one vector of the tile's 8 scores;
//      against q8_0 or q4_0 K (head_dim 64 or 128) the products are integer instead
//      (tile_scores_int: the 16-bit query of the AVX-512 kernel, exact sums per group);
//   2. the online softmax runs once per span on its tiles' score vectors (vector max, vector exp,
//      vector running sum, reduced once at the end);
//   3. acc[g] = acc[g] * c[g] + sum_j p[g][j] V[j] with G x NCC accumulators in registers and each
//      V chunk dequantized in registers once for all heads.
// Quantized K/V need head_dim % 32 == 0 (whole groups per chunk of 8), float types head_dim % 8,
// all head_dim <= 128 (a K row's chunks stay in registers); other shapes return false and take
// attention.cpp's path. The order of operations is fixed and each head's arithmetic does not
// depend on the heads alongside it, so results depend neither on the thread count nor on which
// heads share a call.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "kernels/attention_impl.h"
#include "kernels/simd_avx2.h"

namespace kvserve::detail {

namespace {

constexpr int kTile = 8;      // positions per tile: one ymm of scores
constexpr int kSpan = 64;     // positions per softmax update: kSpan / kTile tiles
constexpr int kSubGroup = 8;  // query heads per pass (larger groups are split)
constexpr int kMaxHeads = 4;  // KV heads per pass (more are split)
constexpr int kMaxHeadDim = 128;  // wider heads take attention.cpp's path (registers)
constexpr int kMaxChunks = kMaxHeadDim / 8;

// Lane j = the sum of a[j]'s 8 lanes.
inline __m256 hsum8(const __m256* a) {
  const __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

inline __m256 f16_scale(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _mm256_cvtph_ps(_mm_set1_epi16(int16_t(h)));
}

// The unscaled codes of a quantized 32-value group g as f32, 8 values at a time: quarter i (0..3)
// of a q8_0 group [f16 d][32 x int8]; of a q4_0 group [f16 d][16 bytes] (values 0..15 in the low
// nibbles, 16..31 in the high ones, stored with +8) the nibbles `high` of widened bytes b
// (q4_bytes: bytes 0..7 or 8..15).
inline __m256 q8_codes(const uint8_t* g, int i) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(g + 2 + 8 * i))));
}
inline __m256i q4_bytes(const uint8_t* g, int half) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(g + 2 + 8 * half)));
}
inline __m256 q4_codes(__m256i b, bool high) {
  const __m256i n = high ? _mm256_srli_epi32(b, 4) : _mm256_and_si256(b, _mm256_set1_epi32(0x0F));
  return _mm256_cvtepi32_ps(_mm256_sub_epi32(n, _mm256_set1_epi32(8)));
}

// Chunk c (values 8c .. 8c+7) of a stored row as f32, dequantized in registers, bit for bit as
// kv_dequantize_row_scalar (each value d * q rounded once).
template <KvElem T>
inline __m256 chunk(const uint8_t* row, int c) {
  if constexpr (T == KvElem::F32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + 8 * c);
  } else if constexpr (T == KvElem::F16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 16 * c)));
  } else if constexpr (T == KvElem::BF16) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 16 * c)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  } else if constexpr (T == KvElem::Q8_0) {
    const uint8_t* g = row + 34 * (c / 4);
    return _mm256_mul_ps(f16_scale(g), q8_codes(g, c % 4));
  } else {
    const uint8_t* g = row + 18 * (c / 4);
    return _mm256_mul_ps(f16_scale(g), q4_codes(q4_bytes(g, c % 2), c % 4 >= 2));
  }
}

// Chunks c and c + 1 (c even) of a stored row, as chunk<T> gives them (bit for bit). For the
// quantized types both lie in one 32-value group: its scale is converted once, which chunk<T>
// called twice cannot do when c is a run-time value (accumulate_pass; see attention_avx512.cpp).
template <KvElem T>
inline void chunk_pair(const uint8_t* row, int c, __m256* lo, __m256* hi) {
  if constexpr (T == KvElem::Q8_0) {
    const uint8_t* g = row + 34 * (c / 4);
    const __m256 d = f16_scale(g);
    *lo = _mm256_mul_ps(d, q8_codes(g, c % 4));
    *hi = _mm256_mul_ps(d, q8_codes(g, c % 4 + 1));
  } else if constexpr (T == KvElem::Q4_0) {
    const uint8_t* g = row + 18 * (c / 4);
    const __m256 d = f16_scale(g);
    *lo = _mm256_mul_ps(d, q4_codes(q4_bytes(g, 0), c % 4 >= 2));
    *hi = _mm256_mul_ps(d, q4_codes(q4_bytes(g, 1), c % 4 >= 2));
  } else {
    *lo = chunk<T>(row, c);
    *hi = chunk<T>(row, c + 1);
  }
}

// One KV head's queries, [G][hd], as each scores kernel reads them: f for the float kernels
// (32-byte aligned), and for q8_0/q4_0 K (tile_scores_int) the same queries as 16-bit integers
// c with one f32 scale d per 32-value group, rounded as attention_round_query (attention.h) and
// as the AVX-512 kernel rounds them.
struct HeadQuery {
  alignas(32) float f[kSubGroup * kMaxHeadDim];
  alignas(32) int16_t c[kSubGroup][kMaxHeadDim];
  float d[kSubGroup][kMaxHeadDim / 32];
};

// hq's integer fields from its G x hd floats f (hd % 32 == 0): per group d = max |x| / 32767,
// codes round-to-nearest-even(x / d), saturated to int16 (only a rounding at the max could pass it).
void quantize_query(HeadQuery* hq, int G, int hd) {
  for (int g = 0; g < G; ++g)
    for (int b = 0; b < hd / 32; ++b)
      hq->d[g][b] = avx2::round_codes16(hq->f + size_t(g) * hd + 32 * b, &hq->c[g][32 * b]) / 32767.0f;
}

// Scores against q8_0 or q4_0 K rows in integers (the AVX-512 kernel's tile_scores_int in 8
// lanes): per 32-value group of a row, its codes widened to 16 bits (q4_0: the nibbles less 8)
// times a head's 16-bit query codes by two vpmaddwd, exact in int32; per 64-value piece one
// hadd puts the first group's partial sums in lanes 0, 1, 4, 5 and the second's in 2, 3, 6, 7,
// and per tile a transposing reduction gives the 8 positions' sums of each group, which take
// the product of the K and query scales in f32. The result is the same integer per group as
// the AVX-512 kernel's (the f32 steps after it are the same too).
template <KvElem KT, int NP>
void tile_scores_int(const uint8_t* const* krow, const HeadQuery& hq, int G, __m256* out) {
  constexpr size_t kGroup = KT == KvElem::Q8_0 ? 34 : 18;  // bytes per 32-value group
  // Values 0..15 (*lo) and 16..31 (*hi) of the group at g, widened to int16.
  auto codes = [](const uint8_t* g, __m256i* lo, __m256i* hi) {
    if constexpr (KT == KvElem::Q8_0) {
      *lo = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + 2)));
      *hi = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + 18)));
    } else {
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(g + 2)), low4 = _mm_set1_epi8(0x0F);
      const __m256i eight = _mm256_set1_epi16(8);
      *lo = _mm256_sub_epi16(_mm256_cvtepu8_epi16(_mm_and_si128(b, low4)), eight);
      *hi = _mm256_sub_epi16(_mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(b, 4), low4)), eight);
    }
  };
  for (int piece = 0; piece < NP; ++piece) {
    const size_t off = size_t(piece) * 2 * kGroup;
    alignas(16) uint16_t d0[kTile], d1[kTile];  // the 8 positions' group scales
    for (int j = 0; j < kTile; ++j) {
      std::memcpy(&d0[j], krow[j] + off, 2);
      std::memcpy(&d1[j], krow[j] + off + kGroup, 2);
    }
    const __m256 k0 = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(d0)));
    const __m256 k1 = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(d1)));
    __m256i t[kSubGroup][kTile];
    for (int j = 0; j < kTile; ++j) {
      __m256i c[4];
      codes(krow[j] + off, &c[0], &c[1]);
      codes(krow[j] + off + kGroup, &c[2], &c[3]);
      for (int g = 0; g < G; ++g) {
        const int16_t* qg = &hq.c[g][64 * piece];
        __m256i m[4];
        for (int i = 0; i < 4; ++i)
          m[i] = _mm256_madd_epi16(c[i], _mm256_load_si256(reinterpret_cast<const __m256i*>(qg + 16 * i)));
        t[g][j] = _mm256_hadd_epi32(_mm256_add_epi32(m[0], m[1]), _mm256_add_epi32(m[2], m[3]));
      }
    }
    for (int g = 0; g < G; ++g) {
      // Per 128-bit lane of u: [x.first, x.second, y.first, y.second] for rows x, y (partial sums).
      __m256 u[4];
      for (int i = 0; i < 4; ++i) u[i] = _mm256_castsi256_ps(_mm256_hadd_epi32(t[g][2 * i], t[g][2 * i + 1]));
      auto pick = [](__m256 x, __m256 y, auto imm) {
        return _mm256_castps_si256(_mm256_shuffle_ps(x, y, decltype(imm)::value));
      };
      using First = std::integral_constant<int, _MM_SHUFFLE(2, 0, 2, 0)>;
      using Second = std::integral_constant<int, _MM_SHUFFLE(3, 1, 3, 1)>;
      // [positions 0..3 | the same positions' other partial sums], then 4..7; folded across lanes.
      auto fold = [](__m256i a, __m256i b) {
        return _mm256_cvtepi32_ps(
            _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31)));
      };
      const __m256 s0 = fold(pick(u[0], u[1], First{}), pick(u[2], u[3], First{}));
      const __m256 s1 = fold(pick(u[0], u[1], Second{}), pick(u[2], u[3], Second{}));
      const __m256 x0 = _mm256_mul_ps(k0, _mm256_set1_ps(hq.d[g][2 * piece]));
      const __m256 x1 = _mm256_mul_ps(k1, _mm256_set1_ps(hq.d[g][2 * piece + 1]));
      const __m256 v = _mm256_fmadd_ps(s1, x1, _mm256_mul_ps(s0, x0));
      out[g] = piece == 0 ? v : _mm256_add_ps(out[g], v);
    }
  }
}

// The 8 scores of rows krow[0..8): q[g] * K[j] lane-wise summed over the head dim, then one hsum8
// per head; each K row is loaded (and dequantized) once for all G heads.
template <KvElem KT, int NC>
void tile_scores(const uint8_t* const* krow, const HeadQuery& hq, int G, __m256* out) {
  const float* q = hq.f;
  __m256 t[kSubGroup][kTile];
  for (int j = 0; j < kTile; ++j) {
    __m256 k[NC];
    for (int c = 0; c < NC; ++c) k[c] = chunk<KT>(krow[j], c);
    for (int g = 0; g < G; ++g) {
      // q is 32-byte aligned (attend_heads copies it). Even and odd chunks in separate sums.
      const float* qg = q + size_t(g) * 8 * NC;
      __m256 a = _mm256_mul_ps(_mm256_load_ps(qg), k[0]);
      if constexpr (NC > 1) {
        __m256 b = _mm256_mul_ps(_mm256_load_ps(qg + 8), k[1]);
        for (int c = 2; c < NC; c += 2) {
          a = _mm256_fmadd_ps(_mm256_load_ps(qg + 8 * c), k[c], a);
          if (c + 1 < NC) b = _mm256_fmadd_ps(_mm256_load_ps(qg + 8 * (c + 1)), k[c + 1], b);
        }
        a = _mm256_add_ps(a, b);
      }
      t[g][j] = a;
    }
  }
  for (int g = 0; g < G; ++g) out[g] = hsum8(t[g]);
}

// acc[g][c] = acc[g][c] * cs[g] + sum_{j < T} p[g][j] V[j][8c ..) for c in [c0, c0 + NCC).
template <KvElem VT, int G, int NCC>
inline void accumulate_pass(const uint8_t* const* vrow, int T, const float (*p)[kSpan], const float* cs, int hd,
                            int c0, float* acc) {
  __m256 a[G][NCC];
  for (int g = 0; g < G; ++g) {
    const __m256 c = _mm256_set1_ps(cs[g]);
    for (int k = 0; k < NCC; ++k) a[g][k] = _mm256_mul_ps(_mm256_load_ps(acc + size_t(g) * hd + 8 * (c0 + k)), c);
  }
  for (int j = 0; j < T; ++j) {
    __m256 v[NCC];
    if constexpr (NCC % 2 == 0) {  // c0 is a multiple of NCC (accumulate), so even
      for (int k = 0; k < NCC; k += 2) chunk_pair<VT>(vrow[j], c0 + k, &v[k], &v[k + 1]);
    } else {
      for (int k = 0; k < NCC; ++k) v[k] = chunk<VT>(vrow[j], c0 + k);
    }
    for (int g = 0; g < G; ++g) {
      const __m256 w = _mm256_broadcast_ss(&p[g][j]);
      for (int k = 0; k < NCC; ++k) a[g][k] = _mm256_fmadd_ps(w, v[k], a[g][k]);
    }
  }
  for (int g = 0; g < G; ++g)
    for (int k = 0; k < NCC; ++k) _mm256_store_ps(acc + size_t(g) * hd + 8 * (c0 + k), a[g][k]);
}

// All hd / 8 chunks, NCC at a time (G x NCC + NCC <= 16 registers), the rest one at a time.
template <KvElem VT, int G>
void accumulate(const uint8_t* const* vrow, int T, const float (*p)[kSpan], const float* cs, int hd, float* acc) {
  constexpr int NCC = G <= 1 ? 8 : G <= 2 ? 4 : G <= 4 ? 2 : 1;
  const int nc = hd / 8;
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

using ScoresFn = void (*)(const uint8_t* const* krow, const HeadQuery& hq, int G, __m256* out);
using AccumulateFn = void (*)(int G, const uint8_t* const* vrow, int T, const float (*p)[kSpan], const float* cs,
                              int hd, float* acc);

template <KvElem KT, int... NC>
ScoresFn scores_for(int nc, std::integer_sequence<int, NC...>) {
  ScoresFn f = nullptr;
  ((nc == NC + 1 ? (f = tile_scores<KT, NC + 1>, 0) : 0), ...);
  return f;
}

template <KvElem KT>
ScoresFn scores_for(int hd) {
  return scores_for<KT>(hd / 8, std::make_integer_sequence<int, kMaxChunks>{});
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

// As attend_heads of attention_avx512.cpp: the states of [begin, end) for `nheads` <= kMaxHeads
// KV heads from kv_head0 with G <= kSubGroup query heads each (head h's queries at
// q + h * q_stride, its state at partial + h * partial_stride as heads g0 .. g0 + G of `group`).
// kL1: hint K/V into L1 rather than L2 (attention_l1_hints, attention_impl.h).
template <bool kL1>
void attend_heads(const PagedKvView& kv, ScoresFn scores, AccumulateFn accumulate, int64_t begin, int64_t end,
                  int kv_head0, int nheads, const float* q, size_t q_stride, int G, float scale, int group, int g0,
                  float* partial, size_t partial_stride) {
  const int hd = kv.head_dim;
  const size_t k_row = kv_row_bytes(kv.k_type, hd), v_row = kv_row_bytes(kv.v_type, hd);
  alignas(32) float acc[kMaxHeads][kSubGroup * kMaxHeadDim];  // [head][G][hd]
  alignas(32) HeadQuery qa[kMaxHeads];                        // the heads' queries
  alignas(32) float p[kMaxHeads][kSubGroup][kSpan];                 // e^(score - m) of the span
  alignas(32) __m256 tile[kSubGroup];                               // a tile's unscaled scores
  alignas(32) __m256 sc[kMaxHeads][kSubGroup][kSpan / kTile];       // scaled scores of the span's tiles
  float m[kMaxHeads][kSubGroup], cs[kMaxHeads][kSubGroup];
  __m256 sum[kMaxHeads][kSubGroup];  // running sums of e^(score - m), lane-wise
  for (int h = 0; h < nheads; ++h) {
    std::fill(acc[h], acc[h] + size_t(G) * hd, 0.0f);
    std::memcpy(qa[h].f, q + size_t(h) * q_stride, size_t(G) * size_t(hd) * sizeof(float));
    if (integer_scores(kv.k_type, hd)) quantize_query(&qa[h], G, hd);
    for (int g = 0; g < G; ++g) {
      m[h][g] = -std::numeric_limits<float>::infinity();
      sum[h][g] = _mm256_setzero_ps();
    }
  }
  const __m256 sv = _mm256_set1_ps(scale);
  const __m256 neg_inf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const uint8_t* krow[kSpan];  // kv_head0's rows; head h's are h rows further (a slot is [heads] rows)
  const uint8_t* vrow[kSpan];
  const uint8_t* kh[kSpan];
  const uint8_t* vh[kSpan];
  prefetch_first_positions<kL1>(kv, k_row, v_row, begin, end, kv_head0, nheads);
  for (int64_t p0 = begin; p0 < end;) {
    const int T = int(std::min<int64_t>(int64_t(kSpan), end - p0));
    span_rows(kv, k_row, v_row, p0, T, kv_head0, krow, vrow);
    const int tiles = (T + kTile - 1) / kTile;
    for (int h = 0; h < nheads; ++h) {
      head_rows(krow, vrow, T, tiles * kTile, h, k_row, v_row, kh, vh);
      for (int i = 0; i < tiles; ++i) {
        if (h == 0) prefetch_slots<kL1>(kv, k_row, v_row, p0 + kPrefetchAhead + i * kTile, kTile, end, kv_head0, nheads);
        scores(kh + i * kTile, qa[h], G, tile);
        // Lanes at or past the span's end are -inf (exp gives exact zeros there).
        const __m256 valid = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(T - i * kTile), lane));
        for (int g = 0; g < G; ++g)
          sc[h][g][i] = _mm256_blendv_ps(neg_inf, _mm256_mul_ps(tile[g], sv), valid);
      }
      for (int g = 0; g < G; ++g) {
        __m256 mx = sc[h][g][0];
        for (int i = 1; i < tiles; ++i) mx = _mm256_max_ps(mx, sc[h][g][i]);
        const float m_new = std::max(m[h][g], avx2::hmax(mx));
        // 0 on the first span (m = -inf); exactly 1 while the maximum stays.
        cs[h][g] = m_new > m[h][g] ? std::exp(m[h][g] - m_new) : 1.0f;
        m[h][g] = m_new;
        const __m256 mv = _mm256_set1_ps(m_new);
        __m256 e = avx2::exp(_mm256_sub_ps(sc[h][g][0], mv));
        _mm256_store_ps(p[h][g], e);
        sum[h][g] = _mm256_fmadd_ps(sum[h][g], _mm256_set1_ps(cs[h][g]), e);
        for (int i = 1; i < tiles; ++i) {
          e = avx2::exp(_mm256_sub_ps(sc[h][g][i], mv));
          _mm256_store_ps(p[h][g] + i * kTile, e);
          sum[h][g] = _mm256_add_ps(sum[h][g], e);
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
      out[group + g0 + g] = avx2::hsum(sum[h][g]);
      std::memcpy(out + 2 * group + size_t(g0 + g) * hd, acc[h] + size_t(g) * hd, size_t(hd) * sizeof(float));
    }
  }
}

}  // namespace

bool attention_partial_heads_avx2(const PagedKvView& kv, int64_t begin, int64_t end, int kv_head0, int nheads,
                                  const float* q, int group, float scale, float* partials) {
  const int hd = kv.head_dim;
  auto quantized = [](KvElem t) { return t == KvElem::Q8_0 || t == KvElem::Q4_0; };
  if (hd % 8 != 0 || hd > kMaxHeadDim) return false;
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
