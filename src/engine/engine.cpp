#include "engine/engine.h"

#include <algorithm>
#include <filesystem>
#include <future>

#include "engine/context_policy.h"
#include "engine/kv_arena_size.h"
#include "engine/sampler.h"
#include "model/paged_attention.h"
#include "util/log.h"
#include "util/memory_info.h"

namespace kvserve {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(SteadyTime a, SteadyTime b) { return std::chrono::duration<double>(b - a).count(); }

// When the loop has nothing to run it sleeps on the queue this long at most, so that cancels
// and timeouts of waiting requests are still noticed promptly.
constexpr std::chrono::milliseconds kIdleWait{10};
constexpr int kMaxTopLogprobs = 20;

Status validate_config(const EngineConfig& c) {
  if (c.max_seqs < 1) return invalid_argument("max_seqs must be >= 1, got " + std::to_string(c.max_seqs));
  if (c.max_batched_tokens < 1)
    return invalid_argument("max_batched_tokens must be >= 1, got " + std::to_string(c.max_batched_tokens));
  if (c.max_queue < 1) return invalid_argument("max_queue must be >= 1, got " + std::to_string(c.max_queue));
  if (c.ctx < 0) return invalid_argument("ctx must be >= 0, got " + std::to_string(c.ctx));
  KVS_RETURN_IF_ERROR(parse_context_overflow(c.context_overflow).status());
  if (c.n_keep < 0) return invalid_argument("n_keep must be >= 0, got " + std::to_string(c.n_keep));
  if (!(c.cache_pin_fraction >= 0 && c.cache_pin_fraction <= 1))
    return invalid_argument("cache_pin_fraction must be in [0, 1], got " + std::to_string(c.cache_pin_fraction));
  return Status::ok_status();
}

// Evicted-block lifetimes kept between two Engine::take_evicted_block_lifetimes() calls.
constexpr size_t kMaxPendingLifetimes = 100000;

std::string describe(const CacheEvent& e) {
  std::string ids;
  for (size_t i = 0; i < e.blocks.size(); ++i) {
    if (i) ids += ',';
    ids += std::to_string(e.blocks[i]);
  }
  std::string line = std::string("kv cache: ") + cache_event_name(e.kind) + " blocks [" + ids + "]";
  if (e.seq >= 0) line += " seq " + std::to_string(e.seq);
  return line;
}

// The prefix cache's options: pins may never hold the blocks one full-context sequence needs.
PrefixCacheOptions cache_options(const EngineConfig& cfg, int64_t ctx, int block_size) {
  PrefixCacheOptions o;
  o.enable_prefix_cache = cfg.prefix_cache;
  o.max_pinned_fraction = cfg.cache_pin_fraction;
  o.min_unpinned_blocks = int32_t(num_blocks_for(ctx, block_size));
  return o;
}

}  // namespace

// ---- creation ----

Engine::Impl::Impl(const EngineConfig& cfg, std::unique_ptr<Model> m, std::unique_ptr<Tokenizer> t,
                   KvStorage storage, int64_t context, ContextOverflow overflow_policy,
                   const ContextPlan& plan)
    : config(cfg),
      ctx(context),
      window(plan.window),
      overflow(overflow_policy),
      shift_keep(plan.keep),
      shift_discard(plan.discard),
      model(std::move(m)),
      tokenizer(std::move(t)),
      kv(std::move(storage)),
      queue(size_t(cfg.max_queue)),
      cache(kv.num_blocks(), kv.layout().block_size, cache_options(cfg, context, kv.layout().block_size)),
      scheduler(SchedulerConfig{cfg.max_seqs, cfg.max_batched_tokens, cfg.prefix_cache, plan.window}, cache),
      runner(*model, kv, cfg.threads, plan.window) {
  model_name = model->hparams().name;
  if (model_name.empty()) model_name = std::filesystem::path(cfg.model_path).stem().string();
  chat_template = model->gguf().get_string_or("tokenizer.chat_template", "");
  if (cfg.prefix_cache) {
    fingerprint = model_fingerprint(*model);
    // That read every tensor byte of the file, and inference reads none of them (model.h): without
    // this the whole file stayed in the server's resident set next to the packed copies.
    model->gguf().release_pages();
    // K/V past the first layer depend on what each token attended to: a window is part of it.
    kv_signature = kv.layout().type_signature() + (window > 0 ? "/window" + std::to_string(window) : "");
  }
  // Block-level events are many (every allocation); they are built only when someone reads them.
  if (log_level() <= LogLevel::kDebug) cache.set_event_listener([](const CacheEvent& e) { KVS_DEBUG(describe(e)); });
}

