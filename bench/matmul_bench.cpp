// matmul per weight encoding at the shapes that matter: decode (m = 1 activation row, bound by
// reading the weights), batched decode (m = 2, 4, 8) and prefill (m = 64 rows, bound by arithmetic). The matrix is
// SmolLM-135M's FFN up-projection (1536 x 576) scaled up 2x in each direction so that it does not
// sit in L2: 3072 x 1152 (13.5 MiB as f32, 2 MiB as q4_K).
#include <benchmark/benchmark.h>

#include "bench_util.h"

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/vec_dot.h"
#include "tensor/block_formats.h"
#include "tensor/quants.h"
#include "util/half.h"
#include "util/thread_pool.h"

namespace kvserve {
namespace {

// The weight matrix of every benchmark here: kRows x kCols (3072 x 1152 unless
// KVS_BENCH_ROWS / KVS_BENCH_COLS say otherwise, e.g. 576 x 576 for smollm-135m's wo: a model's
// own shapes, whose calls are shorter, so each call's fixed costs weigh more).
const int64_t kRows = env_int("KVS_BENCH_ROWS", 3072);
const int64_t kCols = env_int("KVS_BENCH_COLS", 1152);  // k-quant types round up to a multiple of 256

struct Weights {
  std::vector<uint8_t> bytes;
  WeightMatrix w;
};

// Q2_K and Q3_K have no encoder (kvserve only reads them): random codes and scales, and a small
// super-block scale (and Q2_K's dmin) in every block, where those formats keep them.
void random_low_bit_blocks(GgmlType t, std::mt19937& rng, std::vector<uint8_t>& bytes) {
  for (auto& b : bytes) b = uint8_t(rng());
  const size_t block = ggml_type_size(t);
  for (size_t o = 0; o < bytes.size(); o += block) {
    const uint16_t d = f32_to_f16(0.001f * float(1 + rng() % 8));
    if (t == GgmlType::Q2_K) {
      std::memcpy(bytes.data() + o + offsetof(BlockQ2_K, d), &d, 2);
      std::memcpy(bytes.data() + o + offsetof(BlockQ2_K, dmin), &d, 2);
    } else {
      std::memcpy(bytes.data() + o + offsetof(BlockQ3_K, d), &d, 2);
    }
  }
}

Weights make_weights(GgmlType t, int64_t cols, uint32_t seed = 42) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 0.02f);
  std::vector<float> row(static_cast<size_t>(cols));
  Weights out;
  const size_t rb = ggml_row_size(t, cols);
  out.bytes.resize(rb * size_t(kRows));
  if (t == GgmlType::Q2_K || t == GgmlType::Q3_K) {
    random_low_bit_blocks(t, rng, out.bytes);
    out.w = {t, out.bytes.data(), kRows, cols, rb};
    return out;
  }
  for (int64_t r = 0; r < kRows; ++r) {
    for (auto& v : row) v = dist(rng);
    quantize_row(t, row.data(), out.bytes.data() + size_t(r) * rb, cols);
  }
  out.w = {t, out.bytes.data(), kRows, cols, rb};
  return out;
}

// Whole blocks of t (1152 becomes 1280 for the k-quants).
int64_t bench_cols(GgmlType t) { return whole_blocks(t, kCols); }

// args: {ggml type id, m, packed} (packed 1: the matrix repacked for the dispatched table as the
// loader does, where that table has a packed layout for the type)
void BM_matmul(benchmark::State& state) {
  const auto t = GgmlType(state.range(0));
  const int64_t m = state.range(1);
  const bool packed = state.range(2) != 0;
  const int64_t cols = bench_cols(t);
  Weights w = make_weights(t, cols);
  std::vector<float> x(size_t(m * cols)), y(size_t(m * kRows));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (auto& v : x) v = dist(rng);
  std::vector<uint8_t> packed_bytes;
  const KernelTable& k = active_kernels();  // the table matmul() dispatches to
  if (packed && packed_weight_bytes(k, w.w) > 0) {
    packed_bytes.resize(packed_weight_bytes(k, w.w) + 64);
    const uintptr_t a = reinterpret_cast<uintptr_t>(packed_bytes.data());
    pack_weight(k, &w.w, reinterpret_cast<void*>((a + 63) & ~uintptr_t(63)));
  }
  for (auto _ : state) {
    matmul(w.w, x.data(), m, y.data(), &bench_pool());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetLabel(std::string(ggml_type_name(t)) + (packed_bytes.empty() ? "" : " packed"));
  // Bytes of weights read per call: the decode figure of merit (compare with the machine's GB/s).
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(w.bytes.size()));
  state.counters["flops"] = benchmark::Counter(double(2 * m * kRows * cols) * double(state.iterations()),
                                               benchmark::Counter::kIsRate);
}

