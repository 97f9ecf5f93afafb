// The tiled layout of a q8_0 or q4_0 K or V plane: what the tiled attention kernels read fastest
// (attention_tiled_avx512.cpp, attention_tiled_avx2.cpp).
//
// In the row layout (kvcache/kv_layout.h) a block plane is [block_size][num_kv_heads] rows, so
// attention must gather each row's codes and scale and reduce across lanes per position. In the
// tiled layout the plane is cut into tiles of kKvTile = 16 slots, [block_size / 16 tiles]
// [num_kv_heads] tile-heads of kv_tile_head_bytes(type, head_dim) = 16 rows' bytes each (the same
// total as the row layout), and a tile-head holds its 16 rows' code bytes transposed so that the 16
// positions (K) or the head dims (V) fall in the vector lanes. With C code bytes per row (q8_0:
// head_dim, one per value; q4_0: head_dim / 2, byte j of a 32-value group holding value j in its
// low nibble and value j + 16 in its high one, +8), w bytes per K lane (q8_0: 4, q4_0: 2) and b a
// code byte's index in its row:
//   K: codes  [C / w][16 slots][w]     code bytes b .. of slot s at ((b / w) * 16 + s) * w + b % w
//      scales [head_dim / 32][16 slots] f16
//   V: codes  [8 slot pairs][C][2]     code byte b of slots 2j, 2j + 1 at (j * C + b) * 2 + s % 2
//      scales [head_dim / 32][16 slots] f16
// q8_0 K code bytes are stored XOR 0x80 (the int8 code + 128, an unsigned byte: vpdpbusd's
// unsigned operand); every other byte is the row's own. So for q8_0 a K vector load holds dims
// 4i .. 4i + 3 of 16 slots (vpdpbusd's lanes) and a V load 16 dims of two slots; for q4_0 the
// low nibbles of a K load hold dims (2i, 2i + 1) of 32-value group g = i / 8 and the high nibbles
// dims (2i + 16, 2i + 17), and a V load's low nibbles 16 dims of a group, its high nibbles the
// group's next 16 (vpdpwssd's lanes after widening). The codes and scales are the row's
// (kernels/kv_quant.h): storing a row and loading it back gives the same bytes. Requires q8_0 or
// q4_0 K and V (each its own), head_dim % 32 == 0 and block_size % 16 == 0. The q8_0 K order
// (4-byte lanes, + 128) replaced 2-byte lanes on 2026-12-07; KvLayout's type signature names
// the version (",tiled2"), so no block stored in the old order is read in the new one.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/kv_quant.h"

namespace kvserve {

constexpr int kKvTile = 16;  // slots per tile

// PREFETCHW (a hint-NOP on x86 CPUs without it) of every cache line of [begin, end): the lines
// fetched ready for our stores.
inline void prefetch_for_write(const void* begin, const void* end) {
  const auto* p = reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(begin) & ~uintptr_t(63));
  for (; p < static_cast<const char*>(end); p += 64) {
#if defined(__x86_64__) || defined(__i386__)
    asm volatile("prefetchw %0" : : "m"(*p));
#else
    __builtin_prefetch(p, 1, 3);
#endif
  }
}
// The head dim of the tiled attention kernels (attention_tiled_avx512.cpp,
// attention_tiled_avx2.cpp); other head dims read tiled planes through gathered rows.
constexpr int kKvTiledKernelHeadDim = 64;

// Whether a type can be stored tiled (q8_0, q4_0).
inline bool kv_tileable(KvElem type) { return type == KvElem::Q8_0 || type == KvElem::Q4_0; }
// Whether a cache of these types and shapes can use the tiled layout.
bool kv_tiles_supported(KvElem k_type, KvElem v_type, int head_dim, int block_size);
// Bytes of one tile-head: 16 rows of head_dim values of `type`.
inline size_t kv_tile_head_bytes(KvElem type, int head_dim) { return size_t(kKvTile) * kv_row_bytes(type, head_dim); }
// Start of (tile, head) in a plane of num_kv_heads heads.
inline size_t kv_tile_offset(KvElem type, int tile, int head, int num_kv_heads, int head_dim) {
  return (size_t(tile) * size_t(num_kv_heads) + size_t(head)) * kv_tile_head_bytes(type, head_dim);
}

// Writes the row `row` (kv_row_bytes(type, head_dim) bytes) of (slot, head) into a tiled K
// (value = false) or V (value = true) plane.
void kv_tiled_store_row(KvElem type, bool value, uint8_t* plane, int num_kv_heads, int head_dim, int slot, int head,
                        const uint8_t* row);
// The byte ranges of a tile-head (offsets from its start) between which (slot)'s row lies: codes
// in [codes_begin, codes_end), scales in [scales_begin, scales_end).
struct KvTileRowSpan {
  size_t codes_begin, codes_end, scales_begin, scales_end;
};
KvTileRowSpan kv_tiled_row_span(KvElem type, bool value, int head_dim, int slot);
// Hints every cache line kv_tiled_store_row(type, value, plane, ..., slot, head, row) writes (those
// kv_tiled_row_span's ranges touch), for writing: a decode step's new row goes into its sequence's
// newest tile, which the weights streamed since its last visit have pushed out of the caches.
void kv_tiled_hint_store(KvElem type, bool value, const uint8_t* plane, int num_kv_heads, int head_dim, int slot,
                         int head);
// Reads (slot, head)'s row back out of a tiled plane.
void kv_tiled_load_row(KvElem type, bool value, const uint8_t* plane, int num_kv_heads, int head_dim, int slot,
                       int head, uint8_t* row);

}  // namespace kvserve