Expected<std::unique_ptr<Engine>> Engine::create(const EngineConfig& config) {
  KVS_RETURN_IF_ERROR(validate_config(config));
  KVS_ASSIGN_OR_RETURN(KvDType dtype, parse_kv_dtype(config.kv_type));
  KVS_ASSIGN_OR_RETURN(KvDType k_dtype, config.kv_type_k.empty() ? dtype : parse_kv_dtype(config.kv_type_k));
  KVS_ASSIGN_OR_RETURN(KvDType v_dtype, config.kv_type_v.empty() ? dtype : parse_kv_dtype(config.kv_type_v));
  KVS_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::load(config.model_path));
  KVS_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tok, Tokenizer::from_gguf(model->gguf()));
  const ModelHparams& hp = model->hparams();
  if (tok->n_vocab() != hp.n_vocab)
    return corrupt(config.model_path + ": tokenizer has " + std::to_string(tok->n_vocab()) +
                   " tokens but the model's vocabulary has " + std::to_string(hp.n_vocab));
  KvLayout layout;
  layout.num_layers = hp.n_layer;
  layout.num_kv_heads = hp.n_head_kv;
  layout.head_dim = hp.head_dim;
  layout.block_size = config.block_size;
  layout.k_dtype = k_dtype;
  layout.v_dtype = v_dtype;
  layout.tiled = kv_tiles_preferred(layout);
  KVS_RETURN_IF_ERROR(layout.validate());
  KVS_ASSIGN_OR_RETURN(const KvArenaSize arena,
                       size_kv_arena(layout, config.ctx > 0 ? config.ctx : hp.n_ctx_train, config.kv_memory,
                                     available_memory_bytes()));
  const int64_t ctx = arena.ctx;
  KVS_ASSIGN_OR_RETURN(const ContextOverflow overflow, parse_context_overflow(config.context_overflow));
  KVS_ASSIGN_OR_RETURN(const ContextPlan plan, plan_context(overflow, config.attention_window, hp.sliding_window, ctx,
                                                            config.n_keep, layout.block_size));
  KVS_ASSIGN_OR_RETURN(KvStorage kv, KvStorage::create(layout, arena.num_blocks));
  auto impl = std::make_unique<Impl>(config, std::move(model), std::move(tok), std::move(kv), ctx, overflow, plan);
  Impl* p = impl.get();
  std::unique_ptr<Engine> engine(new Engine(std::move(impl)));
  p->loop_alive = true;
  p->publish_stats();
  p->thread = std::thread([p] { p->loop(); });
  return engine;
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Engine::~Engine() { shutdown(std::chrono::milliseconds(0)); }

// ---- caller-thread API ----

Expected<std::shared_ptr<RequestHandle>> Engine::submit_internal(GenerationRequest request,
                                                                 std::shared_ptr<PinOutcome> pin) {
  Impl& m = *impl_;
  if (m.stopping.load()) return unsupported("the engine is shutting down");
  if (request.prompt.empty()) return invalid_argument("the prompt is empty");
  const int32_t n_vocab = m.tokenizer->n_vocab();
  for (int32_t t : request.prompt)
    if (t < 0 || t >= n_vocab)
      return invalid_argument("prompt token " + std::to_string(t) + " is outside the vocabulary of " +
                              std::to_string(n_vocab) + " tokens");
  const SamplingParams& p = request.params;
  if (p.max_tokens < 0) return invalid_argument("max_tokens must be >= 0, got " + std::to_string(p.max_tokens));
  KVS_RETURN_IF_ERROR(check_logit_bias(p, n_vocab));
  KVS_RETURN_IF_ERROR(check_sampling_values(p));
  if (request.top_logprobs < 0 || request.top_logprobs > kMaxTopLogprobs)
    return invalid_argument("top_logprobs must be in [0, " + std::to_string(kMaxTopLogprobs) + "], got " +
                            std::to_string(request.top_logprobs));
  if (request.timeout_seconds < 0) return invalid_argument("timeout_seconds must be >= 0");
  // error: refuse; truncate: drop the oldest prompt tokens after the BOS; shift: only the prompt
  // must fit (generation shifts the context).
  KVS_RETURN_IF_ERROR(
      fit_prompt(m.overflow, request.prompt, p.max_tokens, m.ctx, m.tokenizer->bos_id(), m.config.n_keep).status());
  auto handle = std::make_shared<RequestHandle>(m.next_id.fetch_add(1));
  PendingRequest pr{handle, std::move(request), Clock::now(), std::move(pin)};
  KVS_RETURN_IF_ERROR(m.queue.push(std::move(pr), m.num_waiting.load()));
  m.requests_total.fetch_add(1);
  return handle;
}

