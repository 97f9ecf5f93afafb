// attention_partial_heads over tiled q8_0 / q4_0 K/V planes (kernels/kv_tiles.h) on AVX-512 VNNI.
//
// Why a second layout: in the row layout a position's scores need its row's codes widened, two
// 16-bit products per query head, lane shuffles to reduce each dot product and a gather of the
// row's scales, and V needs each row dequantized to floats and 4 FMAs per query head: ~78
// instructions per (position, KV head) pair with 3 query heads, head_dim 64 (docs/benchmarks.md).
// In a tile the 16 positions lie in the lanes:
//   scores, q8_0 K: per quad of dims one 64-byte load of the 16 slots' codes (stored + 128, so
//     unsigned) and one vpdpbusd per query head against that query quad (8-bit codes, the
//     rounding of attention_round_query with code_max 127) as an embedded broadcast: 16 dot
//     products in one register, no reduction, the +128 taken off once per query group (the sums
//     start at -128 times the group's query codes' sum); q4_0 K: per pair of dims one widening
//     load and one vpdpwssd per query head against the query pair (16-bit codes); the 16 scales
//     are one load, applied per 32-value group after the integer sums;
//   V: e^(score - m) times the slot's V scale over the span's largest such product, rounded to 16
//     bits, then per pair of slots one widening load of 16 dims x 2 slots and one vpdpwssd per
//     query head against that weight pair: the span's integer sums (exact in int32: 64 * 32767 *
//     127 < 2^31) take the span's scale once, in f32. (8-bit weights with vpdpbusd were tried:
//     ~100x the output error, rms 1.5e-3 against 1.3e-5 in attention_tiled_test.)
// q4_0 planes: one widening load gives two dim pairs (K) or two 16-dim chunks (V), its low
// nibbles and its high ones (an AND and a shift); the codes' +8 is taken off K's sums once per
// query group (they start at -8 times the group's query codes' sum: exact in int32, |sum| <=
// 32 * 32767 * 15 + 8 * 32 * 32768) and off V's codes before the products (a subtraction per
// vector: cheaper than summing each tile's weights).
// The V weights' rounding moves each term by at most 2^-16 of the span's largest term's weight;
// the scores are exactly those of the rounded query's.
//
// Why 8 bits for q8_0 (2026-12-07, Intel Xeon VM): in the engine the kernel's arithmetic and its
// K/V stream from memory add up rather than overlap (BM_decode_step_cold ~2x the time in L2), so
// every instruction saved per pair shows; vpdpbusd does twice vpdpwssd's products and its loads
// need no widening. With the prefetches spread over the work (below), one V scale per span and
// a shorter exp, attention per decode step fell by a fifth (docs/benchmarks.md, "8-bit query
// for the tiled q8_0 K").
//
// Per 64-position span (4 tiles) every KV head in turn (its tiles stay in L1 for the other heads),
// pipelined one (span, head) item deep (attend_pipelined); a head's queries in subgroups of up to
// 4, each subgroup a walk of its own over the range (the second of qwen2.5's 4 + 3 finds the
// chunk's K/V in L2); the online-softmax state lives in the partial buffer between spans (m, s
// per query head; acc [G][64]) with s kept lane-wise until the end.
// Handles head_dim 64 only (returns false otherwise: the caller gathers rows).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/attention_avx512_common.h"
#include "kernels/attention_impl.h"
#include "kernels/kv_tiles.h"
#include "util/status.h"

