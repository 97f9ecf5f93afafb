// Decode/prefill attention of a group of query heads over one sequence's paged K/V.
//
// Kept free of the KV-cache types (kernels sit below kvcache in the module graph): the caller
// describes the K/V planes of one layer with a PagedKvView (model/paged_attention.cpp builds it
// from a KvStorage), so these kernels can be tested on plain buffers.
//
// K and V may each be stored as f32, f16, bf16, q8_0 or q4_0 (kernels/kv_quant.h). Quantized and
// bf16 rows are dequantized on the fly, a tile of at most 16 positions at a time, into a stack
// buffer; no full-precision copy of the cache exists.
//
// Work can be split by position: attention_partial computes the unnormalized online-softmax state
// of a range of positions and attention_merge combines two such states exactly (up to rounding).
// attention_group always cuts [0, n) at multiples of kAttentionChunk and merges the chunks left
// to right, so a caller that computes the same chunks on different threads and merges them in the
// same order gets bit-identical results, whatever the thread count.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/kv_quant.h"
#include "kernels/vec_dot.h"

namespace kvserve {

// One layer's K and V of one sequence. Position p lives in block table[p / block_size] at slot
// p % block_size; a slot is [num_kv_heads] head rows of kv_row_bytes(type, head_dim) bytes each
// (k_type for K, v_type for V). The K plane of block b starts at k0 + b * block_stride bytes (V
// likewise from v0).
struct PagedKvView {
  const uint8_t* k0;
  const uint8_t* v0;
  size_t block_stride;
  const int32_t* table;
  int block_size;
  int num_kv_heads;
  int head_dim;
  KvElem k_type = KvElem::F32;
  KvElem v_type = KvElem::F32;
  // The planes in the tiled layout (kernels/kv_tiles.h: q8_0 or q4_0 K and V, head_dim % 32 == 0,
  // block_size % 16 == 0) instead of rows; a slot's rows are then not at the offsets above.
  bool tiled = false;
};

// Positions per chunk of attention_group (a multiple of the kernels' 16-position tile). 256 since
// the tiled q8_0 kernel (each chunk's cold start and merge weigh more against its cheaper work):
// smollm Q8_0, q8_0 K/V, against 128 on the Zen 5 VM, `kvserve bench --cache-compare` (two series
// of four alternations) the extra time of a context-2048 token 8% and 12% lower, batch 8 at
// context 512 x1.035 and prefill x1.066 (three alternations); batch 1 at contexts 200-250 x0.985
// (four, mixed), where a token's 3 KV heads now share one chunk over 2 threads.
constexpr int64_t kAttentionChunk = 256;
inline int64_t attention_num_chunks(int64_t n) { return (n + kAttentionChunk - 1) / kAttentionChunk; }
// Chunks of the positions [begin, end) (begin < end): cut at the multiples of kAttentionChunk,
// so the first and last may be short. Chunk c covers [chunk_begin(c), chunk_end(c)).
inline int64_t attention_num_chunks(int64_t begin, int64_t end) {
  return attention_num_chunks(end) - begin / kAttentionChunk;
}
inline int64_t attention_chunk_begin(int64_t begin, int64_t c) {
  const int64_t b = (begin / kAttentionChunk + c) * kAttentionChunk;
  return b > begin ? b : begin;
}
inline int64_t attention_chunk_end(int64_t begin, int64_t end, int64_t c) {
  const int64_t e = (begin / kAttentionChunk + c + 1) * kAttentionChunk;
  return e < end ? e : end;
}

// The online-softmax state of `group` heads over some positions, in one float buffer of
// attention_partial_floats(group, head_dim):
//   [0, group)              m[g]: the largest score seen
//   [group, 2 group)        s[g]: sum of e^(score - m[g])
//   [2 group, ... )         acc[g][head_dim]: sum of e^(score - m[g]) V (not yet divided by s)
inline size_t attention_partial_floats(int group, int head_dim) { return size_t(group) * size_t(head_dim + 2); }

// The state of the positions [begin, end) (begin < end) for the group's queries q[group][head_dim].
void attention_partial(const PagedKvView& kv, int64_t begin, int64_t end, int kv_head, const float* q, int group,
                       float scale, float* partial);
// The states of [begin, end) for KV heads kv_head0 .. kv_head0 + nheads - 1 at once: head h's
// queries at q + h * group * head_dim, its state at partials + h * attention_partial_floats(group,
// head_dim). Bit-identical to one attention_partial per head; the heads share one walk over the
// positions, so each slot's rows (contiguous for all heads) are read from memory together.
// hint_end > end: the positions [end, hint_end) are what this thread reads next (the following
// chunk of attention_group_range_heads); the tiled kernel hints their first K/V into cache as it
// nears `end` instead of starting that chunk cold. It changes no result.
void attention_partial_heads(const PagedKvView& kv, int64_t begin, int64_t end, int kv_head0, int nheads,
                             const float* q, int group, float scale, float* partials, int64_t hint_end = 0);
// The states of every position chunk of [begin, end) (attention_chunk_begin / attention_chunk_end,
// c = 0 .. attention_num_chunks(begin, end) - 1) for KV heads kv_head0 .. kv_head0 + nheads - 1:
// chunk c's head h at states + (c * nheads + h) * attention_partial_floats(group, head_dim), each
// bit-identical to attention_partial_heads over that chunk. One walk over the positions: the
// tiled kernel rounds the queries once and hints each chunk's first K/V while the previous one is
// read, where one call per chunk paid both again at every chunk (hint_end as above).
void attention_partial_heads_chunks(const PagedKvView& kv, int64_t begin, int64_t end, int kv_head0,
                                    int nheads, const float* q, int group, float scale, float* states,
                                    int64_t hint_end = 0);
// into = the state of both position sets (into's positions come first; merge left to right).
void attention_merge(int group, int head_dim, float* into, const float* other);
// out[group][head_dim] = acc / s.
void attention_finish(int group, int head_dim, const float* partial, float* out);

// For g in [0, group): out[g][0..head_dim) = softmax(q[g] . K[0..n) * scale) . V over KV head
// kv_head, where q and out are [group][head_dim] f32. K and V are read once for the whole group.
// Chunks of kAttentionChunk positions (attention_partial), merged left to right; no [n] buffer. n >= 1.
void attention_group(const PagedKvView& kv, int64_t n, int kv_head, const float* q, int group, float scale,
                     float* out);
// The same over the positions [begin, end) only (0 <= begin < end): a sliding attention window.
// Positions outside are never read, so their blocks may be released (table entries kNoBlock).
void attention_group_range(const PagedKvView& kv, int64_t begin, int64_t end, int kv_head, const float* q,
                           int group, float scale, float* out);

// attention_group_range for KV heads kv_head0 .. kv_head0 + nheads - 1 at once (q and out:
// [nheads][group][head_dim]), chunk by chunk through attention_partial_heads: bit-identical to one
// attention_group_range per head.
void attention_group_range_heads(const PagedKvView& kv, int64_t begin, int64_t end, int kv_head0, int nheads,
                                 const float* q, int group, float scale, float* out);

// The plain scalar version: one online-softmax pass over [0, n) (reference for tests).
void attention_group_scalar(const PagedKvView& kv, int64_t n, int kv_head, const float* q, int group,
                            float scale, float* out);
void attention_group_range_scalar(const PagedKvView& kv, int64_t begin, int64_t end, int kv_head, const float* q,
                                  int group, float scale, float* out);

// The vector path attention_partial takes: kAvx512 where the active kernel table is AVX-512's
// (KVSERVE_KERNELS caps it), else kAvx2. Both are exact to f32 rounding but for the query
// rounding below; they differ otherwise only in the order of additions, and one process always
// uses one of them.
Isa attention_isa();

// Whether attention_isa()'s path has a kernel for tiled planes (kernels/kv_tiles.h) of these
// types and head dim: q8_0 or q4_0 K and V (the same or mixed), head_dim 64, on both vector paths
// (attention_tiled_avx512.cpp, attention_tiled_avx2.cpp). Other tiled views are read through
// gathered rows (correct, but slower than the row layout).
bool attention_has_tiled_kernel(KvElem k_type, KvElem v_type, int head_dim);

// Where true (q8_0 or q4_0 K, head_dim 64 or 128, on either vector path), the scores are
// integer dot products of K's codes with the query rounded per 32 values to 16-bit integers:
// exactly the scores of the query attention_round_query gives (V and the softmax are unchanged).
// The rounding moves each query value by at most 2^-16 of its group's largest magnitude (an f16
// K row rounds each value by up to 2^-11 of itself). The tiled AVX-512 kernel on a q8_0 K plane
// rounds to 8 bits instead (attention_rounds_query_8bit).
bool attention_rounds_query(KvElem k_type, int head_dim);
// Whether attention over `kv` takes the tiled AVX-512 kernel with a q8_0 K plane (tiled view,
// head_dim 64, attention_isa() kAvx512): its scores are integer dot products (vpdpbusd) of K's
// codes with the query rounded per 32 values to 8-bit integers (attention_round_query with
// code_max 127, as GGUF engines round activations for q8_0 dot products: each value moves by at
// most 2^-8 of its group's largest magnitude); its V weights stay 16-bit (rounded against each
// 64-position span's largest, kernels/attention_tiled_avx512.cpp).
bool attention_rounds_query_8bit(const PagedKvView& kv);
// out[0..n) = q rounded as above: per group of 32 values (the last may be short), d = max |q| /
// code_max and each value round-to-nearest-even(q / d) * d, with the kernel's f32 steps.
void attention_round_query(const float* q, int n, float* out, int code_max = 32767);
// Tests only: pin the path (kAvx2, or kAvx512 where the CPU has it; kScalar unpins). Not for use
// while other threads run attention.
void attention_pin_isa(Isa isa);

// The vector path needs head_dim % 8 == 0 and head_dim <= kMaxVectorHeadDim; other head dims
// take the scalar partial.
constexpr int kMaxVectorHeadDim = 256;

}  // namespace kvserve