Expected<std::shared_ptr<RequestHandle>> Engine::submit(GenerationRequest request) {
  return submit_internal(std::move(request), nullptr);
}

namespace {

Status require_prefix_cache(const EngineConfig& c) {
  return c.prefix_cache ? Status::ok_status() : unsupported("prefix caching is off (prefix_cache: off)");
}

// Runs a prefix-cache admin operation on the loop thread (the only one that may touch the
// cache) between two steps, republishes the stats so the caller's next stats() shows its
// effect, and waits up to `timeout` for the answer.
Expected<int64_t> cache_admin(Engine::Impl& m, std::chrono::milliseconds timeout,
                              std::function<Expected<int64_t>(KvCacheManager&)> op) {
  KVS_RETURN_IF_ERROR(require_prefix_cache(m.config));
  auto promise = std::make_shared<std::promise<Expected<int64_t>>>();
  std::future<Expected<int64_t>> answer = promise->get_future();
  KVS_RETURN_IF_ERROR(m.queue.post([&m, promise, op = std::move(op)] {
    Expected<int64_t> r = op(m.cache);
    m.publish_stats();
    promise->set_value(std::move(r));
  }));
  if (answer.wait_for(timeout) != std::future_status::ready)
    return unavailable("the engine did not answer within " + std::to_string(timeout.count()) + " ms");
  return answer.get();
}

}  // namespace

Expected<int64_t> Engine::pin_prefix(std::vector<int32_t> prompt, const std::string& cache_salt,
                                     std::chrono::milliseconds timeout) {
  KVS_RETURN_IF_ERROR(require_prefix_cache(impl_->config));
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.params.max_tokens = 1;  // the prompt must run so its blocks are computed and committed
  r.params.temperature = 0;
  r.cache_salt = cache_salt;
  r.timeout_seconds = std::chrono::duration<double>(timeout).count();
  auto outcome = std::make_shared<PinOutcome>();
  KVS_ASSIGN_OR_RETURN(std::shared_ptr<RequestHandle> h, submit_internal(std::move(r), outcome));
  const RequestResult res = h->wait();  // bounded by the request's timeout
  if (res.finish_reason == "timeout") return unavailable("the pin request did not run within its timeout");
  if (res.finish_reason == "error") return internal_error(res.error);
  if (res.finish_reason == "cancelled") return unavailable("the engine is shutting down");
  if (!outcome->status.ok()) return outcome->status;
  return outcome->pinned_tokens;
}

Expected<int64_t> Engine::unpin_prefix(std::vector<int32_t> prompt, const std::string& cache_salt,
                                       std::chrono::milliseconds timeout) {
  const BlockHash ns = prefix_namespace(impl_->fingerprint, impl_->kv_signature, cache_salt);
  return cache_admin(*impl_, timeout, [ns, prompt = std::move(prompt)](KvCacheManager& c) -> Expected<int64_t> {
    return c.unpin_prefix(ns, prompt);
  });
}

Expected<int64_t> Engine::unpin_all(std::chrono::milliseconds timeout) {
  return cache_admin(*impl_, timeout, [](KvCacheManager& c) -> Expected<int64_t> { return int64_t(c.unpin_all()); });
}

Expected<int64_t> Engine::flush_prefix_cache(std::chrono::milliseconds timeout) {
  return cache_admin(*impl_, timeout, [](KvCacheManager& c) -> Expected<int64_t> { return int64_t(c.flush()); });
}

