#include "engine/generator.h"

#include <algorithm>
#include <chrono>

#include "engine/kv_arena_size.h"
#include "engine/sampler.h"
#include "engine/stop_matcher.h"
#include "model/kv_shift.h"
#include "model/paged_attention.h"
#include "util/memory_info.h"

namespace kvserve {
namespace {

constexpr KvCacheManager::SeqId kSeq = 0;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Expected<std::unique_ptr<Generator>> Generator::create(const GeneratorOptions& opts) {
  KVS_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::load(opts.model_path));
  KVS_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tok, Tokenizer::from_gguf(model->gguf()));
  if (tok->n_vocab() != model->hparams().n_vocab)
    return corrupt(opts.model_path + ": tokenizer has " + std::to_string(tok->n_vocab()) +
                   " tokens but the model's vocabulary has " + std::to_string(model->hparams().n_vocab));
  const ModelHparams& hp = model->hparams();
  KvLayout layout;
  layout.num_layers = hp.n_layer;
  layout.num_kv_heads = hp.n_head_kv;
  layout.head_dim = hp.head_dim;
  layout.block_size = opts.block_size;
  layout.k_dtype = opts.kv_type_k.value_or(opts.kv_type);
  layout.v_dtype = opts.kv_type_v.value_or(opts.kv_type);
  layout.tiled = kv_tiles_preferred(layout);
  KVS_RETURN_IF_ERROR(layout.validate());
  const int64_t model_ctx = opts.ctx > 0 ? opts.ctx : hp.n_ctx_train;
  const bool bounded = opts.max_tokens_held > 0 && opts.kv_memory.empty();
  KVS_ASSIGN_OR_RETURN(const KvArenaSize arena,
                       size_kv_arena(layout, bounded ? std::min(model_ctx, opts.max_tokens_held) : model_ctx,
                                     opts.kv_memory, available_memory_bytes()));
  const int64_t ctx = bounded ? model_ctx : arena.ctx;
  KVS_ASSIGN_OR_RETURN(const ContextPlan plan, plan_context(opts.context_overflow, opts.attention_window,
                                                            hp.sliding_window, ctx, opts.n_keep, layout.block_size));
  KVS_ASSIGN_OR_RETURN(KvStorage kv, KvStorage::create(layout, arena.num_blocks));
  return std::unique_ptr<Generator>(
      new Generator(std::move(model), std::move(tok), std::move(kv), ctx, plan, opts));
}

Generator::Generator(std::unique_ptr<Model> model, std::unique_ptr<Tokenizer> tok, KvStorage kv, int64_t ctx,
                     const ContextPlan& plan, const GeneratorOptions& opts)
    : model_(std::move(model)),
      tokenizer_(std::move(tok)),
      kv_(std::move(kv)),
      cache_(kv_.num_blocks(), kv_.layout().block_size),
      pool_(opts.threads),
      forward_(*model_, kv_, pool_),
      ctx_(ctx),
      window_(plan.window),
      keep_(plan.keep),
      discard_(plan.discard),
      opts_(opts) {}

Status Generator::shift(std::vector<int32_t>& tokens) {
  KVS_ASSIGN_OR_RETURN(const KvShiftPlan plan, cache_.shift(kSeq, keep_, discard_));
  apply_kv_shift(kv_, *model_, plan, cache_.block_table(kSeq), &pool_);
  tokens.erase(tokens.begin() + keep_, tokens.begin() + keep_ + discard_);
  return Status::ok_status();
}

Status Generator::run_chunk(const std::vector<int32_t>& tokens, int64_t start, int64_t n, bool all_logits,
                            std::vector<float>* logits) {
  ForwardBatch batch;
  batch.tokens.assign(tokens.begin() + start, tokens.begin() + start + n);
  // Blocks before this chunk's first window are no longer needed.
  if (window_ > 0) KVS_RETURN_IF_ERROR(cache_.release_before(kSeq, start + 1 - window_).status());
  SeqChunk c;
  c.start_pos = start;
  c.num_tokens = int32_t(n);
  c.block_table = cache_.block_table(kSeq);
  c.all_logits = all_logits;
  c.window = window_;
  batch.chunks.push_back(c);
  return forward_.run(batch, logits);
}

