// Paged attention kernels (see attention.h).
//
// Two vector paths, chosen once per process (attention_isa): AVX-512 (attention_avx512.cpp) where
// the kernel table is AVX-512's, else AVX2 (attention_avx2.cpp: rows dequantized in registers,
// one softmax update per 64 positions). Shapes those decline (head_dim > 128, or q8_0/q4_0 with
// head_dim % 32 != 0) take the tile loop below, then the scalar partial (head_dim % 8 != 0).
//
// Tile loop (AVX2 + FMA + F16C, the project baseline): positions are taken in tiles of up to
// kTile consecutive slots of one block. f32 rows are read in place; f16, bf16, q8_0 and q4_0 rows
// of the tile are first dequantized into kbuf/vbuf ([kTile][head_dim] f32 on the stack, so in L1)
// and then read as f32 (one code path for every type; the conversion is a small part of the
// work next to the G-fold FMAs on each row). Per tile, for up to kSubGroup query heads at a time:
//   1. scores[g][j] = q[g] . K[j] * scale, eight positions per pass (eight independent FMA
//      chains, reduced together by hsum8): the loop is bound by loads, not FMA latency;
//   2. online softmax update per head: m' = max(m, max_j scores), c = e^(m - m'), the running sum
//      and the output accumulator are scaled by c, p[g][j] = e^(scores[g][j] - m');
//   3. acc[g] += sum_j p[g][j] V[j], each V chunk loaded once for every head, with G x NC
//      accumulators in registers (NC chunks of 8 per pass, more when the group is small).
// Buffers: scores/p [kSubGroup][kTile] and acc [kSubGroup][head_dim <= kMaxVectorHeadDim] live on
// the stack; nothing scales with n.
#include "kernels/attention.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/attention_impl.h"
#include "kernels/kv_tiles.h"
#include "kernels/simd_avx2.h"
#include "kernels/vec_dot.h"
#include "util/half.h"

