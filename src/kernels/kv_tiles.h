// The tiled layout of a q8_0 K or V plane: what the AVX-512 attention reads fastest.
//
// In the row layout (kvcache/kv_layout.h) a block plane is [block_size][num_kv_heads] q8_0 rows,
// so attention must gather each row's codes and scale and reduce across lanes per position. In
// the tiled layout the plane is cut into tiles of kKvTile = 16 slots, [block_size / 16 tiles]
// [num_kv_heads] tile-heads of kv_tile_head_bytes(head_dim) = 16 rows' bytes each (the same total
// as the row layout), and a tile-head holds its 16 rows transposed so that the 16 positions (K)
// or the head dims (V) fall in the vector lanes:
//   K: codes  [head_dim / 2][16 slots][2] int8   dims 2i, 2i+1 of slot s at (i * 16 + s) * 2
//      scales [head_dim / 32][16 slots] f16
//   V: codes  [8 slot pairs][head_dim][2] int8   slots 2j, 2j+1 of dim d at (j * head_dim + d) * 2
//      scales [head_dim / 32][16 slots] f16
// The codes and scales are the q8_0 row's (kernels/kv_quant.h): storing a row and loading it back
// gives the same bytes. Requires q8_0 K and V, head_dim % 32 == 0 and block_size % 16 == 0.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/kv_quant.h"

namespace kvserve {

constexpr int kKvTile = 16;  // slots per tile
// The head dim of the AVX-512 tiled attention kernel (attention_tiled_avx512.cpp); other head
// dims read tiled planes through gathered rows.
constexpr int kKvTiledKernelHeadDim = 64;

// Whether a cache of these types and shapes can use the tiled layout.
bool kv_tiles_supported(KvElem k_type, KvElem v_type, int head_dim, int block_size);
// Bytes of one tile-head: 16 q8_0 rows of head_dim values.
inline size_t kv_tile_head_bytes(int head_dim) { return size_t(kKvTile) * kv_row_bytes(KvElem::Q8_0, head_dim); }
// Start of (tile, head) in a plane of num_kv_heads heads.
inline size_t kv_tile_offset(int tile, int head, int num_kv_heads, int head_dim) {
  return (size_t(tile) * size_t(num_kv_heads) + size_t(head)) * kv_tile_head_bytes(head_dim);
}

// Writes the q8_0 row `row` (kv_row_bytes(Q8_0, head_dim) bytes) of (slot, head) into a tiled K
// (value = false) or V (value = true) plane.
void kv_tiled_store_row(bool value, uint8_t* plane, int num_kv_heads, int head_dim, int slot, int head,
                        const uint8_t* row);
// Reads (slot, head)'s q8_0 row back out of a tiled plane.
void kv_tiled_load_row(bool value, const uint8_t* plane, int num_kv_heads, int head_dim, int slot, int head,
                       uint8_t* row);

}  // namespace kvserve
