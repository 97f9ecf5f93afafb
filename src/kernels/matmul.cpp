// matmul driver: activation conversion, tiling and threading around the vec_dot kernels.
//
// Work split: output rows (weight rows) are cut into one contiguous range per thread. Within a
// range, weight rows are taken in tiles of ~kTileBytes; each tile is multiplied with every
// activation row before moving on (kRowsPerMultiDot activation rows per weight-row decode where the
// kernel table has a multi-row kernel), so a weight row is read from memory once per call and the
// converted activations are streamed from cache. How rows are split between threads never changes
// which kernel computes y[i][r], and the multi-row kernels are bit-identical to the single-row
// ones, so results depend neither on the thread count nor on the batch a row is part of.
//
// Where the table has a GEMM kernel for the type (KernelTable::gemm), the range is instead cut
// into tiles of ~kGemmTileBytes of weight rows and handed to it with up to kGemmActRows activation
// rows at a time; the kernel blocks both in registers (4 weight rows x 4 activation rows share
// each loaded block) and is bit-identical to its table's vec_dot, so the same guarantees hold.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/vec_dot.h"
#include "tensor/quants.h"
#include "util/thread_pool.h"

namespace kvserve {

namespace {

constexpr size_t kTileBytes = 16 * 1024;       // weight bytes per tile (fits L1 with room to spare)
constexpr size_t kGemmTileBytes = 32 * 1024;   // weight bytes per GEMM tile (L1 on current x86 cores)
constexpr int64_t kGemmActRows = 64;           // activation rows per GEMM call (~40 KiB of q8_0 at 576 cols: L2)
constexpr int64_t kMinParallelWork = 1 << 16;  // multiply-adds below which threads cost more than they save

[[noreturn]] void fail(const char* what, const WeightMatrix& w) {
  std::fprintf(stderr, "kvserve: %s (type %s, %lld x %lld)\n", what, ggml_type_name(w.type),
               static_cast<long long>(w.rows), static_cast<long long>(w.cols));
  std::abort();
}

void check_matrix(const WeightMatrix& w) {
  if (!is_supported_weight_type(w.type)) fail("unsupported weight type", w);
  if (w.cols % ggml_block_size(w.type) != 0) fail("row length is not a multiple of the block size", w);
  if (w.row_bytes < ggml_row_size(w.type, w.cols)) fail("row stride shorter than a row", w);
}

// Per-calling-thread scratch for converted activations; grows, never shrinks.
uint8_t* activation_scratch(size_t bytes) {
  thread_local std::vector<uint8_t> buf;
  if (buf.size() < bytes) buf.resize(bytes);
  return buf.data();
}

}  // namespace

void matmul_with_kernels(const KernelTable& kernels, const WeightMatrix& w, const float* x, int64_t m,
                         float* y, ThreadPool* pool) {
  if (m <= 0 || w.rows <= 0) return;
  check_matrix(w);
  const VecDotFn dot = kernels.vec_dot[int(w.type)];
  if (dot == nullptr) fail("no kernel for weight type", w);

  const int64_t n = w.cols;
  const bool parallel = pool != nullptr && pool->num_threads() > 1 && w.rows > 1 &&
                        w.rows * n * m >= kMinParallelWork;

  // 1. Activations -> the weight type's activation encoding, once per row.
  const uint8_t* xq;
  size_t x_stride;
  if (activation_type(w.type) == GgmlType::F32) {
    xq = reinterpret_cast<const uint8_t*>(x);
    x_stride = size_t(n) * sizeof(float);
  } else {
    x_stride = activation_row_bytes(w.type, n);
    uint8_t* buf = activation_scratch(x_stride * size_t(m));
    auto convert = [&](int64_t i0, int64_t i1, int) {
      for (int64_t i = i0; i < i1; ++i) convert_activation_row(w.type, x + i * n, buf + size_t(i) * x_stride, n);
    };
    if (parallel && m >= 4) {
      pool->parallel_for(m, convert);
    } else {
      convert(0, m, 0);
    }
    xq = buf;
  }

  // 2. Dot products over tiles of weight rows.
  const uint8_t* wdata = static_cast<const uint8_t*>(w.data);
  const int64_t rows = w.rows;
  if (const GemmFn gemm = kernels.gemm[int(w.type)]) {
    // Register-tiled kernel: a tile of weight rows (~kGemmTileBytes, stays in L1/L2) meets the
    // activation rows kGemmActRows at a time; the kernel reuses each loaded weight block for
    // several activation rows and each activation block for several weight rows.
    const int64_t tile = std::max<int64_t>(4, int64_t(kGemmTileBytes / w.row_bytes) & ~int64_t(3));
    auto work = [&](int64_t r0, int64_t r1, int) {
      for (int64_t t0 = r0; t0 < r1; t0 += tile) {
        const int64_t nw = std::min(r1, t0 + tile) - t0;
        for (int64_t i = 0; i < m; i += kGemmActRows) {
          const int64_t nx = std::min(m, i + kGemmActRows) - i;
          gemm(n, wdata + size_t(t0) * w.row_bytes, w.row_bytes, nw, xq + size_t(i) * x_stride, x_stride, nx,
               y + i * rows + t0, size_t(rows));
        }
      }
    };
    if (parallel) {
      pool->parallel_for(rows, work);
    } else {
      work(0, rows, 0);
    }
    return;
  }
  const int64_t tile = std::max<int64_t>(1, int64_t(kTileBytes / w.row_bytes));
  const VecDotMultiFn dot_multi = kernels.vec_dot_multi[int(w.type)];
  const int64_t m_multi = dot_multi != nullptr ? m - m % kRowsPerMultiDot : 0;
  auto work = [&](int64_t r0, int64_t r1, int) {
    for (int64_t t0 = r0; t0 < r1; t0 += tile) {
      const int64_t t1 = std::min(r1, t0 + tile);
      // Groups of activation rows share one decode of each weight row ...
      for (int64_t i = 0; i < m_multi; i += kRowsPerMultiDot) {
        const uint8_t* xi = xq + size_t(i) * x_stride;
        float* yi = y + i * rows;
        for (int64_t r = t0; r < t1; ++r)
          dot_multi(n, wdata + size_t(r) * w.row_bytes, xi, x_stride, yi + r, size_t(rows));
      }
      // ... and the rest go one by one (bit-identical by the VecDotMultiFn contract).
      for (int64_t i = m_multi; i < m; ++i) {
        const void* xi = xq + size_t(i) * x_stride;
        float* yi = y + i * rows;
        for (int64_t r = t0; r < t1; ++r) yi[r] = dot(n, wdata + size_t(r) * w.row_bytes, xi);
      }
    }
  };
  if (parallel) {
    pool->parallel_for(rows, work);
  } else {
    work(0, rows, 0);
  }
}

void matmul(const WeightMatrix& w, const float* x, int64_t m, float* y, ThreadPool* pool) {
  matmul_with_kernels(active_kernels(), w, x, m, y, pool);
}

void get_rows(const WeightMatrix& w, const int32_t* ids, int64_t n, float* out) {
  check_matrix(w);
  const uint8_t* wdata = static_cast<const uint8_t*>(w.data);
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= w.rows) fail("get_rows: id out of range", w);
    dequantize_row(w.type, wdata + size_t(ids[i]) * w.row_bytes, out + i * w.cols, w.cols);
  }
}

}  // namespace kvserve
