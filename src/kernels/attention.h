// Decode/prefill attention of a group of query heads over one sequence's paged K/V.
//
// Kept free of the KV-cache types (kernels sit below kvcache in the module graph): the caller
// describes the K/V planes of one layer with a PagedKvView (model/paged_attention.cpp builds it
// from a KvStorage), so these kernels can be tested on plain buffers.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvserve {

// One layer's K and V of one sequence. Position p lives in block table[p / block_size] at slot
// p % block_size; a slot is [num_kv_heads][head_dim] elements (f32, or f16 bits when f16).
// The K plane of block b starts at k0 + b * block_stride bytes (V likewise from v0).
struct PagedKvView {
  const uint8_t* k0;
  const uint8_t* v0;
  size_t block_stride;
  const int32_t* table;
  int block_size;
  int num_kv_heads;
  int head_dim;
  bool f16;
};

// For g in [0, group): out[g][0..head_dim) = softmax(q[g] . K[0..n) * scale) . V over KV head
// kv_head, where q and out are [group][head_dim] f32. K and V are read once for the whole group.
// One pass with an online softmax (running max and sum per head): no [n] score buffer. n >= 1.
void attention_group(const PagedKvView& kv, int64_t n, int kv_head, const float* q, int group, float scale,
                     float* out);

// The plain scalar version of the same (reference for tests; also used for head_dim not a multiple
// of 8 or above kMaxVectorHeadDim).
void attention_group_scalar(const PagedKvView& kv, int64_t n, int kv_head, const float* q, int group,
                            float scale, float* out);

constexpr int kMaxVectorHeadDim = 256;

}  // namespace kvserve
