// attention_partial_heads over tiled q8_0 / q4_0 K and V planes (kernels/kv_tiles.h) on AVX2: the
// tiled AVX-512 kernel's design (attention_tiled_avx512.cpp) for CPUs without AVX-512.
//
// Why (AMD EPYC Zen 3 VM, 2026-12-07, docs/benchmarks.md "AVX2 on a Zen 3 VM"): the AVX2 row
// kernel (attention_avx2.cpp) spends ~9-10 ns per (position, query head) in cache at group 3, a
// third of a batch-8 decode step at context 512; per position it gathers each row's codes and
// scales and reduces every dot product across lanes. In a tile the 16 positions lie in the lanes:
//   scores, q8_0 K: per quad of dims, 16 bytes of the tile's K codes (4 slots x 4 dims, stored
//     + 128, so unsigned) are zero-extended to 16 bits and vpmaddwd'ed with the query's 4 codes of
//     that quad (16-bit, attention_round_query's rounding, as the row kernel's: one 64-bit
//     broadcast per query head and quad serves 8 slots); each slot gets two int32 lanes (dims 4i,
//     4i+1 and 4i+2, 4i+3) summed over a 32-value group, one vphaddd per 8 slots and group gives
//     its exact sums (which leaves the slots in lane order 0 1 4 5 2 3 6 7: the K scales are
//     permuted to match and the scores put back with one vpermps per 8 slots and query head);
//     q4_0 K: per pair of code bytes, 8 slots' 16 bytes zero-extended hold two dim pairs in their
//     nibbles, one vpmaddwd each against the query's pair (half_scores_q4), one lane per slot; the
//     sums start at minus the codes' offset (128, 8) times the group's query codes' sum;
//   V: e^(score - m) times the slot's V scale over the span's largest such product, rounded to 16
//     bits (as the AVX-512 kernel), then per pair of slots and 8 dims one vpmaddwd per query head
//     against that weight pair (q8_0: 16 code bytes sign-extended; q4_0: 16 code bytes
//     zero-extended give two such chunks in their nibbles, less 8), exact in int32 over a
//     64-position span (64 * 32767 * 128 < 2^31); the span's sums take its scale once, in f32.
// The V weights' rounding moves each term by at most 2^-16 of the span's largest term's weight;
// the scores are exactly those of the 16-bit rounded query (attention_rounds_query), as on the
// AVX2 row path. Head_dim 64 only; other tiled views return false and the caller gathers rows.
//
// Per 64-position span (4 tiles) every KV head in turn (its tiles stay in L1 for the other heads);
// query heads in subgroups of up to 4, each a walk of its own over the range. Each tile's K loops
// hint the same head's K and V tiles one span ahead, one line per step (attention_l1_hints()
// picks L1 or L2, as for the other wide paths).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/attention_impl.h"
#include "kernels/kv_tiles.h"
#include "kernels/simd_avx2.h"
#include "util/status.h"