namespace kvserve::detail {

namespace {

constexpr int kHd = kKvTiledKernelHeadDim;  // the head dim this kernel handles
constexpr int kSpanTiles = 4;   // tiles per softmax update
constexpr int kMaxG = 4;        // query heads per pass

// One query head rounded for the K plane's type. q4_0 K (PairQuery): its 16-bit codes as (dim 2i,
// dim 2i + 1) pairs, its two group scales, and per group -8 times the group's codes' sum (the
// start of the integer sums). q8_0 K (QuadQuery): its 8-bit codes as quads (dims 4i .. 4i + 3),
// its group scales, and per group -128 times the codes' sum (the stored K codes carry +128).
struct alignas(64) PairQuery {
  int32_t pair[kHd / 2];
  float d[kHd / 32];
  int32_t bias[kHd / 32];
};
struct alignas(64) QuadQuery {
  int32_t quad[kHd / 4];
  float d[kHd / 32];
  int32_t bias[kHd / 32];
};
template <bool Q4>
using QueryCodes = std::conditional_t<Q4, PairQuery, QuadQuery>;

// attention_round_query's rounding: per 32 values d = max |q| / 32767 (PairQuery) or / 127
// (QuadQuery), codes q / d to nearest even.
void round_query(const float* q, PairQuery* out) {
  for (int g = 0; g < kHd / 32; ++g) {
    __m256i lo, hi;  // 32 int16 codes in dim order = 16 (even, odd) pairs
    out->d[g] = round_query_group(q + 32 * g, &lo, &hi);
    _mm256_store_si256(reinterpret_cast<__m256i*>(out->pair + 16 * g), lo);
    _mm256_store_si256(reinterpret_cast<__m256i*>(out->pair + 16 * g + 8), hi);
    const __m256i ones = _mm256_set1_epi16(1);
    const __m512i sums = _mm512_cvtepi32_epi64(_mm256_add_epi32(_mm256_madd_epi16(lo, ones), _mm256_madd_epi16(hi, ones)));
    out->bias[g] = int32_t(-8 * _mm512_reduce_add_epi64(sums));
  }
}
void round_query(const float* q, QuadQuery* out) {
  for (int g = 0; g < kHd / 32; ++g) {
    __m512i ca, cb;
    const float amax = group_codes(q + 32 * g, 127.0f, &ca, &cb);
    _mm_store_si128(reinterpret_cast<__m128i*>(out->quad + 8 * g), _mm512_cvtsepi32_epi8(ca));
    _mm_store_si128(reinterpret_cast<__m128i*>(out->quad + 8 * g + 4), _mm512_cvtsepi32_epi8(cb));
    out->d[g] = amax / 127.0f;
    out->bias[g] = -128 * _mm512_reduce_add_epi32(_mm512_add_epi32(ca, cb));
  }
}

// Code bytes per row (kv_tiles.h's C) and per tile-head, by plane type (Q4: q4_0, else q8_0).
template <bool Q4>
constexpr int kCodeBytes = Q4 ? kHd / 2 : kHd;
template <bool Q4>
constexpr size_t kTileHeadBytes = size_t(kKvTile) * (kCodeBytes<Q4> + 2 * (kHd / 32));

// Bytes from a plane's block 0 to tile t's tile-head `head`.
template <bool Q4>
inline size_t tile_offset(const PagedKvView& kv, int64_t t, int head) {
  const int tiles_per_block = kv.block_size / kKvTile;
  return size_t(kv.table[size_t(t / tiles_per_block)]) * kv.block_stride +
         (size_t(t % tiles_per_block) * size_t(kv.num_kv_heads) + size_t(head)) * kTileHeadBytes<Q4>;
}

inline __m512 f16x16(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline __m512i codes16(const uint8_t* p) {
  return _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
// 32 bytes of q4_0 nibbles widened to 16 bits: their low nibbles (lo) and high ones (hi), 0..15.
inline void nibbles16(const uint8_t* p, __m512i* lo, __m512i* hi) {
  const __m512i b = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  *lo = _mm512_and_si512(b, _mm512_set1_epi16(0x0F));
  *hi = _mm512_srli_epi16(b, 4);
}

// acc += a * the dword at p broadcast (vpdpwssd with an embedded broadcast: GCC otherwise turns a
// just-stored weight pair into register shuffles).
inline void dot_pairs(__m512i& acc, __m512i a, const int32_t* p) {
  asm("vpdpwssd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(a), "m"(*p));
}

// acc += the unsigned byte quads of a times the signed byte quad at p broadcast (vpdpbusd with an
// embedded broadcast, as dot_pairs).
inline void dot_quads(__m512i& acc, __m512i a, const int32_t* p) {
  asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(a), "m"(*p));
}
// The tile's 16 unscaled scores for G query heads (K tile-head kt, q4_0 when Q4 else q8_0).
// (Both per-tile functions are forced inline: GCC otherwise calls them out of line, passing the
// tile's vectors through memory, ~1.6x slower in L2.)
// ahead: a tile-head whose lines are hinted (kL1: into L1, else L2; see span_scores) one per step of
// the loop, so the hints spread over the work (a burst of 17 hints per tile was ~10% slower from
// memory: the fill buffers they hold stall the loads behind them). Never null: with nothing to
// hint the caller passes the tile being read, so the unrolled loops carry no test per hint (with
// a null check GCC kept a line counter per loop in stack slots, ~16 scalar loads and stores per
// V step; BM_paged_attention_group3/2048/3 9.8-10.4 -> 9.4-9.6 us in L2 on the Zen 5 VM).
template <int G, bool Q4, bool kL1>
[[gnu::always_inline]] inline void tile_scores(const uint8_t* kt, const QueryCodes<Q4>* pq, __m512* out,
                                               const uint8_t* ahead) {
  constexpr int kLines = int(kTileHeadBytes<Q4> / 64);
  int line = 0;
  // The query's address made opaque per tile: GCC otherwise hoists the 48 broadcast addresses
  // (&pq[h].quad[i]) out of the tile loop and spills them, a reload before every vpdpbusd.
  asm("" : "+r"(pq));
  // [32-value group][query head][two chains: even / odd dim quads (q8_0), low / high nibbles (q4_0)]
  __m512i acc[2][G][2];
  for (int g = 0; g < 2; ++g)
    for (int h = 0; h < G; ++h) {
      acc[g][h][0] = _mm512_set1_epi32(pq[h].bias[g]);
      acc[g][h][1] = _mm512_setzero_si512();
    }
  if constexpr (Q4) {
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i)
      for (int g = 0; g < 2; ++g) {
        __m512i lo, hi;  // dim pairs 16 g + i and 16 g + 8 + i
        nibbles16(kt + 32 * (8 * g + i), &lo, &hi);
        prefetch_line<kL1>(ahead + 64 * line++);
        for (int h = 0; h < G; ++h) {
          dot_pairs(acc[g][h][0], lo, &pq[h].pair[16 * g + i]);
          dot_pairs(acc[g][h][1], hi, &pq[h].pair[16 * g + 8 + i]);
        }
      }
  } else {
#pragma GCC unroll 4
    for (int i2 = 0; i2 < 8; i2 += 2)
      for (int u = 0; u < 2; ++u)
        for (int g = 0; g < 2; ++g) {
          const int i = 8 * g + i2 + u;  // dim quad
          const __m512i k = _mm512_loadu_si512(kt + 64 * i);
          prefetch_line<kL1>(ahead + 64 * line++);
          for (int h = 0; h < G; ++h) dot_quads(acc[g][h][u], k, &pq[h].quad[i]);
        }
  }
  for (; line < kLines; ++line) prefetch_line<kL1>(ahead + 64 * line);
  const uint8_t* scales = kt + kKvTile * kCodeBytes<Q4>;
  const __m512 d0 = f16x16(scales), d1 = f16x16(scales + 32);
  for (int h = 0; h < G; ++h) {
    const __m512 s0 = _mm512_cvtepi32_ps(_mm512_add_epi32(acc[0][h][0], acc[0][h][1]));
    const __m512 s1 = _mm512_cvtepi32_ps(_mm512_add_epi32(acc[1][h][0], acc[1][h][1]));
    out[h] = _mm512_fmadd_ps(s1, _mm512_mul_ps(d1, _mm512_set1_ps(pq[h].d[1])),
                             _mm512_mul_ps(s0, _mm512_mul_ps(d0, _mm512_set1_ps(pq[h].d[0]))));
  }
}

// One (span, KV head, query subgroup) item between its three steps (span_scores, span_softmax,
// span_values): its tiles, their scores, then its V weights. Two live at a time (attend_pipelined).
template <int G>
struct SpanWork {
  __m512 sc[kSpanTiles][G];  // scaled scores, -inf outside `valid`
  // V weights, [tile][query head][32-value group][slot pair]: p * d over the span's largest
  // |p * d| for (head, group), rounded to 16-bit integers (pairs of slots per int32).
  alignas(64) int32_t w[kSpanTiles][G][2][8];
  float back[G][2];  // that largest over 32767: the span's integer sums times this
  const uint8_t* vt[kSpanTiles];
  const uint8_t* va[kSpanTiles];  // V tile-head to hint while tile i's V is read (never null)
  __mmask16 valid[kSpanTiles];
  int n;
};

// Step 1: the scores of the span's n tiles [t0, t0 + n) (tile t covers positions [16 t, 16 t + 16)
// of which [begin, end) count) for one KV head's subgroup of G query heads.
template <int G, bool K4, bool V4, bool kL1>
[[gnu::always_inline]] inline void span_scores(const PagedKvView& kv, int head, int64_t t0, int n,
                                               int64_t begin, int64_t end, int64_t hint_last, bool hint,
                                               const QueryCodes<K4>* pq, float scale, SpanWork<G>& W) {
  const __m512 sv = _mm512_set1_ps(scale), neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  W.n = n;
  for (int i = 0; i < n; ++i) {
    const int64_t t = t0 + i;
    const uint8_t* kt = kv.k0 + tile_offset<K4>(kv, t, head);
    W.vt[i] = kv.v0 + tile_offset<V4>(kv, t, head);
    const int64_t lo = std::max<int64_t>(begin - 16 * t, 0), hi = std::min<int64_t>(end - 16 * t, 16);
    W.valid[i] = __mmask16(((1u << hi) - 1) & ~((1u << lo) - 1));
    // This head's K and V of the tile one span ahead, one line per step of tile i's K loop (its V
    // loop for V), so the hints stay spread over the work; 1 or 3 tiles ahead, or a whole span's
    // tiles hinted at once, measured no better on the Zen 5 VM, and on the Intel Xeon VM 2 or 4
    // tiles ahead alike, 8 or 12 worse. Into L1 (kL1, prefetcht0) where attention_l1_hints()
    // says so (the Zen 5 VM), else into L2 (prefetcht1). One thread from memory on that VM had
    // measured L2 hints faster (10.2-13.3 against 11.6-15.7 ns per (position, KV head), 200-1000
    // copies of the cache cycled), but in the engine, two threads and the weights streaming
    // between layers, L1 hints won: smollm-135m Q8_0 with q8_0 K/V, `kvserve bench --phases`,
    // eight alternations, attention per step at context 2000 0.89 -> 0.81 ms (medians), at batch
    // 8 and context 512 1.85 -> 1.73 ms.
    const uint8_t* ka = kt;  // nothing to hint: the tile itself (tile_scores)
    W.va[i] = W.vt[i];
    if (hint) {
      const int64_t ta = t + kSpanTiles;
      if (ta <= hint_last) {
        ka = kv.k0 + tile_offset<K4>(kv, ta, head);
        W.va[i] = kv.v0 + tile_offset<V4>(kv, ta, head);
      }
    }
    tile_scores<G, K4, kL1>(kt, pq, W.sc[i], ka);
    for (int h = 0; h < G; ++h)
      W.sc[i][h] = _mm512_mask_mov_ps(neg_inf, W.valid[i], _mm512_mul_ps(W.sc[i][h], sv));
  }
}

// Step 2: the online-softmax update of the state (m[G], s[G] lane-wise sums [G][16], acc[G] rows
// of 64 floats: rescaled where the maximum grew) and the span's V weights into W.
template <int G, bool V4>
[[gnu::always_inline]] inline void span_softmax(SpanWork<G>& W, float* m, float* s, float* const* acc) {
  const int n = W.n;
  // pd[i][h][g] = p * d, d tile i's V scales of 32-value group g (q4_0 scales have either sign);
  // the weights: pd over the span's largest |pd| for query head h and group g, rounded to 16-bit
  // integers (slot pairs, |w| <= 32767): each term keeps 16 bits against the span's largest,
  // however small the span's weights are against the running maximum. One scale per span lets
  // the integer sums run over all its tiles (at most 64 * 32767 * 127 < 2^31).
  constexpr float kLevels = 32767.0f;
  __m512 pd[kSpanTiles][G][2];
  __m512 mx[G][2];
  __m512 d[kSpanTiles][2];  // tile i's V scales of each 32-value group, once for every query head
  for (int i = 0; i < n; ++i) {
    const uint8_t* scales = W.vt[i] + kKvTile * kCodeBytes<V4>;
    // the scales outside `valid` may be anything: masked like p
    d[i][0] = _mm512_maskz_mov_ps(W.valid[i], f16x16(scales));
    d[i][1] = _mm512_maskz_mov_ps(W.valid[i], f16x16(scales + 32));
  }
  for (int h = 0; h < G; ++h) {
    __m512 smax = W.sc[0][h];
    for (int i = 1; i < n; ++i) smax = _mm512_max_ps(smax, W.sc[i][h]);
    const float m_new = std::max(m[h], _mm512_reduce_max_ps(smax));
    // 0 on the first span (m = -inf); exactly 1 while the maximum stays.
    const float cs = m_new > m[h]
                         ? (m[h] == -std::numeric_limits<float>::infinity() ? 0.0f : std::exp(m[h] - m_new))
                         : 1.0f;
    m[h] = m_new;
    const __m512 mv = _mm512_set1_ps(m_new), csv = _mm512_set1_ps(cs);
    __m512 sum = _mm512_mul_ps(_mm512_loadu_ps(s + 16 * h), csv);
    for (int i = 0; i < n; ++i) {
      const __m512 p = _mm512_maskz_mov_ps(W.valid[i], exp_nonpositive(_mm512_sub_ps(W.sc[i][h], mv)));
      sum = _mm512_add_ps(sum, p);
      pd[i][h][0] = _mm512_mul_ps(p, d[i][0]);
      pd[i][h][1] = _mm512_mul_ps(p, d[i][1]);
      for (int g = 0; g < 2; ++g) {
        const __m512 a = _mm512_abs_ps(pd[i][h][g]);
        mx[h][g] = i == 0 ? a : _mm512_max_ps(mx[h][g], a);
      }
    }
    _mm512_storeu_ps(s + 16 * h, sum);
    if (cs != 1.0f)
      for (int c = 0; c < kHd / 16; ++c)
        _mm512_storeu_ps(acc[h] + 16 * c, _mm512_mul_ps(_mm512_loadu_ps(acc[h] + 16 * c), csv));
  }
  for (int h = 0; h < G; ++h)
    for (int g = 0; g < 2; ++g) {
      const float wmax = _mm512_reduce_max_ps(mx[h][g]);
      const __m512 to_int = _mm512_set1_ps(wmax > 0 ? kLevels / wmax : 0.0f);
      W.back[h][g] = wmax / kLevels;
      for (int i = 0; i < n; ++i) {
        const __m512i pn = _mm512_cvtps_epi32(_mm512_mul_ps(pd[i][h][g], to_int));
        _mm256_store_si256(reinterpret_cast<__m256i*>(W.w[i][h][g]), _mm512_cvtsepi32_epi16(pn));
      }
    }
}

// Step 3: acc[h][0..64) += the span's weights times V (tile-heads W.vt, q4_0 when Q4 else q8_0).
template <int G, bool Q4, bool kL1>
[[gnu::always_inline]] inline void span_values(const SpanWork<G>& W, float* const* acc) {
  constexpr int kLines = int(kTileHeadBytes<Q4> / 64);
  __m512i ia[G][4];  // [query head][16-dim chunk]
  for (int h = 0; h < G; ++h)
    for (int c = 0; c < 4; ++c) ia[h][c] = _mm512_setzero_si512();
  for (int i = 0; i < W.n; ++i) {
    const int32_t(*w)[2][8] = W.w[i];
    const uint8_t* v0 = W.vt[i];
    const uint8_t* ahead = W.va[i];
    int line = 0;
    // This tile's sums, added to the span's after it: GCC keeps the accumulators of a fully
    // unrolled tile in registers, but not ones that live across the tile loop (it loaded and
    // stored each of ia around every vpdpwssd: ~15% of the kernel's time in L2).
    __m512i ti[G][4];
    for (int h = 0; h < G; ++h)
      for (int c = 0; c < 4; ++c) ti[h][c] = _mm512_setzero_si512();
    if constexpr (Q4) {
      const __m512i eight = _mm512_set1_epi16(8);
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j)
        for (int g = 0; g < 2; ++g) {
          __m512i lo, hi;  // chunks 2 g and 2 g + 1 of slots 2 j, 2 j + 1, as values -8..7
          nibbles16(v0 + 64 * j + 32 * g, &lo, &hi);
          prefetch_line<kL1>(ahead + 64 * line++);
          lo = _mm512_sub_epi16(lo, eight);
          hi = _mm512_sub_epi16(hi, eight);
          for (int h = 0; h < G; ++h) {
            dot_pairs(ti[h][2 * g], lo, &w[h][g][j]);
            dot_pairs(ti[h][2 * g + 1], hi, &w[h][g][j]);
          }
        }
    } else {
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) {
        __m512i v[4];
        for (int c = 0; c < 4; ++c) {
          v[c] = codes16(v0 + 128 * j + 32 * c);  // dims 16 c.. of slots 2 j, 2 j + 1
          if ((c & 1) == 0) prefetch_line<kL1>(ahead + 64 * line++);
        }
        // One broadcast of a weight pair serves both 16-dim chunks of its group: every broadcast
        // is a vector load, and with an embedded broadcast per vpdpwssd the step was bound by the
        // two vector loads a cycle (Zen 5: 8 widening loads and 24 embedded-broadcast vpdpwssd
        // take ~15 cycles against ~12 with the weights in registers, BM_issue_rate/7-8).
        // BM_paged_attention_group3/2048/3 (in L2) 10.0-10.2 -> 9.4-9.6 us on the Zen 5 VM in
        // its faster phase (no difference in its slower one); the engine's attention at context
        // 2000, 0.91 -> 0.87 ms per step (medians of six alternations, `kvserve bench --phases`).
        // Inline asm, as dot_pairs, so that GCC does not turn the just-stored pair into shuffles.
        for (int h = 0; h < G; ++h)
          for (int g = 0; g < 2; ++g) {
            __m512i bc;
            asm("vpbroadcastd %1, %0" : "=v"(bc) : "m"(w[h][g][j]));
            ti[h][2 * g] = _mm512_dpwssd_epi32(ti[h][2 * g], v[2 * g], bc);
            ti[h][2 * g + 1] = _mm512_dpwssd_epi32(ti[h][2 * g + 1], v[2 * g + 1], bc);
          }
      }
    }
    for (int h = 0; h < G; ++h)
      for (int c = 0; c < 4; ++c) ia[h][c] = _mm512_add_epi32(ia[h][c], ti[h][c]);
    for (; line < kLines; ++line) prefetch_line<kL1>(ahead + 64 * line);
  }
  for (int h = 0; h < G; ++h)
    for (int c = 0; c < 4; ++c) {
      float* a = acc[h] + 16 * c;
      const __m512 back = _mm512_set1_ps(W.back[h][c / 2]);
      _mm512_storeu_ps(a, _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia[h][c]), back, _mm512_loadu_ps(a)));
    }
}

