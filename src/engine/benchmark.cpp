#include "engine/benchmark.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>

#include "kernels/vec_dot.h"
#include "model/paged_attention.h"
#include "util/memory_info.h"
#include "util/units.h"

namespace kvserve {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Median of a non-empty list; an even count averages the two middle values, so that two runs
// do not report the better one twice.
double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// The --cache-compare contexts that run: at least 2 positions (one prefilled, one timed) and
// within the model's context ctx, in the options' order.
std::vector<int64_t> runnable_contexts(const BenchOptions& opts, int64_t ctx) {
  std::vector<int64_t> out;
  for (int64_t c : opts.compare_contexts)
    if (c >= 2 && c <= ctx) out.push_back(c);
  return out;
}

// Best (highest) and median of rates; values is non-empty.
Rate summarize(const std::vector<double>& values) {
  return {*std::max_element(values.begin(), values.end()), median(values)};
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Points a forward pass's phase clock at `sink` (none when null) for one scope, so an early
// error return cannot leave it pointing at a sink that is gone.
class PhaseTiming {
 public:
  PhaseTiming(ForwardPass& forward, ForwardPhases* sink) : forward_(forward) {
    forward_.set_phase_timing(sink);
  }
  ~PhaseTiming() { forward_.set_phase_timing(nullptr); }
  PhaseTiming(const PhaseTiming&) = delete;
  PhaseTiming& operator=(const PhaseTiming&) = delete;

 private:
  ForwardPass& forward_;
};

}  // namespace

MachineInfo detect_machine(int threads) {
  MachineInfo m;
  m.threads = threads;
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  m.logical_cpus = online > 0 ? int(online) : 0;
  m.isa = active_kernels().name;
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  std::vector<std::string> flags;
  while (std::getline(f, line)) {
    auto value = [&]() {
      size_t colon = line.find(':');
      std::string v = colon == std::string::npos ? "" : line.substr(colon + 1);
      size_t b = v.find_first_not_of(" \t");
      return b == std::string::npos ? std::string() : v.substr(b);
    };
    if (m.cpu_model.empty() && line.rfind("model name", 0) == 0) m.cpu_model = value();
    if (flags.empty() && line.rfind("flags", 0) == 0) {
      std::istringstream words(value());
      for (std::string w; words >> w;) flags.push_back(w);
    }
    if (!m.cpu_model.empty() && !flags.empty()) break;
  }
  if (m.cpu_model.empty()) m.cpu_model = "unknown";
  // Only the flags a CPU inference kernel can use; the full list is in /proc/cpuinfo.
  for (const char* name : {"avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512bw", "avx512vl",
                           "avx512_vnni", "avx512_bf16", "amx_tile", "amx_int8"}) {
    if (std::find(flags.begin(), flags.end(), name) == flags.end()) continue;
    if (!m.cpu_flags.empty()) m.cpu_flags += ' ';
    m.cpu_flags += name;
  }
  return m;
}

Expected<std::unique_ptr<Benchmark>> Benchmark::create(const BenchOptions& opts) {
  if (opts.prompt_tokens < 1) return invalid_argument("--prompt must be >= 1");
  if (opts.gen_tokens < 1) return invalid_argument("--gen must be >= 1");
  if (opts.repeat < 1) return invalid_argument("--repeat must be >= 1");
  if (opts.threads < 0) return invalid_argument("--threads must not be negative");
  if (opts.batch_sizes.empty()) return invalid_argument("--batch needs at least one batch size");
  for (int b : opts.batch_sizes)
    if (b < 1 || b > 4096)
      return invalid_argument("--batch sizes must be in 1..4096, got " + std::to_string(b));
  if (opts.compare_cached_tokens < 1 || opts.compare_uncached_tokens < 1)
    return invalid_argument("cache comparison token counts must be >= 1");
  KVS_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::load(opts.model_path));
  const ModelHparams& hp = model->hparams();
  const int64_t ctx = hp.n_ctx_train > 0 ? hp.n_ctx_train : opts.prompt_tokens + opts.gen_tokens;
  if (opts.gen_tokens >= ctx)
    return invalid_argument("--gen " + std::to_string(opts.gen_tokens) +
                            " leaves no room for a prompt in the " + std::to_string(ctx) + "-token context");
  // Positions past the training context would time a model outside its range, so a prompt
  // that does not fit with the decode steps is shortened (and the report says so).
  const int64_t prompt = std::min(opts.prompt_tokens, ctx - opts.gen_tokens);

