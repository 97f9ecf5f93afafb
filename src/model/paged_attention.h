// Attention over a sequence's K/V read through its block table (the vector kernels live in
// kernels/attention.h; this file binds them to KvStorage).
#pragma once

#include <cstdint>
#include <span>

#include "kernels/attention.h"
#include "kvcache/kv_storage.h"

namespace kvserve {

// The kernels' element type for a cache type.
KvElem kv_elem_of(KvDType dtype);

// Whether a cache of this layout should use the tiled layout (kvcache/kv_layout.h,
// kernels/kv_tiles.h): where the layout can tile and the attention path has a tiled kernel for
// its types and head dim (attention_has_tiled_kernel); elsewhere the tiled planes would be read
// through gathered rows, slower than the row layout. KVSERVE_KV_TILES=0 in the environment turns it off
// (comparisons, troubleshooting).
bool kv_tiles_preferred(const KvLayout& layout);

// Writes one token's K and V rows (each [num_kv_heads][head_dim] f32) into slot `offset` of
// `block` for `layer`, converting each head row to its plane's type (quantizing per group of 32
// values for q8_0/q4_0).
void store_kv_row(KvStorage& kv, int32_t block, int layer, int offset, const float* k, const float* v);
// Hints every cache line store_kv_row(kv, block, layer, offset, ...) will write, for writing. A
// decode step stores into each sequence's newest block, which the weights streamed since its last
// visit have pushed out of the caches; hinted together, a token's ~60 lines (smollm-135m, q8_0
// K/V, tiled) miss at once instead of one store after another.
void hint_kv_row_store(const KvStorage& kv, int32_t block, int layer, int offset);

// The kernels' view of one layer of a sequence whose positions live in block_table.
PagedKvView paged_kv_view(const KvStorage& kv, int layer, std::span<const int32_t> block_table);

// out[group][head_dim] = softmax(q·K[0..num_positions) * scale) · V for the `group` query heads
// that share KV head kv_head, whose queries are q[group][head_dim]: K/V are read once for all
// of them. Position p lives in block_table[p / block_size] at offset p % block_size. An online
// softmax over chunks of kAttentionChunk positions (kernels/attention.h), so no
// [num_positions] score buffer exists.
void paged_attention_group(const KvStorage& kv, int layer, std::span<const int32_t> block_table,
                           int64_t num_positions, int kv_head, const float* q, int group, float scale,
                           float* out);
// The same over positions [first, num_positions) only (a sliding window; 0 <= first <
// num_positions). Blocks wholly before `first` are never read and may be holes.
void paged_attention_group(const KvStorage& kv, int layer, std::span<const int32_t> block_table, int64_t first,
                           int64_t num_positions, int kv_head, const float* q, int group, float scale, float* out);

void paged_attention_head(const KvStorage& kv, int layer, std::span<const int32_t> block_table,
                          int64_t num_positions, int kv_head, const float* q, float scale, float* out);

}  // namespace kvserve
