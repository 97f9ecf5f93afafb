#include "kernels/kv_tiles.h"

#include <cstring>

namespace kvserve {

namespace {

// Code bytes of a row of head_dim values (kv_tiles.h's C).
size_t code_bytes(KvElem type, int head_dim) { return type == KvElem::Q4_0 ? size_t(head_dim) / 2 : size_t(head_dim); }

// Code bytes of one slot side by side in a K lane, or slots side by side in a V lane (kv_tiles.h's
// w): 4 for q8_0 K, else 2.
size_t lane_bytes(KvElem type, bool value) { return type == KvElem::Q8_0 && !value ? 4 : 2; }
// What a stored code byte is XORed with: q8_0 K codes are kept as code + 128 (kv_tiles.h).
uint8_t code_flip(KvElem type, bool value) { return type == KvElem::Q8_0 && !value ? 0x80 : 0; }

// Byte offsets inside a tile-head (kv_tiles.h) of code byte b of slot s, and of group g's scale
// of slot s.
size_t code_at(KvElem type, bool value, size_t c, int s, size_t b) {
  const size_t w = lane_bytes(type, value);
  if (value) return (size_t(s) / w * c + b) * w + size_t(s) % w;
  return ((b / w) * kKvTile + size_t(s)) * w + b % w;
}
size_t scale_at(size_t c, int s, int g) { return size_t(kKvTile) * c + (size_t(g) * kKvTile + size_t(s)) * 2; }

// Calls fn(code offset in the tile-head, code offset in the row) for every code byte, and
// fn_scale(scale offset in the tile-head, scale offset in the row) for every group.
template <typename Fn, typename FnScale>
void for_each_byte(KvElem type, bool value, int head_dim, int slot, Fn&& fn, FnScale&& fn_scale) {
  const size_t c = code_bytes(type, head_dim);
  const size_t per_group = c / size_t(head_dim / kKvGroup);  // 32 (q8_0) or 16 (q4_0) code bytes
  for (int g = 0; g < head_dim / kKvGroup; ++g) {
    const size_t row_group = size_t(g) * (2 + per_group);  // [f16 scale][codes]
    fn_scale(scale_at(c, slot, g), row_group);
    for (size_t u = 0; u < per_group; ++u)
      fn(code_at(type, value, c, slot, size_t(g) * per_group + u), row_group + 2 + u);
  }
}

}  // namespace

bool kv_tiles_supported(KvElem k_type, KvElem v_type, int head_dim, int block_size) {
  return kv_tileable(k_type) && kv_tileable(v_type) && head_dim > 0 && head_dim % kKvGroup == 0 && block_size > 0 &&
         block_size % kKvTile == 0;
}

void kv_tiled_store_row(KvElem type, bool value, uint8_t* plane, int num_kv_heads, int head_dim, int slot, int head,
                        const uint8_t* row) {
  // Direct loops rather than for_each_byte's per-byte index arithmetic: this runs for every
  // (token, layer, KV head, K/V) of a decode step (~40 ns a row through for_each_byte, in L1).
  uint8_t* t = plane + kv_tile_offset(type, slot / kKvTile, head, num_kv_heads, head_dim);
  const int s = slot % kKvTile;
  const size_t c = code_bytes(type, head_dim);
  const size_t per_group = c / size_t(head_dim / kKvGroup);
  for (int g = 0; g < head_dim / kKvGroup; ++g) {
    const uint8_t* src = row + size_t(g) * (2 + per_group);  // [f16 scale][codes]
    std::memcpy(t + scale_at(c, s, g), src, 2);
    const size_t b0 = size_t(g) * per_group;
    const uint8_t* codes = src + 2;
    uint8_t* d = t + code_at(type, value, c, s, b0);
    if (value) {  // byte b at (pair base + b) * 2 + s % 2: every other byte of the pair's run
      for (size_t u = 0; u < per_group; ++u) d[2 * u] = codes[u];
    } else if (type == KvElem::Q8_0) {  // bytes b .. b + 3 (b % 4 == 0) + 128, 16 slots' quads apart
      for (size_t u = 0; u < per_group; u += 4) {
        uint32_t quad;
        std::memcpy(&quad, codes + u, 4);
        quad ^= 0x80808080u;
        std::memcpy(d + u * kKvTile, &quad, 4);
      }
    } else {  // bytes b, b + 1 (b even) side by side, 16 slots' pairs (32 bytes) apart
      for (size_t u = 0; u < per_group; u += 2) {
        uint16_t pair;
        std::memcpy(&pair, codes + u, 2);
        std::memcpy(d + u * kKvTile, &pair, 2);
      }
    }
  }
}

KvTileRowSpan kv_tiled_row_span(KvElem type, bool value, int head_dim, int slot) {
  const int s = slot % kKvTile;
  const size_t c = code_bytes(type, head_dim);
  const int groups = head_dim / kKvGroup;
  KvTileRowSpan r;
  // K: the slot's byte pairs (q8_0: quads) lie in every 32 (64) bytes of the codes; V: in one
  // run of 2 C bytes per slot pair.
  r.codes_begin = code_at(type, value, c, s, 0);
  r.codes_end = code_at(type, value, c, s, c - 1) + 1;
  r.scales_begin = scale_at(c, s, 0);
  r.scales_end = scale_at(c, s, groups - 1) + 2;
  return r;
}

void kv_tiled_hint_store(KvElem type, bool value, const uint8_t* plane, int num_kv_heads, int head_dim, int slot,
                         int head) {
  const uint8_t* t = plane + kv_tile_offset(type, slot / kKvTile, head, num_kv_heads, head_dim);
  const KvTileRowSpan r = kv_tiled_row_span(type, value, head_dim, slot);
  prefetch_for_write(t + r.codes_begin, t + r.codes_end);
  prefetch_for_write(t + r.scales_begin, t + r.scales_end);
}

void kv_tiled_load_row(KvElem type, bool value, const uint8_t* plane, int num_kv_heads, int head_dim, int slot,
                       int head, uint8_t* row) {
  const uint8_t* t = plane + kv_tile_offset(type, slot / kKvTile, head, num_kv_heads, head_dim);
  const int s = slot % kKvTile;
  const uint8_t flip = code_flip(type, value);
  for_each_byte(
      type, value, head_dim, s, [&](size_t at, size_t to) { row[to] = t[at] ^ flip; },
      [&](size_t at, size_t to) { std::memcpy(row + to, t + at, 2); });
}

}  // namespace kvserve