// Hints the K and V of tile t (when it exists) of the call's heads [kv_head0, kv_head0 + nheads):
// the first span's, before any work. (Hinting every head's, as it once did, issued 3x the
// prefetches where a call takes one KV head of smollm's three, as batch 1 does below 4 chunks.)
template <bool K4, bool V4, bool kL1>
void hint_tile(const PagedKvView& kv, int64_t t, int64_t last, int kv_head0, int nheads) {
  if (t > last) return;
  // a tile's tile-heads lie head after head
  const uint8_t* k = kv.k0 + tile_offset<K4>(kv, t, kv_head0);
  const uint8_t* v = kv.v0 + tile_offset<V4>(kv, t, kv_head0);
  for (size_t o = 0; o < size_t(nheads) * kTileHeadBytes<K4>; o += 64) prefetch_line<kL1>(k + o);
  for (size_t o = 0; o < size_t(nheads) * kTileHeadBytes<V4>; o += 64) prefetch_line<kL1>(v + o);
}

// The query subgroup [g0, g0 + G) of every head over [begin, end), item by item: an item is one
// (span, KV head), in span order, each span's heads in turn (its tiles stay in L1 for the other
// heads). Pipelined: item k's scores are computed before item k - 1's V, between that item's
// softmax and its V. The softmax is a chain of dependent steps (horizontal maxima, exponentials,
// the weights' maxima and rounding) with little work beside it; in program order item k's K
// products, independent of it, now sit next to it where the core runs both at once, where before
// the chain ran with only the V work it gates in reach. Every item's arithmetic is as before, in
// the same order per head: results are bit-identical. On the Zen 5 VM (pinned, min of 8, three
// rounds alternating with the unpipelined build): BM_paged_attention_group3/2048/3 (in L2)
// 9.2-9.5 -> 8.3-8.5 us, BM_decode_step_partials/2048/3/1 (L3) 1,182-1,190 -> 1,075-1,150 us;
// from memory (BM_decode_step_cold_range) no change. Batch 8 at context 512, attention per
// step 1.71-1.85 -> 1.66-1.74 ms (docs/benchmarks.md, "The pipelined tiled kernel").
template <int G, bool K4, bool V4, bool kL1>
void attend_pipelined(const PagedKvView& kv, int64_t begin, int64_t end, int kv_head0, int nheads, int group,
                      int g0, float scale, const QueryCodes<K4>* pqs, float* sums, float* partials,
                      int64_t hint_last) {
  const size_t pf = attention_partial_floats(group, kHd);
  const int64_t first = begin / kKvTile, last = (end - 1) / kKvTile;
  const int64_t spans = (last - first) / kSpanTiles + 1;
  const int64_t items = spans * nheads;
  SpanWork<G> work[2];
  auto scores = [&](int64_t k, SpanWork<G>& W) {
    const int64_t t0 = first + (k / nheads) * kSpanTiles;
    const int h = int(k % nheads);
    const int n = int(std::min<int64_t>(kSpanTiles, last + 1 - t0));
    span_scores<G, K4, V4, kL1>(kv, kv_head0 + h, t0, n, begin, end, hint_last, g0 == 0,
                                &pqs[size_t(h) * size_t(group) + size_t(g0)], scale, W);
  };
  scores(0, work[0]);
  for (int64_t k = 0; k < items; ++k) {
    SpanWork<G>& W = work[k & 1];
    const int h = int(k % nheads);
    float* part = partials + size_t(h) * pf;
    float* acc[G];
    for (int g = 0; g < G; ++g) acc[g] = part + 2 * group + size_t(g0 + g) * kHd;
    span_softmax<G, V4>(W, part + g0, &sums[(size_t(h) * size_t(group) + size_t(g0)) * 16], acc);
    if (k + 1 < items) scores(k + 1, work[(k + 1) & 1]);
    span_values<G, V4, kL1>(W, acc);
  }
}

