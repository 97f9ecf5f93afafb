// `kvserve bench`: throughput of the engine itself (prefill, batched decode, the KV cache's
// benefit) next to the machine's memory bandwidth, so a decode rate can be read as a
// fraction of its roofline: every decoded token reads all weights once, hence
//   roofline tok/s = bandwidth / Model::weight_bytes().
// A decode step also reads its sequences' K/V (all layers, every position attended): each decode
// result counts those bytes too, and the report gives batch-1 decode's weights + K/V traffic as a
// fraction of the bandwidth. The probe runs right before and right after the decode runs when
// batch 1 is among them (passes split between the two), so both figures of that ratio come from
// the same minute: on a shared VM the bandwidth one probe sees drifts by 2x over an hour. For the
// same reason the decode repetitions of the batch sizes take turns (run_decode).
//
// Inputs are random but valid token ids (a fixed seed): speed does not depend on what the
// tokens say. Nothing here asserts a speed; callers (the CLI, docs) compare with targets.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvcache/kv_cache_manager.h"
#include "kvcache/kv_storage.h"
#include "model/forward.h"
#include "model/model.h"
#include "util/membw.h"
#include "util/status.h"
#include "util/thread_pool.h"

namespace kvserve {

struct BenchOptions {
  std::string model_path;
  int64_t prompt_tokens = 512;  // prefill length and the context each decode seq starts at
  int64_t gen_tokens = 128;     // decode steps per batch size
  std::vector<int> batch_sizes{1, 4, 8};
  int repeat = 3;                  // timed repetitions; best and median are reported
  int threads = 0;                 // 0: one per core
  KvDType kv_type = KvDType::F32;  // K and V element type, unless overridden below
  std::optional<KvDType> kv_type_k;
  std::optional<KvDType> kv_type_v;
  int block_size = 16;
  bool measure_bandwidth = true;
  size_t bandwidth_bytes = 0;  // 0: default_bandwidth_buffer_bytes()
  int bandwidth_passes = 5;
  bool cache_compare = false;
  std::vector<int64_t> compare_contexts{128, 512, 1024, 2048};  // kept when <= the model context
  int compare_cached_tokens = 32;   // decode steps timed per context with the cache
  int compare_uncached_tokens = 2;  // full recomputations timed per context without it
  // Split the timed decode steps and --cache-compare's cached tokens by phase of the forward pass
  // (ForwardPhases): one clock read per stage, 8 per layer, off unless asked for.
  bool phases = false;
  uint64_t seed = 1234;
};

struct MachineInfo {
  std::string cpu_model;  // /proc/cpuinfo "model name"
  int logical_cpus = 0;   // online logical CPUs
  int threads = 0;        // threads the pool uses
  std::string isa;        // the matmul kernels chosen by the run-time dispatch ("avx2", "scalar")
  std::string cpu_flags;  // notable SIMD flags the CPU reports (avx2 avx512f ...)
};

struct Rate {
  double best = 0;  // highest of the repetitions
  double median = 0;
};

struct PrefillResult {
  int64_t tokens = 0;  // prompt length actually used
  Rate tok_per_s;
};

struct DecodeResult {
  int batch = 0;
  int64_t context = 0;           // tokens in each sequence before the first timed step
  int64_t steps = 0;             // timed forward passes per repetition
  Rate tok_per_s;                // aggregate: batch * steps / seconds
  double per_seq_tok_per_s = 0;  // best aggregate / batch
  double ms_per_step = 0;        // best
  double kv_bytes_per_step = 0;  // K/V bytes attention reads per step, averaged over the steps
  double gb_per_s = 0;           // (weight + K/V bytes per step) / best step time, 1 GB = 1e9 bytes
  // When each repetition started, seconds after the first timed decode step of the report.
  std::vector<double> rep_start_s;
  std::vector<double> rep_tok_per_s;  // each repetition's aggregate rate, in order
  // Scaling against batch 1 (0 when batch 1 was not run): the median over repetitions r of this
  // batch's rate in r / batch 1's rate in r. The batch sizes' repetitions take turns, so each
  // ratio compares runs seconds apart; on a VM whose speed drifts, best(B) / best(1) can pair a
  // fast phase with a slow one.
  double vs_batch1 = 0;
  // With BenchOptions::phases: every timed step's time by phase, summed (runs = steps x repeat).
  ForwardPhases phases;
};

struct CacheCompareRow {
  int64_t context = 0;       // sequence length when the measured token is produced
  double cached_ms = 0;      // median per-token latency, KV cache
  double uncached_ms = 0;    // median per-token latency, whole sequence recomputed
  double reduction_pct = 0;  // 100 * (1 - cached / uncached)
  int cached_tokens = 0;
  int uncached_tokens = 0;
  ForwardPhases cached_phases;  // with BenchOptions::phases: the cached tokens' phases, summed
};

struct BenchReport {
  MachineInfo machine;
  std::string model_path;
  std::string arch;
  int64_t model_ctx = 0;
  std::string kv_type;      // "f32" when K and V share a type, else "k=q8_0,v=q4_0"
  size_t weight_bytes = 0;  // bytes read per decoded token
  PrefillResult prefill;
  std::vector<DecodeResult> decode;
  bool has_bandwidth = false;
  MemBandwidth bandwidth;
  bool bandwidth_around_batch1 = false;  // probed right before/after the decode runs, batch 1 among them (else last)
  double roofline_tok_per_s = 0;         // bandwidth / weight_bytes
  double roofline_fraction = 0;          // best batch-1 decode / roofline (0 without batch 1)
  double bandwidth_fraction = 0;         // batch-1 decode's gb_per_s / bandwidth (0 without batch 1)
  std::vector<CacheCompareRow> cache_compare;
  std::vector<std::string> notes;  // adjustments made (a prompt shortened to fit the context)
};

MachineInfo detect_machine(int threads);

class Benchmark {
 public:
  // Validates the options (positive sizes, batch sizes >= 1, repeat >= 1), loads the model and
  // sizes one KV arena for the largest phase (the decode: every batch's sequences at once).
  static Expected<std::unique_ptr<Benchmark>> create(const BenchOptions& opts);

