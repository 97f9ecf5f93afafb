// AVX-512 (F + BW + VL + VNNI) kernels: register-blocked GEMM tiles and the single-row dot products
// of the formats that prefill and decode spend their time in (Q8_0, Q4_0, Q5_0 weights against
// q8_0 activations; Q4_K, Q6_K against q8_K). Compiled with -mavx512* flags (CMakeLists.txt); only reached
// through the "avx512" table, which dispatch.cpp selects only when cpuid reports every flag used here. Also:
// the decode-sized (1 to 3 activation rows) paths with more weight rows per pass and prefetch
// (legacy_rows_small, the kPrefetch tiles), and the q8_0 / q8_K activation quantizers
// (KernelTable::quantize_act) at the end of the file.
//
// This file must not call any non-static inline function or template from a shared header
// (util/half.h, tensor/block_formats.h, <algorithm>, ...): the linker keeps one copy of each such
// function for the whole program, and the copy compiled here would hold AVX-512 instructions that
// an AVX2-only CPU cannot run. Everything below is in an anonymous namespace (this file's or that
// of an internal header such as q8_0_block_avx512.h) or an intrinsic.
//
// Arithmetic (the same for every tile shape, which is what makes a row's result independent of
// its batch-mates): blocks are taken in pairs, 64 elements = one zmm of bytes, block 2p in bytes
// 0..31 and block 2p+1 in bytes 32..63 (an odd last block pairs with zero activations).
//   - weight codes are made unsigned: q + K with K = 128 (q8_0), 8 (q4_0), 16 (q5_0), i.e. the
//     stored nibble / byte xor 0x80;
//   - vpdpbusd(u8 weight codes, s8 activations) gives 16 int32 lanes, lane l = sum of the 4
//     products of elements 4l..4l+3; it starts from -K * (sum of those 4 activations), so each lane
//     is the exact signed integer dot product of its 4 elements;
//   - acc += (dw * dx) * float(lanes) by one vfmadd per pair, lanes 0..7 scaled by block 2p's
//     scales and 8..15 by block 2p+1's; the output is the fixed-order horizontal sum of acc.
// The int32 lanes are exact, so this differs from the scalar reference only in the order of f32
// additions (tests bound it). The tiles differ only in how many weight rows (RW) and activation
// rows (RX) share the loads of one pass, never in the operations applied to one output.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/q8_0_block_avx512.h"
#include "kernels/vec_dot.h"
#include "tensor/block_formats.h"

namespace kvserve {

namespace {

inline __m512i load_pair(const void* a, const void* b) {
  const __m256i lo = _mm256_loadu_si256(static_cast<const __m256i*>(a));
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), _mm256_loadu_si256(static_cast<const __m256i*>(b)), 1);
}

// 16 floats: lanes 0..7 = f16 a, lanes 8..15 = f16 b. The two halves are joined in a scalar
// register (the scalar ports are idle here) and spread by one word permute.
inline __m512 scale_pair(uint16_t a, uint16_t b) {
  const __m256i both = _mm256_castsi128_si256(_mm_cvtsi32_si128(int(uint32_t(a) | (uint32_t(b) << 16))));
  const __m256i idx = _mm256_setr_epi16(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  return _mm512_cvtph_ps(_mm256_permutexvar_epi16(idx, both));
}

// Two 16-byte nibble arrays (block a's, block b's) -> 64 bytes in element order:
// [a low nibbles, a high nibbles, b low nibbles, b high nibbles] (the q4_0 / q5_0 layout).
inline __m512i nibbles_pair(const uint8_t* a, const uint8_t* b) {
  const __m256i v = _mm256_inserti128_si256(
      _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a))),
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(b)), 1);
  const __m512i dup = _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 1, 0, 1, 2, 3, 2, 3), _mm512_castsi256_si512(v));
  const __m512i shifted = _mm512_srlv_epi64(dup, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4));
  return _mm512_and_si512(shifted, _mm512_set1_epi8(0x0F));
}

inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// ---- weight formats: unsigned codes of a block pair, their offset K, and the scale field ----

struct Q8_0Format {
  using Block = BlockQ8_0;
  static constexpr int kOffset = 128;
  static __m512i codes(const Block& a, const Block& b) {
    return _mm512_xor_si512(load_pair(a.qs, b.qs), _mm512_set1_epi8(char(0x80)));
  }
};

struct Q4_0Format {
  using Block = BlockQ4_0;
  static constexpr int kOffset = 8;
  static __m512i codes(const Block& a, const Block& b) { return nibbles_pair(a.qs, b.qs); }
};

struct Q5_0Format {
  using Block = BlockQ5_0;
  static constexpr int kOffset = 16;
  static __m512i codes(const Block& a, const Block& b) {
    const __m512i low = nibbles_pair(a.qs, b.qs);
    // Bit j of qh is the fifth bit of element j: exactly a byte mask over the 64 lanes.
    const __mmask64 high = _cvtu64_mask64(uint64_t(load_u32(a.qh)) | (uint64_t(load_u32(b.qh)) << 32));
    return _mm512_mask_add_epi8(low, high, low, _mm512_set1_epi8(16));
  }
};

// One activation block pair as the tiles use it.
struct ActPair {
  __m512i q;     // 64 int8 codes (upper 32 zero for a lone last block)
  __m512 d;      // dx of block 2p in lanes 0..7, of block 2p+1 in 8..15 (0 for a lone block)
  __m512i negc;  // -K * (sum of each 4 codes): the start value that undoes the weight offset
};

template <int K>
inline ActPair load_act(const BlockQ8_0* x, bool two) {
  ActPair p;
  const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[0].qs));
  if (two) {
    p.q = _mm512_inserti64x4(_mm512_castsi256_si512(lo), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[1].qs)), 1);
    p.d = scale_pair(x[0].d, x[1].d);
  } else {
    p.q = _mm512_inserti64x4(_mm512_setzero_si512(), lo, 0);
    p.d = scale_pair(x[0].d, 0);
  }
  // Activations never hold -128, so negating them is exact.
  const __m512i neg = _mm512_sub_epi8(_mm512_setzero_si512(), p.q);
  p.negc = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(char(K)), neg);
  return p;
}

// Software prefetch of bytes [p, p + len) into L1, one hint per cache line (len is a compile-time
// constant at every call site, so the loop unrolls). The small-batch paths read each weight byte
// once and do little arithmetic on it, so they would otherwise wait on memory; they hint the rows
// of the next tile while working on this one.
template <size_t kLen>
inline void prefetch_span(const uint8_t* p) {
  for (size_t off = 0; off < kLen; off += 64) _mm_prefetch(reinterpret_cast<const char*>(p + off), _MM_HINT_T0);
  _mm_prefetch(reinterpret_cast<const char*>(p + kLen - 1), _MM_HINT_T0);
}

inline float reduce(__m512 v) {
  // Fixed order: 512 -> 256 -> 128 -> scalar.
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}


// ---- k-quants (Q4_K, Q6_K) against q8_K ----
//
// Per 256-element super-block and (weight row, activation row): four 64-element chunks, each
// vpmaddubsw(unsigned codes, s8 activations) -> 32 int16 pair sums (exact: codes <= 63), then
// vpdpwssd with the sub-block scales (int16, one per pair) into 16 int32 lanes that start from the
// offset correction; acc += (dw * dx) * float(lanes), and for Q4_K also
// acc -= (dminw * dx) * float(min lanes). Lane assignment and f32 operations are the same for every
// tile shape, as in the legacy kernels.

