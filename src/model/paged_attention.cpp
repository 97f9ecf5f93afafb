#include "model/paged_attention.h"

#include <cstdlib>
#include <cstring>

#include "kernels/kv_tiles.h"
#include "util/status.h"

namespace kvserve {

namespace {
// A tiled head row on the stack: q8_0 (or q4_0) of head_dim up to 1024.
constexpr size_t kMaxTiledRowBytes = 1024 + 64;
}  // namespace

KvElem kv_elem_of(KvDType dtype) {
  switch (dtype) {
    case KvDType::F32:
      return KvElem::F32;
    case KvDType::F16:
      return KvElem::F16;
    case KvDType::BF16:
      return KvElem::BF16;
    case KvDType::Q8_0:
      return KvElem::Q8_0;
    case KvDType::Q4_0:
      return KvElem::Q4_0;
  }
  KVS_ASSERT(false, "bad KvDType");
  return KvElem::F32;
}

void store_kv_row(KvStorage& kv, int32_t block, int layer, int offset, const float* k, const float* v) {
  const KvLayout& L = kv.layout();
  const int hd = L.head_dim;
  const KvElem kt = kv_elem_of(L.k_dtype), vt = kv_elem_of(L.v_dtype);
  if (L.tiled) {  // each head's row quantized here, then scattered into its tile (kv_tiles.h)
    uint8_t kq[kMaxTiledRowBytes], vq[kMaxTiledRowBytes];
    KVS_ASSERT(kv_row_bytes(kt, hd) <= sizeof(kq) && kv_row_bytes(vt, hd) <= sizeof(vq), "tiled row too long");
    for (int h = 0; h < L.num_kv_heads; ++h) {
      kv_quantize_row(kt, k + size_t(h) * hd, hd, kq);
      kv_quantize_row(vt, v + size_t(h) * hd, hd, vq);
      kv_tiled_store_row(kt, false, kv.k_block(block, layer), L.num_kv_heads, hd, offset, h, kq);
      kv_tiled_store_row(vt, true, kv.v_block(block, layer), L.num_kv_heads, hd, offset, h, vq);
    }
    return;
  }
  // Slot `offset` holds [num_kv_heads] rows of head_row_bytes each; each head row is quantized
  // on its own (its groups never straddle two heads).
  uint8_t* kd = kv.k_block(block, layer) + size_t(offset) * L.slot_bytes(KvPart::kKey);
  uint8_t* vd = kv.v_block(block, layer) + size_t(offset) * L.slot_bytes(KvPart::kValue);
  const size_t kr = L.head_row_bytes(KvPart::kKey), vr = L.head_row_bytes(KvPart::kValue);
  for (int h = 0; h < L.num_kv_heads; ++h) {
    kv_quantize_row(kt, k + size_t(h) * hd, hd, kd + size_t(h) * kr);
    kv_quantize_row(vt, v + size_t(h) * hd, hd, vd + size_t(h) * vr);
  }
}

void hint_kv_row_store(const KvStorage& kv, int32_t block, int layer, int offset) {
  const KvLayout& L = kv.layout();
  if (L.tiled) {
    const KvElem kt = kv_elem_of(L.k_dtype), vt = kv_elem_of(L.v_dtype);
    for (int h = 0; h < L.num_kv_heads; ++h) {
      kv_tiled_hint_store(kt, false, kv.k_block(block, layer), L.num_kv_heads, L.head_dim, offset, h);
      kv_tiled_hint_store(vt, true, kv.v_block(block, layer), L.num_kv_heads, L.head_dim, offset, h);
    }
    return;
  }
  for (KvPart part : {KvPart::kKey, KvPart::kValue}) {
    const size_t bytes = L.slot_bytes(part);
    const uint8_t* p = (part == KvPart::kKey ? kv.k_block(block, layer) : kv.v_block(block, layer)) + size_t(offset) * bytes;
    prefetch_for_write(p, p + bytes);
  }
}

bool kv_tiles_preferred(const KvLayout& layout) {
  static const bool allowed = [] {
    const char* e = std::getenv("KVSERVE_KV_TILES");
    return e == nullptr || std::strcmp(e, "0") != 0;
  }();
  return allowed && layout.can_tile() &&
         attention_has_tiled_kernel(kv_elem_of(layout.k_dtype), kv_elem_of(layout.v_dtype), layout.head_dim);
}

PagedKvView paged_kv_view(const KvStorage& kv, int layer, std::span<const int32_t> block_table) {
  const KvLayout& L = kv.layout();
  // The kernels compute row sizes from the type; they must be the layout's.
  KVS_ASSERT(kv_row_bytes(kv_elem_of(L.k_dtype), L.head_dim) == L.head_row_bytes(KvPart::kKey) &&
                 kv_row_bytes(kv_elem_of(L.v_dtype), L.head_dim) == L.head_row_bytes(KvPart::kValue),
             "kernel and KV layout disagree on a row size");
  // Block b's planes of this layer start b * block_stride() after block 0's (KvStorage::plane_offset).
  PagedKvView view{kv.k_block(0, layer), kv.v_block(0, layer), kv.block_stride(), block_table.data(),
                   L.block_size,         L.num_kv_heads,       L.head_dim};
  view.k_type = kv_elem_of(L.k_dtype);
  view.v_type = kv_elem_of(L.v_dtype);
  view.tiled = L.tiled;
  return view;
}

void paged_attention_group(const KvStorage& kv, int layer, std::span<const int32_t> block_table,
                           int64_t num_positions, int kv_head, const float* q, int group, float scale,
                           float* out) {
  if (num_positions <= 0) {
    for (int64_t i = 0; i < int64_t(group) * kv.layout().head_dim; ++i) out[i] = 0.0f;
    return;
  }
  attention_group(paged_kv_view(kv, layer, block_table), num_positions, kv_head, q, group, scale, out);
}

void paged_attention_group(const KvStorage& kv, int layer, std::span<const int32_t> block_table, int64_t first,
                           int64_t num_positions, int kv_head, const float* q, int group, float scale, float* out) {
  if (first >= num_positions) {
    for (int64_t i = 0; i < int64_t(group) * kv.layout().head_dim; ++i) out[i] = 0.0f;
    return;
  }
  attention_group_range(paged_kv_view(kv, layer, block_table), first, num_positions, kv_head, q, group, scale, out);
}

void paged_attention_head(const KvStorage& kv, int layer, std::span<const int32_t> block_table,
                          int64_t num_positions, int kv_head, const float* q, float scale, float* out) {
  paged_attention_group(kv, layer, block_table, num_positions, kv_head, q, 1, scale, out);
}

}  // namespace kvserve
