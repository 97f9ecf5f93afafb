#include "model/paged_attention.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "util/half.h"

namespace kvserve {
namespace {

inline float load(const float* p, int i) { return p[i]; }
inline float load(const uint16_t* p, int i) { return f16_to_f32(p[i]); }

template <typename T>
void attend(const KvStorage& kv, int layer, std::span<const int32_t> table, int64_t n, int kv_head,
            const float* q, float scale, float* out) {
  const KvLayout& L = kv.layout();
  const int hd = L.head_dim;
  const int bs = L.block_size;
  const size_t row = size_t(L.num_kv_heads) * size_t(hd);  // elements per slot
  float m = -std::numeric_limits<float>::infinity();         // running max of scores
  float s = 0.0f;                                            // running sum of exp(score - m)
  for (int i = 0; i < hd; ++i) out[i] = 0.0f;
  for (int64_t p = 0; p < n; ++p) {
    int32_t block = table[size_t(p / bs)];
    size_t slot = size_t(p % bs) * row + size_t(kv_head) * size_t(hd);
    const T* k = reinterpret_cast<const T*>(kv.k_block(block, layer)) + slot;
    const T* v = reinterpret_cast<const T*>(kv.v_block(block, layer)) + slot;
    float score = 0.0f;
    for (int i = 0; i < hd; ++i) score += q[i] * load(k, i);
    score *= scale;
    if (score > m) {
      // Rescale what was accumulated under the old maximum.
      float c = std::exp(m - score);
      s *= c;
      for (int i = 0; i < hd; ++i) out[i] *= c;
      m = score;
    }
    float e = std::exp(score - m);
    s += e;
    for (int i = 0; i < hd; ++i) out[i] += e * load(v, i);
  }
  float inv = s > 0 ? 1.0f / s : 0.0f;
  for (int i = 0; i < hd; ++i) out[i] *= inv;
}

template <typename T>
void store(KvStorage& kv, int32_t block, int layer, int offset, const float* k, const float* v);

template <>
void store<float>(KvStorage& kv, int32_t block, int layer, int offset, const float* k, const float* v) {
  const size_t row = size_t(kv.layout().num_kv_heads) * size_t(kv.layout().head_dim);
  std::memcpy(reinterpret_cast<float*>(kv.k_block(block, layer)) + size_t(offset) * row, k, row * sizeof(float));
  std::memcpy(reinterpret_cast<float*>(kv.v_block(block, layer)) + size_t(offset) * row, v, row * sizeof(float));
}

template <>
void store<uint16_t>(KvStorage& kv, int32_t block, int layer, int offset, const float* k, const float* v) {
  const size_t row = size_t(kv.layout().num_kv_heads) * size_t(kv.layout().head_dim);
  uint16_t* kd = reinterpret_cast<uint16_t*>(kv.k_block(block, layer)) + size_t(offset) * row;
  uint16_t* vd = reinterpret_cast<uint16_t*>(kv.v_block(block, layer)) + size_t(offset) * row;
  for (size_t i = 0; i < row; ++i) {
    kd[i] = f32_to_f16(k[i]);
    vd[i] = f32_to_f16(v[i]);
  }
}

}  // namespace

void store_kv_row(KvStorage& kv, int32_t block, int layer, int offset, const float* k, const float* v) {
  if (kv.layout().dtype == KvDType::F16)
    store<uint16_t>(kv, block, layer, offset, k, v);
  else
    store<float>(kv, block, layer, offset, k, v);
}

void paged_attention_head(const KvStorage& kv, int layer, std::span<const int32_t> block_table,
                          int64_t num_positions, int kv_head, const float* q, float scale, float* out) {
  if (kv.layout().dtype == KvDType::F16)
    attend<uint16_t>(kv, layer, block_table, num_positions, kv_head, q, scale, out);
  else
    attend<float>(kv, layer, block_table, num_positions, kv_head, q, scale, out);
}

}  // namespace kvserve
