// Paged attention (one query head, and a group of 3 sharing a KV head) over contexts 128..2048 (SmolLM-135M's
// head_dim 64, 3 KV heads, 16-token blocks), for every KV cache type (f32, f16, bf16, q8_0, q4_0). Blocks are handed out in a scrambled order,
// as a long-running cache does, so the benchmark does not profit from a contiguous layout
// (BM_decode_step_cold also runs with them in id order, to measure what that layout is worth).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "model/paged_attention.h"

namespace kvserve {
namespace {

constexpr int kHeadDim = 64;
constexpr int kKvHeads = 3;
constexpr int kBlockSize = 16;

// A cache of `num_layers` layers holding `ctx` random K/V rows behind a shuffled block table (in
// id order with in_order: a fresh pool's adjacent blocks).
struct Fixture {
  std::unique_ptr<KvStorage> kv;
  std::vector<int32_t> table;
  std::vector<float> q, out;
};

std::unique_ptr<Fixture> make_fixture(int64_t ctx, KvDType dtype, int num_queries, int num_layers = 1,
                                      bool in_order = false) {
  KvLayout layout;
  layout.num_layers = num_layers;
  layout.num_kv_heads = kKvHeads;
  layout.head_dim = kHeadDim;
  layout.block_size = kBlockSize;
  layout.set_dtype(dtype);
  layout.tiled = kv_tiles_preferred(layout);  // the engine's choice (KVSERVE_KV_TILES=0: rows)
  const int32_t num_blocks = int32_t((ctx + kBlockSize - 1) / kBlockSize);
  auto kv = KvStorage::create(layout, num_blocks);
  if (!kv.ok()) return nullptr;
  auto f = std::make_unique<Fixture>();
  f->kv = std::make_unique<KvStorage>(std::move(kv).value());
  f->table.resize(size_t(num_blocks));
  std::iota(f->table.begin(), f->table.end(), 0);
  std::mt19937 rng(3);
  if (!in_order) std::shuffle(f->table.begin(), f->table.end(), rng);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> k(kKvHeads * kHeadDim), v(kKvHeads * kHeadDim);
  for (int64_t p = 0; p < ctx; ++p) {
    for (auto& e : k) e = dist(rng);
    for (auto& e : v) e = dist(rng);
    for (int l = 0; l < num_layers; ++l)
      store_kv_row(*f->kv, f->table[size_t(p / kBlockSize)], l, int(p % kBlockSize), k.data(), v.data());
  }
  f->q.resize(size_t(num_queries) * kHeadDim);
  f->out.resize(f->q.size());
  for (auto& e : f->q) e = dist(rng);
  return f;
}

KvDType dtype_arg(int64_t a) { return kAllKvDTypes[a]; }

// args: {context, dtype (index into kAllKvDTypes: 0 f32, 1 f16, 2 bf16, 3 q8_0, 4 q4_0)}
void BM_paged_attention_head(benchmark::State& state) {
  const int64_t ctx = state.range(0);
  auto f = make_fixture(ctx, dtype_arg(state.range(1)), 1);
  if (!f) {
    state.SkipWithError("KV arena allocation failed");
    return;
  }
  for (auto _ : state) {
    paged_attention_head(*f->kv, 0, f->table, ctx, 1, f->q.data(), 0.125f, f->out.data());
    benchmark::DoNotOptimize(f->out.data());
  }
  state.SetLabel(kv_dtype_name(f->kv->layout().k_dtype));
  // K and V rows read per call.
  state.SetBytesProcessed(int64_t(state.iterations()) * ctx * 2 * int64_t(f->kv->layout().head_row_bytes(KvPart::kKey)));
}

// The grouped form the forward pass uses: SmolLM-135M has 9 query heads over 3 KV heads, so each
// K/V row read serves 3 queries.
void BM_paged_attention_group3(benchmark::State& state) {
  const int64_t ctx = state.range(0);
  constexpr int kGroup = 3;
  auto f = make_fixture(ctx, dtype_arg(state.range(1)), kGroup);
  if (!f) {
    state.SkipWithError("KV arena allocation failed");
    return;
  }
  for (auto _ : state) {
    paged_attention_group(*f->kv, 0, f->table, ctx, 1, f->q.data(), kGroup, 0.125f, f->out.data());
    benchmark::DoNotOptimize(f->out.data());
  }
  state.SetLabel(kv_dtype_name(f->kv->layout().k_dtype));
  state.SetBytesProcessed(int64_t(state.iterations()) * ctx * 2 * int64_t(f->kv->layout().head_row_bytes(KvPart::kKey)));
}

// One decode step's attention, single thread: SmolLM-135M's 30 layers x 3 KV heads (groups of 3)
// over a cache of 30 layers, so K/V come from memory as in the engine, not from a warm L2.
void BM_decode_step_attention(benchmark::State& state) {
  const int64_t ctx = state.range(0);
  constexpr int kGroup = 3, kLayers = 30;
  auto f = make_fixture(ctx, dtype_arg(state.range(1)), kGroup, kLayers);
  if (!f) {
    state.SkipWithError("KV arena allocation failed");
    return;
  }
  for (auto _ : state) {
    for (int l = 0; l < kLayers; ++l)
      for (int h = 0; h < kKvHeads; ++h)
        paged_attention_group(*f->kv, l, f->table, ctx, h, f->q.data(), kGroup, 0.125f, f->out.data());
    benchmark::DoNotOptimize(f->out.data());
  }
  state.SetLabel(kv_dtype_name(f->kv->layout().k_dtype));
  state.SetBytesProcessed(int64_t(state.iterations()) * ctx * int64_t(f->kv->layout().bytes_per_token()));
}

// The decode-step benchmarks' cache: 30 layers of `ctx` positions, queries for every KV head's
// group of 3 (null, the benchmark skipped, when the arena cannot be allocated).
constexpr int kStepGroup = 3, kStepLayers = 30;
std::unique_ptr<Fixture> step_fixture(benchmark::State& state, int64_t ctx, bool in_order = false) {
  auto f = make_fixture(ctx, dtype_arg(state.range(1)), kStepGroup * kKvHeads, kStepLayers, in_order);
  if (!f) state.SkipWithError("KV arena allocation failed");
  return f;
}

// The same step as states over the whole context: one attention_partial per KV head (multi = 0)
// or one attention_partial_heads for all of a layer's KV heads (multi = 1: the heads share one
// walk over the positions, so each slot's rows of every head are read together).
// args: {context, dtype, multi}
void BM_decode_step_partials(benchmark::State& state) {
  const int64_t ctx = state.range(0);
  const bool multi = state.range(2) != 0;
  auto f = step_fixture(state, ctx);
  if (!f) return;
  const size_t pf = attention_partial_floats(kStepGroup, kHeadDim);
  std::vector<float> partials(pf * kKvHeads);
  for (auto _ : state) {
    for (int l = 0; l < kStepLayers; ++l) {
      const PagedKvView view = paged_kv_view(*f->kv, l, f->table);
      if (multi) {
        attention_partial_heads(view, 0, ctx, 0, kKvHeads, f->q.data(), kStepGroup, 0.125f, partials.data());
      } else {
        for (int h = 0; h < kKvHeads; ++h)
          attention_partial(view, 0, ctx, h, f->q.data() + size_t(h) * kStepGroup * kHeadDim, kStepGroup, 0.125f,
                            partials.data() + size_t(h) * pf);
      }
    }
    benchmark::DoNotOptimize(partials.data());
  }
  state.SetLabel(std::string(kv_dtype_name(f->kv->layout().k_dtype)) + (multi ? " heads together" : " head by head"));
  state.SetBytesProcessed(int64_t(state.iterations()) * ctx * int64_t(f->kv->layout().bytes_per_token()));
}

// A 256 MiB streaming read, outside the timing, that evicts the K/V from every cache level before
// an iteration (the weights do that in the engine between two layers' attention).
struct CacheFlush {
  std::vector<uint64_t> buf = std::vector<uint64_t>(size_t(256) << 17, 1);
  uint64_t sink = 0;
  void untimed(benchmark::State& state) {
    state.PauseTiming();
    for (size_t i = 0; i < buf.size(); i += 8) sink += buf[i];
    benchmark::DoNotOptimize(sink);
    state.ResumeTiming();
  }
};

// One decode step's attention as the engine runs it at batch 1, single thread, from memory: each
// layer's positions in kAttentionChunk chunks, one attention_partial_heads per chunk for all KV
// heads, after a 256 MiB streaming read has evicted the K/V from every cache level (the weights do
// that in the engine between two layers' attention). Against BM_decode_step_partials (heads
// together, K/V in L3), the difference is what memory stalls cost. args: {context, dtype,
// blocks in id order}: scattered blocks (0), as a long-running pool hands them out, or adjacent
// ones (1), as a fresh pool does.
void BM_decode_step_cold(benchmark::State& state) {
  const int64_t ctx = state.range(0);
  const bool in_order = state.range(2) != 0;
  auto f = step_fixture(state, ctx, in_order);
  if (!f) return;
  std::vector<float> partials(attention_partial_floats(kStepGroup, kHeadDim) * kKvHeads);
  CacheFlush flush;
  for (auto _ : state) {
    flush.untimed(state);
    for (int l = 0; l < kStepLayers; ++l) {
      const PagedKvView view = paged_kv_view(*f->kv, l, f->table);
      for (int64_t c = 0; c < attention_num_chunks(ctx); ++c)
        attention_partial_heads(view, attention_chunk_begin(0, c), attention_chunk_end(0, ctx, c), 0, kKvHeads,
                                f->q.data(), kStepGroup, 0.125f, partials.data());
    }
    benchmark::DoNotOptimize(partials.data());
  }
  state.SetLabel(std::string(kv_dtype_name(f->kv->layout().k_dtype)) + (in_order ? " adjacent blocks" : " scattered blocks"));
  state.SetBytesProcessed(int64_t(state.iterations()) * ctx * int64_t(f->kv->layout().bytes_per_token()));
}

// The same cold step as a batched decode's task runs it (one thread walks every chunk of a
// sequence in order and merges them: attention_group_range_heads, all KV heads at once, blocks in
// id order), so a chunk may warm the next one's first K/V (hint_end, kernels/attention.h).
// args: {context, dtype}
void BM_decode_step_cold_range(benchmark::State& state) {
  const int64_t ctx = state.range(0);
  auto f = step_fixture(state, ctx, /*in_order=*/true);
  if (!f) return;
  std::vector<float> out(size_t(kStepGroup) * kKvHeads * kHeadDim);
  CacheFlush flush;
  for (auto _ : state) {
    flush.untimed(state);
    for (int l = 0; l < kStepLayers; ++l)
      attention_group_range_heads(paged_kv_view(*f->kv, l, f->table), 0, ctx, 0, kKvHeads, f->q.data(), kStepGroup,
                                  0.125f, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetLabel(std::string(kv_dtype_name(f->kv->layout().k_dtype)) + " adjacent blocks, chunks merged in turn");
  state.SetBytesProcessed(int64_t(state.iterations()) * ctx * int64_t(f->kv->layout().bytes_per_token()));
}

BENCHMARK(BM_paged_attention_head)
    ->ArgsProduct({{128, 256, 512, 1024, 2048}, {0, 1, 2, 3, 4}})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_paged_attention_group3)
    ->ArgsProduct({{128, 256, 512, 1024, 2048}, {0, 1, 2, 3, 4}})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_decode_step_attention)->ArgsProduct({{128, 2048}, {0, 1, 3, 4}})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_decode_step_partials)->ArgsProduct({{512, 2048}, {0, 1, 3}, {0, 1}})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_decode_step_cold)->ArgsProduct({{512, 2048}, {1, 3, 4}, {0, 1}})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_decode_step_cold_range)->ArgsProduct({{544, 2048}, {3, 4}})->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kvserve