std::vector<double> Engine::take_evicted_block_lifetimes() {
  std::lock_guard<std::mutex> lock(impl_->lifetimes_mu);
  std::vector<double> out(impl_->evicted_lifetimes.begin(), impl_->evicted_lifetimes.end());
  impl_->evicted_lifetimes.clear();
  return out;
}

std::vector<int32_t> Engine::tokenize(std::string_view text, bool add_special, bool parse_special) const {
  return impl_->tokenizer->encode(text, add_special, parse_special);
}
std::vector<int32_t> Engine::tokenize_chat(std::string_view text,
                                           std::span<const std::pair<uint32_t, uint32_t>> content) const {
  std::vector<TextRange> literal;
  literal.reserve(content.size());
  for (const auto& [begin, end] : content) literal.push_back({begin, end});
  return impl_->tokenizer->encode(text, true, true, literal);
}
std::string Engine::detokenize(const std::vector<int32_t>& tokens) const { return impl_->tokenizer->decode(tokens); }
std::string Engine::token_to_piece(int32_t token) const { return impl_->tokenizer->token_to_piece(token); }
bool Engine::is_eog(int32_t token) const { return impl_->tokenizer->is_eog(token); }
int32_t Engine::bos_id() const { return impl_->tokenizer->bos_id(); }
int32_t Engine::eos_id() const { return impl_->tokenizer->eos_id(); }
const std::string& Engine::model_name() const { return impl_->model_name; }
int64_t Engine::context_length() const { return impl_->ctx; }
int Engine::n_vocab() const { return impl_->tokenizer->n_vocab(); }
std::string Engine::chat_template() const { return impl_->chat_template; }
const EngineConfig& Engine::config() const { return impl_->config; }

EngineStats Engine::stats() const {
  EngineStats s;
  {
    std::lock_guard<std::mutex> lock(impl_->stats_mu);
    s = impl_->stats_snapshot;
  }
  s.num_waiting += int(impl_->queue.size());
  s.requests_total = impl_->requests_total.load();
  s.loop_alive = impl_->loop_alive.load();
  return s;
}

bool Engine::healthy() const { return impl_->loop_alive.load() && !impl_->stopping.load(); }

void Engine::shutdown(std::chrono::milliseconds drain_deadline) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.shutdown_mu);
  if (!m.thread.joinable()) return;
  const auto deadline = Clock::now() + drain_deadline;
  m.drain_deadline_ns.store(std::chrono::duration_cast<std::chrono::nanoseconds>(deadline.time_since_epoch()).count());
  m.queue.close();
  m.stopping.store(true);
  m.queue.wake();
  m.thread.join();
}

// ---- loop thread ----

void Engine::Impl::loop() {
  for (;;) {
    admit_pending();
    const SteadyTime now = Clock::now();
    expire(now);
    if (stopping.load()) {
      const SteadyTime deadline{std::chrono::nanoseconds(drain_deadline_ns.load())};
      if (active.empty() || now >= deadline) break;
    }
    if (!scheduler.has_work()) {
      publish_stats();
      queue.wait_for_work(kIdleWait);
      continue;
    }
    step();
    publish_stats();
  }
  // Requests pushed just before the queue closed are admitted so they get an answer too.
  admit_pending();
  std::vector<SeqId> ids;
  for (auto& [id, a] : active) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  for (SeqId id : ids) finish(id, "cancelled");
  loop_alive.store(false);
  publish_stats();
}

const ConstraintVocab* Engine::Impl::json_vocab_for(const GenerationRequest& r) {
  if (!r.params.json_object) return nullptr;
  if (!json_vocab) json_vocab = std::make_unique<ConstraintVocab>(ConstraintVocab::from(*tokenizer));
  return json_vocab.get();
}

