// Paged attention kernels (see attention.h).
//
// Vector path (AVX2 + FMA + F16C, the project baseline): positions are taken in tiles of up to
// kTile consecutive slots of one block. Per tile, for up to kSubGroup query heads at a time:
//   1. scores[g][j] = q[g] . K[j] * scale: each K row is loaded (and converted from f16) once per
//      8-lane chunk and multiplied into every head's accumulator;
//   2. online softmax update per head: m' = max(m, max_j scores), c = e^(m - m'), the running sum
//      and the output accumulator are scaled by c, p[g][j] = e^(scores[g][j] - m');
//   3. acc[g] += sum_j p[g][j] V[j], again loading each V chunk once for every head.
// Buffers: scores/p [kSubGroup][kTile] and acc [kSubGroup][head_dim <= kMaxVectorHeadDim] live on
// the stack; nothing scales with n.
#include "kernels/attention.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/simd_avx2.h"
#include "util/half.h"

namespace kvserve {

namespace {

constexpr int kTile = 16;      // positions per softmax update
constexpr int kSubGroup = 8;   // query heads handled together (larger groups are split)

// Start of K (or V) row of `slot` in block `block` for the view's kv_head, as element pointer
// (bytes: element size 2 for f16, 4 for f32).
inline const uint8_t* row_ptr(const uint8_t* plane0, const PagedKvView& kv, int32_t block, int slot, int kv_head) {
  const size_t esize = kv.f16 ? 2 : 4;
  const size_t elems = (size_t(slot) * size_t(kv.num_kv_heads) + size_t(kv_head)) * size_t(kv.head_dim);
  return plane0 + size_t(block) * kv.block_stride + elems * esize;
}

inline float load_scalar(const uint8_t* row, int i, bool f16) {
  if (f16) return f16_to_f32(reinterpret_cast<const uint16_t*>(row)[i]);
  return reinterpret_cast<const float*>(row)[i];
}

template <bool F16>
inline __m256 load8(const uint8_t* row, int i) {
  if constexpr (F16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row) + i / 8));
  } else {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + i);
  }
}

// The vector path for G <= kSubGroup heads whose queries are q[G][hd].
template <bool F16>
void attend_subgroup(const PagedKvView& kv, int64_t n, int kv_head, const float* q, int G, float scale,
                     float* out) {
  const int hd = kv.head_dim;
  const int bs = kv.block_size;
  alignas(32) float acc[kSubGroup][kMaxVectorHeadDim];
  alignas(32) float p[kSubGroup][kTile];
  float m[kSubGroup], s[kSubGroup];
  for (int g = 0; g < G; ++g) {
    std::fill(acc[g], acc[g] + hd, 0.0f);
    m[g] = -std::numeric_limits<float>::infinity();
    s[g] = 0.0f;
  }
  const uint8_t* krow[kTile];
  const uint8_t* vrow[kTile];
  for (int64_t p0 = 0; p0 < n;) {
    // A tile: consecutive slots of one block.
    const int32_t block = kv.table[size_t(p0 / bs)];
    const int slot0 = int(p0 % bs);
    const int T = int(std::min<int64_t>({int64_t(kTile), int64_t(bs - slot0), n - p0}));
    for (int j = 0; j < T; ++j) {
      krow[j] = row_ptr(kv.k0, kv, block, slot0 + j, kv_head);
      vrow[j] = row_ptr(kv.v0, kv, block, slot0 + j, kv_head);
    }
    // 1. scores, padded with -inf up to kTile so exp gives exact zeros there.
    for (int j = 0; j < T; ++j) {
      __m256 a[kSubGroup];
      for (int g = 0; g < G; ++g) a[g] = _mm256_setzero_ps();
      for (int d = 0; d < hd; d += 8) {
        const __m256 k = load8<F16>(krow[j], d);
        for (int g = 0; g < G; ++g) a[g] = _mm256_fmadd_ps(_mm256_loadu_ps(q + g * hd + d), k, a[g]);
      }
      for (int g = 0; g < G; ++g) p[g][j] = avx2::hsum(a[g]) * scale;
    }
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
    // 3. acc[g] += p[g][j] V[j], one 8-lane chunk of V for all heads at a time.
    for (int d = 0; d < hd; d += 8) {
      __m256 a[kSubGroup];
      for (int g = 0; g < G; ++g) a[g] = _mm256_load_ps(&acc[g][d]);
      for (int j = 0; j < T; ++j) {
        const __m256 v = load8<F16>(vrow[j], d);
        for (int g = 0; g < G; ++g) a[g] = _mm256_fmadd_ps(_mm256_broadcast_ss(&p[g][j]), v, a[g]);
      }
      for (int g = 0; g < G; ++g) _mm256_store_ps(&acc[g][d], a[g]);
    }
    p0 += T;
  }
  for (int g = 0; g < G; ++g) {
    const __m256 inv = _mm256_set1_ps(s[g] > 0 ? 1.0f / s[g] : 0.0f);
    for (int d = 0; d < hd; d += 8)
      _mm256_storeu_ps(out + g * hd + d, _mm256_mul_ps(_mm256_load_ps(&acc[g][d]), inv));
  }
}

}  // namespace

void attention_group_scalar(const PagedKvView& kv, int64_t n, int kv_head, const float* q, int group,
                            float scale, float* out) {
  const int hd = kv.head_dim;
  for (int g = 0; g < group; ++g) {
    const float* qg = q + g * hd;
    float* o = out + g * hd;
    float m = -std::numeric_limits<float>::infinity();  // running max of scores
    float s = 0.0f;                                       // running sum of exp(score - m)
    for (int i = 0; i < hd; ++i) o[i] = 0.0f;
    for (int64_t p = 0; p < n; ++p) {
      const int32_t block = kv.table[size_t(p / kv.block_size)];
      const int slot = int(p % kv.block_size);
      const uint8_t* k = row_ptr(kv.k0, kv, block, slot, kv_head);
      const uint8_t* v = row_ptr(kv.v0, kv, block, slot, kv_head);
      float score = 0.0f;
      for (int i = 0; i < hd; ++i) score += qg[i] * load_scalar(k, i, kv.f16);
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
      for (int i = 0; i < hd; ++i) o[i] += e * load_scalar(v, i, kv.f16);
    }
    const float inv = s > 0 ? 1.0f / s : 0.0f;
    for (int i = 0; i < hd; ++i) o[i] *= inv;
  }
}

void attention_group(const PagedKvView& kv, int64_t n, int kv_head, const float* q, int group, float scale,
                     float* out) {
  const int hd = kv.head_dim;
  if (hd % 8 != 0 || hd > kMaxVectorHeadDim) {
    attention_group_scalar(kv, n, kv_head, q, group, scale, out);
    return;
  }
  for (int g0 = 0; g0 < group; g0 += kSubGroup) {
    const int G = std::min(kSubGroup, group - g0);
    if (kv.f16)
      attend_subgroup<true>(kv, n, kv_head, q + g0 * hd, G, scale, out + g0 * hd);
    else
      attend_subgroup<false>(kv, n, kv_head, q + g0 * hd, G, scale, out + g0 * hd);
  }
}

}  // namespace kvserve