namespace kvserve::detail {

namespace {

constexpr int kHd = kKvTiledKernelHeadDim;            // the head dim this kernel handles (64)
constexpr int kSpanTiles = 4;                         // tiles per softmax update
constexpr int kMaxG = 4;                              // query heads per pass
// A tile-head's code bytes, its bytes with the f16 scales, and its cache lines, by plane type
// (Q4: q4_0, else q8_0): 1024 / 1088 / 17 and 512 / 576 / 9.
template <bool Q4>
constexpr size_t kCodeBytes = size_t(kKvTile) * (Q4 ? kHd / 2 : kHd);
template <bool Q4>
constexpr size_t kTileHeadBytes = kCodeBytes<Q4> + size_t(kKvTile) * 2 * (kHd / 32);
template <bool Q4>
constexpr int kTileLines = int(kTileHeadBytes<Q4> / 64);

// One query head rounded to 16-bit codes per 32-value group (attention_round_query, code_max
// 32767), the group scales, and per group minus the K codes' offset times the group's codes' sum
// (the start of the integer sums: q8_0 K codes are stored + 128, q4_0 ones carry their + 8).
struct alignas(32) Query16 {
  int16_t c[kHd];
  float d[kHd / 32];
  int32_t bias[kHd / 32];
};

// 8 int32 lanes to 8 int16 values in lane order, then the next 8: packs works per 128-bit half,
// 0xD8 puts the halves back in order.
inline __m256i pack16(__m256i lo, __m256i hi) {
  return _mm256_permute4x64_epi64(_mm256_packs_epi32(lo, hi), 0xD8);
}

void round_query(const float* q, int k_offset, Query16* out) {
  for (int g = 0; g < kHd / 32; ++g) {
    out->d[g] = avx2::round_codes16(q + 32 * g, out->c + 32 * g) / 32767.0f;
    const __m256i* c = reinterpret_cast<const __m256i*>(out->c + 32 * g);
    const __m256i ones = _mm256_set1_epi16(1);
    out->bias[g] = -k_offset *
                   avx2::hsum(_mm256_add_epi32(_mm256_madd_epi16(c[0], ones), _mm256_madd_epi16(c[1], ones)));
  }
}

// Bytes from a plane's block 0 to tile t's tile-head `head`.
template <bool Q4>
inline size_t tile_offset(const PagedKvView& kv, int64_t t, int head) {
  const int tiles_per_block = kv.block_size / kKvTile;
  return size_t(kv.table[size_t(t / tiles_per_block)]) * kv.block_stride +
         (size_t(t % tiles_per_block) * size_t(kv.num_kv_heads) + size_t(head)) * kTileHeadBytes<Q4>;
}

inline __m128i load128(const uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }
inline __m256 f16x8(const uint8_t* p) { return _mm256_cvtph_ps(load128(p)); }

// acc += vpmaddwd(a, b), as one opaque step: with plain intrinsics GCC reassociated a tile's
// integer sums (exact, so it may), computed every product first and kept them on the stack (a
// store and a load per vpmaddwd in the V loop).
inline void madd_acc(__m256i& acc, __m256i a, __m256i b) {
  __m256i t;
  asm("vpmaddwd %3, %2, %1\n\tvpaddd %1, %0, %0" : "+x"(acc), "=&x"(t) : "x"(a), "x"(b));
}

// The lane order vphaddd leaves 8 slots' sums in (slot order[l] in lane l); its own inverse.
inline __m256i hadd_order() { return _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7); }

// The unscaled scores of slots 8 hf .. 8 hf + 7 of K tile-head kt (q8_0) for G query heads, in
// slot order. ahead: a tile-head of kAheadLines lines, hinted one line per quad step while they
// last (never null).
template <int G, bool kL1, int kAheadLines>
[[gnu::always_inline]] inline void half_scores(const uint8_t* kt, int hf, const Query16* pq, __m256* out,
                                               const uint8_t* ahead) {
  const __m256i order = hadd_order();
  __m256 t[G];
  for (int g = 0; g < 2; ++g) {
    __m256i a[G][2];  // [query head][slots 8 hf .. +3, 8 hf + 4 .. +7], two lanes per slot
    for (int h = 0; h < G; ++h) a[h][0] = a[h][1] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) {
      const int quad = 8 * g + i;
      const uint8_t* p = kt + 64 * quad + 32 * hf;
      const __m256i k0 = _mm256_cvtepu8_epi16(load128(p));
      const __m256i k1 = _mm256_cvtepu8_epi16(load128(p + 16));
      if (quad < kAheadLines) prefetch_line<kL1>(ahead + 64 * quad);
      for (int h = 0; h < G; ++h) {
        int64_t four;  // the query's codes of this quad
        std::memcpy(&four, pq[h].c + 4 * quad, sizeof four);
        const __m256i qb = _mm256_set1_epi64x(four);
        madd_acc(a[h][0], k0, qb);
        madd_acc(a[h][1], k1, qb);
      }
    }
    // this half's K scales of group g, in the lane order of the sums below
    const __m256 dk = _mm256_permutevar8x32_ps(f16x8(kt + kCodeBytes<false> + 32 * g + 16 * hf), order);
    for (int h = 0; h < G; ++h) {
      const __m256 s = _mm256_cvtepi32_ps(
          _mm256_add_epi32(_mm256_hadd_epi32(a[h][0], a[h][1]), _mm256_set1_epi32(pq[h].bias[g])));
      const __m256 d = _mm256_mul_ps(dk, _mm256_set1_ps(pq[h].d[g]));
      t[h] = g == 0 ? _mm256_mul_ps(s, d) : _mm256_fmadd_ps(s, d, t[h]);
    }
  }
  for (int h = 0; h < G; ++h) out[h] = _mm256_permutevar8x32_ps(t[h], order);
}

