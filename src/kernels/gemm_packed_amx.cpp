// AMX (Advanced Matrix Extensions, AMX-INT8) GEMM over the repacked legacy quants Q8_0, Q5_0 and
// Q4_0 (KernelTable::packed of the `amx` table). Same packed layout as the AVX-512 table
// (packed_layout.h), same results bit for bit.
//
// Why: prefill and batched decode are bound by arithmetic. The AVX-512 kernel
// (gemm_packed_avx512.cpp) spends a block of 16 weight rows x 8 activation rows on 64 vpdpbusd and
// 64 broadcasts; one tdpbsud multiplies a block of 16 weight rows by up to 16 activation rows
// (8,192 byte products) in a single instruction. What remains per block is the f32 step, the same
// as the AVX-512 kernel's.
//
// A block's weight codes are already an AMX "B" tile: the packed layout puts bytes 4r .. 4r+3 of
// code vector j at elements 4j .. 4j+3 of row r, which is B's row j (K/4 = 8 rows of 16 x 4
// bytes). The activation codes of 16 rows for one block are an "A" tile (16 rows x 32 bytes, one
// row per activation row, the row stride of the rearranged activations). tdpbsud: signed A
// (activations) x unsigned B (the biased weight codes) into C (16 x 16 int32). Q5_0 and Q4_0
// codes are nibble-packed, so a group's blocks are unpacked once into a scratch buffer of Q8_0's
// code layout (the same unpack as the AVX-512 kernel) and then read as B tiles.
//
// Arithmetic per output, as in gemm_packed_avx512.cpp: isum = -kBias * sum(x) + sum((q + kBias) x)
// (exact int32), then acc = fma(d_w * d_x, float(isum), acc) block after block. The integer sum
// is exact whoever computes it, and the f32 steps are the same operations in the same order, so
// this kernel and the AVX-512 one give identical bits; that is why the AMX table can send calls
// of few activation rows (a decode step's one) and the few rows past a call's last tile to the
// AVX-512 kernel without a result depending on the batch.
//
// Linux grants AMX's tile data state per process on request (arch_prctl ARCH_REQ_XCOMP_PERM);
// isa_supported(Isa::kAmx) makes that request, and this table is used only where it succeeded.
// Compiled with AVX-512 and AMX flags; nothing here runs elsewhere.
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/packed_avx512_common.h"

namespace kvserve {

namespace {

constexpr int kTileRows = 16;  // activation rows per A/C tile (AMX's maximum)

// Tile registers: C0/C1 (tmm0, tmm1) the int32 sums of two blocks, A0/A1 (tmm2, tmm3) their
// activation codes [16 rows][32 bytes], B0/B1 (tmm4, tmm5) their weight codes [8][16 x 4 bytes]:
// two blocks in flight so that one tdpbsud's latency hides behind the other's.
constexpr int kC0 = 0, kC1 = 1, kA0 = 2, kA1 = 3, kB0 = 4, kB1 = 5;
constexpr int kNumTiles = 8;

// The 64-byte operand of ldtilecfg (palette 1); unused tiles stay 0 x 0.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};  // bytes per row of each tile
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64 && offsetof(TileConfig, colsb) == 16 && offsetof(TileConfig, rows) == 48,
              "ldtilecfg's memory layout");

// Tiles for `rows` (1 .. 16) activation rows.
TileConfig tile_config(int rows) {
  TileConfig c;
  for (int t : {kC0, kC1}) c.rows[t] = uint8_t(rows), c.colsb[t] = kRows * 4;
  for (int t : {kA0, kA1}) c.rows[t] = uint8_t(rows), c.colsb[t] = kQK;
  for (int t : {kB0, kB1}) c.rows[t] = kQK / 4, c.colsb[t] = kRows * 4;
  return c;
}

// A block's tile work, c[k][r] = sum_e x[k][e] * code[r][e] for the activation rows at x (xs
// bytes apart, the block's 32 codes each) and one block's weight codes (Q8_0's code layout), one
// block (single) or two (pair, into c0 and c1). Two implementations of one sequence of tile
// operations: the AMX instructions, and the same operations in scalar code as the instruction set
// reference defines them, so that the kernel's tiling is tested on CPUs without AMX
// (fill_amx_emulated_packed_kernels). GCC's tile intrinsics paste their register numbers into
// the assembly text, hence the literals.
struct AmxTiles {
  static void begin(const TileConfig& c) {
    // GCC does not always count the 64 bytes ldtilecfg reads as used: in a variant of this file
    // (the rows and widths set in other loops) it dropped their stores, leaving an all-zero
    // configuration and #UD on the first tile instruction. The empty asm reads all of c.
    asm volatile("" : : "m"(c));
    _tile_loadconfig(&c);
  }
  static void end() { _tile_release(); }  // back to the init state: a context switch need not save tiles
  static void pair(const uint8_t* x0, const uint8_t* x1, size_t xs, const uint8_t* w0, const uint8_t* w1,
                   int32_t* c0, int32_t* c1) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_loadd(2, x0, xs);
    _tile_loadd(4, w0, 64);
    _tile_loadd(3, x1, xs);
    _tile_loadd(5, w1, 64);
    _tile_dpbsud(0, 2, 4);
    _tile_dpbsud(1, 3, 5);
    _tile_stored(0, c0, 64);
    _tile_stored(1, c1, 64);
  }
  static void single(const uint8_t* x0, size_t xs, const uint8_t* w0, int32_t* c0) {
    _tile_zero(0);
    _tile_loadd(2, x0, xs);
    _tile_loadd(4, w0, 64);
    _tile_dpbsud(0, 2, 4);
    _tile_stored(0, c0, 64);
  }
};

