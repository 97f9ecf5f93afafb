#include "model/paged_attention.h"

#include <cstring>

#include "kernels/attention.h"
#include "util/half.h"

namespace kvserve {
namespace {

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

void paged_attention_group(const KvStorage& kv, int layer, std::span<const int32_t> block_table,
                           int64_t num_positions, int kv_head, const float* q, int group, float scale,
                           float* out) {
  if (num_positions <= 0) {
    for (int64_t i = 0; i < int64_t(group) * kv.layout().head_dim; ++i) out[i] = 0.0f;
    return;
  }
  const KvLayout& L = kv.layout();
  // Block b's planes start block_bytes() after block 0's (KvStorage::plane_offset).
  const PagedKvView view{kv.k_block(0, layer), kv.v_block(0, layer), L.block_bytes(), block_table.data(),
                         L.block_size,         L.num_kv_heads,       L.head_dim,      L.dtype == KvDType::F16};
  attention_group(view, num_positions, kv_head, q, group, scale, out);
}

void paged_attention_head(const KvStorage& kv, int layer, std::span<const int32_t> block_table,
                          int64_t num_positions, int kv_head, const float* q, float scale, float* out) {
  paged_attention_group(kv, layer, block_table, num_positions, kv_head, q, 1, scale, out);
}

}  // namespace kvserve
