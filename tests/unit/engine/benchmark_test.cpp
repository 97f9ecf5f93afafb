// The bench engine on stories260K with tiny sizes: structure and sanity of every figure.
// No timing thresholds: test machines are noisy and shared.
#include "engine/benchmark.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "util/units.h"

namespace kvserve {
namespace {

std::string stories() { return std::string(KVS_SHARED_DIR) + "/models/stories260K.gguf"; }

BenchOptions tiny_options() {
  BenchOptions o;
  o.model_path = stories();
  o.prompt_tokens = 16;
  o.gen_tokens = 4;
  o.batch_sizes = {1, 3};
  o.repeat = 2;
  o.threads = 2;
  o.bandwidth_bytes = size_t(8) << 20;  // small: this checks the plumbing, not the machine
  o.bandwidth_passes = 2;
  return o;
}

// The whole report for options o (a fatal failure when the bench cannot be made or run).
void run_report(const BenchOptions& o, std::optional<BenchReport>* out) {
  auto b = Benchmark::create(o);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  auto rep = (*b)->run_all();
  ASSERT_TRUE(rep.ok()) << rep.status().to_string();
  *out = std::move(rep).value();
}

TEST(Benchmark, FullReportIsComplete) {
  BenchOptions o = tiny_options();
  o.cache_compare = true;
  // The last one exceeds every model's context and must be skipped.
  o.compare_contexts = {128, 256, int64_t(1) << 40};
  o.compare_cached_tokens = 2;
  o.compare_uncached_tokens = 1;
  auto b = Benchmark::create(o);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  auto rep = (*b)->run_all();
  ASSERT_TRUE(rep.ok()) << rep.status().to_string();
  const BenchReport& r = *rep;

  EXPECT_EQ(r.weight_bytes, (*b)->model().weight_bytes());
  EXPECT_GT(r.weight_bytes, 0u);
  EXPECT_EQ(r.machine.threads, 2);
  EXPECT_FALSE(r.machine.cpu_model.empty());
  EXPECT_FALSE(r.machine.isa.empty());
  EXPECT_GT(r.machine.logical_cpus, 0);
  EXPECT_EQ(r.arch, (*b)->model().hparams().arch);
  EXPECT_EQ(r.kv_type, "f32");

  EXPECT_EQ(r.prefill.tokens, 16);
  EXPECT_GT(r.prefill.tok_per_s.best, 0);
  EXPECT_GE(r.prefill.tok_per_s.best, r.prefill.tok_per_s.median);

  ASSERT_EQ(r.decode.size(), 2u);
  EXPECT_EQ(r.decode[0].batch, 1);
  EXPECT_EQ(r.decode[1].batch, 3);
  for (const DecodeResult& d : r.decode) {
    EXPECT_EQ(d.context, 16);
    EXPECT_EQ(d.steps, 4);
    EXPECT_GT(d.tok_per_s.best, 0);
    EXPECT_GE(d.tok_per_s.best, d.tok_per_s.median);
    EXPECT_GT(d.ms_per_step, 0);
    EXPECT_DOUBLE_EQ(d.per_seq_tok_per_s, d.tok_per_s.best / d.batch);
    // Steps attend 17..20 positions (18.5 on average) of every sequence, all layers' K and V.
    const ModelHparams& hp = (*b)->model().hparams();
    const double token_kv = double(hp.n_layer) * 2 * hp.n_head_kv * hp.head_dim * sizeof(float);
    EXPECT_DOUBLE_EQ(d.kv_bytes_per_step, d.batch * 18.5 * token_kv);
    EXPECT_NEAR(d.gb_per_s, (double(r.weight_bytes) + d.kv_bytes_per_step) / (d.ms_per_step * 1e6),
                1e-9 * d.gb_per_s);
    EXPECT_EQ(d.phases.runs, 0);  // not asked for
  }

  // Scaling against batch 1: the median of the per-round ratios (two rounds: their mean).
  ASSERT_EQ(r.decode[0].rep_tok_per_s.size(), 2u);
  ASSERT_EQ(r.decode[1].rep_tok_per_s.size(), 2u);
  EXPECT_DOUBLE_EQ(r.decode[0].vs_batch1, 1.0);
  const double r0 = r.decode[1].rep_tok_per_s[0] / r.decode[0].rep_tok_per_s[0];
  const double r1 = r.decode[1].rep_tok_per_s[1] / r.decode[0].rep_tok_per_s[1];
  EXPECT_NEAR(r.decode[1].vs_batch1, (r0 + r1) / 2, 1e-12 * r.decode[1].vs_batch1);
  EXPECT_DOUBLE_EQ(std::max(r.decode[1].rep_tok_per_s[0], r.decode[1].rep_tok_per_s[1]), r.decode[1].tok_per_s.best);

  // The batch sizes' repetitions take turns: 1, 3, 1, 3.
  ASSERT_EQ(r.decode[0].rep_start_s.size(), 2u);
  ASSERT_EQ(r.decode[1].rep_start_s.size(), 2u);
  EXPECT_EQ(r.decode[0].rep_start_s[0], 0.0);
  EXPECT_LT(r.decode[0].rep_start_s[0], r.decode[1].rep_start_s[0]);
  EXPECT_LT(r.decode[1].rep_start_s[0], r.decode[0].rep_start_s[1]);
  EXPECT_LT(r.decode[0].rep_start_s[1], r.decode[1].rep_start_s[1]);

  ASSERT_TRUE(r.has_bandwidth);
  EXPECT_GT(r.bandwidth.gb_per_s, 0);
  EXPECT_GE(r.bandwidth.gb_per_s, r.bandwidth.median_gb_per_s);
  EXPECT_EQ(r.bandwidth.threads, 2);
  EXPECT_GE(r.bandwidth.buffer_bytes, size_t(7) << 20);
  EXPECT_NEAR(r.roofline_tok_per_s, r.bandwidth.gb_per_s * 1e9 / double(r.weight_bytes),
              1e-6 * r.roofline_tok_per_s);
  EXPECT_NEAR(r.roofline_fraction, r.decode[0].tok_per_s.best / r.roofline_tok_per_s, 1e-9);
  EXPECT_NEAR(r.bandwidth_fraction, r.decode[0].gb_per_s / r.bandwidth.gb_per_s, 1e-9);
  // Probed around the decode runs (batch 1 among them): one pass before, one after.
  EXPECT_TRUE(r.bandwidth_around_batch1);
  EXPECT_EQ(r.bandwidth.passes, 2);
  EXPECT_EQ(r.bandwidth.pass_gb_per_s.size(), 2u);

  // Only the contexts that fit the model's context appear, in order.
  std::vector<int64_t> want;
  for (int64_t c : o.compare_contexts)
    if (c <= (*b)->context_length()) want.push_back(c);
  ASSERT_EQ(want.size(), 2u);
  ASSERT_EQ(r.cache_compare.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const CacheCompareRow& c = r.cache_compare[i];
    EXPECT_EQ(c.context, want[i]);
    EXPECT_GT(c.cached_ms, 0);
    EXPECT_GT(c.uncached_ms, 0);
    EXPECT_EQ(c.cached_tokens, 2);
    EXPECT_EQ(c.uncached_tokens, 1);
    EXPECT_LT(c.reduction_pct, 100.0);
    EXPECT_EQ(c.cached_phases.runs, 0);
  }
  EXPECT_TRUE(r.notes.empty());
}

// --phases: every timed decode step and every cached --cache-compare token is split by phase,
// nothing else (not the prefills, not the recomputations without the cache).
TEST(Benchmark, PhasesCoverTheTimedStepsOnly) {
  BenchOptions o = tiny_options();
  o.measure_bandwidth = false;
  o.phases = true;
  o.cache_compare = true;
  o.compare_contexts = {64, 128};
  o.compare_cached_tokens = 3;
  o.compare_uncached_tokens = 1;
  std::optional<BenchReport> rep;
  run_report(o, &rep);
  if (HasFatalFailure()) return;
  ASSERT_EQ(rep->decode.size(), 2u);
  for (const DecodeResult& d : rep->decode) {
    SCOPED_TRACE("batch " + std::to_string(d.batch));
    EXPECT_EQ(d.phases.runs, d.steps * o.repeat);
    // The repetitions' wall time: batch * steps tokens at each repetition's rate.
    double timed_ms = 0;
    for (double rate : d.rep_tok_per_s) timed_ms += 1e3 * double(d.batch * d.steps) / rate;
    EXPECT_GT(d.phases.ms[ForwardPhases::kAttention], 0);
    EXPECT_GT(d.phases.total_ms(), 0);
    EXPECT_LE(d.phases.total_ms(), timed_ms);
  }
  ASSERT_EQ(rep->cache_compare.size(), 2u);
  for (const CacheCompareRow& c : rep->cache_compare) {
    EXPECT_EQ(c.cached_phases.runs, c.cached_tokens);
    EXPECT_GT(c.cached_phases.ms[ForwardPhases::kAttention], 0);
  }
}

// Every batch size gets its own sequences, even when one is listed twice, and the cache is empty
// again afterwards (a second run finds room for all of them).
TEST(Benchmark, DecodeGivesEachBatchSizeItsOwnSequences) {
  BenchOptions o = tiny_options();
  o.batch_sizes = {2, 2, 5};
  o.repeat = 1;
  auto b = Benchmark::create(o);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  for (int run = 0; run < 2; ++run) {
    auto d = (*b)->run_decode(o.batch_sizes);
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    ASSERT_EQ(d->size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ((*d)[i].batch, o.batch_sizes[i]);
      EXPECT_GT((*d)[i].tok_per_s.best, 0);
      ASSERT_EQ((*d)[i].rep_start_s.size(), 1u);
      if (i > 0) {
        EXPECT_LT((*d)[i - 1].rep_start_s[0], (*d)[i].rep_start_s[0]);
      }
    }
  }
  EXPECT_FALSE((*b)->run_decode({1, 0}).ok());
}

// A KV arena for all batch sizes at once that would take more than half the machine's memory is
// refused with an error before anything is allocated (the zero fill would meet the OOM killer).
TEST(Benchmark, RefusesAKvCacheBeyondHalfTheMemory) {
  const uint64_t ram = physical_memory_bytes();
  if (ram == 0) GTEST_SKIP() << "physical memory unknown";
  auto probe = Benchmark::create(tiny_options());
  ASSERT_TRUE(probe.ok()) << probe.status().to_string();
  const ModelHparams& hp = (*probe)->model().hparams();
  const int64_t ctx = (*probe)->context_length();
  BenchOptions o = tiny_options();
  o.gen_tokens = 4;
  o.prompt_tokens = ctx - o.gen_tokens;
  // f32 K and V of every layer; whole 16-token blocks per sequence.
  const double seq_bytes = double((ctx + 15) / 16 * 16) * double(hp.n_layer) * 2 * hp.n_head_kv * hp.head_dim * 4;
  const auto entries = size_t(0.5 * double(ram) / (4096 * seq_bytes)) + 1;
  o.batch_sizes.assign(entries, 4096);
  auto b = Benchmark::create(o);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kOutOfMemory);
  EXPECT_NE(b.status().message().find("--batch"), std::string::npos) << b.status().message();
}

TEST(Benchmark, PromptIsShortenedToFitTheContext) {
  BenchOptions o = tiny_options();
  o.prompt_tokens = 1 << 20;
  auto b = Benchmark::create(o);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ((*b)->notes().size(), 1u);
  // One prefill of the whole context is cheap for stories260K; decode would add nothing new.
  auto pre = (*b)->run_prefill();
  ASSERT_TRUE(pre.ok()) << pre.status().to_string();
  EXPECT_EQ(pre->tokens + o.gen_tokens, (*b)->context_length());
}

TEST(Benchmark, WithoutBandwidthThereIsNoRoofline) {
  BenchOptions o = tiny_options();
  o.measure_bandwidth = false;
  o.batch_sizes = {1};
  o.repeat = 1;
  std::optional<BenchReport> rep;
  ASSERT_NO_FATAL_FAILURE(run_report(o, &rep));
  EXPECT_FALSE(rep->has_bandwidth);
  EXPECT_FALSE(rep->bandwidth_around_batch1);
  EXPECT_EQ(rep->roofline_fraction, 0);
  EXPECT_EQ(rep->bandwidth_fraction, 0);
  EXPECT_TRUE(rep->notes.empty());
}

TEST(Benchmark, RejectsBadOptions) {
  auto bad = [](auto edit) {
    BenchOptions o = tiny_options();
    edit(o);
    auto b = Benchmark::create(o);
    return !b.ok() && b.status().code() == StatusCode::kInvalidArgument;
  };
  EXPECT_TRUE(bad([](BenchOptions& o) { o.prompt_tokens = 0; }));
  EXPECT_TRUE(bad([](BenchOptions& o) { o.prompt_tokens = -1; }));
  EXPECT_TRUE(bad([](BenchOptions& o) { o.gen_tokens = 0; }));
  EXPECT_TRUE(bad([](BenchOptions& o) { o.gen_tokens = 1 << 20; }));
  EXPECT_TRUE(bad([](BenchOptions& o) { o.batch_sizes = {}; }));
  EXPECT_TRUE(bad([](BenchOptions& o) { o.batch_sizes = {1, 0}; }));
  EXPECT_TRUE(bad([](BenchOptions& o) { o.repeat = 0; }));
  EXPECT_TRUE(bad([](BenchOptions& o) { o.threads = -2; }));
  BenchOptions missing = tiny_options();
  missing.model_path = "/nonexistent/model.gguf";
  EXPECT_FALSE(Benchmark::create(missing).ok());
}

TEST(Benchmark, WithoutBatchOneTheProbeRunsLast) {
  BenchOptions o = tiny_options();
  o.batch_sizes = {2};
  o.repeat = 1;
  o.bandwidth_passes = 3;
  std::optional<BenchReport> rep;
  ASSERT_NO_FATAL_FAILURE(run_report(o, &rep));
  EXPECT_TRUE(rep->has_bandwidth);
  EXPECT_FALSE(rep->bandwidth_around_batch1);
  EXPECT_EQ(rep->bandwidth.passes, 3);
  EXPECT_GT(rep->roofline_tok_per_s, 0);
  EXPECT_EQ(rep->roofline_fraction, 0);  // no batch-1 decode to compare
  EXPECT_EQ(rep->bandwidth_fraction, 0);
  ASSERT_EQ(rep->decode.size(), 1u);
  EXPECT_EQ(rep->decode[0].vs_batch1, 0);  // no batch 1 to scale against
}

TEST(MemBandwidth, CombinePoolsPasses) {
  MemBandwidth a, b;
  a.pass_gb_per_s = {10, 30};
  a.passes = 2;
  b.pass_gb_per_s = {20};
  b.passes = 1;
  const MemBandwidth c = combine(a, b);
  EXPECT_EQ(c.passes, 3);
  EXPECT_EQ(c.pass_gb_per_s, (std::vector<double>{10, 30, 20}));
  EXPECT_EQ(c.gb_per_s, 30);
  EXPECT_EQ(c.median_gb_per_s, 20);
  EXPECT_EQ(combine(MemBandwidth{}, b).pass_gb_per_s, b.pass_gb_per_s);  // an empty probe adds nothing
}

TEST(MemBandwidth, ProbeReportsPositiveRate) {
  ThreadPool pool(2);
  auto bw = measure_read_bandwidth(pool, size_t(4) << 20, 2);
  ASSERT_TRUE(bw.ok()) << bw.status().to_string();
  EXPECT_GT(bw->gb_per_s, 0);
  EXPECT_EQ(bw->passes, 2);
  EXPECT_FALSE(measure_read_bandwidth(pool, 1024, 1).ok());
  EXPECT_FALSE(measure_read_bandwidth(pool, size_t(4) << 20, 0).ok());
  EXPECT_GE(default_bandwidth_buffer_bytes(), size_t(64) << 20);
}

}  // namespace
}  // namespace kvserve