// The same against a q4_0 K tile-head: per pair lane i (code bytes 2i, 2i + 1 of each slot, group
// i / 8), 16 bytes of 8 slots zero-extended to 16 bits give in their low nibbles dims (d, d + 1)
// and in their high ones (d + 16, d + 17), d = 32 (i / 8) + 2 (i % 8), one int32 lane per slot
// after a vpmaddwd with the query's codes of those dims (one 32-bit broadcast per pair): no
// reduction, slots in lane order. The codes' + 8 comes off as the sums' start (Query16::bias).
template <int G, bool kL1, int kAheadLines>
[[gnu::always_inline]] inline void half_scores_q4(const uint8_t* kt, int hf, const Query16* pq, __m256* out,
                                                  const uint8_t* ahead) {
  const __m256i low4 = _mm256_set1_epi16(0x0F);
  __m256 t[G];
  for (int g = 0; g < 2; ++g) {
    __m256i a[G];
    for (int h = 0; h < G; ++h) a[h] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int i8 = 0; i8 < 8; ++i8) {
      const int i = 8 * g + i8;
      const __m256i v = _mm256_cvtepu8_epi16(load128(kt + 32 * i + 16 * hf));
      const __m256i lo = _mm256_and_si256(v, low4), hi = _mm256_srli_epi16(v, 4);
      if (i < kAheadLines) prefetch_line<kL1>(ahead + 64 * i);
      const int d = 32 * g + 2 * i8;
      for (int h = 0; h < G; ++h) {
        int32_t pl, ph;  // the query's codes of dims (d, d + 1) and (d + 16, d + 17)
        std::memcpy(&pl, pq[h].c + d, sizeof pl);
        std::memcpy(&ph, pq[h].c + d + 16, sizeof ph);
        madd_acc(a[h], lo, _mm256_set1_epi32(pl));
        madd_acc(a[h], hi, _mm256_set1_epi32(ph));
      }
    }
    const __m256 dk = f16x8(kt + kCodeBytes<true> + 32 * g + 16 * hf);
    for (int h = 0; h < G; ++h) {
      const __m256 s = _mm256_cvtepi32_ps(_mm256_add_epi32(a[h], _mm256_set1_epi32(pq[h].bias[g])));
      const __m256 d = _mm256_mul_ps(dk, _mm256_set1_ps(pq[h].d[g]));
      t[h] = g == 0 ? _mm256_mul_ps(s, d) : _mm256_fmadd_ps(s, d, t[h]);
    }
  }
  for (int h = 0; h < G; ++h) out[h] = t[h];
}

// One (span, KV head, query subgroup) item: its tiles, their scores, then its V weights.
template <int G>
struct SpanWork {
  __m256 sc[kSpanTiles][2][G];  // [tile][half][query head] scaled scores, -inf outside valid
  __m256 valid[kSpanTiles][2];  // all-ones lanes for the positions of [begin, end)
  // V weights, [tile][query head][32-value group][slot pair]: p * d over the span's largest
  // |p * d| for (head, group), rounded to 16-bit integers (pairs of slots per int32).
  alignas(32) int32_t w[kSpanTiles][G][2][8];
  float back[G][2];  // that largest over 32767: the span's integer sums times this
  const uint8_t* vt[kSpanTiles];
  const uint8_t* va[kSpanTiles];  // V tile-head to hint while tile i's K is read (never null)
  int n;
};