// Scale words for chunk c of a sub-block size of 16 (Q6_K: words 8s..8s+7 = sc[4c + s]) built
// from the 16 scales as int16 in a ymm.
inline __m512i spread16(__m256i sc16, int c) {
  const __m512i idx = _mm512_add_epi16(
      _mm512_set1_epi16(short(4 * c)),
      _mm512_set_epi16(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0));
  return _mm512_permutexvar_epi16(idx, _mm512_castsi256_si512(sc16));
}

// Q4_K scale words for chunk c (sub-blocks 2c, 2c + 1 of 32): words 0..15 = sc[2c], 16..31 = sc[2c+1].
inline __m512i spread32(__m256i sc16, int c) {
  const __m512i idx = _mm512_add_epi16(
      _mm512_set1_epi16(short(2 * c)),
      _mm512_set_epi16(1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0));
  return _mm512_permutexvar_epi16(idx, _mm512_castsi256_si512(sc16));
}

inline __m512i load512(const void* p) { return _mm512_loadu_si512(p); }

// One decoded Q6_K / Q4_K super-block of a weight row.
struct KWeights {
  __m512i codes[4];  // unsigned codes of elements 64c .. 64c + 63
  __m512i sc[4];     // int16 scale per pair of chunk c
  __m256i corr;      // int16 words multiplied with the activation bsums (offset / min term)
  float d, dmin;
};

inline float f16_scalar(uint16_t h) { return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h))); }

struct Q6_KFormat {
  using Block = BlockQ6_K;
  static constexpr bool kHasMin = false;
  static void decode(const Block& b, KWeights* o) {
    const __m512i low4 = _mm512_set1_epi8(0x0F), bits45 = _mm512_set1_epi8(0x30);
    for (int h = 0; h < 2; ++h) {
      const __m512i ql = load512(b.ql + 64 * h);
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh + 32 * h));
      // [qh, qh >> 2]: bits 0-1 (elements l) and 2-3 (elements 32 + l) of each byte at bits 0-1.
      const __m512i qz = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
      const __m512i hi_a = _mm512_and_si512(_mm512_slli_epi16(qz, 4), bits45);
      const __m512i hi_b = _mm512_and_si512(qz, bits45);
      o->codes[2 * h] = _mm512_or_si512(_mm512_and_si512(ql, low4), hi_a);
      o->codes[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low4), hi_b);
    }
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)));
    for (int c = 0; c < 4; ++c) o->sc[c] = spread16(sc16, c);
    // Codes are q6 + 32: subtract 32 * sum_j sc_j * bsums_j.
    o->corr = _mm256_mullo_epi16(sc16, _mm256_set1_epi16(-32));
    o->d = f16_scalar(b.d);
    o->dmin = 0.0f;
  }
};

struct Q4_KFormat {
  using Block = BlockQ4_K;
  static constexpr bool kHasMin = true;
  static void decode(const Block& b, KWeights* o) {
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    for (int c = 0; c < 4; ++c) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * c));
      const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 4), 1);
      o->codes[c] = _mm512_and_si512(both, low4);
    }
    // 6-bit scales and mins (the layout of unpack_scale_min_k4 in block_formats.h, kept local: see
    // the file comment), unpacked four at a time in 32-bit words u0 = bytes 0..3, u1 = 4..7,
    // u2 = 8..11: sc[0..3] = u0 & 63, mn[0..3] = u1 & 63, sc[4..7] = (u2 & 15) | (u0 >> 6) << 4,
    // mn[4..7] = (u2 >> 4) | (u1 >> 6) << 4, byte by byte (the masks stop bits crossing bytes).
    const uint32_t u0 = load_u32(b.scales), u1 = load_u32(b.scales + 4), u2 = load_u32(b.scales + 8);
    const uint32_t s_lo = u0 & 0x3F3F3F3Fu, m_lo = u1 & 0x3F3F3F3Fu;
    const uint32_t s_hi = (u2 & 0x0F0F0F0Fu) | (((u0 >> 6) & 0x03030303u) << 4);
    const uint32_t m_hi = ((u2 >> 4) & 0x0F0F0F0Fu) | (((u1 >> 6) & 0x03030303u) << 4);
    // sc: 8 scales as int16 in words 0..7 (8..15 zero); mn: each min twice (bsums come in 16s,
    // two per sub-block of 32).
    const __m128i s8 = _mm_cvtsi64_si128(int64_t(uint64_t(s_lo) | (uint64_t(s_hi) << 32)));
    const __m128i m8 = _mm_cvtsi64_si128(int64_t(uint64_t(m_lo) | (uint64_t(m_hi) << 32)));
    const __m256i sc16 = _mm256_cvtepu8_epi16(s8);
    for (int c = 0; c < 4; ++c) o->sc[c] = spread32(sc16, c);
    o->corr = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));
    o->d = f16_scalar(b.d);
    o->dmin = f16_scalar(b.dmin);
  }
};

