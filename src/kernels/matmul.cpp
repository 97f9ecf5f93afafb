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
// Decode-sized calls (m <= 3) give the kernel each claimed range at once (its small-batch path
// takes 8 or 4 weight rows per pass and prefetches). Threads claim rows in multiples of 8 (the
// pool hands each thread a contiguous share and lets a faster one take over part of a slower's).
//
// A matrix packed for the table in use (WeightMatrix::packed, KernelTable::packed) goes through
// the packed GEMM instead: the converted activation rows are rearranged once per call
// (PackedKernels::pack_acts), threads take whole groups of kPackedRows rows, and the groups are
// tiled like the GEMM's rows (~kPackedTileBytes, or the table's PackedKernels::tile_bytes; the
// whole range for decode-sized calls and for calls of at most PackedKernels::whole_range_rows
// rows, whose kernel has a set-up per call).
#include "kernels/matmul.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "kernels/ops.h"
#include "kernels/vec_dot.h"
#include "tensor/quants.h"
#include "util/thread_pool.h"

namespace kvserve {

namespace {

constexpr size_t kTileBytes = 16 * 1024;       // weight bytes per tile (fits L1 with room to spare)
constexpr size_t kGemmTileBytes = 32 * 1024;   // weight bytes per GEMM tile (L1 on current x86 cores)
constexpr size_t kPackedTileBytes = 48 * 1024;  // weight bytes per packed-GEMM tile (at least one group;
                                                // PackedKernels::tile_bytes overrides it)
constexpr int64_t kGemmActRows = 64;           // activation rows per GEMM call (~40 KiB of q8_0 at 576 cols: L2)
constexpr int64_t kMinParallelWork = 1 << 16;  // multiply-adds below which threads cost more than they save
// Decode-sized calls (m <= kSmallBatch): the GEMM kernel streams the whole row range in one call
// (its small-batch path reads each weight byte once for all m rows anyway).
constexpr int64_t kSmallBatch = 3;
// Rows are handed to threads in whole multiples of this (the widest GEMM tile), so no thread's
// range ends in a narrow remainder tile except the matrix's last.
constexpr int64_t kRowUnit = 8;
// NextWeights: the bytes each thread hints of the next matmul's start, and the largest batch that
// hints (decode-sized calls stream their weights once; a prefill chunk is bound by arithmetic).
// Why 16 KiB: the packed GEMMs that hint run that far ahead of their reads; smollm-135m Q8_0
// decode on the Zen 4 VM gained ~3% (32 KiB: no more).
constexpr size_t kNextHintBytes = 16 * 1024;
constexpr int64_t kMaxHintRows = 16;

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

// Per-calling-thread scratch for converted activations (slot 0) and their packed rearrangement
// (slot 1); grows, never shrinks.
uint8_t* activation_scratch(size_t bytes, int slot = 0) {
  thread_local std::vector<uint8_t> buf[2];
  if (buf[slot].size() < bytes) buf[slot].resize(bytes);
  return buf[slot].data();
}

// The packed kernels to use for w under `kernels`, or null when w is not packed for that table.
const PackedKernels* packed_kernels(const KernelTable& kernels, const WeightMatrix& w) {
  if (!is_packed_for(w, kernels)) return nullptr;
  return &kernels.packed[int(w.type)];
}

// Groups (of gb bytes) per tile of a packed GEMM beyond the whole-range sizes: at least one.
int64_t packed_tile_groups(const PackedKernels& pk, size_t gb) {
  const size_t bytes = pk.tile_bytes > 0 ? pk.tile_bytes : kPackedTileBytes;
  return std::max<int64_t>(1, int64_t(bytes / gb));
}

}  // namespace

namespace {

// The activation rows as w's kernel reads them, converted once per call: m rows of w.cols floats
// into w's activation encoding (*x_stride gets the bytes per row; F32 activations are used in
// place) and, when w is packed for this table, rearranged by the packed kernels' pack_acts right
// after each row range is converted, in the same parallel pass.
const uint8_t* prepare_activations(const KernelTable& kernels, const WeightMatrix& w, const float* x, int64_t m,
                                   ThreadPool* pool, bool parallel, size_t* x_stride) {
  const int64_t n = w.cols;
  if (activation_type(w.type) == GgmlType::F32) {
    *x_stride = size_t(n) * sizeof(float);
    return reinterpret_cast<const uint8_t*>(x);
  }
  const size_t xs = activation_row_bytes(w.type, n);
  const PackedKernels* pk = packed_kernels(kernels, w);
  const bool one_pass = pk != nullptr && pk->quantize_pack_acts != nullptr;
  // The rows in activation_type: the result, or (packed) pack_acts' input; none in one pass.
  uint8_t* buf = one_pass ? nullptr : activation_scratch(xs * size_t(m));
  const size_t ps = pk != nullptr ? pk->act_bytes(n) : 0;
  uint8_t* packed = pk != nullptr ? activation_scratch(ps * size_t(m), 1) : nullptr;
  // The table's wide quantizer when it has one (bit-identical to convert_activation_row).
  const QuantizeActFn quantize = kernels.quantize_act[int(activation_type(w.type))];
  auto convert = [&](int64_t i0, int64_t i1, int) {
    if (one_pass) {  // the same bytes as the two steps below
      pk->quantize_pack_acts(x + i0 * n, i1 - i0, n, packed + size_t(i0) * ps, ps);
      return;
    }
    for (int64_t i = i0; i < i1; ++i) {
      if (quantize != nullptr) {
        quantize(x + i * n, buf + size_t(i) * xs, n);
      } else {
        convert_activation_row(w.type, x + i * n, buf + size_t(i) * xs, n);
      }
    }
    if (pk != nullptr) pk->pack_acts(buf + size_t(i0) * xs, xs, i1 - i0, n, packed + size_t(i0) * ps, ps);
  };
  // Below 16 rows the conversion costs less than the pool hand-off and barrier it would add
  // (smollm layer at 8 rows, packed Q8_0: ~6% faster in one pass than split over 2 threads;
  // engine batch 8 +1-8% in four alternations).
  constexpr int64_t kMinParallelRows = 16;
  if (parallel && m >= kMinParallelRows) {
    pool->parallel_for(m, convert);
  } else {
    convert(0, m, 0);
  }
  *x_stride = pk != nullptr ? ps : xs;
  return pk != nullptr ? packed : buf;
}

// y[i][r] for every activation row i < m and weight rows r in [r0, r1) of w (xq: converted rows,
// x_stride bytes apart; y: [m][w.rows]). Which rows a call covers never changes a result.
void multiply_rows(const KernelTable& kernels, const WeightMatrix& w, const uint8_t* xq, size_t x_stride,
                   int64_t m, float* y, int64_t r0, int64_t r1) {
  const int64_t n = w.cols, rows = w.rows;
  if (const PackedKernels* pk = packed_kernels(kernels, w)) {
    const size_t gb = pk->group_bytes(n);
    const int64_t g0 = r0 / kPackedRows, g1 = r1 / kPackedRows;
    const int64_t tile =
        m <= std::max(kSmallBatch, pk->whole_range_rows) ? g1 - g0 : packed_tile_groups(*pk, gb);
    const uint8_t* wp = static_cast<const uint8_t*>(w.packed);
    for (int64_t t0 = g0; t0 < g1; t0 += tile) {
      const int64_t ng = std::min(g1, t0 + tile) - t0;
      for (int64_t i = 0; i < m; i += kGemmActRows) {
        const int64_t nx = std::min(m, i + kGemmActRows) - i;
        pk->gemm(n, wp + size_t(t0) * gb, gb, ng, xq + size_t(i) * x_stride, x_stride, nx,
                 y + i * rows + t0 * kPackedRows, size_t(rows));
      }
    }
    return;
  }
  const uint8_t* wdata = static_cast<const uint8_t*>(w.data);
  if (const GemmFn gemm = kernels.gemm[int(w.type)]) {
    // Register-tiled kernel: a tile of weight rows (~kGemmTileBytes, stays in L1/L2) meets the
    // activation rows kGemmActRows at a time; the kernel reuses each loaded weight block for
    // several activation rows and each activation block for several weight rows. Decode-sized
    // calls hand over the whole range (the kernel's small-batch path streams it once).
    const int64_t tile = m <= kSmallBatch ? r1 - r0
                                          : std::max<int64_t>(4, int64_t(kGemmTileBytes / w.row_bytes) & ~int64_t(3));
    for (int64_t t0 = r0; t0 < r1; t0 += tile) {
      const int64_t nw = std::min(r1, t0 + tile) - t0;
      for (int64_t i = 0; i < m; i += kGemmActRows) {
        const int64_t nx = std::min(m, i + kGemmActRows) - i;
        gemm(n, wdata + size_t(t0) * w.row_bytes, w.row_bytes, nw, xq + size_t(i) * x_stride, x_stride, nx,
             y + i * rows + t0, size_t(rows));
      }
    }
    return;
  }
  const VecDotFn dot = kernels.vec_dot[int(w.type)];
  const int64_t tile = std::max<int64_t>(1, int64_t(kTileBytes / w.row_bytes));
  const VecDotMultiFn dot_multi = kernels.vec_dot_multi[int(w.type)];
  const int64_t m_multi = dot_multi != nullptr ? m - m % kRowsPerMultiDot : 0;
  for (int64_t t0 = r0; t0 < r1; t0 += tile) {
    const int64_t t1 = std::min(r1, t0 + tile);
    // Groups of activation rows share one decode of each weight row ...
    for (int64_t i = 0; i < m_multi; i += kRowsPerMultiDot) {
      const uint8_t* xi = xq + size_t(i) * x_stride;
      float* yi = y + i * rows;
      for (int64_t r = t0; r < t1; ++r) dot_multi(n, wdata + size_t(r) * w.row_bytes, xi, x_stride, yi + r, size_t(rows));
    }
    // ... and the rest go one by one (bit-identical by the VecDotMultiFn contract).
    for (int64_t i = m_multi; i < m; ++i) {
      const void* xi = xq + size_t(i) * x_stride;
      float* yi = y + i * rows;
      for (int64_t r = t0; r < t1; ++r) yi[r] = dot(n, wdata + size_t(r) * w.row_bytes, xi);
    }
  }
}

// Whether two matrices read the same activation rows: both unpacked, or both packed with the same
// activation rearrangement (Q8_0/Q5_0/Q4_0 share one; Q4_K and Q6_K each have their own).
bool same_packed_activations(const KernelTable& kernels, const WeightMatrix& a, const WeightMatrix& b) {
  const PackedKernels* pa = packed_kernels(kernels, a);
  const PackedKernels* pb = packed_kernels(kernels, b);
  if (pa == nullptr || pb == nullptr) return pa == pb;
  return pa->pack_acts == pb->pack_acts && pa->act_bytes == pb->act_bytes;
}

// Threads take weight rows in whole packed groups, in units of kRowUnit for GEMM types (whole
// tiles), single rows otherwise.
int64_t row_unit(const KernelTable& kernels, const WeightMatrix& w) {
  if (packed_kernels(kernels, w) != nullptr) return kPackedRows;
  return kernels.gemm[int(w.type)] != nullptr ? kRowUnit : 1;
}

// Whether one activation conversion and one row unit fit all `count` matrices, so that
// matmul_multi runs them in one pool pass (else one matmul each).
bool share_one_pass(const KernelTable& kernels, const WeightMatrix* ws, int count) {
  for (int j = 1; j < count; ++j)
    if (ws[j].cols != ws[0].cols || activation_type(ws[j].type) != activation_type(ws[0].type) ||
        row_unit(kernels, ws[j]) != row_unit(kernels, ws[0]) || !same_packed_activations(kernels, ws[j], ws[0]))
      return false;
  return true;
}

// The fewest units (row_unit) a thread should claim at a time: one weight tile of multiply_rows
// for batches beyond decode size, whose tiles each re-read every activation row (a shorter claim
// means a narrower tile and more of those re-reads); any size for decode, which streams once.
int64_t claim_grain(const KernelTable& kernels, const WeightMatrix& w, int64_t m) {
  if (m <= kSmallBatch) return 1;
  if (const PackedKernels* pk = packed_kernels(kernels, w))
    return packed_tile_groups(*pk, pk->group_bytes(w.cols));
  if (kernels.gemm[int(w.type)] != nullptr) return std::max<int64_t>(1, int64_t(kGemmTileBytes / w.row_bytes) / kRowUnit);
  return std::max<int64_t>(1, int64_t(kTileBytes / w.row_bytes));
}

}  // namespace

void matmul_with_kernels(const KernelTable& kernels, const WeightMatrix& w, const float* x, int64_t m,
                         float* y, ThreadPool* pool, const NextWeights& next) {
  if (m <= 0 || w.rows <= 0) return;
  check_matrix(w);
  if (kernels.vec_dot[int(w.type)] == nullptr) fail("no kernel for weight type", w);
  const int64_t rows = w.rows;
  const bool parallel = pool != nullptr && pool->num_threads() > 1 && rows > 1 && rows * w.cols * m >= kMinParallelWork;
  size_t x_stride = 0;
  const uint8_t* xq = prepare_activations(kernels, w, x, m, pool, parallel, &x_stride);
  if (!parallel) {
    multiply_rows(kernels, w, xq, x_stride, m, y, 0, rows);
    return;
  }
  const int64_t unit = row_unit(kernels, w);
  const NextWeightsHint next_hint{next, m, pool};
  const ThreadPool::AfterFn hint = std::cref(next_hint);
  pool->parallel_for(
      (rows + unit - 1) / unit,
      [&](int64_t u0, int64_t u1, int) {
        multiply_rows(kernels, w, xq, x_stride, m, y, u0 * unit, std::min(rows, u1 * unit));
      },
      claim_grain(kernels, w, m), next.count > 0 ? &hint : nullptr);
}

void matmul_multi_with_kernels(const KernelTable& kernels, const WeightMatrix* ws, int count, const float* x,
                               int64_t m, float* const* ys, ThreadPool* pool, const NextWeights& next) {
  if (m <= 0 || count <= 0) return;
  for (int j = 0; j < count; ++j) {
    check_matrix(ws[j]);
    if (kernels.vec_dot[int(ws[j].type)] == nullptr) fail("no kernel for weight type", ws[j]);
  }
  if (!share_one_pass(kernels, ws, count) || pool == nullptr || pool->num_threads() <= 1) {
    for (int j = 0; j < count; ++j)
      matmul_with_kernels(kernels, ws[j], x, m, ys[j], pool, j + 1 < count ? NextWeights{&ws[j + 1], 1} : next);
    return;
  }
  // Units (kRowUnit rows, or single rows) of all matrices, numbered matrix after matrix:
  // first_unit[j] is matrix j's first (count + 1 entries, at most kMaxMulti matrices).
  constexpr int kMaxMulti = 8;
  if (count > kMaxMulti) fail("matmul_multi: too many matrices", ws[0]);
  const int64_t unit = row_unit(kernels, ws[0]);
  int64_t first_unit[kMaxMulti + 1] = {0};
  for (int j = 0; j < count; ++j) {
    first_unit[j + 1] = first_unit[j] + (ws[j].rows + unit - 1) / unit;
  }
  size_t x_stride = 0;
  const uint8_t* xq = prepare_activations(kernels, ws[0], x, m, pool, true, &x_stride);
  const NextWeightsHint next_hint{next, m, pool};
  const ThreadPool::AfterFn hint = std::cref(next_hint);
  pool->parallel_for(
      first_unit[count],
      [&](int64_t u0, int64_t u1, int) {
        // The range [u0, u1) may span several matrices: one multiply_rows per piece.
        for (int j = 0; j < count && u0 < u1; ++j) {
          if (u0 >= first_unit[j + 1]) continue;
          const int64_t e = std::min(u1, first_unit[j + 1]);
          multiply_rows(kernels, ws[j], xq, x_stride, m, ys[j], (u0 - first_unit[j]) * unit,
                        std::min(ws[j].rows, (e - first_unit[j]) * unit));
          u0 = e;
        }
      },
      claim_grain(kernels, ws[0], m), next.count > 0 ? &hint : nullptr);
}

void matmul_swiglu_with_kernels(const KernelTable& kernels, const WeightMatrix& pair, const float* x,
                                int64_t m, float* g, float* scratch, ThreadPool* pool,
                                const NextWeights& next) {
  if (m <= 0 || pair.rows <= 0) return;
  check_matrix(pair);
  if (packed_kernels(kernels, pair) == nullptr || pair.rows % (2 * kPackedRows) != 0)
    fail("matmul_swiglu: not a gate/up pair packed for this kernel table", pair);
  // A unit is one group of each: 16 columns of g, 32 rows of the pair.
  constexpr int64_t kUnitRows = 2 * kPackedRows;
  const int64_t rows = pair.rows, f = rows / 2, units = rows / kUnitRows;
  const bool parallel =
      pool != nullptr && pool->num_threads() > 1 && rows * pair.cols * m >= kMinParallelWork;
  size_t x_stride = 0;
  const uint8_t* xq = prepare_activations(kernels, pair, x, m, pool, parallel, &x_stride);
  // Decode-sized calls apply the SwiGLU per claim, to the columns just computed (still in cache);
  // longer ones (prefill) row by row in a pass of their own, as the products of a claim's tiles
  // over hundreds of rows have left the cache by its end (qwen2.5-0.5b Q4_K_M prefill 512: ~2.5%
  // slower per claim, `kvserve bench`, three alternations).
  const bool per_claim = m <= kMaxHintRows;
  auto run = [&](int64_t u0, int64_t u1, int) {
    multiply_rows(kernels, pair, xq, x_stride, m, scratch, u0 * kUnitRows, u1 * kUnitRows);
    if (!per_claim) return;
    for (int64_t i = 0; i < m; ++i)
      swiglu_pairs16(scratch + size_t(i * rows + u0 * kUnitRows), u1 - u0,
                     g + size_t(i * f + u0 * kPackedRows));
  };
  auto rows_swiglu = [&](int64_t i0, int64_t i1, int) {
    for (int64_t i = i0; i < i1; ++i) swiglu_pairs16(scratch + size_t(i * rows), units, g + size_t(i * f));
  };
  if (!parallel) {
    run(0, units, 0);
    if (!per_claim) rows_swiglu(0, m, 0);
    return;
  }
  const NextWeightsHint next_hint{next, m, pool};
  const ThreadPool::AfterFn hint = std::cref(next_hint);
  pool->parallel_for(units, run, std::max<int64_t>(1, claim_grain(kernels, pair, m) / 2),
                     next.count > 0 ? &hint : nullptr);
  if (!per_claim) pool->parallel_for(m, rows_swiglu);  // (beyond decode size nothing is hinted)
}

void matmul_swiglu(const WeightMatrix& pair, const float* x, int64_t m, float* g, float* scratch,
                   ThreadPool* pool, const NextWeights& next) {
  matmul_swiglu_with_kernels(active_kernels(), pair, x, m, g, scratch, pool, next);
}

void matmul_multi(const WeightMatrix* ws, int count, const float* x, int64_t m, float* const* ys, ThreadPool* pool,
                  const NextWeights& next) {
  matmul_multi_with_kernels(active_kernels(), ws, count, x, m, ys, pool, next);
}

void matmul(const WeightMatrix& w, const float* x, int64_t m, float* y, ThreadPool* pool, const NextWeights& next) {
  matmul_with_kernels(active_kernels(), w, x, m, y, pool, next);
}

WeightSpan next_weights_start(const NextWeights& next, int64_t m, const ThreadPool& pool, int thread) {
  if (next.count <= 0 || m <= 0 || m > kMaxHintRows) return {};
  const KernelTable& kernels = active_kernels();
  const WeightMatrix* ws = next.ws;
  // The units the next pass numbers, as matmul_multi_with_kernels numbers them (only the first
  // matrix when they cannot share a pass), or as matmul_swiglu does (a group of each of the pair's
  // matrices).
  const int64_t unit = row_unit(kernels, ws[0]) * (next.pair ? 2 : 1);
  const int count = next.pair ? 1 : share_one_pass(kernels, ws, next.count) ? next.count : 1;
  int64_t total = 0;
  for (int j = 0; j < count; ++j) total += (ws[j].rows + unit - 1) / unit;
  int64_t u = pool.first_index(total, thread);
  for (int j = 0; j < count; ++j) {
    const WeightMatrix& w = ws[j];
    const int64_t units = (w.rows + unit - 1) / unit;
    if (u >= units) {
      u -= units;
      continue;
    }
    if (const PackedKernels* pk = packed_kernels(kernels, w)) {
      const size_t ub = pk->group_bytes(w.cols) * size_t(unit / kPackedRows);  // bytes per unit
      return {static_cast<const uint8_t*>(w.packed) + size_t(u) * ub,
              std::min(kNextHintBytes, size_t(units - u) * ub)};
    }
    return {static_cast<const uint8_t*>(w.data) + size_t(u * unit) * w.row_bytes,
            std::min(kNextHintBytes, size_t(w.rows - u * unit) * w.row_bytes)};
  }
  return {};
}

ThreadPool::WarmSpan NextWeightsHint::operator()(int thread) const {
  const WeightSpan s = next_weights_start(next, m, *pool, thread);
  return {s.data, s.bytes};
}

size_t packed_weight_bytes(const KernelTable& kernels, const WeightMatrix& w) {
  const PackedKernels& pk = kernels.packed[int(w.type)];
  if (pk.gemm == nullptr || w.rows <= 0 || w.rows % kPackedRows != 0) return 0;
  return pk.group_bytes(w.cols) * size_t(w.rows / kPackedRows);
}

void pack_weight(const KernelTable& kernels, WeightMatrix* w, void* dst) {
  check_matrix(*w);
  if (packed_weight_bytes(kernels, *w) == 0) fail("pack_weight: no packed layout for this matrix", *w);
  kernels.packed[int(w->type)].pack(w->data, w->row_bytes, w->rows, w->cols, dst);
  w->packed = dst;
  w->packed_for = &kernels;
}

size_t packed_pair_bytes(const KernelTable& kernels, const WeightMatrix& gate, const WeightMatrix& up) {
  if (gate.type != up.type || gate.rows != up.rows || gate.cols != up.cols || gate.row_bytes != up.row_bytes)
    return 0;
  const size_t one = packed_weight_bytes(kernels, gate);
  return one > 0 && packed_weight_bytes(kernels, up) == one ? 2 * one : 0;
}

WeightMatrix pack_weight_pair(const KernelTable& kernels, const WeightMatrix& gate, const WeightMatrix& up,
                              void* dst) {
  check_matrix(gate);
  check_matrix(up);
  if (packed_pair_bytes(kernels, gate, up) == 0)
    fail("pack_weight_pair: gate and up cannot be packed as a pair", up);
  const PackedKernels& pk = kernels.packed[int(gate.type)];
  const size_t gb = pk.group_bytes(gate.cols);
  auto* out = static_cast<uint8_t*>(dst);
  const auto* gd = static_cast<const uint8_t*>(gate.data);
  const auto* ud = static_cast<const uint8_t*>(up.data);
  for (int64_t g = 0; g < gate.rows / kPackedRows; ++g) {
    const size_t src = size_t(g * kPackedRows) * gate.row_bytes;
    pk.pack(gd + src, gate.row_bytes, kPackedRows, gate.cols, out + size_t(2 * g) * gb);
    pk.pack(ud + src, up.row_bytes, kPackedRows, up.cols, out + size_t(2 * g + 1) * gb);
  }
  WeightMatrix pair = gate;
  pair.rows = 2 * gate.rows;
  pair.data = nullptr;
  pair.packed = dst;
  pair.packed_for = &kernels;
  return pair;
}

void get_rows(const WeightMatrix& w, const int32_t* ids, int64_t n, float* out) {
  check_matrix(w);
  const uint8_t* wdata = static_cast<const uint8_t*>(w.data);
  const PackedKernels* pk = w.packed != nullptr ? &w.packed_for->packed[int(w.type)] : nullptr;
  const bool from_packed = pk != nullptr && pk->unpack_row != nullptr;
  const size_t gb = from_packed ? pk->group_bytes(w.cols) : 0;
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= w.rows) fail("get_rows: id out of range", w);
    if (from_packed)
      pk->unpack_row(static_cast<const uint8_t*>(w.packed) + size_t(ids[i] / kPackedRows) * gb, w.cols,
                     int(ids[i] % kPackedRows), out + i * w.cols);
    else
      dequantize_row(w.type, wdata + size_t(ids[i]) * w.row_bytes, out + i * w.cols, w.cols);
  }
}

}  // namespace kvserve
