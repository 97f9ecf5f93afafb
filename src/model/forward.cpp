#include "model/forward.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>

#include "kernels/ops.h"
#include "kernels/vec_dot.h"
#include "model/paged_attention.h"

namespace kvserve {

ForwardPass::ForwardPass(const Model& model, KvStorage& kv, ThreadPool& pool)
    : model_(model), kv_(kv), pool_(pool) {}

Status ForwardPass::validate(const ForwardBatch& batch) const {
  const ModelHparams& hp = model_.hparams();
  const KvLayout& L = kv_.layout();
  if (L.num_layers != hp.n_layer || L.num_kv_heads != hp.n_head_kv || L.head_dim != hp.head_dim)
    return invalid_argument("KV storage layout does not match the model");
  int64_t total = 0;
  for (const SeqChunk& c : batch.chunks) {
    if (c.num_tokens <= 0 || c.start_pos < 0) return invalid_argument("empty chunk or negative position");
    if (c.window < 0) return invalid_argument("negative attention window");
    int64_t end = c.start_pos + c.num_tokens;
    int64_t need_blocks = (end + L.block_size - 1) / L.block_size;
    if (int64_t(c.block_table.size()) < need_blocks)
      return invalid_argument("block table holds " + std::to_string(c.block_table.size()) +
                              " blocks but positions up to " + std::to_string(end) + " need " +
                              std::to_string(need_blocks));
    // Blocks before the first token's window are never read (they may be released holes).
    const int64_t first_read = c.window > 0 ? std::max<int64_t>(0, c.start_pos + 1 - c.window) : 0;
    for (int64_t b = first_read / L.block_size; b < need_blocks; ++b)
      if (c.block_table[size_t(b)] < 0 || c.block_table[size_t(b)] >= kv_.num_blocks())
        return invalid_argument("block id out of range in block table");
    total += c.num_tokens;
  }
  if (total != int64_t(batch.tokens.size()))
    return invalid_argument("batch token count does not match its chunks");
  for (int32_t t : batch.tokens)
    if (t < 0 || t >= hp.n_vocab)
      return invalid_argument("token id " + std::to_string(t) + " out of range (vocabulary of " +
                              std::to_string(hp.n_vocab) + ")");
  return {};
}

void ForwardPass::ensure_workspace(int64_t T, int64_t num_out) {
  const ModelHparams& hp = model_.hparams();
  auto grow = [](std::vector<float>& v, int64_t n) {
    if (int64_t(v.size()) < n) v.resize(size_t(n));
  };
  grow(x_, T * hp.n_embd);
  grow(h_, T * hp.n_embd);
  grow(q_, T * hp.q_dim());
  grow(k_, T * hp.kv_dim());
  grow(v_, T * hp.kv_dim());
  grow(attn_, T * hp.q_dim());
  grow(gate_, T * hp.n_ff);
  grow(up_, 2 * T * hp.n_ff);  // the up products, or matmul_swiglu's gate and up products
  grow(out_h_, num_out * hp.n_embd);
}

// Writes the batch's K/V rows of `layer` into their slots: position p of a chunk lives in
// block table[p / block_size] at offset p % block_size.
void ForwardPass::store_kv(const ForwardBatch& batch, int layer) {
  // Decode-sized batches: every token's lines requested before the first store, so that their
  // misses overlap (a prefill's tokens share their tiles: the first store of each pays alone).
  constexpr int64_t kMaxHintedTokens = 16;
  const int64_t T = int64_t(batch.tokens.size());
  if (T <= kMaxHintedTokens)
    for (int64_t t = 0; t < T; ++t) hint_token_kv(batch, layer, t);
  for (int64_t t = 0; t < T; ++t) store_token_kv(batch, layer, t);
}

void ForwardPass::hint_token_kv(const ForwardBatch& batch, int layer, int64_t t) {
  const int bs = kv_.layout().block_size;
  const SeqChunk& c = batch.chunks[size_t(token_chunk_[size_t(t)])];
  const int64_t pos = token_pos_[size_t(t)];
  hint_kv_row_store(kv_, c.block_table[size_t(pos / bs)], layer, int(pos % bs));
}

void ForwardPass::store_token_kv(const ForwardBatch& batch, int layer, int64_t t) {
  const int bs = kv_.layout().block_size;
  const size_t row_elems = size_t(model_.hparams().kv_dim());
  const SeqChunk& c = batch.chunks[size_t(token_chunk_[size_t(t)])];
  const int64_t pos = token_pos_[size_t(t)];
  store_kv_row(kv_, c.block_table[size_t(pos / bs)], layer, int(pos % bs), &k_[size_t(t) * row_elems],
               &v_[size_t(t) * row_elems]);
}

void ForwardPass::prepare_token(int64_t t, const LayerWeights& L) {
  const ModelHparams& hp = model_.hparams();
  const int64_t half = hp.rope_dim / 2;
  float* q = &q_[size_t(t * hp.q_dim())];
  float* k = &k_[size_t(t * hp.kv_dim())];
  float* v = &v_[size_t(t * hp.kv_dim())];
  if (!L.bq.empty()) {
    add(q, L.bq.data(), hp.q_dim(), q);
    add(k, L.bk.data(), hp.kv_dim(), k);
    add(v, L.bv.data(), hp.kv_dim(), v);
  }
  const float* cs = &rope_cos_[size_t(t * half)];
  const float* sn = &rope_sin_[size_t(t * half)];
  apply_rope_cos_sin(q, hp.n_head, hp.head_dim, hp.rope_dim, cs, sn, hp.rope_neox);
  apply_rope_cos_sin(k, hp.n_head_kv, hp.head_dim, hp.rope_dim, cs, sn, hp.rope_neox);
}

// True when every chunk is a single token whose K/V block no other chunk writes or reads: then a
// token's attention reads no other token's new row, whatever order the tokens are stored in. The
// scheduler's decode batches are like that (one token per sequence; a block being written is never
// shared), but the forward pass does not rely on it: two tokens of one sequence in one batch, or
// chunks sharing a written block, take the store-everything-first path.
bool ForwardPass::tokens_read_no_new_rows_of_others(const ForwardBatch& batch) {
  const int bs = kv_.layout().block_size;
  written_blocks_.clear();
  for (const SeqChunk& c : batch.chunks) {
    if (c.num_tokens != 1) return false;
    written_blocks_.push_back(c.block_table[size_t(c.start_pos / bs)]);
  }
  std::sort(written_blocks_.begin(), written_blocks_.end());
  if (std::adjacent_find(written_blocks_.begin(), written_blocks_.end()) != written_blocks_.end()) return false;
  for (const SeqChunk& c : batch.chunks) {
    const int64_t own = c.start_pos / bs;
    const int64_t first = c.window > 0 ? std::max<int64_t>(0, c.start_pos + 1 - c.window) / bs : 0;
    for (int64_t b = first; b < own; ++b)  // earlier blocks read: none may be written by another token
      if (std::binary_search(written_blocks_.begin(), written_blocks_.end(), c.block_table[size_t(b)])) return false;
  }
  return true;
}

int64_t ForwardPass::item_end(int64_t i) const {
  return token_pos_[size_t(i / model_.hparams().n_head_kv)] + 1;
}

const SeqChunk& ForwardPass::item_chunk(const ForwardBatch& batch, int64_t i) const {
  return batch.chunks[size_t(token_chunk_[size_t(i / model_.hparams().n_head_kv)])];
}

int64_t ForwardPass::item_first(const ForwardBatch& batch, int64_t i) const {
  const int64_t w = item_chunk(batch, i).window;
  return w > 0 ? std::max<int64_t>(0, item_end(i) - w) : int64_t(0);
}

// Work is cut into units, one per (item, kAttentionChunk chunk of its positions), merged per
// item left to right exactly as attention_group_range merges them, so every path gives
// bit-identical results:
//  - few items (decode of a few sequences, where a long context makes attention dominate):
//    units spread the positions of each item over every thread and are taken chunk by chunk,
//    every KV head of a chunk in turn (see below);
//  - prefill: the tokens of one sequence chunk that all cover the same whole chunk of positions
//    share its K/V reads (query_groups_): up to kQueryTokens tokens' queries are stacked as one
//    group of heads, and each token's state is scattered to its unit. Per-head arithmetic does
//    not depend on the heads computed alongside, so this equals the token-by-token result;
//  - otherwise one task per item (attn_units_ false).
// The plan depends on the batch only, so run() makes it once for every layer.
void ForwardPass::plan_attention(const ForwardBatch& batch) {
  const int64_t nkv = model_.hparams().n_head_kv;
  const int64_t items = int64_t(batch.tokens.size()) * nkv;
  constexpr int64_t C = kAttentionChunk;
  constexpr int64_t kItemsPerThread = 4;
  attn_few_ = items < int64_t(pool_.num_threads()) * kItemsPerThread;
  attn_units_ = false;
  attn_heads_ = false;
  const int64_t min_tasks = 2 * int64_t(pool_.num_threads());
  attn_token_heads_ = nkv > 1 && int64_t(batch.tokens.size()) >= min_tasks;
  attn_prepares_tokens_ = false;
  query_groups_.clear();
  attn_order_.clear();
  if (!attn_few_) {
    int64_t t0 = 0;  // batch index of the sequence chunk's first token
    for (const SeqChunk& c : batch.chunks) {
      const int64_t n = c.num_tokens;
      // Chunk a is whole for token k (position start_pos + k) when (a + 1) * C <= position + 1
      // and, with a window, the window starts at or before a * C: a contiguous run of tokens.
      for (int64_t a = 0; n >= 2 && (a + 1) * C <= c.start_pos + n; ++a) {
        const int64_t lo = std::max<int64_t>(0, (a + 1) * C - 1 - c.start_pos);
        const int64_t hi = c.window > 0 ? std::min<int64_t>(n, a * C + c.window - c.start_pos) : n;
        if (hi - lo < 2) continue;
        for (int64_t h = 0; h < nkv; ++h)
          for (int64_t k = lo; k < hi; k += kQueryTokens)
            query_groups_.push_back({int32_t(h), a, t0 + k, t0 + std::min(hi, k + kQueryTokens)});
      }
      t0 += n;
    }
    // Batched decode: one task per item keeps a sequence's heads on one thread (its K/V lines
    // stay in L2 between heads); position units measured no faster there.
    if (query_groups_.empty()) {
      attn_prepares_tokens_ = attn_token_heads_ && tokens_read_no_new_rows_of_others(batch);
      return;
    }
  }
  int64_t units = 0;
  unit_first_.resize(size_t(items) + 1);
  for (int64_t i = 0; i < items; ++i) {
    unit_first_[size_t(i)] = units;
    units += attention_num_chunks(item_first(batch, i), item_end(i));
  }
  unit_first_[size_t(items)] = units;
  if (attn_few_ && units <= items) return;  // no item has more than one chunk
  attn_units_ = true;
  unit_grouped_.assign(size_t(units), 0);
  for (const QueryGroup& g : query_groups_)
    for (int64_t t = g.t_begin; t < g.t_end; ++t) {
      const int64_t i = t * nkv + g.kv_head;
      unit_grouped_[size_t(unit_first_[size_t(i)] + g.chunk - item_first(batch, i) / C)] = 1;
    }
  // The other units in (token, position chunk, KV head) order: a slot holds all KV heads' rows
  // side by side, so a thread that takes a chunk's heads in turn finds the cache lines the
  // first head pulled in still in L1/L2 (item-major order read them from memory once per KV
  // head at long contexts: decode at context 2000, q8_0 K/V, went 171 -> 215 tok/s). Results do
  // not depend on the order: each unit has its own state, merged per item in position order.
  unit_single_.clear();
  for (int64_t t = 0; t < int64_t(batch.tokens.size()); ++t) {
    const int64_t i0 = t * nkv;  // every KV head of a token sees the same positions
    const int64_t n = unit_first_[size_t(i0) + 1] - unit_first_[size_t(i0)];
    for (int64_t c = 0; c < n; ++c)
      for (int64_t h = 0; h < nkv; ++h) {
        const int64_t u = unit_first_[size_t(i0 + h)] + c;
        if (!unit_grouped_[size_t(u)]) unit_single_.push_back(u);
      }
  }
  // Decode of a few sequences: one task per (token, position chunk) for all KV heads when there
  // are enough of them (no query groups on this path, so every unit is single).
  unit_heads_.clear();
  if (attn_few_ && nkv > 1) {
    for (int64_t t = 0; t < int64_t(batch.tokens.size()); ++t) {
      const int64_t i0 = t * nkv;
      for (int64_t u = unit_first_[size_t(i0)]; u < unit_first_[size_t(i0) + 1]; ++u) unit_heads_.push_back(u);
    }
    attn_heads_ = int64_t(unit_heads_.size()) >= min_tasks;
  }
  // Groups and singles interleaved in proportion (attn_order_, forward.h).
  const int64_t singles = int64_t(attn_heads_ ? unit_heads_.size() : unit_single_.size());
  if (!query_groups_.empty() && singles > 0)
    attn_order_ = interleave_in_proportion(int64_t(query_groups_.size()), singles);
}

void ForwardPass::attention_layer(const ForwardBatch& batch, int layer, const LayerWeights& L) {
  const ModelHparams& hp = model_.hparams();
  const int64_t T = int64_t(batch.tokens.size());
  // Each thread done with its attention share warms the start of its share of wo.
  const NextWeightsHint wo{{&L.wo, 1}, T, &pool_};
  const ThreadPool::AfterFn hint_wo = std::cref(wo);
  const float scale = 1.0f / std::sqrt(float(hp.head_dim));
  const int group = hp.n_head / hp.n_head_kv;
  const int64_t nkv = hp.n_head_kv;
  const int64_t items = T * nkv;
  constexpr int64_t C = kAttentionChunk;
  // A work item is one (token, KV head): the `group` query heads sharing a KV head are adjacent
  // in q_ ([n_head][head_dim] per token) and attend together, so each K/V row is read once per
  // group. q/out offset of item i = (t, kv_head):
  auto item_offset = [&](int64_t i) {
    return size_t((i / nkv) * hp.q_dim() + (i % nkv) * group * hp.head_dim);
  };
  auto item_table = [&](int64_t i) { return item_chunk(batch, i).block_table; };
  if (!attn_units_ && attn_token_heads_) {  // one task per token, every KV head at once
    pool_.parallel_for(T, [&](int64_t begin, int64_t end, int) {
      for (int64_t t = begin; t < end; ++t) {
        if (attn_prepares_tokens_) {
          // This token's store lines now, the next one's to arrive while this token attends (the
          // next index is usually this thread's next claim).
          if (t == begin) hint_token_kv(batch, layer, t);
          if (t + 1 < T) hint_token_kv(batch, layer, t + 1);
          prepare_token(t, L);
          store_token_kv(batch, layer, t);
        }
        const int64_t i0 = t * nkv;
        const size_t off = item_offset(i0);
        attention_group_range_heads(paged_kv_view(kv_, layer, item_table(i0)), item_first(batch, i0), item_end(i0), 0,
                                    int(nkv), &q_[off], group, scale, &attn_[off]);
      }
    }, 1, &hint_wo);
    return;
  }
  if (!attn_units_) {
    pool_.parallel_for(items, [&](int64_t begin, int64_t end, int) {
      for (int64_t i = begin; i < end; ++i) {
        const size_t off = item_offset(i);
        paged_attention_group(kv_, layer, item_table(i), item_first(batch, i), item_end(i), int(i % nkv), &q_[off],
                              group, scale, &attn_[off]);
      }
    }, 1, &hint_wo);
    return;
  }
  // The unit of item i for absolute chunk a (positions [a * C, (a + 1) * C)).
  auto unit_of = [&](int64_t i, int64_t a) { return unit_first_[size_t(i)] + a - item_first(batch, i) / C; };
  // attn_partials_: [units][pf], item i's chunk c at unit unit_first_[i] + c.
  const int hd = hp.head_dim;
  const size_t pf = attention_partial_floats(group, hd);
  const int64_t units = unit_first_[size_t(items)];
  if (attn_partials_.size() < size_t(units) * pf) attn_partials_.resize(size_t(units) * pf);
  const int64_t num_groups = int64_t(query_groups_.size());
  const int64_t singles = int64_t(attn_heads_ ? unit_heads_.size() : unit_single_.size());
  pool_.parallel_for(num_groups + singles, [&](int64_t begin, int64_t end, int) {
    // Stacked queries [tokens * group][hd] and their state (layout of attention.h) for one group;
    // hs: [nkv][pf], one chunk's states of every KV head of a token.
    thread_local std::vector<float> qs, st, hs;
    for (int64_t k = begin; k < end; ++k) {
      const int64_t w = attn_order_.empty() ? k : attn_order_[size_t(k)];
      if (w >= num_groups && attn_heads_) {
        const int64_t u0 = unit_heads_[size_t(w - num_groups)];
        const int64_t i0 = std::upper_bound(unit_first_.begin(), unit_first_.end(), u0) - unit_first_.begin() - 1;
        const int64_t c = u0 - unit_first_[size_t(i0)], first = item_first(batch, i0);
        hs.resize(size_t(nkv) * pf);
        // The unit after this one is mostly this thread's next (an owner claims its part of the
        // units front to back) and, while the sequence has chunks left, its next chunk: the
        // kernel hints that chunk's first K/V as this one ends instead of it starting cold
        // (hint_end, kernels/attention.h). smollm-135m Q8_0, q8_0 K/V, context 2000, Zen 5 VM:
        // attention 0.97 -> 0.91 ms per decode step (`kvserve bench --phases`, six alternations).
        const int64_t last = item_end(i0);
        const bool more = c + 1 < unit_first_[size_t(i0) + 1] - unit_first_[size_t(i0)];
        attention_partial_heads(paged_kv_view(kv_, layer, item_table(i0)), attention_chunk_begin(first, c),
                                attention_chunk_end(first, last, c), 0, int(nkv), &q_[item_offset(i0)], group,
                                scale, hs.data(), more ? attention_chunk_end(first, last, c + 1) : 0);
        for (int64_t h = 0; h < nkv; ++h)
          std::memcpy(&attn_partials_[size_t(unit_first_[size_t(i0 + h)] + c) * pf], &hs[size_t(h) * pf],
                      pf * sizeof(float));
        continue;
      }
      if (w < num_groups) {
        const QueryGroup& g = query_groups_[size_t(w)];
        const int64_t R = g.t_end - g.t_begin;
        const int G = int(R) * group;
        qs.resize(size_t(G) * size_t(hd));
        st.resize(attention_partial_floats(G, hd));
        for (int64_t r = 0; r < R; ++r)
          std::memcpy(&qs[size_t(r) * group * hd], &q_[item_offset((g.t_begin + r) * nkv + g.kv_head)],
                      size_t(group) * size_t(hd) * sizeof(float));
        const int64_t i0 = g.t_begin * nkv + g.kv_head;
        attention_partial(paged_kv_view(kv_, layer, item_table(i0)), g.chunk * C, (g.chunk + 1) * C, g.kv_head,
                          qs.data(), G, scale, st.data());
        for (int64_t r = 0; r < R; ++r) {
          float* dst = &attn_partials_[size_t(unit_of((g.t_begin + r) * nkv + g.kv_head, g.chunk)) * pf];
          const size_t h0 = size_t(r) * size_t(group);
          std::memcpy(dst, &st[h0], size_t(group) * sizeof(float));                       // m
          std::memcpy(dst + group, &st[size_t(G) + h0], size_t(group) * sizeof(float));   // s
          std::memcpy(dst + 2 * group, &st[2 * size_t(G) + h0 * size_t(hd)], size_t(group) * size_t(hd) * sizeof(float));
        }
        continue;
      }
      const int64_t u = unit_single_[size_t(w - num_groups)];
      const int64_t i = std::upper_bound(unit_first_.begin(), unit_first_.end(), u) - unit_first_.begin() - 1;
      const int64_t c = u - unit_first_[size_t(i)], first = item_first(batch, i);
      const PagedKvView view = paged_kv_view(kv_, layer, item_table(i));
      attention_partial(view, attention_chunk_begin(first, c), attention_chunk_end(first, item_end(i), c),
                        int(i % nkv), &q_[item_offset(i)], group, scale, &attn_partials_[size_t(u) * pf]);
    }
  }, 1, &hint_wo);
  auto merge_items = [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end; ++i) {
      float* first = &attn_partials_[size_t(unit_first_[size_t(i)]) * pf];
      for (int64_t u = unit_first_[size_t(i)] + 1; u < unit_first_[size_t(i) + 1]; ++u)
        attention_merge(group, hd, first, &attn_partials_[size_t(u) * pf]);
      attention_finish(group, hd, first, &attn_[item_offset(i)]);
    }
  };
  // A few items merge in less time than waking the pool takes (decode: one barrier fewer per layer).
  if (attn_few_) {
    merge_items(0, items, 0);
  } else {
    pool_.parallel_for(items, merge_items);
  }
}