void matmul_args(benchmark::internal::Benchmark* b) {
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0,
                     GgmlType::Q5_0, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K,
                     GgmlType::Q6_K})
    for (int64_t m : {1, 2, 4, 8, 64})
      for (int packed : {0, 1}) b->Args({int64_t(t), m, packed});
}

BENCHMARK(BM_matmul)->Apply(matmul_args)->Unit(benchmark::kMicrosecond)->UseRealTime();

// Decode as the engine runs it: the weights come from memory, not from a cache. 48 packed copies
// of the matrix (~180 MiB as q8_0, far beyond L3) are multiplied one after another, each call
// told the next one (NextWeights), like the passes of a forward step; bytes/s is the weight
// stream. With one row this is bound by bandwidth; with 8 (batched decode) it shows how well the
// kernel overlaps the stream with its arithmetic (compare BM_matmul's in-cache rate).
// args: {ggml type id, m}
void BM_matmul_stream(benchmark::State& state) {
  // KVS_BENCH_COPIES=N changes the count (6: ~22 MiB, from L3 instead of memory).
  static const int kCopies = std::max(1, env_int("KVS_BENCH_COPIES", 48));
  const auto t = GgmlType(state.range(0));
  const int64_t m = state.range(1);
  const int64_t cols = bench_cols(t);
  Weights w = make_weights(t, cols);
  const KernelTable& k = active_kernels();
  const size_t pb = (packed_weight_bytes(k, w.w) + 63) / 64 * 64;
  if (pb == 0) {
    state.SkipWithError("no packed layout for this type");
    return;
  }
  const HugeBuffer store(pb * size_t(kCopies));  // like the loader's packed weights
  if (store.data() == nullptr) {
    state.SkipWithError("allocation failed");
    return;
  }
  uint8_t* base = store.data();
  // Distinct weights per copy: a host that merges identical pages would serve identical copies
  // from one (and from the caches).
  std::vector<WeightMatrix> ms;
  for (int i = 0; i < kCopies; ++i) {
    Weights wi = i == 0 ? std::move(w) : make_weights(t, cols, 42 + uint32_t(i));
    pack_weight(k, &wi.w, base + size_t(i) * pb);
    wi.w.data = nullptr;  // only the packed copy is read (matmul on the table it was packed for)
    ms.push_back(wi.w);
  }
  std::vector<float> x(size_t(m * cols)), y(size_t(m * kRows));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (auto& v : x) v = dist(rng);
  for (auto _ : state) {
    for (int i = 0; i < kCopies; ++i)
      matmul(ms[size_t(i)], x.data(), m, y.data(), &bench_pool(), {&ms[size_t((i + 1) % kCopies)], 1});
    benchmark::DoNotOptimize(y.data());
  }
  state.SetLabel(std::string(ggml_type_name(t)) + " packed, " + std::to_string(kCopies) + " copies");
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(pb) * kCopies);
  state.counters["flops"] = benchmark::Counter(double(2 * m * kRows * cols) * kCopies * double(state.iterations()),
                                               benchmark::Counter::kIsRate);
}