// kPrefetch: as in legacy_tile, hint the same super-block of the RW rows after the tile.
template <typename F, int RW, int RX, bool kPrefetch = false>
void kquant_tile(int64_t n, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs, float* y, size_t ys) {
  using BW = typename F::Block;
  const int64_t nb = n / kQK_K;
  __m512 acc[RW][RX];
  for (int r = 0; r < RW; ++r)
    for (int k = 0; k < RX; ++k) acc[r][k] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    for (int r = 0; r < RW; ++r) {
      if constexpr (kPrefetch)
        prefetch_span<sizeof(BW)>(w + size_t(r + RW) * ws + size_t(b) * sizeof(BW));
      KWeights kw;
      F::decode(reinterpret_cast<const BW*>(w + size_t(r) * ws)[b], &kw);
      for (int k = 0; k < RX; ++k) {
        const BlockQ8_K& a = reinterpret_cast<const BlockQ8_K*>(x + size_t(k) * xs)[b];
        const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.bsums));
        // corr . bsums in 8 int32 lanes (lanes 8..15 zero).
        const __m256i corr = _mm256_madd_epi16(kw.corr, bsums);
        __m512i sumi = F::kHasMin ? _mm512_setzero_si512() : _mm512_zextsi256_si512(corr);
        for (int c = 0; c < 4; ++c)
          sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(kw.codes[c], load512(a.qs + 64 * c)), kw.sc[c]);
        acc[r][k] = _mm512_fmadd_ps(_mm512_set1_ps(kw.d * a.d), _mm512_cvtepi32_ps(sumi), acc[r][k]);
        if constexpr (F::kHasMin)
          acc[r][k] = _mm512_fnmadd_ps(_mm512_set1_ps(kw.dmin * a.d), _mm512_cvtepi32_ps(_mm512_zextsi256_si512(corr)),
                                       acc[r][k]);
      }
    }
  }
  for (int r = 0; r < RW; ++r)
    for (int k = 0; k < RX; ++k) y[size_t(k) * ys + size_t(r)] = reduce(acc[r][k]);
}

// Where a legacy tile gets its activation pairs: decoded from the q8_0 rows on the fly, or read
// from a buffer that pack_acts filled once for many weight rows. Both give the same ActPair values,
// so the results are the same bit for bit.
template <int K>
struct ActsFromRows {
  const uint8_t* x;
  size_t xs;
  ActPair get(int k, int64_t b, bool two) const {
    return load_act<K>(reinterpret_cast<const BlockQ8_0*>(x + size_t(k) * xs) + b, two);
  }
};

struct ActsFromPack {
  const ActPair* pack;  // [pair][kMaxPackRows]
  ActPair get(int k, int64_t b, bool) const;
};

constexpr int kPackRows = 4;       // activation rows packed together (the tile height)
constexpr int64_t kMaxPackPairs = 96;  // 6144 columns; 96 * 4 * 192 B = 72 KiB of stack

inline ActPair ActsFromPack::get(int k, int64_t b, bool) const { return pack[(b / 2) * kPackRows + k]; }