struct EmulatedTiles {
  struct State {
    TileConfig cfg;
    alignas(64) uint8_t tile[kNumTiles][16][64];
  };
  static State& state() {
    thread_local State s;
    return s;
  }
  static void begin(const TileConfig& c) { state().cfg = c; }
  static void end() {}
  static void zero(int t) { std::memset(state().tile[t], 0, sizeof(state().tile[t])); }
  static void load(int t, const uint8_t* base, size_t stride) {
    State& s = state();
    if (s.cfg.rows[t] > 16 || s.cfg.colsb[t] > 64) std::abort();
    zero(t);
    for (int r = 0; r < s.cfg.rows[t]; ++r) std::memcpy(s.tile[t][r], base + size_t(r) * stride, s.cfg.colsb[t]);
  }
  static void store(int t, int32_t* base, size_t stride) {
    State& s = state();
    for (int r = 0; r < s.cfg.rows[t]; ++r)
      std::memcpy(reinterpret_cast<uint8_t*>(base) + size_t(r) * stride, s.tile[t][r], s.cfg.colsb[t]);
  }
  // TDPBSUD: c.row[m].dword[n] += sum over k < a.colsb / 4, i < 4 of
  // int8(a.row[m].byte[4k + i]) * uint8(b.row[k].byte[4n + i]). Shapes the instruction rejects
  // (#UD on the hardware) abort here.
  static void dpbsud(int c, int a, int b) {
    State& s = state();
    const TileConfig& g = s.cfg;
    if (g.rows[c] != g.rows[a] || g.colsb[c] != g.colsb[b] || g.colsb[a] != 4 * g.rows[b] || g.rows[c] > 16 ||
        g.colsb[c] > 64 || g.colsb[a] > 64)
      std::abort();
    for (int m = 0; m < s.cfg.rows[c]; ++m)
      for (int n = 0; n < s.cfg.colsb[c] / 4; ++n) {
        int32_t acc;
        std::memcpy(&acc, &s.tile[c][m][4 * n], 4);
        for (int k = 0; k < s.cfg.colsb[a] / 4; ++k)
          for (int i = 0; i < 4; ++i)
            acc += int32_t(int8_t(s.tile[a][m][4 * k + i])) * int32_t(s.tile[b][k][4 * n + i]);
        std::memcpy(&s.tile[c][m][4 * n], &acc, 4);
      }
  }
  static void pair(const uint8_t* x0, const uint8_t* x1, size_t xs, const uint8_t* w0, const uint8_t* w1,
                   int32_t* c0, int32_t* c1) {
    zero(kC0);
    zero(kC1);
    load(kA0, x0, xs);
    load(kB0, w0, 64);
    load(kA1, x1, xs);
    load(kB1, w1, 64);
    dpbsud(kC0, kA0, kB0);
    dpbsud(kC1, kA1, kB1);
    store(kC0, c0, 64);
    store(kC1, c1, 64);
  }
  static void single(const uint8_t* x0, size_t xs, const uint8_t* w0, int32_t* c0) {
    zero(kC0);
    load(kA0, x0, xs);
    load(kB0, w0, 64);
    dpbsud(kC0, kA0, kB0);
    store(kC0, c0, 64);
  }
};