  KvLayout layout;
  layout.num_layers = hp.n_layer;
  layout.num_kv_heads = hp.n_head_kv;
  layout.head_dim = hp.head_dim;
  layout.block_size = opts.block_size;
  layout.k_dtype = opts.kv_type_k.value_or(opts.kv_type);
  layout.v_dtype = opts.kv_type_v.value_or(opts.kv_type);
  layout.tiled = kv_tiles_preferred(layout);
  KVS_RETURN_IF_ERROR(layout.validate());
  // One arena for the largest phase; phases run one after another on an emptied cache. The decode
  // holds every batch size's sequences at once (their repetitions take turns).
  const int bs = opts.block_size;
  int64_t total_seqs = 0;
  for (int b : opts.batch_sizes) total_seqs += b;
  int64_t blocks = std::max(ceil_div(prompt, bs), total_seqs * ceil_div(prompt + opts.gen_tokens, bs));
  if (opts.cache_compare) {  // every context's sequence at once (run_cache_compare)
    int64_t compare_blocks = 0;
    for (int64_t c : runnable_contexts(opts, ctx)) compare_blocks += ceil_div(c, bs);
    blocks = std::max(blocks, compare_blocks);
  }
  if (blocks > INT32_MAX) return out_of_memory("the benchmark needs more KV blocks than block ids exist");
  // The arena is zero-filled up front: past the machine's memory that would end in the OOM killer,
  // not in an error, so refuse what could not leave room for the weights and the probe's buffer.
  const uint64_t ram = memory_limit_bytes();
  const double kv_bytes = double(blocks) * double(layout.block_bytes());
  if (ram > 0 && kv_bytes > 0.5 * double(ram))
    return out_of_memory("the benchmark's KV cache (every --batch size's sequences of --prompt + --gen tokens at once) "
                         "needs " + format_bytes(uint64_t(kv_bytes)) + ", more than half of this machine's " +
                         format_bytes(ram) + ": use fewer or smaller --batch sizes or shorter --prompt/--gen");
  KVS_ASSIGN_OR_RETURN(KvStorage kv, KvStorage::create(layout, int32_t(blocks)));
  auto b = std::unique_ptr<Benchmark>(
      new Benchmark(std::move(model), std::move(kv), opts, ctx, prompt, opts.gen_tokens));
  if (prompt != opts.prompt_tokens)
    b->notes_.push_back("prompt shortened from " + std::to_string(opts.prompt_tokens) + " to " +
                        std::to_string(prompt) + " tokens so that prompt + gen fits the " +
                        std::to_string(ctx) + "-token context");
  return b;
}

Benchmark::Benchmark(std::unique_ptr<Model> model, KvStorage kv, const BenchOptions& opts, int64_t ctx,
                     int64_t prompt, int64_t gen)
    : model_(std::move(model)),
      kv_(std::move(kv)),
      cache_(kv_.num_blocks(), kv_.layout().block_size),
      pool_(opts.threads),
      forward_(*model_, kv_, pool_),
      opts_(opts),
      ctx_(ctx),
      prompt_(prompt),
      gen_(gen),
      rng_state_(opts.seed) {}