  const Model& model() const { return *model_; }
  int64_t context_length() const { return ctx_; }
  // Adjustments create() made to the options (also copied into the report).
  const std::vector<std::string>& notes() const { return notes_; }

  // One chunked prefill of the prompt per repetition.
  Expected<PrefillResult> run_prefill();
  // For each batch size B: B sequences prefilled with the prompt, then repetitions of `gen`
  // steps where each step is one ForwardPass::run of B one-token chunks. The repetitions of the
  // batch sizes take turns (B1 B2 .. B1 B2 ..), so a ratio between two of them compares runs a
  // few seconds apart, not phases of the machine minutes apart. One result per batch size.
  Expected<std::vector<DecodeResult>> run_decode(const std::vector<int>& batches);
  // Per-token latency with and without the KV cache at each context of the options; the
  // contexts' cached tokens are timed in turns (one per context per round).
  Expected<std::vector<CacheCompareRow>> run_cache_compare();
  // Everything the options ask for, in the order above, then the bandwidth probe.
  Expected<BenchReport> run_all();

 private:
  Benchmark(std::unique_ptr<Model> model, KvStorage kv, const BenchOptions& opts, int64_t ctx, int64_t prompt,
            int64_t gen);
  std::vector<int32_t> random_tokens(int64_t n);
  // Frees every sequence, so each phase starts from an empty cache.
  Status reset();

  std::unique_ptr<Model> model_;
  KvStorage kv_;
  KvCacheManager cache_;
  ThreadPool pool_;
  ForwardPass forward_;
  BenchOptions opts_;
  int64_t ctx_;
  int64_t prompt_;  // prompt_tokens after fitting into the context
  int64_t gen_;
  uint64_t rng_state_;
  std::vector<std::string> notes_;
};

}  // namespace kvserve