// The AVX-512 table's GEMM for format F, which this table started as a copy of (set by
// fill_amx_packed_kernels while the tables are built): activation rows that do not fill a tile go there.
using GemmPtr = decltype(PackedKernels::gemm);
template <typename Tiles, typename F>
GemmPtr g_vector_gemm = nullptr;

// A group's code vectors where GroupLayout<PackQ8_0>::codes finds them (block b: 8 x 64 unsigned
// codes), for B tiles: Q8_0's are read in place, the nibble formats' are unpacked into a
// per-thread scratch buffer laid out like a Q8_0 group (its scale slots unused).
template <typename F>
const uint8_t* unpacked_codes(const uint8_t* group, int64_t nb) {
  if constexpr (std::is_same_v<F, PackQ8_0>) {
    return group;
  } else {
    using Q8 = GroupLayout<PackQ8_0>;
    thread_local std::vector<uint8_t> scratch;
    const size_t bytes = packed_group_bytes<PackQ8_0>(nb * kQK);
    if (scratch.size() < bytes) scratch.resize(bytes);
    for (int64_t b = 0; b < nb; ++b) {
      __m512i v[8];
      unpack_codes(F{}, GroupLayout<F>::codes(group, nb, b), GroupLayout<F>::high(group, nb, b), v);
      for (int j = 0; j < 8; ++j) _mm512_storeu_si512(Q8::codes(scratch.data(), nb, b) + 64 * j, v[j]);
    }
    return scratch.data();
  }
}

// acc[k] = fma(d_w * d_x[k][b], float(isum[k]), acc[k]) for the M activation rows of a tile, isum
// being the tile's int32 sums c[k][r] plus the bias correction: group_tile's f32 step exactly.
// kHint: block b's weight-stream hint (GroupLayout::hint_line), one line per activation row.
template <typename F, int M, bool kHint>
inline void apply_block(const int32_t (*c)[kRows], const uint8_t* group, int64_t nb, const Q8ActRow* a,
                        int64_t b, __m512 acc[M]) {
  using L = GroupLayout<F>;
  const int hint_lines = kHint ? L::hint_lines(nb, b) : 0;
  const __m512 dw =
      _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(L::scales(group, nb, b))));
  for (int i = M; i < hint_lines; ++i) L::template hint_line<kWeightHintBytes>(group, nb, b, i);
  for (int k = 0; k < M; ++k) {
    if (k < hint_lines) L::template hint_line<kWeightHintBytes>(group, nb, b, k);
    const __m512i isum = _mm512_add_epi32(_mm512_set1_epi32(-F::kBias * a[k].sum[b]), _mm512_load_si512(c[k]));
    acc[k] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(a[k].dx[b])), _mm512_cvtepi32_ps(isum), acc[k]);
  }
}

// One group of 16 weight rows (group: its packed bytes, for the scales; codes: its code vectors
// where GroupLayout<PackQ8_0>::codes finds them) times the M activation rows at x (xs bytes apart;
// a: the same rows' views): y[k * ys + r]. kHint: hint the weight stream ahead as the vector
// kernels do (calls of one tile of rows or fewer, where each weight byte is used once).
template <typename Tiles, typename F, int M, bool kHint>
void group_tile(int64_t nb, const uint8_t* group, const uint8_t* codes, const uint8_t* x, size_t xs,
                const Q8ActRow* a, float* y, size_t ys) {
  using Q8 = GroupLayout<PackQ8_0>;
  alignas(64) int32_t c[2][kTileRows][kRows];
  __m512 acc[M];
  for (int k = 0; k < M; ++k) acc[k] = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    Tiles::pair(x + size_t(b) * kQK, x + size_t(b + 1) * kQK, xs, Q8::codes(codes, nb, b),
                Q8::codes(codes, nb, b + 1), c[0][0], c[1][0]);
    apply_block<F, M, kHint>(c[0], group, nb, a, b, acc);
    apply_block<F, M, kHint>(c[1], group, nb, a, b + 1, acc);
  }
  if (b < nb) {
    Tiles::single(x + size_t(b) * kQK, xs, Q8::codes(codes, nb, b), c[0][0]);
    apply_block<F, M, kHint>(c[0], group, nb, a, b, acc);
  }
  for (int k = 0; k < M; ++k) _mm512_storeu_ps(y + size_t(k) * ys, acc[k]);
}

