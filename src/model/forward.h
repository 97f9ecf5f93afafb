// One batched forward pass of a llama-family transformer over a paged KV cache.
//
// A batch holds chunks of one or more sequences (prefill chunks and single decode tokens alike).
// Every chunk's new K/V rows are written into the KvStorage blocks named by its block table,
// then each token attends to all earlier positions of its own sequence through that table (or
// to the last `window` of them: SeqChunk::window).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvcache/kv_storage.h"
#include "model/model.h"
#include "util/status.h"
#include "util/thread_pool.h"

namespace kvserve {

struct SeqChunk {
  int64_t start_pos = 0;   // absolute position of the chunk's first token in its sequence
  int32_t num_tokens = 0;  // tokens of this chunk (>= 1)
  std::span<const int32_t> block_table;  // blocks covering positions [0, start_pos + num_tokens)
  bool all_logits = false;  // logits for every token of the chunk (perplexity), else only the last
  // Sliding attention window: the token at position p attends to positions
  // [max(0, p + 1 - window), p]; 0 means all earlier positions. Blocks wholly before the first
  // token's window may be holes (kNoBlock) in block_table.
  int64_t window = 0;
};

// Where ForwardPass::run's time goes (ForwardPass::set_phase_timing), summed over runs. Each
// matmul phase includes its pool job's hand-off and the wait for the slower thread; "attention"
// covers the q/k/v biases, RoPE, the K/V stores and attention itself; "other" the embedding
// lookup, the norms, the residual adds, SwiGLU and the set-up before the first layer; "output"
// the final norm and the vocabulary projection.
struct ForwardPhases {
  enum Phase { kQkv, kAttention, kWo, kFfnGateUp, kFfnDown, kOutput, kOther, kCount };
  double ms[kCount] = {};
  int64_t runs = 0;
  // "qkv", "attention", "wo", "ffn_gate_up", "ffn_down", "output", "other"
  static const char* name(int phase);
  double total_ms() const;
};

struct ForwardBatch {
  std::vector<int32_t> tokens;  // all chunks' tokens, concatenated in chunk order
  std::vector<SeqChunk> chunks;
};

class ForwardPass {
 public:
  ForwardPass(const Model& model, KvStorage& kv, ThreadPool& pool);

  // Runs the batch; on success `logits` holds one row of n_vocab floats per requested output
  // (chunk order: num_tokens rows for all_logits chunks, else one). Inputs are validated first
  // (token ids in range, block tables long enough, block ids in range), so an error leaves the
  // KV cache untouched.
  Status run(const ForwardBatch& batch, std::vector<float>* logits);

  // From now on each successful run adds its time per phase to *sink and counts itself there;
  // nullptr (the default) turns the clock reads off. The sink must outlive its use.
  void set_phase_timing(ForwardPhases* sink) { phases_ = sink; }

 private:
  // Charges the time since the previous lap to a phase of phases_ (nothing when it is null).
  class PhaseLap;
  ForwardPhases* phases_ = nullptr;

  Status validate(const ForwardBatch& batch) const;
  void ensure_workspace(int64_t num_tokens, int64_t num_out);
  // Runs fn(t0, t1) over the token rows [0, T): on the pool for prefill-sized batches, inline for
  // decode-sized ones (a pool hand-off costs more than a few rows of norms and adds). Each row is
  // computed the same way either way.
  template <typename Fn>
  void for_tokens(int64_t T, Fn&& fn) {
    constexpr int64_t kParallelTokens = 16;
    if (T < kParallelTokens) {
      fn(int64_t(0), T);
      return;
    }
    pool_.parallel_for(T, [&](int64_t t0, int64_t t1, int) { fn(t0, t1); });
  }
  // How attention_layer splits this batch's work (the same for every layer).
  void plan_attention(const ForwardBatch& batch);
  void attention_layer(const ForwardBatch& batch, int layer, const LayerWeights& L);
  // Token t's projections made ready for attention: q/k/v biases, RoPE on q and k.
  void prepare_token(int64_t t, const LayerWeights& L);
  // Work item i = (token i / n_head_kv, KV head i % n_head_kv): its chunk, the end and the
  // first position of what it attends to.
  const SeqChunk& item_chunk(const ForwardBatch& batch, int64_t i) const;
  int64_t item_end(int64_t i) const;
  int64_t item_first(const ForwardBatch& batch, int64_t i) const;
  void store_kv(const ForwardBatch& batch, int layer);
  void store_token_kv(const ForwardBatch& batch, int layer, int64_t t);
  // Hints the lines store_token_kv(batch, layer, t) will write (hint_kv_row_store).
  void hint_token_kv(const ForwardBatch& batch, int layer, int64_t t);
  bool tokens_read_no_new_rows_of_others(const ForwardBatch& batch);