std::vector<int32_t> Benchmark::random_tokens(int64_t n) {
  // splitmix64: a fixed seed gives the same ids on every run and machine.
  const uint64_t n_vocab = uint64_t(model_->hparams().n_vocab);
  std::vector<int32_t> out(static_cast<size_t>(n));
  for (auto& id : out) {
    uint64_t z = (rng_state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    id = int32_t((z ^ (z >> 31)) % n_vocab);
  }
  return out;
}

Status Benchmark::reset() {
  std::vector<KvCacheManager::SeqId> ids;
  // Ours are 0 .. (sum of the batch sizes) - 1; stop once all are found.
  for (KvCacheManager::SeqId s = 0; ids.size() < cache_.num_seqs(); ++s)
    if (cache_.has_seq(s)) ids.push_back(s);
  for (auto s : ids) KVS_RETURN_IF_ERROR(cache_.free(s));
  return Status::ok_status();
}

Expected<PrefillResult> Benchmark::run_prefill() {
  KVS_RETURN_IF_ERROR(reset());
  KVS_RETURN_IF_ERROR(cache_.allocate(0, prompt_));
  ForwardBatch batch;
  batch.tokens = random_tokens(prompt_);
  batch.chunks.push_back({0, int32_t(prompt_), cache_.block_table(0), false});
  std::vector<float> logits;
  std::vector<double> rates;
  // Each repetition rewrites the same slots: the work is one full prefill every time.
  for (int r = 0; r < opts_.repeat; ++r) {
    auto t0 = Clock::now();
    KVS_RETURN_IF_ERROR(forward_.run(batch, &logits));
    rates.push_back(double(prompt_) / seconds_since(t0));
  }
  KVS_RETURN_IF_ERROR(reset());
  PrefillResult res;
  res.tokens = prompt_;
  res.tok_per_s = summarize(rates);
  return res;
}

Expected<std::vector<DecodeResult>> Benchmark::run_decode(const std::vector<int>& batches) {
  for (int b : batches)
    if (b < 1) return invalid_argument("batch size must be >= 1");
  KVS_RETURN_IF_ERROR(reset());
  // One group of sequences per batch size (ids first .. first + B - 1). Every sequence reserves its
  // prompt + gen slots up front, so a repetition can replay the same decode positions
  // (prompt .. prompt+gen-1) over the same prefilled context. Per step this does exactly the model
  // work of live decoding; only the slot bookkeeping (append_slots, a few integer updates) is
  // hoisted out of the timed loop.
  struct Group {
    int batch = 0;
    std::vector<int32_t> inputs;  // [gen][batch] decode inputs, drawn before timing
    ForwardBatch step;
    std::vector<double> rates, step_ms, starts;
    ForwardPhases phases;
  };
  std::vector<Group> groups(batches.size());
  std::vector<float> logits;
  int32_t next_seq = 0;
  for (size_t g = 0; g < batches.size(); ++g) {
    Group& G = groups[g];
    G.batch = batches[g];
    ForwardBatch pre;
    for (int i = 0; i < G.batch; ++i) {
      const int32_t id = next_seq + i;
      KVS_RETURN_IF_ERROR(cache_.allocate(id, prompt_ + gen_));
      std::vector<int32_t> t = random_tokens(prompt_);
      pre.tokens.insert(pre.tokens.end(), t.begin(), t.end());
      pre.chunks.push_back({0, int32_t(prompt_), cache_.block_table(id), false});
      G.step.chunks.push_back({prompt_, 1, cache_.block_table(id), false});
    }
    next_seq += G.batch;
    KVS_RETURN_IF_ERROR(forward_.run(pre, &logits));
    G.inputs = random_tokens(gen_ * G.batch);
    G.step.tokens.resize(size_t(G.batch));
  }
  Clock::time_point origin;  // the first repetition's start
  for (int r = 0; r < opts_.repeat; ++r) {
    for (Group& G : groups) {
      auto t0 = Clock::now();
      if (r == 0 && &G == &groups.front()) origin = t0;
      G.starts.push_back(std::chrono::duration<double>(t0 - origin).count());
      {
        PhaseTiming timing(forward_, opts_.phases ? &G.phases : nullptr);
        for (int64_t s = 0; s < gen_; ++s) {
          for (int i = 0; i < G.batch; ++i) {
            G.step.tokens[size_t(i)] = G.inputs[size_t(s * G.batch + i)];
            G.step.chunks[size_t(i)].start_pos = prompt_ + s;
          }
          KVS_RETURN_IF_ERROR(forward_.run(G.step, &logits));
        }
      }
      double sec = seconds_since(t0);
      G.rates.push_back(double(G.batch) * double(gen_) / sec);
      G.step_ms.push_back(sec * 1e3 / double(gen_));
    }
  }
  KVS_RETURN_IF_ERROR(reset());
  std::vector<DecodeResult> out;
  for (const Group& G : groups) {
    DecodeResult res;
    res.batch = G.batch;
    res.context = prompt_;
    res.steps = gen_;
    res.tok_per_s = summarize(G.rates);
    res.per_seq_tok_per_s = res.tok_per_s.best / G.batch;
    res.ms_per_step = *std::min_element(G.step_ms.begin(), G.step_ms.end());
    // Step s of a sequence attends prompt + s + 1 positions: prompt + (gen + 1) / 2 on average.
    res.kv_bytes_per_step =
        double(G.batch) * (double(prompt_) + double(gen_ + 1) / 2) * double(kv_.layout().bytes_per_token());
    res.gb_per_s = (double(model_->weight_bytes()) + res.kv_bytes_per_step) / (res.ms_per_step * 1e-3) / 1e9;
    res.rep_start_s = G.starts;
    res.rep_tok_per_s = G.rates;
    res.phases = G.phases;
    out.push_back(std::move(res));
  }
  const auto one = std::find_if(out.begin(), out.end(), [](const DecodeResult& d) { return d.batch == 1; });
  if (one != out.end()) {
    const std::vector<double> base = one->rep_tok_per_s;  // a copy: `one` is among the results written
    for (DecodeResult& d : out) {
      std::vector<double> ratios;
      for (size_t r = 0; r < base.size() && r < d.rep_tok_per_s.size(); ++r)
        if (base[r] > 0) ratios.push_back(d.rep_tok_per_s[r] / base[r]);
      d.vs_batch1 = ratios.empty() ? 0 : median(ratios);
    }
  }
  return out;
}

Expected<std::vector<CacheCompareRow>> Benchmark::run_cache_compare() {
  std::vector<CacheCompareRow> rows;
  std::vector<float> logits;
  const std::vector<int64_t> contexts = runnable_contexts(opts_, ctx_);
  const size_t nc = contexts.size();
  // With the cache: one sequence per context (id = its index), prefilled with all but its last n
  // positions; then rounds of one decoded token per context, so each context's timed tokens see
  // contexts c-n+1 .. c. The contexts take turns (the first of a round rotates): this VM's speed
  // drifts by 20-30% over seconds, and timing the contexts one after another put that drift into
  // the ratio between them (a run once timed context 1024 slower than 2048).
  std::vector<std::vector<int32_t>> tokens(nc);
  std::vector<int64_t> timed(nc);
  std::vector<std::vector<double>> cached(nc);
  std::vector<ForwardPhases> cached_phases(nc);
  KVS_RETURN_IF_ERROR(reset());
  for (size_t i = 0; i < nc; ++i) {
    const int64_t c = contexts[i];
    tokens[i] = random_tokens(c);
    timed[i] = std::min<int64_t>(opts_.compare_cached_tokens, c - 1);
    const auto id = KvCacheManager::SeqId(i);
    KVS_RETURN_IF_ERROR(cache_.allocate(id, c - timed[i]));
    ForwardBatch batch;
    batch.tokens.assign(tokens[i].begin(), tokens[i].begin() + (c - timed[i]));
    batch.chunks.push_back({0, int32_t(c - timed[i]), cache_.block_table(id), false});
    KVS_RETURN_IF_ERROR(forward_.run(batch, &logits));
  }
  for (int k = 0; k < opts_.compare_cached_tokens; ++k) {
    for (size_t j = 0; j < nc; ++j) {
      const size_t i = (j + size_t(k)) % nc;
      if (k >= timed[i]) continue;
      const auto id = KvCacheManager::SeqId(i);
      const int64_t p = contexts[i] - timed[i] + k;
      auto t0 = Clock::now();
      KVS_RETURN_IF_ERROR(cache_.append_slots(id, 1));
      ForwardBatch one;
      one.tokens = {tokens[i][size_t(p)]};
      one.chunks.push_back({p, 1, cache_.block_table(id), false});
      PhaseTiming timing(forward_, opts_.phases ? &cached_phases[i] : nullptr);
      KVS_RETURN_IF_ERROR(forward_.run(one, &logits));
      cached[i].push_back(seconds_since(t0) * 1e3);
    }
  }
  KVS_RETURN_IF_ERROR(reset());
  for (size_t i = 0; i < nc; ++i) {
    const int64_t c = contexts[i];
    CacheCompareRow row;
    row.context = c;
    row.cached_ms = median(cached[i]);
    row.cached_tokens = int(timed[i]);
    row.cached_phases = cached_phases[i];
    // Without the cache, as Generator does under --no-cache: forget the sequence's K/V and
    // recompute all c positions to produce one token.
    std::vector<double> ms;
    ForwardBatch full;
    full.tokens = tokens[i];
    for (int k = 0; k < opts_.compare_uncached_tokens; ++k) {
      auto t0 = Clock::now();
      if (cache_.has_seq(0)) KVS_RETURN_IF_ERROR(cache_.free(0));
      KVS_RETURN_IF_ERROR(cache_.allocate(0, c));
      full.chunks = {{0, int32_t(c), cache_.block_table(0), false}};
      KVS_RETURN_IF_ERROR(forward_.run(full, &logits));
      ms.push_back(seconds_since(t0) * 1e3);
    }
    row.uncached_ms = median(ms);
    row.uncached_tokens = opts_.compare_uncached_tokens;
    row.reduction_pct = row.uncached_ms > 0 ? 100.0 * (1.0 - row.cached_ms / row.uncached_ms) : 0;
    rows.push_back(row);
  }
  KVS_RETURN_IF_ERROR(reset());
  return rows;
}

Expected<BenchReport> Benchmark::run_all() {
  BenchReport rep;
  rep.machine = detect_machine(pool_.num_threads());
  rep.model_path = opts_.model_path;
  rep.arch = model_->hparams().arch;
  rep.model_ctx = ctx_;
  {
    const KvLayout& L = kv_.layout();
    rep.kv_type = L.k_dtype == L.v_dtype
                      ? std::string(kv_dtype_name(L.k_dtype))
                      : std::string("k=") + kv_dtype_name(L.k_dtype) + ",v=" + kv_dtype_name(L.v_dtype);
  }
  rep.weight_bytes = model_->weight_bytes();
  KVS_ASSIGN_OR_RETURN(rep.prefill, run_prefill());
  // The bandwidth probe brackets the batch-1 decode (see the header), or runs last without one.
  const bool brackets =
      opts_.measure_bandwidth &&
      std::find(opts_.batch_sizes.begin(), opts_.batch_sizes.end(), 1) != opts_.batch_sizes.end();
  const int passes_before = opts_.bandwidth_passes > 1 ? opts_.bandwidth_passes / 2 : 0;
  auto probe = [&](int passes) -> Status {
    KVS_ASSIGN_OR_RETURN(MemBandwidth bw, measure_read_bandwidth(pool_, opts_.bandwidth_bytes, passes));
    rep.bandwidth = combine(rep.bandwidth, bw);
    rep.has_bandwidth = true;
    return Status::ok_status();
  };
  if (brackets && passes_before > 0) KVS_RETURN_IF_ERROR(probe(passes_before));
  KVS_ASSIGN_OR_RETURN(rep.decode, run_decode(opts_.batch_sizes));
  if (brackets) {
    KVS_RETURN_IF_ERROR(probe(opts_.bandwidth_passes - passes_before));
    rep.bandwidth_around_batch1 = true;
  }
  if (opts_.cache_compare) {
    KVS_ASSIGN_OR_RETURN(rep.cache_compare, run_cache_compare());
  }
  if (opts_.measure_bandwidth) {
    if (!rep.has_bandwidth) KVS_RETURN_IF_ERROR(probe(opts_.bandwidth_passes));
    if (rep.weight_bytes > 0)
      rep.roofline_tok_per_s = rep.bandwidth.gb_per_s * 1e9 / double(rep.weight_bytes);
    for (const DecodeResult& d : rep.decode)
      if (d.batch == 1 && rep.roofline_tok_per_s > 0) {
        rep.roofline_fraction = d.tok_per_s.best / rep.roofline_tok_per_s;
        rep.bandwidth_fraction = d.gb_per_s / rep.bandwidth.gb_per_s;
      }
  }
  rep.notes = notes_;
  return rep;
}

}  // namespace kvserve