// Every group of the call times `tiles` tiles of M activation rows at x, under one tile
// configuration, group by group (a group's codes, unpacked once, serve every tile).
template <typename Tiles, typename F, int M, bool kHint>
void tiles_of_rows(int64_t nb, const void* w, size_t gb, int64_t ng, const uint8_t* x, size_t xs,
                   int64_t tiles, float* y, size_t ys) {
  Tiles::begin(tile_config(M));
  for (int64_t g = 0; g < ng; ++g) {
    const uint8_t* group = static_cast<const uint8_t*>(w) + size_t(g) * gb;
    const uint8_t* codes = unpacked_codes<F>(group, nb);
    for (int64_t t = 0; t < tiles; ++t) {
      const uint8_t* xt = x + size_t(t) * M * xs;
      Q8ActRow a[M];
      for (int k = 0; k < M; ++k) a[k] = q8_act_row(xt + size_t(k) * xs, nb);
      group_tile<Tiles, F, M, kHint>(nb, group, codes, xt, xs, a, y + size_t(t) * M * ys + size_t(g) * kRows,
                                     ys);
    }
  }
}

// Fewer activation rows than this go to the AVX-512 kernel. Every block's sums pass through a tile
// store whatever the rows, so a tile of few rows costs nearly what a full one does: for Q8_0 the
// tiles overtake the vector kernel from ~8 rows; Q5_0 and Q4_0 also unpack each group's codes
// first, which only full tiles pay back (docs/architecture.md, "AMX tiles").
template <typename F>
constexpr int64_t kMinTileRows = std::is_same_v<F, PackQ8_0> ? 8 : kTileRows;

// The rows left after a call's full tiles (kMinTileRows .. 15) as one tile of that many rows.
template <typename Tiles, typename F, int M = int(kMinTileRows<F>)>
void partial_tile(int rows, int64_t nb, const void* w, size_t gb, int64_t ng, const uint8_t* x, size_t xs,
                  float* y, size_t ys) {
  if constexpr (M < kTileRows) {
    if (rows != M) return partial_tile<Tiles, F, M + 1>(rows, nb, w, gb, ng, x, xs, y, ys);
    tiles_of_rows<Tiles, F, M, true>(nb, w, gb, ng, x, xs, 1, y, ys);
  }
}

// The packed GEMM entry (PackedKernels::gemm): tiles of 16 activation rows, then for Q8_0 one tile
// of the 8 .. 15 rows left, on AMX; fewer rows (a call's, or those after its tiles) on the AVX-512
// kernel. A call of more than one tile of rows is a prefill chunk whose weights the next chunks
// reuse (matmul.cpp's weight tiles): no stream to hint.
template <typename Tiles, typename F>
void gemm(int64_t cols, const void* w, size_t gb, int64_t ng, const void* x, size_t xs, int64_t nx, float* y,
          size_t ys) {
  const int64_t nb = cols / kQK;
  const auto* xb = static_cast<const uint8_t*>(x);
  if (nx < kMinTileRows<F>) return g_vector_gemm<Tiles, F>(cols, w, gb, ng, xb, xs, nx, y, ys);
  const int64_t full = nx / kTileRows;
  if (nx > kTileRows) {
    tiles_of_rows<Tiles, F, kTileRows, false>(nb, w, gb, ng, xb, xs, full, y, ys);
  } else if (full > 0) {
    tiles_of_rows<Tiles, F, kTileRows, true>(nb, w, gb, ng, xb, xs, full, y, ys);
  }
  const int rest = int(nx - full * kTileRows);
  const uint8_t* xr = xb + size_t(full) * kTileRows * xs;
  float* yr = y + size_t(full) * kTileRows * ys;
  if constexpr (kMinTileRows<F> < kTileRows) {
    if (rest >= kMinTileRows<F>) {
      partial_tile<Tiles, F>(rest, nb, w, gb, ng, xr, xs, yr, ys);
      return Tiles::end();
    }
  }
  Tiles::end();
  if (rest > 0) g_vector_gemm<Tiles, F>(cols, w, gb, ng, xr, xs, rest, yr, ys);
}

template <typename Tiles, typename F>
void override_gemm(KernelTable* t, GgmlType type) {
  g_vector_gemm<Tiles, F> = t->packed[int(type)].gemm;
  if (g_vector_gemm<Tiles, F> != nullptr) t->packed[int(type)].gemm = gemm<Tiles, F>;
}