// The scores of the span's n tiles [t0, t0 + n) (tile t covers positions [16 t, 16 t + 16) of
// which [begin, end) count) for one KV head's subgroup of G query heads.
template <int G, bool K4, bool V4, bool kL1>
[[gnu::always_inline]] inline void span_scores(const PagedKvView& kv, int head, int64_t t0, int n,
                                               int64_t begin, int64_t end, int64_t hint_last, bool hint,
                                               const Query16* pq, float scale, SpanWork<G>& W) {
  const __m256 sv = _mm256_set1_ps(scale), neg_inf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i lo = _mm256_set1_epi32(int32_t(begin) - 1), hi = _mm256_set1_epi32(int32_t(end));
  W.n = n;
  for (int i = 0; i < n; ++i) {
    const int64_t t = t0 + i;
    const uint8_t* kt = kv.k0 + tile_offset<K4>(kv, t, head);
    W.vt[i] = kv.v0 + tile_offset<V4>(kv, t, head);
    const uint8_t* ka = kt;  // nothing to hint: the tile itself
    W.va[i] = W.vt[i];
    if (hint && t + kSpanTiles <= hint_last) {
      ka = kv.k0 + tile_offset<K4>(kv, t + kSpanTiles, head);
      W.va[i] = kv.v0 + tile_offset<V4>(kv, t + kSpanTiles, head);
    }
    // The hints carry no test and sit in the K loops only: the first half's steps hint the K tile
    // one span ahead, the second half's its V tile, then the lines left. (With the V hints in
    // span_values behind a test of the step, GCC cut its loop at every test and kept the
    // accumulators in memory around them.)
    for (int hf = 0; hf < 2; ++hf) {
      const __m256i pos = _mm256_add_epi32(_mm256_set1_epi32(int32_t(16 * t + 8 * hf)), lanes);
      W.valid[i][hf] =
          _mm256_castsi256_ps(_mm256_and_si256(_mm256_cmpgt_epi32(pos, lo), _mm256_cmpgt_epi32(hi, pos)));
      __m256 s[G];
      if constexpr (K4) {
        if (hf == 0)
          half_scores_q4<G, kL1, kTileLines<K4>>(kt, 0, pq, s, ka);
        else
          half_scores_q4<G, kL1, kTileLines<V4>>(kt, 1, pq, s, W.va[i]);
      } else {
        if (hf == 0)
          half_scores<G, kL1, kTileLines<K4>>(kt, 0, pq, s, ka);
        else
          half_scores<G, kL1, kTileLines<V4>>(kt, 1, pq, s, W.va[i]);
      }
      for (int h = 0; h < G; ++h)
        W.sc[i][hf][h] = _mm256_blendv_ps(neg_inf, _mm256_mul_ps(s[h], sv), W.valid[i][hf]);
    }
    // (a half hints 16 lines: only q8_0's 17th, its scales, is left)
    for (int line = 16; line < kTileLines<K4>; ++line) prefetch_line<kL1>(ka + 64 * line);
    for (int line = 16; line < kTileLines<V4>; ++line) prefetch_line<kL1>(W.va[i] + 64 * line);
  }
}