void Engine::Impl::admit_pending() {
  for (EngineTask& task : queue.drain_tasks()) task();
  for (PendingRequest& p : queue.drain()) {
    const SeqId id = SeqId(p.handle->id());
    const ConstraintVocab* json = json_vocab_for(p.request);
    auto a = std::make_unique<ActiveRequest>(std::move(p), *tokenizer, json);
    a->result.prompt_tokens = int64_t(a->request.prompt.size());
    if (config.prefix_cache) a->ns = prefix_namespace(fingerprint, kv_signature, a->request.cache_salt);
    if (a->request.prompt_logprobs) a->prompt_logprobs.resize(a->request.prompt.size() - 1);
    a->prompt_logprobs_complete = a->request.prompt.size() <= 1;  // nothing after the first token
    Status st = scheduler.add(id, a->request.prompt, a->ns, a->request.prompt_logprobs);
    const bool runs_prompt =
        a->request.params.max_tokens > 0 || (a->request.prompt_logprobs && a->request.prompt.size() > 1);
    active.emplace(id, std::move(a));
    if (!st.ok()) {
      finish(id, "error", st.to_string());
    } else if (!runs_prompt) {
      finish(id, "length");  // nothing to generate or score: answer without running the prompt
    }
  }
  num_waiting.store(size_t(scheduler.num_waiting()));
}

void Engine::Impl::expire(SteadyTime now) {
  std::vector<std::pair<SeqId, const char*>> ends;
  for (auto& [id, a] : active) {
    if (a->handle->cancel_requested()) {
      ends.emplace_back(id, "cancelled");
    } else if (a->request.timeout_seconds > 0 && seconds_between(a->submitted, now) >= a->request.timeout_seconds) {
      ends.emplace_back(id, "timeout");
    }
  }
  for (auto& [id, reason] : ends) finish(id, reason);
}

void Engine::Impl::step() {
  ScheduleOutput out = scheduler.schedule();
  for (SeqId id : out.preempted) {
    auto it = active.find(id);
    if (it != active.end()) ++it->second->result.preemptions;
  }
  num_waiting.store(size_t(scheduler.num_waiting()));
  if (out.empty()) {
    // Nothing fits this step (cannot last: running sequences finish and free blocks).
    queue.wait_for_work(std::chrono::milliseconds(1));
    return;
  }
  const SteadyTime now = Clock::now();
  for (const ScheduledChunk& c : out.chunks) {
    ActiveRequest& a = *active.at(c.seq);
    if (!a.scheduled) {
      a.scheduled = true;
      a.result.queue_seconds = seconds_between(a.submitted, now);
      // The prefix matched at first admission (a re-admission after preemption may hit the
      // sequence's own blocks, which the client did not get from the cache).
      a.result.cached_tokens = scheduler.find(c.seq)->num_cached_tokens;
    }
  }
  // Chunks whose prompt positions are scored return every position's logits (rows in chunk order).
  all_logits.assign(out.chunks.size(), 0);
  for (size_t i = 0; i < out.chunks.size(); ++i)
    all_logits[i] = active.at(out.chunks[i].seq)->wants_all_logits(out.chunks[i]) ? 1 : 0;
  Status st = runner.run(out, scheduler, cache, &logits, all_logits);
  ++steps_total;
  collect_lifetimes();
  if (!st.ok()) {
    // The pass validates before writing, so the cache is as it was; the affected sequences'
    // bookkeeping has moved on, so they end with the error rather than retry forever.
    for (const ScheduledChunk& c : out.chunks) {
      // This step's K/V were not written: its blocks must not enter the prefix cache.
      if (scheduler.find(c.seq) != nullptr) {
        Status rs = scheduler.remove(c.seq, /*kv_written=*/false);
        KVS_ASSERT(rs.ok(), "removing a known sequence");
      }
      finish(c.seq, "error", st.to_string());
    }
    return;
  }
  const size_t n_vocab = size_t(runner.n_vocab());
  size_t row = 0;  // this chunk's first row of `logits`
  for (size_t i = 0; i < out.chunks.size(); ++i) {
    const ScheduledChunk& c = out.chunks[i];
    const size_t rows = all_logits[i] ? size_t(c.num_tokens) : 1;
    const float* last_row = logits.data() + (row + rows - 1) * n_vocab;
    auto it = active.find(c.seq);
    if (it != active.end() && it->second->request.prompt_logprobs) {
      ActiveRequest& a = *it->second;
      if (all_logits[i]) score_prompt(a, c, logits.data() + row * n_vocab);
      // Chunks run a prompt in order from position 0 (no prefix hit, and a preempted sequence
      // starts over), so the chunk that reaches the prompt's end completes the scores (it may
      // hold just the last token, which scores nothing).
      if (c.start_pos + c.num_tokens >= int64_t(a.request.prompt.size())) a.prompt_logprobs_complete = true;
    }
    row += rows;
    if (!c.sample) continue;
    if (it == active.end()) continue;
    postprocess(*it->second, c.seq, last_row);
    if (!config.use_cache && active.count(c.seq) != 0) {
      // The no-cache baseline: forget the K/V so the next step recomputes everything.
      Status rs = scheduler.reset_computed(c.seq);
      if (!rs.ok()) finish(c.seq, "error", rs.to_string());
    }
  }
}

