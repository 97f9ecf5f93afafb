// The batched matrix product every model layer uses, and the embedding lookup.
//
// Numerics follow the reference engine (llama.cpp CPU): each activation row is first converted to
// the weight type's activation encoding (q8_0 / q8_1 / q8_K / f16 / bf16 / f32, see vec_dot.h),
// once per call, and the dot products are exact per-block integer sums scaled in f32.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gguf/types.h"
#include "util/thread_pool.h"

namespace kvserve {

struct KernelTable;
struct WeightMatrix;

// The matrices of the matmul that follows the current pool pass (none: count 0). Each thread,
// once done with its share of the pass, hints into L2 the first weight bytes it is expected to
// read there, so the next matmul starts on a warm stream instead of a cold one.
struct NextWeights {
  const WeightMatrix* ws = nullptr;
  int count = 0;
  // ws[0] is a gate/up pair (pack_weight_pair) read by matmul_swiglu, whose units are two groups.
  bool pair = false;
};

// A row-major weight matrix as stored in a GGUF file: `rows` output features, each a row of `cols`
// input features encoded as `type`. row_bytes is the stride between rows (normally
// ggml_row_size(type, cols)). cols must be a multiple of the type's block size.
struct WeightMatrix {
  GgmlType type;
  const void* data;
  int64_t rows;
  int64_t cols;
  size_t row_bytes;
  // Optional copy of the same matrix in a kernel table's packed layout (KernelTable::packed), set
  // by pack_weight; used only by matmuls running on that very table (packed_for), which then never
  // read `data`, and by get_rows where the layout has a row reader (PackedKernels::unpack_row).
  // Every other table keeps using `data`.
  const void* packed = nullptr;
  const KernelTable* packed_for = nullptr;
};

// Whether w has a packed copy for `kernels` (the only table that may read it).
inline bool is_packed_for(const WeightMatrix& w, const KernelTable& kernels) {
  return w.packed != nullptr && w.packed_for == &kernels;
}

// Bytes of w's packed copy for `kernels`; 0 when the table has no packed layout for w's type or
// shape (rows must be a multiple of kPackedRows).
size_t packed_weight_bytes(const KernelTable& kernels, const WeightMatrix& w);
// Writes that copy to dst (packed_weight_bytes of it, 64-byte aligned, outliving w's uses) and
// points w->packed at it. Results of a packed matmul match the file-layout kernels within f32
// reordering, and like them do not depend on the batch or the thread count.
void pack_weight(const KernelTable& kernels, WeightMatrix* w, void* dst);

// y[i][r] = sum_c x[i][c] * w[r][c] for i in [0, m), r in [0, w.rows).
// x: [m][w.cols] f32 row-major; y: [m][w.rows] f32 row-major (must not alias x).
// pool may be null (single thread). The result does not depend on the number of threads.
// Scratch for the converted activations is a per-calling-thread buffer that grows to the largest
// call and is reused, so the steady state does not allocate.
void matmul(const WeightMatrix& w, const float* x, int64_t m, float* y, ThreadPool* pool,
            const NextWeights& next = {});

// As matmul, with an explicit kernel table (tests compare instruction sets with it).
void matmul_with_kernels(const KernelTable& kernels, const WeightMatrix& w, const float* x, int64_t m,
                         float* y, ThreadPool* pool, const NextWeights& next = {});

// Several matrices applied to the same input in one pass of the thread pool (one barrier instead
// of `count`): ys[j] = x * ws[j]^T exactly as matmul(ws[j], x, m, ys[j], pool) computes it, bit for
// bit. For the projections that share an input: wq/wk/wv after the attention norm, gate/up
// after the FFN norm. count <= 8; ys[j] is [m][ws[j].rows] and must not alias x or another ys.
// When the matrices differ in cols or activation encoding, or pool is null, it is simply one
// matmul per matrix.
void matmul_multi(const WeightMatrix* ws, int count, const float* x, int64_t m, float* const* ys, ThreadPool* pool,
                  const NextWeights& next = {});
void matmul_multi_with_kernels(const KernelTable& kernels, const WeightMatrix* ws, int count, const float* x,
                               int64_t m, float* const* ys, ThreadPool* pool, const NextWeights& next = {});

// The SwiGLU feed-forward's gate and up matrices packed as one: their 16-row groups interleaved
// (group 2g gate's rows 16g.., group 2g + 1 up's), so that a thread's share of both is one
// weight stream and one GEMM call (two streams per claim measured slower than the serial SwiGLU
// this pass removes; docs/benchmarks.md). packed_pair_bytes: the bytes it takes, 0 when the pair
// cannot be packed so for `kernels` (either matrix without a packed layout, or different types or
// shapes). pack_weight_pair writes it to dst (64-byte aligned, outliving its uses) and returns it
// as a packed-only matrix: rows 2 * gate.rows, data null, usable only by matmul_swiglu on that
// very table.
size_t packed_pair_bytes(const KernelTable& kernels, const WeightMatrix& gate, const WeightMatrix& up);
WeightMatrix pack_weight_pair(const KernelTable& kernels, const WeightMatrix& gate, const WeightMatrix& up,
                              void* dst);

// g[i][r] = silu(x_i . gate_r) * (x_i . up_r) for i in [0, m), r in [0, pair.rows / 2), over a
// pair from pack_weight_pair: bit for bit matmul_multi({gate, up}) then swiglu (kernels/ops.h).
// Each thread applies the SwiGLU to the columns it has just computed, so it runs inside the pool
// pass instead of serially after it (batch-8 decode of smollm-135m: 4.4-4.9 us per layer on the
// calling thread while the others waited). x: [m][pair.cols]; g: [m][pair.rows / 2]; scratch:
// [m][pair.rows] (the products, gate's and up's 16 columns alternating); none may alias another.
void matmul_swiglu(const WeightMatrix& pair, const float* x, int64_t m, float* g, float* scratch,
                   ThreadPool* pool, const NextWeights& next = {});
void matmul_swiglu_with_kernels(const KernelTable& kernels, const WeightMatrix& pair, const float* x,
                                int64_t m, float* g, float* scratch, ThreadPool* pool,
                                const NextWeights& next = {});

// The first weight bytes thread `thread` of `pool` is expected to read in a matmul(_multi) of m
// activation rows over next (the active kernel table's layout; ThreadPool::first_index), capped at
// the size of the hint; empty when that call would not be hinted (m beyond a small batch, or no
// matrices).
struct WeightSpan {
  const uint8_t* data = nullptr;
  size_t bytes = 0;
};
WeightSpan next_weights_start(const NextWeights& next, int64_t m, const ThreadPool& pool, int thread);
// That span as a pool pass's `after` (ThreadPool::parallel_for warms it once the thread's share is
// done), for matmul's passes and the others before one (attention before wo). Held by reference
// (std::cref) the std::function wrapping it never allocates.
struct NextWeightsHint {
  NextWeights next;
  int64_t m;
  const ThreadPool* pool;
  ThreadPool::WarmSpan operator()(int thread) const;
};

// Embedding lookup: out[i][0..w.cols) = dequantized row ids[i] of w, for i in [0, n), read from
// w.packed where its layout has a row reader (the same values), else from w.data.
// Aborts on an id outside [0, w.rows).
void get_rows(const WeightMatrix& w, const int32_t* ids, int64_t n, float* out);

}  // namespace kvserve