// The online-softmax update of the state (m[G], s[G] lane-wise sums [G][8], acc[G] rows of 64
// floats: rescaled where the maximum grew) and the span's V weights into W.
template <int G, bool V4>
[[gnu::always_inline]] inline void span_softmax(SpanWork<G>& W, float* m, float* s, float* const* acc) {
  const int n = W.n;
  constexpr float kLevels = 32767.0f;
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  __m256 pd[kSpanTiles][2][G][2];  // [tile][half][query head][group] p * d
  __m256 d[kSpanTiles][2][2];      // [tile][half][group] V scales, 0 outside valid (may be junk there)
  for (int i = 0; i < n; ++i)
    for (int hf = 0; hf < 2; ++hf)
      for (int g = 0; g < 2; ++g)
        d[i][hf][g] = _mm256_and_ps(W.valid[i][hf], f16x8(W.vt[i] + kCodeBytes<V4> + 32 * g + 16 * hf));
  __m256 mx[G][2];  // [query head][group] the largest |p * d| (all >= 0)
  for (int h = 0; h < G; ++h) {
    mx[h][0] = mx[h][1] = _mm256_setzero_ps();
    __m256 smax = _mm256_max_ps(W.sc[0][0][h], W.sc[0][1][h]);
    for (int i = 1; i < n; ++i) smax = _mm256_max_ps(smax, _mm256_max_ps(W.sc[i][0][h], W.sc[i][1][h]));
    const float m_new = std::max(m[h], avx2::hmax(smax));
    // 0 on the first span (m = -inf); exactly 1 while the maximum stays.
    const float cs = m_new > m[h]
                         ? (m[h] == -std::numeric_limits<float>::infinity() ? 0.0f : std::exp(m[h] - m_new))
                         : 1.0f;
    m[h] = m_new;
    const __m256 mv = _mm256_set1_ps(m_new), csv = _mm256_set1_ps(cs);
    __m256 sum = _mm256_mul_ps(_mm256_loadu_ps(s + 8 * h), csv);
    for (int i = 0; i < n; ++i)
      for (int hf = 0; hf < 2; ++hf) {
        const __m256 p = _mm256_and_ps(W.valid[i][hf], avx2::exp(_mm256_sub_ps(W.sc[i][hf][h], mv)));
        sum = _mm256_add_ps(sum, p);
        for (int g = 0; g < 2; ++g) {
          pd[i][hf][h][g] = _mm256_mul_ps(p, d[i][hf][g]);
          const __m256 a = _mm256_and_ps(pd[i][hf][h][g], abs_mask);
          mx[h][g] = _mm256_max_ps(mx[h][g], a);
        }
      }
    _mm256_storeu_ps(s + 8 * h, sum);
    if (cs != 1.0f)
      for (int c = 0; c < kHd / 8; ++c)
        _mm256_storeu_ps(acc[h] + 8 * c, _mm256_mul_ps(_mm256_loadu_ps(acc[h] + 8 * c), csv));
  }
  for (int h = 0; h < G; ++h)
    for (int g = 0; g < 2; ++g) {
      const float wmax = avx2::hmax(mx[h][g]);
      const __m256 to_int = _mm256_set1_ps(wmax > 0 ? kLevels / wmax : 0.0f);
      W.back[h][g] = wmax / kLevels;
      for (int i = 0; i < n; ++i) {
        const __m256i w = pack16(_mm256_cvtps_epi32(_mm256_mul_ps(pd[i][0][h][g], to_int)),
                                 _mm256_cvtps_epi32(_mm256_mul_ps(pd[i][1][h][g], to_int)));
        _mm256_store_si256(reinterpret_cast<__m256i*>(W.w[i][h][g]), w);
      }
    }
}

