// Attention over a sequence's K/V read through its block table (the vector kernels live in
// kernels/attention.h; this file binds them to KvStorage).
#pragma once

#include <cstdint>
#include <span>

#include "kvcache/kv_storage.h"

namespace kvserve {

// Writes one token's K and V rows (each [num_kv_heads][head_dim] f32) into slot `offset` of
// `block` for `layer`, converting to the storage dtype.
void store_kv_row(KvStorage& kv, int32_t block, int layer, int offset, const float* k, const float* v);

// out[head_dim] = softmax(q·K[0..num_positions) * scale) · V, for KV head `kv_head`, where position
// p lives in block_table[p / block_size] at offset p % block_size. A single pass with an online
// softmax (running max and sum), so no [num_positions] score buffer exists.
// As paged_attention_head for the `group` query heads that share KV head kv_head, whose queries
// are q[group][head_dim] and outputs out[group][head_dim]: K/V are read once for all of them.
void paged_attention_group(const KvStorage& kv, int layer, std::span<const int32_t> block_table,
                           int64_t num_positions, int kv_head, const float* q, int group, float scale,
                           float* out);

void paged_attention_head(const KvStorage& kv, int layer, std::span<const int32_t> block_table,
                          int64_t num_positions, int kv_head, const float* q, float scale, float* out);

}  // namespace kvserve