// RW weight rows x RX activation rows: y[k * ys + r] = dot(w row r, x row k). With kPrefetch, the
// same columns of the RW rows after the tile are hinted into cache (a prefetch never faults, so
// running past the matrix is harmless).
template <typename F, int RW, int RX, typename Acts, bool kPrefetch = false>
void legacy_tile(int64_t n, const uint8_t* w, size_t ws, const Acts& acts, float* y, size_t ys) {
  using BW = typename F::Block;
  const int64_t nb = n / kQK;
  __m512 acc[RW][RX];
  for (int r = 0; r < RW; ++r)
    for (int k = 0; k < RX; ++k) acc[r][k] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; b += 2) {
    const bool two = b + 1 < nb;
    __m512i q[RW];
    __m512 dw[RW];
    for (int r = 0; r < RW; ++r) {
      const BW* blk = reinterpret_cast<const BW*>(w + size_t(r) * ws) + b;
      if constexpr (kPrefetch) prefetch_span<2 * sizeof(BW)>(reinterpret_cast<const uint8_t*>(blk) + RW * ws);
      const BW& second = two ? blk[1] : blk[0];  // a lone block meets zero activations
      q[r] = F::codes(blk[0], second);
      dw[r] = scale_pair(blk[0].d, second.d);
    }
    for (int k = 0; k < RX; ++k) {
      const ActPair a = acts.get(k, b, two);
      for (int r = 0; r < RW; ++r) {
        const __m512i sumi = _mm512_dpbusd_epi32(a.negc, q[r], a.q);
        acc[r][k] = _mm512_fmadd_ps(_mm512_mul_ps(dw[r], a.d), _mm512_cvtepi32_ps(sumi), acc[r][k]);
      }
    }
  }
  for (int r = 0; r < RW; ++r)
    for (int k = 0; k < RX; ++k) y[size_t(k) * ys + size_t(r)] = reduce(acc[r][k]);
}

// Rows [0, rows) of the tile through tiles of 4 weight rows and then single rows.
template <typename F, int RX, typename Acts>
void legacy_rows(int64_t n, const uint8_t* w, size_t ws, int64_t nw, const Acts& acts, float* y, size_t ys) {
  int64_t r = 0;
  for (; r + 4 <= nw; r += 4) legacy_tile<F, 4, RX>(n, w + size_t(r) * ws, ws, acts, y + r, ys);
  for (; r < nw; ++r) legacy_tile<F, 1, RX>(n, w + size_t(r) * ws, ws, acts, y + r, ys);
}

// Small batches (1 to 3 activation rows, i.e. decode): arithmetic per weight byte is low, so the
// rows are taken 8 at a time for one activation row (8 independent accumulators, 8 row streams in
// flight; 27 zmm registers live) and 4 at a time for 2 or 3, with the next tile's rows prefetched.
// Same operations per output as every other tile shape, so bit-identical to vec_dot.
template <typename F, int RX, typename Acts>
void legacy_rows_small(int64_t n, const uint8_t* w, size_t ws, int64_t nw, const Acts& acts, float* y, size_t ys) {
  constexpr int kRW = RX == 1 ? 8 : 4;
  int64_t r = 0;
  for (; r + kRW <= nw; r += kRW) legacy_tile<F, kRW, RX, Acts, true>(n, w + size_t(r) * ws, ws, acts, y + r, ys);
  if (kRW == 8 && r + 4 <= nw) {
    legacy_tile<F, 4, RX, Acts, true>(n, w + size_t(r) * ws, ws, acts, y + r, ys);
    r += 4;
  }
  for (; r < nw; ++r) legacy_tile<F, 1, RX>(n, w + size_t(r) * ws, ws, acts, y + r, ys);
}