void Engine::Impl::score_prompt(ActiveRequest& a, const ScheduledChunk& c, const float* rows) {
  const std::vector<int32_t>& prompt = a.request.prompt;
  const size_t n_vocab = size_t(runner.n_vocab());
  // Row j holds position start_pos + j's logits: they score the token after it.
  for (int64_t j = 0; j < c.num_tokens; ++j) {
    const int64_t pos = c.start_pos + j;
    if (pos + 1 >= int64_t(prompt.size())) break;
    const std::span<const float> lg(rows + size_t(j) * n_vocab, n_vocab);
    a.prompt_logprobs[size_t(pos)] = token_logprobs(lg, prompt[size_t(pos + 1)], a.request.top_logprobs);
  }
}

void Engine::Impl::postprocess(ActiveRequest& a, SeqId id, const float* row) {
  const std::span<const float> lg(row, size_t(runner.n_vocab()));
  if (a.request.prompt_logprobs && a.prompt_logprobs_complete && !a.prompt_logprobs_sent) {
    // The scores go out in a delta of their own, before any token's.
    StreamDelta d;
    d.prompt_logprobs = std::move(a.prompt_logprobs);
    a.prompt_logprobs_sent = true;
    RequestHandleWriter::push(*a.handle, std::move(d));
    if (a.request.params.max_tokens == 0) {
      finish(id, "length");  // the prompt was only to be scored
      return;
    }
  }
  const Sequence* s = scheduler.find(id);
  const int32_t tok = a.sampler.sample(lg, s->tokens);
  if (tok == Sampler::kNoToken) {
    finish(id, "error", Sampler::kNoTokenReason);
    return;
  }
  const SteadyTime now = Clock::now();
  if (a.result.generated_tokens == 0 && a.result.ttft_seconds == 0) {
    a.result.ttft_seconds = seconds_between(a.submitted, now);
  } else {
    a.result.inter_token_seconds.push_back(seconds_between(a.last_token, now));
  }
  a.last_token = now;
  const SamplingParams& p = a.request.params;
  if (!p.ignore_eos && tokenizer->is_eog(tok)) {
    finish(id, "stop");  // the end-of-generation token itself is not part of the output
    return;
  }
  Status st = scheduler.append_token(id, tok);
  if (!st.ok()) {
    finish(id, "error", st.to_string());
    return;
  }
  ++generation_tokens_total;
  a.result.tokens.push_back(tok);
  ++a.result.generated_tokens;
  StreamDelta d;
  d.tokens.push_back(tok);
  if (a.request.logprobs) d.logprobs.push_back(token_logprobs(lg, tok, a.request.top_logprobs));
  d.text = a.stops.push(a.detok.push(tok));
  a.result.text += d.text;
  RequestHandleWriter::push(*a.handle, std::move(d));
  if (a.stops.stopped() || a.sampler.constraint_complete()) {
    finish(id, "stop");  // a stop string, or the JSON object asked for has closed
  } else if (a.result.generated_tokens >= p.max_tokens) {
    finish(id, "length");
  } else if (overflow == ContextOverflow::kShift) {
    // Every position of the context holds K/V: make room before the new token runs.
    if (s->num_computed >= ctx) shift_context(a, id);
  } else if (s->num_tokens() >= ctx) {
    finish(id, "length");
  }
}

bool Engine::Impl::shift_context(ActiveRequest& a, SeqId id) {
  Expected<KvShiftPlan> plan = scheduler.shift(id, shift_keep, shift_discard);
  if (!plan.ok()) {
    // Only copies of shared blocks can need memory; with none free the request ends here.
    KVS_WARN("request " + std::to_string(id) + ": context shift failed (" + plan.status().to_string() +
             "); finishing at the context length");
    finish(id, "length");
    return false;
  }
  runner.apply_shift(*plan, cache.block_table(id));
  ++a.result.context_shifts;
  ++context_shifts_total;
  KVS_DEBUG("request " + std::to_string(id) + ": context shift kept " + std::to_string(shift_keep) + " tokens, dropped " +
            std::to_string(shift_discard) + ", copied " + std::to_string(plan->copies.size()) + " slot ranges");
  return true;
}

