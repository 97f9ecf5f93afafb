// Repacked legacy-quant weights (Q8_0, Q4_0, Q5_0) and their AVX-512 VNNI GEMM
// (KernelTable::packed).
//
// Why: in the file's layout each weight row keeps its blocks together, so the row-major kernels
// (gemm_avx512.cpp) end every 32-element block of every (weight row, activation row) pair with f32
// work of their own: a convert, a scale product and an fma per vpdpbusd, then a horizontal sum.
// Interleaving 16 weight rows so that one zmm holds 4 consecutive elements of each of the 16 rows
// lets one vpdpbusd against a broadcast 4-byte group of activations advance 16 outputs at once: a
// block costs 8 vpdpbusd, then one convert, one multiply and one fma for 16 outputs, and the 16
// lanes are the 16 outputs (no horizontal sum). The weight bytes read are the same as the file's
// (the 4- and 5-bit formats stay nibble-packed; see the Pack* formats below).
//
// Packed weights, per group of 16 rows (rows 16g .. 16g+15), nb = cols / 32 blocks:
//   codes  [nb][kCodeBytes]  unsigned codes q + kBias, arranged as the format says
//   high   [nb][kHighBytes]  Q5_0's fifth bits (none for the others)
//   scales [nb][16] f16      [b][r] = d of row r, block b
// group_bytes rounded up to 64 (zero padding); the groups follow one another.
//
// Arithmetic per output (weight row r, activation row k), whatever the tile:
//   for each block b in order: isum = -kBias * sum_e x[k][e] + sum_e (q[r][e] + kBias) * x[k][e]
//   (exact int32: |isum| <= 32 * 255 * 127), then acc = fma(d[r][b] * dx[k][b], float(isum), acc).
// Integer partial sums may be split across registers (exact), the f32 steps never are, so an
// output depends neither on which activation rows share its tile nor on the thread split.
//
// This file follows gemm_avx512.cpp's rule: nothing from a shared header's inline functions, only
// intrinsics and this file's anonymous namespace (it is compiled with AVX-512 flags).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/packed_avx512_common.h"