template <typename F, typename Acts>
void legacy_rows_rx(int rx, int64_t n, const uint8_t* w, size_t ws, int64_t nw, const Acts& acts, float* y,
                    size_t ys) {
  switch (rx) {
    case 4: return legacy_rows<F, 4>(n, w, ws, nw, acts, y, ys);
    case 3: return legacy_rows_small<F, 3>(n, w, ws, nw, acts, y, ys);
    case 2: return legacy_rows_small<F, 2>(n, w, ws, nw, acts, y, ys);
    default: return legacy_rows_small<F, 1>(n, w, ws, nw, acts, y, ys);
  }
}

// Activation rows in groups of up to 4; each group is packed once (when the row is short enough
// for the stack buffer) and then meets all nw weight rows.
template <typename F>
void legacy_gemm(int64_t n, const uint8_t* w, size_t ws, int64_t nw, const uint8_t* x, size_t xs, int64_t nx,
                 float* y, size_t ys) {
  const int64_t pairs = (n / kQK + 1) / 2;
  for (int64_t i = 0; i < nx; i += kPackRows) {
    const int rx = int(nx - i < kPackRows ? nx - i : kPackRows);
    const ActsFromRows<F::kOffset> rows{x + size_t(i) * xs, xs};
    float* yi = y + size_t(i) * ys;
    if (pairs > kMaxPackPairs) {
      legacy_rows_rx<F>(rx, n, w, ws, nw, rows, yi, ys);
      continue;
    }
    ActPair pack[kMaxPackPairs * kPackRows];
    const int64_t nb = n / kQK;
    for (int64_t b = 0; b < nb; b += 2)
      for (int k = 0; k < rx; ++k) pack[(b / 2) * kPackRows + k] = rows.get(k, b, b + 1 < nb);
    legacy_rows_rx<F>(rx, n, w, ws, nw, ActsFromPack{pack}, yi, ys);
  }
}

template <typename F, int RW, int RX, bool kPrefetch = false>
void kquant_rows(int64_t n, const uint8_t* w, size_t ws, int64_t nw, const uint8_t* x, size_t xs, float* y,
                 size_t ys) {
  int64_t r = 0;
  for (; r + RW <= nw; r += RW) kquant_tile<F, RW, RX, kPrefetch>(n, w + size_t(r) * ws, ws, x, xs, y + r, ys);
  for (; r < nw; ++r) kquant_tile<F, 1, RX>(n, w + size_t(r) * ws, ws, x, xs, y + r, ys);
}

// Covers nw x nx outputs with 4 x 4 tiles, then the 1 to 3 leftover activation rows with one
// 4 x (1..3) tile each (so a decoded weight super-block serves all of them), 1 x RX for leftover
// weight rows. The leftover pass is the whole call for decode (nx <= 3) and prefetches.
template <typename F>
void kquant_gemm(int64_t n, const uint8_t* w, size_t ws, int64_t nw, const uint8_t* x, size_t xs, int64_t nx,
                 float* y, size_t ys) {
  int64_t i = 0;
  for (; i + 4 <= nx; i += 4) kquant_rows<F, 4, 4>(n, w, ws, nw, x + size_t(i) * xs, xs, y + size_t(i) * ys, ys);
  const uint8_t* xi = x + size_t(i) * xs;
  float* yi = y + size_t(i) * ys;
  switch (nx - i) {
    case 3: return kquant_rows<F, 4, 3, true>(n, w, ws, nw, xi, xs, yi, ys);
    case 2: return kquant_rows<F, 4, 2, true>(n, w, ws, nw, xi, xs, yi, ys);
    case 1: return kquant_rows<F, 4, 1, true>(n, w, ws, nw, xi, xs, yi, ys);
    default: return;
  }
}

template <typename F>
void gemm(int64_t n, const void* w, size_t ws, int64_t nw, const void* x, size_t xs, int64_t nx, float* y,
          size_t ys) {
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* xb = static_cast<const uint8_t*>(x);
  if constexpr (requires { F::kOffset; }) legacy_gemm<F>(n, wb, ws, nw, xb, xs, nx, y, ys);
  else kquant_gemm<F>(n, wb, ws, nw, xb, xs, nx, y, ys);
}