template <typename Tiles>
void override_gemms(KernelTable* t) {
  override_gemm<Tiles, PackQ8_0>(t, GgmlType::Q8_0);
  override_gemm<Tiles, PackQ5_0>(t, GgmlType::Q5_0);
  override_gemm<Tiles, PackQ4_0>(t, GgmlType::Q4_0);
}

// True when the tile GEMM of `type` gives the vector GEMM's bits on one group of 16 weight rows x
// 96 columns (three blocks: a pair and an odd one) of pseudo-random codes with sane scales, times
// 17 activation rows (a tile and one row past it).
template <typename Tiles, typename F>
bool agrees_with_vector_gemm(const KernelTable& t, GgmlType type) {
  const PackedKernels& pk = t.packed[int(type)];
  constexpr int64_t kCols = 96, kActRows = 17;
  constexpr int64_t kBlocks = kCols / kQK;
  const size_t row_bytes = size_t(kBlocks) * sizeof(typename F::Block);
  uint32_t state = 0x9E3779B9u;
  auto next_byte = [&] {
    state = state * 1664525u + 1013904223u;
    return uint8_t(state >> 24);
  };
  // Random block bytes, then each block's leading f16 scale (every legacy block starts with it)
  // set to a normal value.
  auto fill_blocks = [&](std::vector<uint8_t>& v, size_t block_bytes) {
    for (auto& b : v) b = next_byte();
    for (size_t o = 0; o < v.size(); o += block_bytes) {
      const uint16_t d = uint16_t(0x2000 + (next_byte() << 2));
      std::memcpy(v.data() + o, &d, 2);
    }
  };
  std::vector<uint8_t> w(size_t(kRows) * row_bytes), x(size_t(kActRows) * kBlocks * sizeof(BlockQ8_0));
  fill_blocks(w, sizeof(typename F::Block));
  fill_blocks(x, sizeof(BlockQ8_0));
  const size_t gb = pk.group_bytes(kCols), xs = pk.act_bytes(kCols);
  std::vector<uint8_t> packed(gb + 64), acts(size_t(kActRows) * xs + 64);
  uint8_t* pw = packed.data() + (64 - reinterpret_cast<uintptr_t>(packed.data()) % 64) % 64;
  uint8_t* pa = acts.data() + (64 - reinterpret_cast<uintptr_t>(acts.data()) % 64) % 64;
  pk.pack(w.data(), row_bytes, kRows, kCols, pw);
  pk.pack_acts(x.data(), size_t(kBlocks) * sizeof(BlockQ8_0), kActRows, kCols, pa, xs);
  std::vector<float> tiles(size_t(kActRows) * kRows), vector(tiles.size());
  pk.gemm(kCols, pw, gb, 1, pa, xs, kActRows, tiles.data(), kRows);
  g_vector_gemm<Tiles, F>(kCols, pw, gb, 1, pa, xs, kActRows, vector.data(), kRows);
  return std::memcmp(tiles.data(), vector.data(), sizeof(float) * tiles.size()) == 0;
}

template <typename Tiles, typename F>
void keep_if_it_agrees(KernelTable* t, GgmlType type, bool* all) {
  if (t->packed[int(type)].gemm == nullptr || agrees_with_vector_gemm<Tiles, F>(*t, type)) return;
  t->packed[int(type)].gemm = g_vector_gemm<Tiles, F>;
  *all = false;
}

// The tile path is tested against the vector one on emulated tiles (the instruction set
// reference's definitions); on the hardware it is checked once more as the table is built: a
// format whose tile GEMM disagrees by one bit keeps the AVX-512 GEMM, and the table's name says
// so (kvserve bench and the server's ready line print it).
template <typename Tiles>
void fill_checked(KernelTable* t) {
  override_gemms<Tiles>(t);
  bool all = true;
  keep_if_it_agrees<Tiles, PackQ8_0>(t, GgmlType::Q8_0, &all);
  keep_if_it_agrees<Tiles, PackQ5_0>(t, GgmlType::Q5_0, &all);
  keep_if_it_agrees<Tiles, PackQ4_0>(t, GgmlType::Q4_0, &all);
  if (!all) t->name = "amx (self-check failed: AVX-512 GEMMs kept)";
}

}  // namespace

void fill_amx_packed_kernels(KernelTable* t) { fill_checked<AmxTiles>(t); }

void fill_amx_emulated_packed_kernels(KernelTable* t) { fill_checked<EmulatedTiles>(t); }

}  // namespace kvserve