void Engine::Impl::finish(SeqId id, const std::string& reason, const std::string& error) {
  auto it = active.find(id);
  if (it == active.end()) return;
  ActiveRequest& a = *it->second;
  if (reason != "error" && !a.stops.stopped()) {
    // Release the text held back for a possible stop string or an incomplete character.
    StreamDelta d;
    d.text = a.stops.push(a.detok.flush());
    if (!a.stops.stopped()) d.text += a.stops.flush();
    a.result.text += d.text;
    RequestHandleWriter::push(*a.handle, std::move(d));
  }
  if (scheduler.find(id) != nullptr) {
    Status st = scheduler.remove(id);
    KVS_ASSERT(st.ok(), "removing a known sequence");
  }
  if (a.pin) {
    // The prompt's full blocks were committed as it ran and stay cached now that the sequence
    // is gone; pinning them here, before any other sequence runs, cannot miss them.
    if (reason == "stop" || reason == "length") {
      Expected<int64_t> pinned = cache.pin_prefix(a.ns, a.request.prompt);
      if (pinned.ok()) {
        a.pin->pinned_tokens = *pinned;
      } else {
        a.pin->status = pinned.status();
      }
    } else {
      a.pin->status = unavailable("the pin request ended: " + reason);
    }
    publish_stats();  // before the caller wakes up, so stats() shows the pin
  }
  a.result.finish_reason = reason;
  a.result.error = error;
  a.result.total_seconds = seconds_between(a.submitted, Clock::now());
  prompt_tokens_total += a.result.prompt_tokens;
  ++requests_finished;
  RequestHandleWriter::finish(*a.handle, std::move(a.result));
  active.erase(it);
  num_waiting.store(size_t(scheduler.num_waiting()));
}

void Engine::Impl::collect_lifetimes() {
  std::vector<double> lives = cache.take_evicted_lifetimes();
  if (lives.empty()) return;
  std::lock_guard<std::mutex> lock(lifetimes_mu);
  for (double s : lives) evicted_lifetimes.push_back(s);
  while (evicted_lifetimes.size() > kMaxPendingLifetimes) evicted_lifetimes.pop_front();
}

void Engine::Impl::publish_stats() {
  EngineStats s;
  s.num_running = scheduler.num_running();
  s.num_waiting = scheduler.num_waiting();
  s.kv_blocks_total = cache.num_blocks_total();
  s.kv_blocks_used = cache.num_blocks_used();
  const size_t block_bytes = kv.layout().block_bytes();
  s.kv_block_bytes = block_bytes;
  const PrefixCacheStats ps = cache.prefix_stats();
  s.prefix.enabled = config.prefix_cache;
  s.prefix.blocks_cached = ps.blocks_cached;
  s.prefix.blocks_free = ps.blocks_free;
  s.prefix.blocks_pinned = ps.blocks_pinned;
  s.prefix.blocks_pinned_cap = ps.pinned_blocks_cap;
  s.prefix.evictions_total = ps.evictions_total;
  s.prefix.query_tokens_total = ps.query_tokens_total;
  s.prefix.hit_tokens_total = ps.hit_tokens_total;
  s.prefix.recent_query_tokens = ps.recent_query_tokens;
  s.prefix.recent_hit_tokens = ps.recent_hit_tokens;
  s.kv_bytes_total = size_t(s.kv_blocks_total) * block_bytes;
  s.kv_bytes_used = size_t(s.kv_blocks_used) * block_bytes;
  s.prompt_tokens_total = prompt_tokens_total;
  s.generation_tokens_total = generation_tokens_total;
  s.preemptions_total = scheduler.num_preemptions();
  s.context_shifts_total = context_shifts_total;
  s.requests_finished = requests_finished;
  s.steps_total = steps_total;
  s.loop_alive = loop_alive.load();
  std::lock_guard<std::mutex> lock(stats_mu);
  stats_snapshot = s;
}

}  // namespace kvserve