// One range [begin, end) of attend_tiled (at most one attention chunk's, or the whole call's):
// its states from scratch into partials ([nheads][pf]), with the queries already rounded (pq).
template <bool K4, bool V4, bool kL1>
void attend_tiled_range(const PagedKvView& kv, int64_t begin, int64_t end, int kv_head0, int nheads,
                        int group, float scale, const QueryCodes<K4>* pqs, std::vector<float>& sums,
                        float* partials, int64_t hint_last) {
  const size_t pf = attention_partial_floats(group, kHd);
  sums.assign(size_t(nheads) * size_t(group) * 16, 0.0f);
  reset_partials(partials, nheads, group, kHd);
  for (int g0 = 0; g0 < group; g0 += kMaxG)
    with_subgroup_size(std::min(kMaxG, group - g0), [&](auto g) {
      attend_pipelined<decltype(g)::value, K4, V4, kL1>(kv, begin, end, kv_head0, nheads, group, g0, scale,
                                                        pqs, sums.data(), partials, hint_last);
    });
  for (int h = 0; h < nheads; ++h)
    for (int g = 0; g < group; ++g)
      partials[size_t(h) * pf + size_t(group) + size_t(g)] =
          _mm512_reduce_add_ps(_mm512_loadu_ps(&sums[(size_t(h) * size_t(group) + size_t(g)) * 16]));
}