// acc[h][0..64) += the span's weights times V (tile-heads W.vt, q4_0 when V4 else q8_0). Dims in
// passes of NCH chunks of 8 (G x NCH int32 accumulators in registers), all of one 32-value group.
// q8_0: per slot pair and chunk, 16 code bytes (8 dims x 2 slots) sign-extended. q4_0: per slot
// pair, 16 code bytes (code bytes 8 l .. 8 l + 7 of both slots, l = 0..3) zero-extended give two
// chunks, the low nibbles dims 32 (l / 2) + 8 (l % 2) .. + 7 and the high ones those + 16, each
// less 8 (the codes' offset) before the products.
template <bool V4>
constexpr int value_chunk(int c) {  // the dim chunk (of 8) of a pass's accumulator c (q4_0: load c / 2)
  if constexpr (!V4) return c;
  const int l = c / 2;
  return 4 * (l / 2) + l % 2 + 2 * (c % 2);
}
template <int G, bool V4>
[[gnu::always_inline]] inline void span_values(const SpanWork<G>& W, float* const* acc) {
  constexpr int NCH = G <= 2 ? 4 : 2;
  const __m256i low4 = _mm256_set1_epi16(0x0F), eight = _mm256_set1_epi16(8);
  for (int c0 = 0; c0 < kHd / 8; c0 += NCH) {
    const int g = c0 / 4;  // (q4_0: the loads c0 / 2 .., the same group)
    __m256i ia[G][NCH];
    for (int h = 0; h < G; ++h)
      for (int c = 0; c < NCH; ++c) ia[h][c] = _mm256_setzero_si256();
    for (int i = 0; i < W.n; ++i) {
      const uint8_t* v0 = W.vt[i];
      // This tile's sums, added to the span's after it (kept in registers within a tile).
      __m256i ti[G][NCH];
      for (int h = 0; h < G; ++h)
        for (int c = 0; c < NCH; ++c) ti[h][c] = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) {
        __m256i bc[G];
        for (int h = 0; h < G; ++h) bc[h] = _mm256_set1_epi32(W.w[i][h][g][j]);
        if constexpr (V4) {
          for (int c = 0; c < NCH; c += 2) {
            const __m256i v = _mm256_cvtepu8_epi16(load128(v0 + 64 * j + 8 * (c0 + c)));
            const __m256i lo = _mm256_sub_epi16(_mm256_and_si256(v, low4), eight);
            const __m256i hi = _mm256_sub_epi16(_mm256_srli_epi16(v, 4), eight);
            for (int h = 0; h < G; ++h) {
              madd_acc(ti[h][c], lo, bc[h]);
              madd_acc(ti[h][c + 1], hi, bc[h]);
            }
          }
        } else {
          for (int c = 0; c < NCH; ++c) {
            const __m256i v = _mm256_cvtepi8_epi16(load128(v0 + 128 * j + 16 * (c0 + c)));
            for (int h = 0; h < G; ++h) madd_acc(ti[h][c], v, bc[h]);
          }
        }
      }
      for (int h = 0; h < G; ++h)
        for (int c = 0; c < NCH; ++c) ia[h][c] = _mm256_add_epi32(ia[h][c], ti[h][c]);
    }
    for (int h = 0; h < G; ++h)
      for (int c = 0; c < NCH; ++c) {
        float* a = acc[h] + 8 * value_chunk<V4>(c0 + c);
        _mm256_storeu_ps(a, _mm256_fmadd_ps(_mm256_cvtepi32_ps(ia[h][c]), _mm256_set1_ps(W.back[h][g]),
                                            _mm256_loadu_ps(a)));
      }
  }
}

// Hints the K and V of tile t (when it exists) of the heads [kv_head0, kv_head0 + nheads): the
// first span's, before any work.
template <bool K4, bool V4, bool kL1>
void hint_tile(const PagedKvView& kv, int64_t t, int64_t last, int kv_head0, int nheads) {
  if (t > last) return;
  const uint8_t* k = kv.k0 + tile_offset<K4>(kv, t, kv_head0);  // a tile's tile-heads lie head after head
  const uint8_t* v = kv.v0 + tile_offset<V4>(kv, t, kv_head0);
  for (size_t o = 0; o < size_t(nheads) * kTileHeadBytes<K4>; o += 64) prefetch_line<kL1>(k + o);
  for (size_t o = 0; o < size_t(nheads) * kTileHeadBytes<V4>; o += 64) prefetch_line<kL1>(v + o);
}