const char* ForwardPhases::name(int phase) {
  static constexpr const char* kNames[kCount] = {"qkv",      "attention", "wo",   "ffn_gate_up",
                                                 "ffn_down", "output",    "other"};
  return phase >= 0 && phase < kCount ? kNames[phase] : "?";
}

double ForwardPhases::total_ms() const {
  double t = 0;
  for (double v : ms) t += v;
  return t;
}

// Laps are taken in the engine thread between pool jobs, so each phase's time is wall time of
// the whole pass, the pool's hand-offs included. A run's laps are summed locally and added to the
// sink only when the run succeeds.
class ForwardPass::PhaseLap {
 public:
  explicit PhaseLap(ForwardPhases* sink) : sink_(sink) {
    if (sink_ != nullptr) last_ = Clock::now();
  }
  void operator()(ForwardPhases::Phase phase) {
    if (sink_ == nullptr) return;
    const auto now = Clock::now();
    ms_[phase] += std::chrono::duration<double, std::milli>(now - last_).count();
    last_ = now;
  }
  void commit() {
    if (sink_ == nullptr) return;
    for (int p = 0; p < ForwardPhases::kCount; ++p) sink_->ms[p] += ms_[p];
    ++sink_->runs;
  }

 private:
  using Clock = std::chrono::steady_clock;
  ForwardPhases* sink_;
  Clock::time_point last_;
  double ms_[ForwardPhases::kCount] = {};
};