Expected<GenerationResult> Generator::generate(const std::vector<int32_t>& prompt, const SamplingParams& params,
                                               const std::function<bool(const std::string&)>& on_text) {
  if (prompt.empty()) return invalid_argument("empty prompt");
  if (int64_t(prompt.size()) > ctx_)  // fit_prompt() makes it fit under every policy
    return invalid_argument("prompt of " + std::to_string(prompt.size()) + " tokens exceeds the context of " +
                            std::to_string(ctx_) + " tokens");
  if (params.max_tokens < 0) return invalid_argument("max_tokens must be >= 0");
  KVS_RETURN_IF_ERROR(check_logit_bias(params, model_->hparams().n_vocab));
  KVS_RETURN_IF_ERROR(check_sampling_values(params));
  GenerationResult res;
  res.prompt_tokens = int64_t(prompt.size());
  std::vector<int32_t> seq = prompt;  // prompt + generated
  std::vector<float> logits;
  const int n_vocab = model_->hparams().n_vocab;

  if (cache_.has_seq(kSeq)) KVS_RETURN_IF_ERROR(cache_.free(kSeq));
  auto t0 = std::chrono::steady_clock::now();
  KVS_RETURN_IF_ERROR(cache_.allocate(kSeq, int64_t(seq.size())));
  Status st = run_chunk(seq, 0, int64_t(seq.size()), false, &logits);
  if (!st.ok()) {
    (void)cache_.free(kSeq);
    return st;
  }
  res.prefill_seconds = seconds_since(t0);
  int32_t peak_blocks = cache_.num_blocks_used();

  if (params.json_object && !json_vocab_)
    json_vocab_ = std::make_unique<ConstraintVocab>(ConstraintVocab::from(*tokenizer_));
  Sampler sampler(params, params.json_object ? json_vocab_.get() : nullptr);
  StreamDetokenizer detok(*tokenizer_);
  StopMatcher stops(params.stop);
  bool keep_going = true;
  auto emit = [&](const std::string& s) {
    if (s.empty()) return;
    res.text += s;
    if (on_text && !on_text(s)) keep_going = false;
  };
  res.finish_reason = "length";
  auto t1 = std::chrono::steady_clock::now();
  while (int64_t(res.tokens.size()) < params.max_tokens && keep_going) {
    int32_t next = sampler.sample(std::span<const float>(logits.data(), size_t(n_vocab)), seq);
    if (next == Sampler::kNoToken) {
      (void)cache_.free(kSeq);
      return invalid_argument(Sampler::kNoTokenReason);
    }
    if (!params.ignore_eos && tokenizer_->is_eog(next)) {
      res.finish_reason = "stop";
      break;
    }
    res.tokens.push_back(next);
    seq.push_back(next);
    emit(stops.push(detok.push(next)));
    if (stops.stopped() || sampler.constraint_complete()) {
      res.finish_reason = "stop";  // a stop string, or the JSON object asked for has closed
      break;
    }
    if (int64_t(res.tokens.size()) >= params.max_tokens) break;
    if (opts_.context_overflow == ContextOverflow::kShift) {
      // Every position holds K/V (seq has one token more): make room for the new one.
      if (int64_t(seq.size()) > ctx_) {
        KVS_RETURN_IF_ERROR(shift(seq));
        ++res.context_shifts;
      }
    } else if (int64_t(seq.size()) >= ctx_) {
      break;  // context full: finish_reason stays "length"
    }
    if (opts_.use_cache) {
      // Only the new token runs; earlier positions come from the KV cache.
      KVS_RETURN_IF_ERROR(cache_.append_slots(kSeq, 1));
      KVS_RETURN_IF_ERROR(run_chunk(seq, int64_t(seq.size()) - 1, 1, false, &logits));
    } else {
      // The no-cache baseline: forget all K/V and recompute the whole sequence.
      KVS_RETURN_IF_ERROR(cache_.free(kSeq));
      KVS_RETURN_IF_ERROR(cache_.allocate(kSeq, int64_t(seq.size())));
      KVS_RETURN_IF_ERROR(run_chunk(seq, 0, int64_t(seq.size()), false, &logits));
    }
    peak_blocks = std::max(peak_blocks, cache_.num_blocks_used());
  }
  if (!stops.stopped()) emit(stops.push(detok.flush()) + stops.flush());
  res.decode_seconds = seconds_since(t1);
  res.kv_bytes_used = size_t(cache_.num_blocks_used()) * kv_.layout().block_bytes();
  res.kv_bytes_peak = size_t(peak_blocks) * kv_.layout().block_bytes();
  KVS_RETURN_IF_ERROR(cache_.free(kSeq));
  return res;
}

Expected<std::vector<float>> Generator::eval_all(const std::vector<int32_t>& tokens, bool incremental) {
  if (tokens.empty()) return invalid_argument("no tokens to evaluate");
  const bool shifting = opts_.context_overflow == ContextOverflow::kShift;
  if (int64_t(tokens.size()) > ctx_ && !shifting)
    return invalid_argument(std::to_string(tokens.size()) + " tokens exceed the context of " + std::to_string(ctx_) +
                            " tokens (--context-overflow shift evaluates longer texts)");
  if (cache_.has_seq(kSeq)) KVS_RETURN_IF_ERROR(cache_.free(kSeq));
  const size_t n_vocab = size_t(model_->hparams().n_vocab);
  std::vector<float> all, rows;
  all.reserve(tokens.size() * n_vocab);
  // `held`: the tokens whose K/V are in the cache, in position order (they differ from a
  // prefix of `tokens` once the context shifted).
  std::vector<int32_t> held;
  Status st = cache_.allocate(kSeq, 0);
  for (size_t i = 0; st.ok() && i < tokens.size();) {
    if (cache_.num_tokens(kSeq) >= ctx_) {
      st = shift(held);
      if (!st.ok()) break;
    }
    const int64_t room = ctx_ - cache_.num_tokens(kSeq);
    const int64_t n = incremental ? 1 : std::min<int64_t>(room, int64_t(tokens.size() - i));
    const int64_t start = cache_.num_tokens(kSeq);
    held.insert(held.end(), tokens.begin() + std::ptrdiff_t(i), tokens.begin() + std::ptrdiff_t(i) + n);
    st = cache_.append_slots(kSeq, n);
    if (st.ok()) st = run_chunk(held, start, n, !incremental, &rows);
    if (st.ok()) all.insert(all.end(), rows.begin(), rows.begin() + std::ptrdiff_t(size_t(n) * n_vocab));
    i += size_t(n);
  }
  (void)cache_.free(kSeq);
  if (!st.ok()) return st;
  return all;
}

}  // namespace kvserve