// The query subgroup [g0, g0 + G) of every head over [begin, end): per span every head in turn.
template <int G, bool K4, bool V4, bool kL1>
void attend_subgroup(const PagedKvView& kv, int64_t begin, int64_t end, int kv_head0, int nheads, int group,
                     int g0, float scale, const Query16* pqs, float* sums, float* partials,
                     int64_t hint_last) {
  const size_t pf = attention_partial_floats(group, kHd);
  const int64_t first = begin / kKvTile, last = (end - 1) / kKvTile;
  SpanWork<G> W;
  for (int64_t t0 = first; t0 <= last; t0 += kSpanTiles) {
    const int n = int(std::min<int64_t>(kSpanTiles, last + 1 - t0));
    for (int h = 0; h < nheads; ++h) {
      float* part = partials + size_t(h) * pf;
      float* acc[G];
      for (int g = 0; g < G; ++g) acc[g] = part + 2 * group + size_t(g0 + g) * kHd;
      span_scores<G, K4, V4, kL1>(kv, kv_head0 + h, t0, n, begin, end, hint_last, g0 == 0,
                                  &pqs[size_t(h) * size_t(group) + size_t(g0)], scale, W);
      span_softmax<G, V4>(W, part + g0, &sums[(size_t(h) * size_t(group) + size_t(g0)) * 8], acc);
      span_values<G, V4>(W, acc);
    }
  }
}

// One range [begin, end): its states from scratch into partials ([nheads][pf]).
template <bool K4, bool V4, bool kL1>
void attend_range(const PagedKvView& kv, int64_t begin, int64_t end, int kv_head0, int nheads, int group,
                  float scale, const Query16* pqs, std::vector<float>& sums, float* partials,
                  int64_t hint_last) {
  const size_t pf = attention_partial_floats(group, kHd);
  sums.assign(size_t(nheads) * size_t(group) * 8, 0.0f);
  reset_partials(partials, nheads, group, kHd);
  for (int g0 = 0; g0 < group; g0 += kMaxG)
    with_subgroup_size(std::min(kMaxG, group - g0), [&](auto g) {
      attend_subgroup<decltype(g)::value, K4, V4, kL1>(kv, begin, end, kv_head0, nheads, group, g0, scale,
                                                       pqs, sums.data(), partials, hint_last);
    });
  for (int h = 0; h < nheads; ++h)
    for (int g = 0; g < group; ++g)
      partials[size_t(h) * pf + size_t(group) + size_t(g)] =
          avx2::hsum(_mm256_loadu_ps(&sums[(size_t(h) * size_t(group) + size_t(g)) * 8]));
}

// The states of [begin, end) into partials, or with `chunked` those of each of its attention
// chunks into partials + c * nheads * pf: the queries rounded once, the start hinted once.
template <bool K4, bool V4, bool kL1>
void attend_tiled(const PagedKvView& kv, int64_t begin, int64_t end, int kv_head0, int nheads, const float* q,
                  int group, float scale, float* partials, int64_t hint_end, bool chunked) {
  thread_local std::vector<Query16> pq;
  thread_local std::vector<float> sums;
  pq.resize(size_t(nheads) * size_t(group));
  for (size_t i = 0; i < pq.size(); ++i) round_query(q + i * kHd, K4 ? 8 : 128, &pq[i]);
  // The last tile a span may hint: this call's, or the following positions' this thread reads next.
  const int64_t hint_last = (std::max(end, hint_end) - 1) / kKvTile;
  {
    const int64_t first = begin / kKvTile, last = (end - 1) / kKvTile;
    for (int64_t t = first; t < first + kSpanTiles; ++t)
      hint_tile<K4, V4, kL1>(kv, t, last, kv_head0, nheads);
  }
  for_each_state_range(
      begin, end, chunked, nheads, group, kHd, partials, [&](int64_t cb, int64_t ce, float* st) {
        attend_range<K4, V4, kL1>(kv, cb, ce, kv_head0, nheads, group, scale, pq.data(), sums, st, hint_last);
      });
}

}  // namespace

bool attention_tiled_heads_avx2(const PagedKvView& kv, int64_t begin, int64_t end, int kv_head0, int nheads,
                                const float* q, int group, float scale, float* out, int64_t hint_end,
                                bool chunked) {
  return run_tiled_kernel<kTileHeadBytes<false>, kTileHeadBytes<true>>(kv, [&](auto k4, auto v4, auto l1) {
    attend_tiled<decltype(k4)::value, decltype(v4)::value, decltype(l1)::value>(
        kv, begin, end, kv_head0, nheads, q, group, scale, out, hint_end, chunked);
  });
}

}  // namespace kvserve::detail