template <typename F>
float dot(int64_t n, const void* w, const void* x) {
  float r;
  const auto* wb = static_cast<const uint8_t*>(w);
  if constexpr (requires { F::kOffset; }) {
    legacy_tile<F, 1, 1>(n, wb, 0, ActsFromRows<F::kOffset>{static_cast<const uint8_t*>(x), 0}, &r, 0);
  } else {
    kquant_tile<F, 1, 1>(n, wb, 0, static_cast<const uint8_t*>(x), 0, &r, 0);
  }
  return r;
}

// ---- activation quantizers (KernelTable::quantize_act), bit-identical to tensor/quants.h ----
//
// quantize_row_q8_0 / quantize_row_q8_K with the max-abs search in registers instead of a libm
// fmaxf call per element. Bit-identical because every step is the same IEEE operation: max of
// |x| is exact whatever the order, d / id / iscale are the same scalar divisions, x * id is one
// rounded product, and vcvtps2dq rounds half to even under the default MXCSR exactly as
// nearbyint does under the default FP environment. (NaN inputs may differ; none reach here.)

// 32 floats -> one q8_0 block.
void quantize_q8_0(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(dst);
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    const Q8_0Block q = quantize_q8_0_block(x);  // q8_0_block_avx512.h
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y[b].qs), _mm512_cvtsepi32_epi8(q.lo));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y[b].qs + 16), _mm512_cvtsepi32_epi8(q.hi));
    y[b].d = q.d;
  }
}

// 256 floats -> one q8_K block. Each zmm of 16 floats is exactly one bsums group.
void quantize_q8_K(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_K*>(dst);
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    __m512 m = _mm512_setzero_ps();
    for (int g = 0; g < 16; ++g) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(x + 16 * g)));
    const float amax = _mm512_reduce_max_ps(m);
    if (amax == 0.0f) {
      std::memset(&y[b], 0, sizeof(BlockQ8_K));
      continue;
    }
    // The signed value of the first element of largest magnitude (the reference keeps the first
    // on ties: its comparison is strict).
    int first = 0;
    for (int g = 0; g < 16; ++g) {
      const __mmask16 hit =
          _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(x + 16 * g)), _mm512_set1_ps(amax), _CMP_EQ_OQ);
      if (hit != 0) {
        first = 16 * g + __builtin_ctz(unsigned(hit));
        break;
      }
    }
    const float iscale = -127.0f / x[first];
    const __m512 vs = _mm512_set1_ps(iscale);
    for (int g = 0; g < 16; ++g) {
      const __m512i v = _mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(vs, _mm512_loadu_ps(x + 16 * g))),
                                         _mm512_set1_epi32(127));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(y[b].qs + 16 * g), _mm512_cvtsepi32_epi8(v));
      y[b].bsums[g] = int16_t(_mm512_reduce_add_epi32(v));
    }
    y[b].d = 1.0f / iscale;
  }
}

template <typename F>
void set(KernelTable* t, GgmlType type) {
  t->vec_dot[int(type)] = dot<F>;
  t->vec_dot_multi[int(type)] = nullptr;  // the GEMM covers every batch shape
  t->gemm[int(type)] = gemm<F>;
}

}  // namespace

void fill_avx512_kernels(KernelTable* t) {
  set<Q8_0Format>(t, GgmlType::Q8_0);
  set<Q4_0Format>(t, GgmlType::Q4_0);
  set<Q5_0Format>(t, GgmlType::Q5_0);
  set<Q4_KFormat>(t, GgmlType::Q4_K);
  set<Q6_KFormat>(t, GgmlType::Q6_K);
  t->quantize_act[int(GgmlType::Q8_0)] = quantize_q8_0;
  t->quantize_act[int(GgmlType::Q8_K)] = quantize_q8_K;
}

}  // namespace kvserve