Status ForwardPass::run(const ForwardBatch& batch, std::vector<float>* logits) {
  PhaseLap lap(phases_);
  KVS_RETURN_IF_ERROR(validate(batch));
  const ModelHparams& hp = model_.hparams();
  const ModelWeights& w = model_.weights();
  const int64_t T = int64_t(batch.tokens.size());
  int64_t num_out = 0;
  for (const SeqChunk& c : batch.chunks) num_out += c.all_logits ? c.num_tokens : 1;
  ensure_workspace(T, num_out);

  token_pos_.resize(size_t(T));
  token_chunk_.resize(size_t(T));
  {
    int64_t t = 0;
    for (size_t ci = 0; ci < batch.chunks.size(); ++ci)
      for (int32_t i = 0; i < batch.chunks[ci].num_tokens; ++i, ++t) {
        token_pos_[size_t(t)] = batch.chunks[ci].start_pos + i;
        token_chunk_[size_t(t)] = int32_t(ci);
      }
  }
  plan_attention(batch);

  const int64_t E = hp.n_embd;
  float* x = x_.data();
  float* h = h_.data();
  get_rows(w.tok_embd, batch.tokens.data(), T, x);
  // Rotary angles once per token for all layers (and for both q and k), built as the reference
  // builds them (linear scaling and Llama-3 factors included): [T][rope_dim / 2] each.
  const int64_t half = hp.rope_dim / 2;
  rope_cos_.resize(size_t(T * half));
  rope_sin_.resize(size_t(T * half));
  for_tokens(T, [&](int64_t t0, int64_t t1) {
    const auto& factors = w.rope_factors;
    for (int64_t t = t0; t < t1; ++t)
      rope_cos_sin(int(token_pos_[size_t(t)]), hp.rope_freq_base, hp.rope_freq_scale,
                   factors.empty() ? nullptr : factors.data(), hp.rope_dim, &rope_cos_[size_t(t * half)],
                   &rope_sin_[size_t(t * half)]);
  });

  for (int l = 0; l < hp.n_layer; ++l) {
    const LayerWeights& L = w.layers[size_t(l)];
    // --- attention sub-layer ---
    for_tokens(T, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) rmsnorm(x + t * E, L.attn_norm.data(), E, hp.rms_eps, h + t * E);
    });
    lap(ForwardPhases::kOther);
    {
      // One activation conversion and one pool pass for the three projections of h.
      const WeightMatrix qkv[3] = {L.wq, L.wk, L.wv};
      float* const outs[3] = {q_.data(), k_.data(), v_.data()};
      matmul_multi(qkv, 3, h, T, outs, &pool_, {&L.wo, 1});
    }
    lap(ForwardPhases::kQkv);
    if (!attn_prepares_tokens_) {
      for_tokens(T, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) prepare_token(t, L);
      });
      store_kv(batch, l);
    }
    attention_layer(batch, l, L);
    lap(ForwardPhases::kAttention);
    const WeightMatrix gate_up[2] = {L.w_gate, L.w_up};
    // gate and up packed as one pair for the table in use (Model::repack_weights), else apart.
    const bool paired = is_packed_for(L.w_gate_up, active_kernels());
    matmul(L.wo, attn_.data(), T, h, &pool_,
           paired ? NextWeights{&L.w_gate_up, 1, true} : NextWeights{gate_up, 2});
    lap(ForwardPhases::kWo);

    // --- feed-forward sub-layer (SwiGLU), after the attention residual ---
    for_tokens(T, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        add(x + t * E, h + t * E, E, x + t * E);
        rmsnorm(x + t * E, L.ffn_norm.data(), E, hp.rms_eps, h + t * E);
      }
    });
    lap(ForwardPhases::kOther);
    if (paired) {
      // gate_ = swiglu(h W_gate^T, h W_up^T), the SwiGLU inside the pass (up_: the products).
      matmul_swiglu(L.w_gate_up, h, T, gate_.data(), up_.data(), &pool_, {&L.w_down, 1});
      lap(ForwardPhases::kFfnGateUp);
    } else {
      {
        float* const outs[2] = {gate_.data(), up_.data()};
        matmul_multi(gate_up, 2, h, T, outs, &pool_, {&L.w_down, 1});
      }
      lap(ForwardPhases::kFfnGateUp);
      const int64_t F = hp.n_ff;
      for_tokens(T, [&](int64_t t0, int64_t t1) {
        swiglu(&gate_[size_t(t0 * F)], &up_[size_t(t0 * F)], (t1 - t0) * F, &gate_[size_t(t0 * F)]);
      });
      lap(ForwardPhases::kOther);
    }
    if (l + 1 < hp.n_layer) {
      const LayerWeights& N = w.layers[size_t(l + 1)];
      const WeightMatrix next_qkv[3] = {N.wq, N.wk, N.wv};
      matmul(L.w_down, gate_.data(), T, h, &pool_, {next_qkv, 3});
    } else {
      matmul(L.w_down, gate_.data(), T, h, &pool_, {&w.output, 1});
    }
    lap(ForwardPhases::kFfnDown);
    for_tokens(T, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) add(x + t * E, h + t * E, E, x + t * E);
    });
  }

  lap(ForwardPhases::kOther);
  // Final norm only on the rows whose logits are wanted, then the vocabulary projection.
  int64_t o = 0, t0 = 0;
  for (const SeqChunk& c : batch.chunks) {
    int64_t first = c.all_logits ? t0 : t0 + c.num_tokens - 1;
    for (int64_t t = first; t < t0 + c.num_tokens; ++t, ++o)
      rmsnorm(x + t * E, w.output_norm.data(), E, hp.rms_eps, &out_h_[size_t(o * E)]);
    t0 += c.num_tokens;
  }
  logits->resize(size_t(num_out) * size_t(hp.n_vocab));
  matmul(w.output, out_h_.data(), num_out, logits->data(), &pool_);
  lap(ForwardPhases::kOutput);
  lap.commit();
  return {};
}

}  // namespace kvserve