// The states of [begin, end) into partials ([nheads][pf]), or with `chunked` those of each of its
// attention chunks into partials + c * nheads * pf: the queries rounded once, the start hinted
// once, and each chunk's last span hinting the next chunk's first tiles (hint_last spans them all).
template <bool K4, bool V4, bool kL1>
void attend_tiled(const PagedKvView& kv, int64_t begin, int64_t end, int kv_head0, int nheads, const float* q,
                  int group, float scale, float* partials, int64_t hint_end, bool chunked) {
  // Per (head, query head): the rounded query and the lane-wise sums; m and acc live in partials.
  thread_local std::vector<QueryCodes<K4>> pq;
  thread_local std::vector<float> sums;
  pq.resize(size_t(nheads) * size_t(group));
  for (int h = 0; h < nheads; ++h)
    for (int g = 0; g < group; ++g)
      round_query(q + (size_t(h) * size_t(group) + size_t(g)) * kHd,
                  &pq[size_t(h) * size_t(group) + size_t(g)]);
  // The last tile the span passes may hint: this call's, or the following positions' the caller
  // reads next on this thread (so that chunk does not start cold).
  const int64_t hint_last = (std::max(end, hint_end) - 1) / kKvTile;
  {
    const int64_t first = begin / kKvTile, last = (end - 1) / kKvTile;
    for (int64_t t = first; t < first + kSpanTiles; ++t)
      hint_tile<K4, V4, kL1>(kv, t, last, kv_head0, nheads);
  }
  for_each_state_range(begin, end, chunked, nheads, group, kHd, partials,
                       [&](int64_t cb, int64_t ce, float* st) {
                         attend_tiled_range<K4, V4, kL1>(kv, cb, ce, kv_head0, nheads, group, scale,
                                                         pq.data(), sums, st, hint_last);
                       });
}

}  // namespace

bool attention_tiled_heads_avx512(const PagedKvView& kv, int64_t begin, int64_t end, int kv_head0, int nheads,
                                  const float* q, int group, float scale, float* out, int64_t hint_end,
                                  bool chunked) {
  return run_tiled_kernel<kTileHeadBytes<false>, kTileHeadBytes<true>>(kv, [&](auto k4, auto v4, auto l1) {
    attend_tiled<decltype(k4)::value, decltype(v4)::value, decltype(l1)::value>(
        kv, begin, end, kv_head0, nheads, q, group, scale, out, hint_end, chunked);
  });
}

}  // namespace kvserve::detail