namespace kvserve {

namespace {

constexpr int kMaxTileCols = 8;                         // activation rows per register tile
// ---- weight formats: how a block's 16 x 32 unsigned codes (q + kBias) are stored and unpacked ----
//
// Code vector j (j = 0..7) of a block is the zmm whose byte 4r + i is the code of row r, element
// 4j + i; vpdpbusd of it against the broadcast activation codes 4j..4j+3 advances all 16 rows.

// Q8_0: the 8 code vectors as they are (512 bytes), code = q + 128.
struct PackQ8_0 {
  using Block = BlockQ8_0;
  static constexpr int kBias = 128;
  static constexpr size_t kCodeBytes = 512, kHighBytes = 0;
  static uint8_t code(const Block& b, int e) { return uint8_t(b.qs[e]) ^ 0x80; }
  static void store(uint8_t* codes, uint8_t*, int j, int byte, uint8_t c) { codes[64 * j + byte] = c; }
  static void unpack(const uint8_t* codes, const uint8_t*, __m512i v[8]) {
    for (int j = 0; j < 8; ++j) v[j] = _mm512_loadu_si512(codes + 64 * j);
  }
};

// Q4_0: code vectors 2i and 2i+1 share 64 bytes as low and high nibbles (256 bytes), code = q + 8
// (the stored nibble). The same bytes per row as the file's 16 nibble bytes.
struct PackQ5_0 {
  using Block = BlockQ5_0;
  static constexpr int kBias = 16;
  static constexpr size_t kCodeBytes = 256, kHighBytes = 64;
  static uint8_t code(const Block& b, int e) {
    const uint8_t low = e < 16 ? (b.qs[e] & 0x0F) : (b.qs[e - 16] >> 4);
    return uint8_t(low | (((load_u32(b.qh) >> e) & 1u) << 4));
  }
  static void store(uint8_t* codes, uint8_t* high, int j, int byte, uint8_t c) {
    PackQ4_0::store(codes, nullptr, j, byte, uint8_t(c & 0x0F));
    if (c & 0x10) high[8 * j + byte / 8] |= uint8_t(1u << (byte % 8));
  }
  static void unpack(const uint8_t* codes, const uint8_t* high, __m512i v[8]) {
    PackQ4_0::unpack(codes, nullptr, v);
    for (int j = 0; j < 8; ++j) {
      uint64_t bits;
      std::memcpy(&bits, high + 8 * j, 8);
      v[j] = _mm512_mask_add_epi8(v[j], _cvtu64_mask64(bits), v[j], _mm512_set1_epi8(16));
    }
  }
};

// Group layout: codes [nb][kCodeBytes] | fifth bits [nb][kHighBytes] | scales [nb][16] f16.
template <typename F>
size_t group_bytes(int64_t cols) {
  if (cols <= 0 || cols % kQK != 0 || cols > kMaxCols) return 0;
  return round64(size_t(cols / kQK) * (F::kCodeBytes + F::kHighBytes + kScaleBytes));
}

template <typename F>
void pack(const void* w, size_t row_bytes, int64_t rows, int64_t cols, void* dst) {
  const int64_t nb = cols / kQK;
  const size_t gb = group_bytes<F>(cols);
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t g = 0; g < rows / kRows; ++g, out += gb) {
    std::memset(out, 0, gb);
    uint8_t* codes = out;
    uint8_t* high = out + size_t(nb) * F::kCodeBytes;
    uint8_t* scales = high + size_t(nb) * F::kHighBytes;
    for (int r = 0; r < kRows; ++r) {
      const auto* src =
          reinterpret_cast<const typename F::Block*>(static_cast<const uint8_t*>(w) + size_t(g * kRows + r) * row_bytes);
      for (int64_t b = 0; b < nb; ++b) {
        std::memcpy(scales + size_t(b) * kScaleBytes + 2 * size_t(r), &src[b].d, 2);
        for (int e = 0; e < kQK; ++e)
          F::store(codes + size_t(b) * F::kCodeBytes, high + size_t(b) * F::kHighBytes, e / 4, 4 * r + e % 4,
                   F::code(src[b], e));
      }
    }
  }
}

// ---- activations ----
//
// Rearranged activation rows (the q8_0 values the row-major path uses, bit for bit):
//   codes [nb][32] s8 | dx [nb] f32 (the block's f16 scale, widened) | sum [nb] i32 (of the codes)
// row bytes = nb * 40 rounded up to 64.
size_t act_bytes(int64_t cols) { return round64(size_t(cols / kQK) * (kQK + 8)); }

struct ActRow {
  const int8_t* q;      // [nb][32]
  const float* dx;      // [nb]
  const int32_t* sum;   // [nb]
};

inline ActRow act_row(const uint8_t* row, int64_t nb) {
  return {reinterpret_cast<const int8_t*>(row), reinterpret_cast<const float*>(row + nb * kQK),
          reinterpret_cast<const int32_t*>(row + nb * (kQK + 4))};
}

void pack_acts(const void* x, size_t x_stride, int64_t m, int64_t cols, void* dst, size_t dst_stride) {
  const int64_t nb = cols / kQK;
  for (int64_t k = 0; k < m; ++k) {
    const auto* src = reinterpret_cast<const BlockQ8_0*>(static_cast<const uint8_t*>(x) + size_t(k) * x_stride);
    uint8_t* row = static_cast<uint8_t*>(dst) + size_t(k) * dst_stride;
    auto* dx = reinterpret_cast<float*>(row + nb * kQK);
    auto* sum = reinterpret_cast<int32_t*>(row + nb * (kQK + 4));
    for (int64_t b = 0; b < nb; ++b) {
      std::memcpy(row + b * kQK, src[b].qs, kQK);
      dx[b] = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(src[b].d)));
      // Sum of the 32 signed codes: SAD of the biased bytes against zero, minus the bias.
      const __m256i biased = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src[b].qs)),
                                              _mm256_set1_epi8(char(0x80)));
      const __m256i sad = _mm256_sad_epu8(biased, _mm256_setzero_si256());
      sum[b] = int32_t(_mm256_extract_epi64(sad, 0) + _mm256_extract_epi64(sad, 1) + _mm256_extract_epi64(sad, 2) +
                       _mm256_extract_epi64(sad, 3) - 128 * kQK);
    }
    std::memset(row + nb * (kQK + 8), 0, dst_stride - size_t(nb) * (kQK + 8));
  }
}

// ---- the GEMM ----

