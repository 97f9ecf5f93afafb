#include "kernels/kv_tiles.h"

#include <cstring>

namespace kvserve {

namespace {

// Byte offsets inside a tile-head (kv_tiles.h) of value (dim) of slot s's codes and of group g's
// scale of slot s.
size_t code_at(bool value, int head_dim, int s, int dim) {
  if (value) return (size_t(s / 2) * size_t(head_dim) + size_t(dim)) * 2 + size_t(s % 2);
  return (size_t(dim / 2) * kKvTile + size_t(s)) * 2 + size_t(dim % 2);
}
size_t scale_at(int head_dim, int s, int g) {
  return size_t(kKvTile) * size_t(head_dim) + (size_t(g) * kKvTile + size_t(s)) * 2;
}

// Calls fn(code offset in the tile-head, code offset in the row) for every value, and
// fn_scale(scale offset in the tile-head, scale offset in the row) for every group.
template <typename Fn, typename FnScale>
void for_each_byte(bool value, int head_dim, int slot, Fn&& fn, FnScale&& fn_scale) {
  constexpr size_t kGroupBytes = 2 + kKvGroup;  // q8_0: f16 scale, 32 codes
  for (int g = 0; g < head_dim / kKvGroup; ++g) {
    fn_scale(scale_at(head_dim, slot, g), size_t(g) * kGroupBytes);
    for (int e = 0; e < kKvGroup; ++e) fn(code_at(value, head_dim, slot, g * kKvGroup + e), size_t(g) * kGroupBytes + 2 + size_t(e));
  }
}

}  // namespace

bool kv_tiles_supported(KvElem k_type, KvElem v_type, int head_dim, int block_size) {
  return k_type == KvElem::Q8_0 && v_type == KvElem::Q8_0 && head_dim > 0 && head_dim % kKvGroup == 0 &&
         block_size > 0 && block_size % kKvTile == 0;
}

void kv_tiled_store_row(bool value, uint8_t* plane, int num_kv_heads, int head_dim, int slot, int head,
                        const uint8_t* row) {
  uint8_t* t = plane + kv_tile_offset(slot / kKvTile, head, num_kv_heads, head_dim);
  const int s = slot % kKvTile;
  for_each_byte(value, head_dim, s, [&](size_t at, size_t from) { t[at] = row[from]; },
                [&](size_t at, size_t from) { std::memcpy(t + at, row + from, 2); });
}

void kv_tiled_load_row(bool value, const uint8_t* plane, int num_kv_heads, int head_dim, int slot, int head,
                       uint8_t* row) {
  const uint8_t* t = plane + kv_tile_offset(slot / kKvTile, head, num_kv_heads, head_dim);
  const int s = slot % kKvTile;
  for_each_byte(value, head_dim, s, [&](size_t at, size_t to) { row[to] = t[at]; },
                [&](size_t at, size_t to) { std::memcpy(row + to, t + at, 2); });
}

}  // namespace kvserve