BENCHMARK(BM_matmul_stream)
    ->ArgsProduct({{int64_t(GgmlType::Q8_0), int64_t(GgmlType::Q4_K)}, {1, 2, 4, 8}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace kvserve

// ---- one SmolLM-135M layer's seven matmuls, per kernel table ----
// The weight shapes of one block of the smollm-135m preset (hidden 576, 3 KV heads of 64, ffn
// 1536) in the encodings `kvserve synth` gives them; 30 of these plus the output matrix are the
// model. m = 1 is a decode step, 8 a batch of 8 sequences, 512 a prefill chunk. Reported as tokens
// (activation rows) per second through the layer; compare tables within one run (machine noise).
namespace kvserve {
namespace {

struct LayerMatrix {
  GgmlType type;
  int64_t rows, cols;
};

// 0: the q8_0 model; 1: q4_k_m (576-column matrices fall back to q5_0, attn_v q8_0, ffn_down q6_K).
std::vector<LayerMatrix> smollm_layer(int encoding) {
  const GgmlType main = encoding == 0 ? GgmlType::Q8_0 : GgmlType::Q5_0;
  const GgmlType down = encoding == 0 ? GgmlType::Q8_0 : GgmlType::Q6_K;
  return {{main, 576, 576},  {main, 192, 576},  {GgmlType::Q8_0, 192, 576}, {main, 576, 576},
          {main, 1536, 576}, {main, 1536, 576}, {down, 576, 1536}};
}

// args: {encoding, m, isa, packed} (isa: the Isa enum value, 1 avx2, 2 avxvnni, 3 avx512, 4 amx; packed 1:
// each matrix repacked for that table as the model loader does, so the packed GEMMs run, else the
// file-layout kernels)
void BM_smollm_layer(benchmark::State& state) {
  const int encoding = int(state.range(0));
  const int64_t m = state.range(1);
  const Isa isa = Isa(state.range(2));
  const bool packed = state.range(3) != 0;
  if (!isa_supported(isa)) {
    state.SkipWithError("CPU lacks this instruction set");
    return;
  }
  std::vector<std::vector<uint8_t>> storage;
  std::vector<WeightMatrix> mats;
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 0.02f);
  int64_t max_dim = 0;
  for (const auto& lm : smollm_layer(encoding)) {
    const size_t rb = ggml_row_size(lm.type, lm.cols);
    storage.emplace_back(rb * size_t(lm.rows));
    std::vector<float> row(static_cast<size_t>(lm.cols));
    for (int64_t r = 0; r < lm.rows; ++r) {
      for (auto& v : row) v = dist(rng);
      quantize_row(lm.type, row.data(), storage.back().data() + size_t(r) * rb, lm.cols);
    }
    mats.push_back({lm.type, storage.back().data(), lm.rows, lm.cols, rb});
    max_dim = std::max({max_dim, lm.rows, lm.cols});
  }
  std::vector<float> x(size_t(m * max_dim)), y(size_t(m * max_dim));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto& v : x) v = u(rng);
  const KernelTable& k = kernel_table(isa);
  std::vector<std::vector<uint8_t>> packed_storage;  // 64 bytes of slack for alignment
  for (auto& w : mats) {
    const size_t bytes = packed ? packed_weight_bytes(k, w) : 0;
    if (bytes == 0) continue;
    packed_storage.emplace_back(bytes + 64);
    const uintptr_t a = reinterpret_cast<uintptr_t>(packed_storage.back().data());
    pack_weight(k, &w, reinterpret_cast<void*>((a + 63) & ~uintptr_t(63)));
  }
  for (auto _ : state) {
    for (const auto& w : mats) matmul_with_kernels(k, w, x.data(), m, y.data(), &bench_pool());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetLabel(std::string(k.name) + (encoding == 0 ? " q8_0" : " q4_k_m") +
                 (packed ? " packed (" + std::to_string(packed_storage.size()) + " of 7)" : ""));
  state.counters["tok/s"] = benchmark::Counter(double(m) * double(state.iterations()), benchmark::Counter::kIsRate);
}

void layer_args(benchmark::internal::Benchmark* b) {
  for (int encoding : {0, 1})
    for (int64_t m : {1, 8, 512})
      for (Isa isa : {Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512, Isa::kAmx})
        for (int packed : {0, 1}) b->Args({encoding, m, int64_t(isa), packed});
}

BENCHMARK(BM_smollm_layer)->Apply(layer_args)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace kvserve
