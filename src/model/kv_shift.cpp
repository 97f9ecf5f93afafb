#include "model/kv_shift.h"

#include <cstring>
#include <vector>

#include "kernels/kv_quant.h"
#include "kernels/kv_tiles.h"
#include "kernels/ops.h"
#include "model/paged_attention.h"

namespace kvserve {

void copy_kv_slots(KvStorage& kv, const KvSlotCopy& c) {
  if (c.num_slots <= 0) return;
  const KvLayout& L = kv.layout();
  const size_t ks = L.slot_bytes(KvPart::kKey), vs = L.slot_bytes(KvPart::kValue);
  if (L.tiled) {  // row by row through the tiles (kv_tiles.h)
    for (int part = 0; part < 2; ++part) {
      const KvElem type = kv_elem_of(part ? L.v_dtype : L.k_dtype);
      std::vector<uint8_t> row(kv_row_bytes(type, L.head_dim));
      for (int l = 0; l < L.num_layers; ++l) {
        const uint8_t* src = part ? kv.v_block(c.src_block, l) : kv.k_block(c.src_block, l);
        uint8_t* dst = part ? kv.v_block(c.dst_block, l) : kv.k_block(c.dst_block, l);
        for (int i = 0; i < c.num_slots; ++i)
          for (int h = 0; h < L.num_kv_heads; ++h) {
            kv_tiled_load_row(type, part == 1, src, L.num_kv_heads, L.head_dim, c.src_slot + i, h, row.data());
            kv_tiled_store_row(type, part == 1, dst, L.num_kv_heads, L.head_dim, c.dst_slot + i, h, row.data());
          }
      }
    }
    return;
  }
  for (int l = 0; l < L.num_layers; ++l) {
    // Distinct blocks (the plan never copies a block onto itself), so the ranges never overlap.
    std::memcpy(kv.k_block(c.dst_block, l) + size_t(c.dst_slot) * ks, kv.k_block(c.src_block, l) + size_t(c.src_slot) * ks,
                size_t(c.num_slots) * ks);
    std::memcpy(kv.v_block(c.dst_block, l) + size_t(c.dst_slot) * vs, kv.v_block(c.src_block, l) + size_t(c.src_slot) * vs,
                size_t(c.num_slots) * vs);
  }
}

void rerotate_keys(KvStorage& kv, const Model& model, std::span<const int32_t> table, int64_t begin, int64_t end,
                   int64_t delta, ThreadPool* pool) {
  if (begin >= end || delta == 0) return;
  const ModelHparams& hp = model.hparams();
  const KvLayout& L = kv.layout();
  const std::vector<float>& factors = model.weights().rope_factors;
  // [rope_dim / 2] angles of a rotation by delta positions, shared by every position and head.
  std::vector<float> cos_t(size_t(hp.rope_dim / 2)), sin_t(size_t(hp.rope_dim / 2));
  rope_cos_sin(int(delta), hp.rope_freq_base, hp.rope_freq_scale, factors.empty() ? nullptr : factors.data(),
               hp.rope_dim, cos_t.data(), sin_t.data());
  const KvElem kt = kv_elem_of(L.k_dtype);
  const size_t row = L.head_row_bytes(KvPart::kKey), slot = L.slot_bytes(KvPart::kKey);
  const int bs = L.block_size, hd = L.head_dim;
  auto rotate_layers = [&](int64_t l0, int64_t l1, int) {
    std::vector<float> k(static_cast<size_t>(hd));  // one dequantized head row
    std::vector<uint8_t> tiled_row(L.tiled ? row : 0);  // a tiled plane's row, loaded and stored back
    for (int64_t l = l0; l < l1; ++l)
      for (int64_t p = begin; p < end; ++p) {
        uint8_t* plane = kv.k_block(table[size_t(p / bs)], int(l));
        uint8_t* s = plane + size_t(p % bs) * slot;
        for (int h = 0; h < L.num_kv_heads; ++h) {
          uint8_t* r = L.tiled ? tiled_row.data() : s + size_t(h) * row;
          if (L.tiled) kv_tiled_load_row(kt, false, plane, L.num_kv_heads, hd, int(p % bs), h, r);
          kv_dequantize_row(kt, r, hd, k.data());
          apply_rope_cos_sin(k.data(), 1, hd, hp.rope_dim, cos_t.data(), sin_t.data(), hp.rope_neox);
          kv_quantize_row(kt, k.data(), hd, r);
          if (L.tiled) kv_tiled_store_row(kt, false, plane, L.num_kv_heads, hd, int(p % bs), h, r);
        }
      }
  };
  if (pool != nullptr && pool->num_threads() > 1) {
    pool->parallel_for(L.num_layers, rotate_layers);
  } else {
    rotate_layers(0, L.num_layers, 0);
  }
}

void apply_kv_shift(KvStorage& kv, const Model& model, const KvShiftPlan& plan, std::span<const int32_t> table,
                    ThreadPool* pool) {
  for (const KvSlotCopy& c : plan.copies) copy_kv_slots(kv, c);
  rerotate_keys(kv, model, table, plan.rotate_begin, plan.rotate_end, plan.delta, pool);
}

}  // namespace kvserve