  const Model& model_;
  KvStorage& kv_;
  ThreadPool& pool_;
  std::vector<float> rope_cos_, rope_sin_;  // [T][rope_dim / 2] angles of the batch's tokens

  // Workspace, grown on demand and reused across calls (T = tokens in the batch):
  std::vector<float> x_;     // [T][n_embd]   residual stream
  std::vector<float> h_;     // [T][n_embd]   normed input of a sub-layer
  std::vector<float> q_;     // [T][q_dim]
  std::vector<float> k_;     // [T][kv_dim]
  std::vector<float> v_;     // [T][kv_dim]
  std::vector<float> attn_;  // [T][q_dim]    attention output before wo
  std::vector<float> gate_;  // [T][n_ff]
  std::vector<float> up_;    // [T][n_ff] up's products, or [T][2 n_ff] matmul_swiglu's scratch
  std::vector<float> out_h_;   // [num_out][n_embd] rows whose logits are wanted
  std::vector<int64_t> token_pos_;   // [T] absolute position of each token
  std::vector<int32_t> token_chunk_;  // [T] chunk index of each token
  // attention_layer's position split (few work items): unit_first_[i] = first unit of work item
  // i (one unit per kAttentionChunk positions), [items + 1]; attn_partials_ = [units][group *
  // (head_dim + 2)] online-softmax states (kernels/attention.h).
  std::vector<int64_t> unit_first_;
  std::vector<float> attn_partials_;
  // Prefill: batch tokens [t_begin, t_end) of one sequence chunk whose windows all hold the whole
  // position chunk [chunk * kAttentionChunk, +kAttentionChunk), for one KV head: their queries
  // are stacked and read its K/V once. unit_grouped_ [units]: 1 when a group computes the unit;
  // unit_single_: the other units.
  struct QueryGroup {
    int32_t kv_head;
    int64_t chunk;
    int64_t t_begin, t_end;
  };
  static constexpr int64_t kQueryTokens = 8;
  std::vector<QueryGroup> query_groups_;
  std::vector<uint8_t> unit_grouped_;
  std::vector<int64_t> unit_single_;
  bool attn_few_ = false;    // fewer items than 4 per thread
  bool attn_units_ = false;  // the unit path (else one task per item)
  // Every KV head of a token in one kernel call (attention_partial_heads), so a slot's rows of all
  // heads are read together, where that leaves at least 2 tasks per thread: attn_heads_ on the
  // unit path (unit_heads_: the units of KV head 0, each standing for its chunk of every head of
  // its token), attn_token_heads_ on the one-task-per-item path (one task per token instead).
  bool attn_heads_ = false;
  bool attn_token_heads_ = false;
  // Decode batch on the one-task-per-token path (every chunk a single token whose attention reads
  // no other token's new K/V row: tokens_read_no_new_rows_of_others): each token's task also
  // applies its biases and RoPE and stores its K/V row, instead of the engine thread doing all of
  // them in turn first (at batch 8 that serial part was ~10% of a step, the other threads idling).
  bool attn_prepares_tokens_ = false;
  std::vector<int32_t> written_blocks_;  // scratch of tokens_read_no_new_rows_of_others
  std::vector<int64_t> unit_heads_;
  // The unit path's task order when it has both query groups and single units: task k runs
  // attn_order_[k] (< groups: that group, else that single), the groups spread evenly among the
  // singles (interleave_in_proportion). A group costs about 8 single units of a whole chunk: with
  // every group first, one thread's first claim held most of a long prompt's attention while the
  // other idled (smollm-135m, 1,900-token prefill: 853 against 350 ms busy in that pass).
  std::vector<int32_t> attn_order_;
};

}  // namespace kvserve