namespace kvserve {

namespace {

using detail::kPrefetchAhead;
using detail::prefetch_positions;
using detail::row_ptr;

constexpr int kTile = 16;      // positions per softmax update
constexpr int kSubGroup = 8;   // query heads handled together (larger groups are split)

// Start of the K (or V) head row of `slot` in block `block` for kv_head.

// Sum of each of 8 vectors, as one vector: lane j = sum of a[j]'s 8 lanes.
inline __m256 hsum8(const __m256 a[8]) {
  const __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
  // u0 = [a0 a1 a2 a3 (low halves) | a0 a1 a2 a3 (high halves)], u1 likewise for a4..a7.
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// p[g][j] = q[g] . K[j] * scale for j < T (<= kTile), krow[j] being f32 rows of hd values
// (krow[j] for j in [T, kTile) must be readable; their scores are overwritten by the caller).
// Eight positions at a time per head: eight independent FMA chains instead of one.
void tile_scores(const float* const* krow, const float* q, int G, int hd, float scale, float (*p)[kTile]) {
  const __m256 sv = _mm256_set1_ps(scale);
  for (int g = 0; g < G; ++g) {
    const float* qg = q + size_t(g) * hd;
    for (int j0 = 0; j0 < kTile; j0 += 8) {
      __m256 a[8];
      for (int j = 0; j < 8; ++j) a[j] = _mm256_setzero_ps();
      for (int d = 0; d < hd; d += 8) {
        const __m256 qv = _mm256_loadu_ps(qg + d);
        for (int j = 0; j < 8; ++j) a[j] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(krow[j0 + j] + d), a[j]);
      }
      _mm256_store_ps(&p[g][j0], _mm256_mul_ps(hsum8(a), sv));
    }
  }
}

// acc[g][d0..hd) += sum_{j < T} p[g][j] V[j] for G heads (compile time, so the G x NC
// accumulators stay in registers), NC 8-lane chunks of the head dimension per pass.
template <int G, int NC>
void tile_accumulate(const float* const* vrow, int T, const float (*p)[kTile], int hd, int d0,
                     float (*acc)[kMaxVectorHeadDim]) {
  int d = d0;
  for (; d + 8 * NC <= hd; d += 8 * NC) {
    __m256 a[G][NC];
    for (int g = 0; g < G; ++g)
      for (int c = 0; c < NC; ++c) a[g][c] = _mm256_load_ps(&acc[g][d + 8 * c]);
    for (int j = 0; j < T; ++j) {
      __m256 v[NC];
      for (int c = 0; c < NC; ++c) v[c] = _mm256_loadu_ps(vrow[j] + d + 8 * c);
      for (int g = 0; g < G; ++g) {
        const __m256 w = _mm256_broadcast_ss(&p[g][j]);
        for (int c = 0; c < NC; ++c) a[g][c] = _mm256_fmadd_ps(w, v[c], a[g][c]);
      }
    }
    for (int g = 0; g < G; ++g)
      for (int c = 0; c < NC; ++c) _mm256_store_ps(&acc[g][d + 8 * c], a[g][c]);
  }
  if constexpr (NC > 1)
    if (d < hd) tile_accumulate<G, 1>(vrow, T, p, hd, d, acc);
}

// Chunks per pass: enough independent FMA chains (G x NC >= 4 where possible) within 16 registers.
void accumulate(const float* const* vrow, int T, const float (*p)[kTile], int G, int hd, float (*acc)[kMaxVectorHeadDim]) {
  switch (G) {
    case 1: return tile_accumulate<1, 4>(vrow, T, p, hd, 0, acc);
    case 2: return tile_accumulate<2, 4>(vrow, T, p, hd, 0, acc);
    case 3: return tile_accumulate<3, 2>(vrow, T, p, hd, 0, acc);
    case 4: return tile_accumulate<4, 2>(vrow, T, p, hd, 0, acc);
    case 5: return tile_accumulate<5, 1>(vrow, T, p, hd, 0, acc);
    case 6: return tile_accumulate<6, 1>(vrow, T, p, hd, 0, acc);
    case 7: return tile_accumulate<7, 1>(vrow, T, p, hd, 0, acc);
    default: return tile_accumulate<8, 1>(vrow, T, p, hd, 0, acc);
  }
}

// The vector path for G <= kSubGroup heads whose queries are q[G][hd]; writes their state into
// `partial` (group heads in all, this sub-group's first head being g0).
void attend_subgroup(const PagedKvView& kv, int64_t begin, int64_t end, int kv_head, const float* q, int G,
                     float scale, int group, int g0, float* partial) {
  const int hd = kv.head_dim;
  const int bs = kv.block_size;
  const size_t k_row = kv_row_bytes(kv.k_type, hd), v_row = kv_row_bytes(kv.v_type, hd);
  const bool k_deq = kv.k_type != KvElem::F32, v_deq = kv.v_type != KvElem::F32;
  alignas(32) float acc[kSubGroup][kMaxVectorHeadDim];
  alignas(32) float p[kSubGroup][kTile];
  alignas(32) float kbuf[kTile][kMaxVectorHeadDim];  // dequantized K rows of the tile (when k_deq)
  alignas(32) float vbuf[kTile][kMaxVectorHeadDim];  // dequantized V rows of the tile (when v_deq)
  float m[kSubGroup], s[kSubGroup];
  for (int g = 0; g < G; ++g) {
    std::fill(acc[g], acc[g] + hd, 0.0f);
    m[g] = -std::numeric_limits<float>::infinity();
    s[g] = 0.0f;
  }
  const float* krow[kTile];
  const float* vrow[kTile];
  for (int64_t p0 = begin; p0 < end;) {
    // A tile: consecutive slots of one block.
    const int32_t block = kv.table[size_t(p0 / bs)];
    const int slot0 = int(p0 % bs);
    const int T = int(std::min<int64_t>({int64_t(kTile), int64_t(bs - slot0), end - p0}));
    prefetch_positions(kv, k_row, v_row, p0 + kPrefetchAhead, kTile, end, kv_head);
    for (int j = 0; j < T; ++j) {
      const uint8_t* kr = row_ptr(kv.k0, kv, k_row, block, slot0 + j, kv_head);
      const uint8_t* vr = row_ptr(kv.v0, kv, v_row, block, slot0 + j, kv_head);
      if (k_deq) {
        kv_dequantize_row(kv.k_type, kr, hd, kbuf[j]);
        krow[j] = kbuf[j];
      } else {
        krow[j] = reinterpret_cast<const float*>(kr);
      }
      if (v_deq) {
        kv_dequantize_row(kv.v_type, vr, hd, vbuf[j]);
        vrow[j] = vbuf[j];
      } else {
        vrow[j] = reinterpret_cast<const float*>(vr);
      }
    }
    for (int j = T; j < kTile; ++j) krow[j] = krow[0];  // scored, then masked below
    // 1. scores, padded with -inf up to kTile so exp gives exact zeros there.
    tile_scores(krow, q, G, hd, scale, p);
    for (int g = 0; g < G; ++g)
      for (int j = T; j < kTile; ++j) p[g][j] = -std::numeric_limits<float>::infinity();
    // 2. online softmax update.
    for (int g = 0; g < G; ++g) {
      float tmax = p[g][0];
      for (int j = 1; j < T; ++j) tmax = std::max(tmax, p[g][j]);
      const float m_new = std::max(m[g], tmax);
      const float c = std::exp(m[g] - m_new);  // 0 on the first tile (m = -inf)
      m[g] = m_new;
      const __m256 mv = _mm256_set1_ps(m_new);
      __m256 sum = _mm256_setzero_ps();
      for (int j = 0; j < kTile; j += 8) {
        const __m256 e = avx2::exp(_mm256_sub_ps(_mm256_load_ps(&p[g][j]), mv));
        _mm256_store_ps(&p[g][j], e);
        sum = _mm256_add_ps(sum, e);
      }
      s[g] = s[g] * c + avx2::hsum(sum);
      if (c != 1.0f) {
        const __m256 cv = _mm256_set1_ps(c);
        for (int d = 0; d < hd; d += 8) _mm256_store_ps(&acc[g][d], _mm256_mul_ps(_mm256_load_ps(&acc[g][d]), cv));
      }
    }
    // 3. acc[g] += p[g][j] V[j], each V chunk loaded once for all heads.
    accumulate(vrow, T, p, G, hd, acc);
    p0 += T;
  }
  for (int g = 0; g < G; ++g) {
    partial[g0 + g] = m[g];
    partial[group + g0 + g] = s[g];
    std::memcpy(partial + 2 * group + size_t(g0 + g) * hd, acc[g], size_t(hd) * sizeof(float));
  }
}

// A row-layout copy of the blocks of a tiled view that [begin, end) touches (into this thread's
// scratch: the returned view is valid until the thread's next call), for the paths that read rows.
PagedKvView tiled_as_rows(const PagedKvView& kv, int64_t begin, int64_t end) {
  thread_local std::vector<uint8_t> bytes;
  thread_local std::vector<int32_t> table;
  const int bs = kv.block_size, nh = kv.num_kv_heads, hd = kv.head_dim;
  const size_t kb = kv_row_bytes(kv.k_type, hd), vb = kv_row_bytes(kv.v_type, hd);
  const size_t kplane = size_t(bs) * size_t(nh) * kb, plane = kplane + size_t(bs) * size_t(nh) * vb;
  const int64_t b0 = begin / bs, b1 = (end - 1) / bs + 1;
  table.assign(size_t(b1), 0);  // blocks before b0 are never read
  bytes.resize(size_t(b1 - b0) * plane);
  for (int64_t b = b0; b < b1; ++b) {
    table[size_t(b)] = int32_t(b - b0);
    uint8_t* dst = bytes.data() + size_t(b - b0) * plane;  // [K plane][V plane] of one block
    const uint8_t* kp = kv.k0 + size_t(kv.table[size_t(b)]) * kv.block_stride;
    const uint8_t* vp = kv.v0 + size_t(kv.table[size_t(b)]) * kv.block_stride;
    for (int slot = 0; slot < bs; ++slot)
      for (int h = 0; h < nh; ++h) {
        const size_t at = size_t(slot) * size_t(nh) + size_t(h);
        kv_tiled_load_row(kv.k_type, false, kp, nh, hd, slot, h, dst + at * kb);
        kv_tiled_load_row(kv.v_type, true, vp, nh, hd, slot, h, dst + kplane + at * vb);
      }
  }
  PagedKvView rows = kv;
  rows.k0 = bytes.data();
  rows.v0 = bytes.data() + kplane;
  rows.block_stride = plane;
  rows.table = table.data();
  rows.tiled = false;
  return rows;
}

// The scalar state of [begin, end) for all `group` heads (any head_dim).
void partial_scalar(const PagedKvView& kv, int64_t begin, int64_t end, int kv_head, const float* q, int group,
                    float scale, float* partial) {
  const int hd = kv.head_dim;
  const size_t k_row = kv_row_bytes(kv.k_type, hd), v_row = kv_row_bytes(kv.v_type, hd);
  std::vector<float> k(static_cast<size_t>(hd)), v(static_cast<size_t>(hd));  // one dequantized row each
  for (int g = 0; g < group; ++g) {
    const float* qg = q + g * hd;
    float* o = partial + 2 * group + size_t(g) * hd;
    float m = -std::numeric_limits<float>::infinity();  // running max of scores
    float s = 0.0f;                                       // running sum of exp(score - m)
    for (int i = 0; i < hd; ++i) o[i] = 0.0f;
    for (int64_t p = begin; p < end; ++p) {
      const int32_t block = kv.table[size_t(p / kv.block_size)];
      const int slot = int(p % kv.block_size);
      kv_dequantize_row_scalar(kv.k_type, row_ptr(kv.k0, kv, k_row, block, slot, kv_head), hd, k.data());
      kv_dequantize_row_scalar(kv.v_type, row_ptr(kv.v0, kv, v_row, block, slot, kv_head), hd, v.data());
      float score = 0.0f;
      for (int i = 0; i < hd; ++i) score += qg[i] * k[size_t(i)];
      score *= scale;
      if (score > m) {
        // Rescale what was accumulated under the old maximum.
        const float c = std::exp(m - score);
        s *= c;
        for (int i = 0; i < hd; ++i) o[i] *= c;
        m = score;
      }
      const float e = std::exp(score - m);
      s += e;
      for (int i = 0; i < hd; ++i) o[i] += e * v[size_t(i)];
    }
    partial[g] = m;
    partial[group + g] = s;
  }
}

}  // namespace

namespace detail {
bool attention_l1_hints() {
  static const bool l1 = [] {
    const CpuModel cpu = cpu_model();
    return cpu.amd && cpu.family == 0x1A;
  }();
  return l1;
}
}  // namespace detail

namespace {
// kScalar: not pinned (follow active_kernels()).
std::atomic<int> g_pinned_isa{int(Isa::kScalar)};
}  // namespace

Isa attention_isa() {
  const int pinned = g_pinned_isa.load(std::memory_order_relaxed);
  if (pinned != int(Isa::kScalar)) return Isa(pinned);
  return active_kernels().isa >= Isa::kAvx512 ? Isa::kAvx512 : Isa::kAvx2;
}

void attention_pin_isa(Isa isa) {
  if (isa == Isa::kAvx512 && !isa_supported(Isa::kAvx512)) isa = Isa::kScalar;
  g_pinned_isa.store(int(isa), std::memory_order_relaxed);
}

bool attention_rounds_query(KvElem k_type, int head_dim) {
  // Both vector paths (attention_isa() is never kScalar) round alike; other head dims take
  // float scores.
  return detail::integer_scores(k_type, head_dim);
}

bool attention_has_tiled_kernel(KvElem k_type, KvElem v_type, int head_dim) {
  // Both vector paths' tiled kernels take q8_0 or q4_0 K and V (the same or mixed) at head_dim 64.
  return head_dim == kKvTiledKernelHeadDim && kv_tileable(k_type) && kv_tileable(v_type);
}

bool attention_rounds_query_8bit(const PagedKvView& kv) {
  return kv.tiled && kv.k_type == KvElem::Q8_0 && kv.head_dim == kKvTiledKernelHeadDim &&
         attention_isa() == Isa::kAvx512 &&
         kv_tiles_supported(kv.k_type, kv.v_type, kv.head_dim, kv.block_size);
}

void attention_round_query(const float* q, int n, float* out, int code_max) {
  const float levels = float(code_max);
  for (int b = 0; b < n; b += 32) {
    const int len = std::min(32, n - b);
    float amax = 0;
    for (int i = 0; i < len; ++i) amax = std::max(amax, std::fabs(q[b + i]));
    // The kernel's float steps: d and 1/d each rounded once, x / d rounded to nearest even.
    const float d = amax / levels, id = amax > 0 ? levels / amax : 0.0f;
    for (int i = 0; i < len; ++i)
      out[b + i] = std::clamp(std::nearbyint(q[b + i] * id), -levels - 1.0f, levels) * d;
  }
}

namespace {

// The tiled kernel of the vector path in use (attention_impl.h); false where it does not apply.
bool tiled_heads(const PagedKvView& kv, int64_t begin, int64_t end, int kv_head0, int nheads, const float* q,
                 int group, float scale, float* out, int64_t hint_end, bool chunked) {
  return attention_isa() == Isa::kAvx512
             ? detail::attention_tiled_heads_avx512(kv, begin, end, kv_head0, nheads, q, group, scale, out,
                                                    hint_end, chunked)
             : detail::attention_tiled_heads_avx2(kv, begin, end, kv_head0, nheads, q, group, scale, out,
                                                  hint_end, chunked);
}

}  // namespace

void attention_partial_heads(const PagedKvView& kv, int64_t begin, int64_t end, int kv_head0, int nheads,
                             const float* q, int group, float scale, float* partials, int64_t hint_end) {
  if (kv.tiled) {
    if (tiled_heads(kv, begin, end, kv_head0, nheads, q, group, scale, partials, hint_end, false)) return;
    attention_partial_heads(tiled_as_rows(kv, begin, end), begin, end, kv_head0, nheads, q, group, scale, partials);
    return;
  }
  if (attention_isa() == Isa::kAvx512 &&
      detail::attention_partial_heads_avx512(kv, begin, end, kv_head0, nheads, q, group, scale, partials))
    return;
  if (detail::attention_partial_heads_avx2(kv, begin, end, kv_head0, nheads, q, group, scale, partials)) return;
  const size_t q_stride = size_t(group) * size_t(kv.head_dim), pf = attention_partial_floats(group, kv.head_dim);
  for (int h = 0; h < nheads; ++h)
    attention_partial(kv, begin, end, kv_head0 + h, q + size_t(h) * q_stride, group, scale, partials + size_t(h) * pf);
}

void attention_partial_heads_chunks(const PagedKvView& kv, int64_t begin, int64_t end, int kv_head0,
                                    int nheads, const float* q, int group, float scale, float* states,
                                    int64_t hint_end) {
  if (kv.tiled && tiled_heads(kv, begin, end, kv_head0, nheads, q, group, scale, states, hint_end, true))
    return;
  const size_t all = attention_partial_floats(group, kv.head_dim) * size_t(nheads);
  const int64_t chunks = attention_num_chunks(begin, end);
  for (int64_t c = 0; c < chunks; ++c)
    attention_partial_heads(kv, attention_chunk_begin(begin, c), attention_chunk_end(begin, end, c), kv_head0,
                            nheads, q, group, scale, states + size_t(c) * all, std::max(end, hint_end));
}

void attention_partial(const PagedKvView& kv, int64_t begin, int64_t end, int kv_head, const float* q, int group,
                       float scale, float* partial) {
  if (kv.tiled) {
    attention_partial_heads(kv, begin, end, kv_head, 1, q, group, scale, partial);
    return;
  }
  const int hd = kv.head_dim;
  if (attention_isa() == Isa::kAvx512 &&
      detail::attention_partial_avx512(kv, begin, end, kv_head, q, group, scale, partial))
    return;
  if (detail::attention_partial_heads_avx2(kv, begin, end, kv_head, 1, q, group, scale, partial)) return;
  if (hd % 8 != 0 || hd > kMaxVectorHeadDim) {
    partial_scalar(kv, begin, end, kv_head, q, group, scale, partial);
    return;
  }
  for (int g0 = 0; g0 < group; g0 += kSubGroup) {
    const int G = std::min(kSubGroup, group - g0);
    attend_subgroup(kv, begin, end, kv_head, q + size_t(g0) * hd, G, scale, group, g0, partial);
  }
}

void attention_merge(int group, int head_dim, float* into, const float* other) {
  for (int g = 0; g < group; ++g) {
    const float m1 = into[g], m2 = other[g];
    const float m = std::max(m1, m2);
    // A state of no positions has m = -inf and contributes e^-inf = 0.
    const float c1 = m1 == m ? 1.0f : std::exp(m1 - m);
    const float c2 = m2 == m ? 1.0f : std::exp(m2 - m);
    into[g] = m;
    into[group + g] = into[group + g] * c1 + other[group + g] * c2;
    float* a = into + 2 * group + size_t(g) * head_dim;
    const float* b = other + 2 * group + size_t(g) * head_dim;
    for (int i = 0; i < head_dim; ++i) a[i] = a[i] * c1 + b[i] * c2;
  }
}

void attention_finish(int group, int head_dim, const float* partial, float* out) {
  for (int g = 0; g < group; ++g) {
    const float s = partial[group + g];
    const float inv = s > 0 ? 1.0f / s : 0.0f;
    const float* a = partial + 2 * group + size_t(g) * head_dim;
    for (int i = 0; i < head_dim; ++i) out[size_t(g) * head_dim + i] = a[i] * inv;
  }
}

void attention_group_scalar(const PagedKvView& kv, int64_t n, int kv_head, const float* q, int group,
                            float scale, float* out) {
  attention_group_range_scalar(kv, 0, n, kv_head, q, group, scale, out);
}

void attention_group_range_scalar(const PagedKvView& kv, int64_t begin, int64_t end, int kv_head, const float* q,
                                  int group, float scale, float* out) {
  std::vector<float> st(attention_partial_floats(group, kv.head_dim));
  partial_scalar(kv.tiled ? tiled_as_rows(kv, begin, end) : kv, begin, end, kv_head, q, group, scale, st.data());
  attention_finish(group, kv.head_dim, st.data(), out);
}

void attention_group(const PagedKvView& kv, int64_t n, int kv_head, const float* q, int group, float scale,
                     float* out) {
  attention_group_range(kv, 0, n, kv_head, q, group, scale, out);
}

void attention_group_range(const PagedKvView& kv, int64_t begin, int64_t end, int kv_head, const float* q,
                           int group, float scale, float* out) {
  // Two states (the merged prefix and the next chunk), reused by this thread across calls.
  thread_local std::vector<float> scratch;
  const size_t pf = attention_partial_floats(group, kv.head_dim);
  if (scratch.size() < 2 * pf) scratch.resize(2 * pf);
  float* acc = scratch.data();
  float* next = acc + pf;
  const int64_t chunks = attention_num_chunks(begin, end);
  attention_partial(kv, begin, attention_chunk_end(begin, end, 0), kv_head, q, group, scale, acc);
  for (int64_t c = 1; c < chunks; ++c) {
    attention_partial(kv, attention_chunk_begin(begin, c), attention_chunk_end(begin, end, c), kv_head, q, group,
                      scale, next);
    attention_merge(group, kv.head_dim, acc, next);
  }
  attention_finish(group, kv.head_dim, acc, out);
}

void attention_group_range_heads(const PagedKvView& kv, int64_t begin, int64_t end, int kv_head0, int nheads,
                                 const float* q, int group, float scale, float* out) {
  // [chunks][nheads][pf]: every chunk's states, reused by this thread.
  thread_local std::vector<float> scratch;
  const int hd = kv.head_dim;
  const size_t pf = attention_partial_floats(group, hd), all = pf * size_t(nheads);
  const int64_t chunks = attention_num_chunks(begin, end);
  if (scratch.size() < size_t(chunks) * all) scratch.resize(size_t(chunks) * all);
  float* acc = scratch.data();
  attention_partial_heads_chunks(kv, begin, end, kv_head0, nheads, q, group, scale, acc);
  for (int64_t c = 1; c < chunks; ++c)
    for (int h = 0; h < nheads; ++h)
      attention_merge(group, hd, acc + size_t(h) * pf, acc + (size_t(c) * all + size_t(h) * pf));
  for (int h = 0; h < nheads; ++h)
    attention_finish(group, hd, acc + size_t(h) * pf, out + size_t(h) * size_t(group) * size_t(hd));
}

}  // namespace kvserve