// Blocks ahead whose codes are hinted into L1: 8 (4 KiB of Q8_0 codes). A decode matmul streams
// every weight byte from memory once; the hint lifts batch-8 decode at context 128 from ~820 to
// ~1,150 tok/s and batch 1 by ~10% (Q8_0; distances 2, 4, 8, 12, 16 measured; 8 to 16 alike).
// Inline asm because GCC may delete a __builtin_prefetch it deems pure (kernels/attention_impl.h).
constexpr int64_t kPrefetchBlocks = 8;


// One group of 16 weight rows (w) times NC activation rows: y[k * ys + r]. Each block's integer
// sum starts at -kBias * (sum of the activation codes), which undoes the weight codes' bias. With
// one or two activation rows (decode) the 8 vpdpbusd of a block are split over two integer
// chains per row so that the chain latency does not bound a memory-streaming loop (exact).
template <typename F, int NC>
void group_tile(int64_t nb, const uint8_t* w, const ActRow* a, float* y, size_t ys) {
  constexpr int kChains = NC <= 2 ? 2 : 1;
  const uint8_t* codes = w;
  const uint8_t* high = w + size_t(nb) * F::kCodeBytes;
  const uint8_t* scales = high + size_t(nb) * F::kHighBytes;
  __m512 acc[NC];
  for (int k = 0; k < NC; ++k) acc[k] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m512i s[kChains][NC];
    for (int k = 0; k < NC; ++k) {
      s[0][k] = _mm512_set1_epi32(-F::kBias * a[k].sum[b]);
      if constexpr (kChains == 2) s[1][k] = _mm512_setzero_si512();
    }
    const uint8_t* cb = codes + size_t(b) * F::kCodeBytes;
    // Past the group's last codes this lands in its fifth bits, scales or the next group:
    // harmless hints (a prefetch never faults).
    for (size_t o = 0; o < F::kCodeBytes; o += 64) prefetch_line(cb + kPrefetchBlocks * F::kCodeBytes + o);
    __m512i v[8];
    F::unpack(cb, high + size_t(b) * F::kHighBytes, v);
    for (int j = 0; j < 8; ++j)
      for (int k = 0; k < NC; ++k)
        s[j % kChains][k] = _mm512_dpbusd_epi32(s[j % kChains][k], v[j], _mm512_set1_epi32(load_i32(a[k].q + b * kQK + 4 * j)));
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales + size_t(b) * kScaleBytes)));
    for (int k = 0; k < NC; ++k) {
      __m512i isum = s[0][k];
      if constexpr (kChains == 2) isum = _mm512_add_epi32(isum, s[1][k]);
      acc[k] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(a[k].dx[b])), _mm512_cvtepi32_ps(isum), acc[k]);
    }
  }
  for (int k = 0; k < NC; ++k) _mm512_storeu_ps(y + size_t(k) * ys, acc[k]);
}

template <typename F, int NC>
void groups(int64_t nb, const uint8_t* w, size_t gb, int64_t ng, const ActRow* a, float* y, size_t ys) {
  for (int64_t g = 0; g < ng; ++g) group_tile<F, NC>(nb, w + size_t(g) * gb, a, y + g * kRows, ys);
}

template <typename F>
void gemm(int64_t cols, const void* w, size_t gb, int64_t ng, const void* x, size_t xs, int64_t nx, float* y,
          size_t ys) {
  const int64_t nb = cols / kQK;
  const auto* wb = static_cast<const uint8_t*>(w);
  for_each_tile<kMaxTileCols>(x, xs, nx, y, ys, [&](auto width, const uint8_t* const* rows, float* yk) {
    constexpr int kNC = decltype(width)::value;
    ActRow a[kNC];
    for (int k = 0; k < kNC; ++k) a[k] = act_row(rows[k], nb);
    groups<F, kNC>(nb, wb, gb, ng, a, yk, ys);
  });
}

template <typename F>
PackedKernels packed_kernels() {
  return PackedKernels{group_bytes<F>, pack<F>, act_bytes, pack_acts, gemm<F>};
}

}  // namespace

void fill_avx512_packed_kernels(KernelTable* t) {
  t->packed[int(GgmlType::Q8_0)] = packed_kernels<PackQ8_0>();
  t->packed[int(GgmlType::Q4_0)] = packed_kernels<PackQ4_0>();
  t->packed[int(GgmlType::Q5_0)] = packed_kernels<PackQ5_0>();
}

}  // namespace kvserve
