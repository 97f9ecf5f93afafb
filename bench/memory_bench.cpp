// How fast one core streams a sequence's K/V from memory depending on where its blocks lie.
//
// Attention reads, per layer, one contiguous piece per block of the sequence: the block's K and
// V planes of that layer (layer_block_bytes(): 6,528 bytes for smollm-135m with q8_0 K/V and
// 16-token blocks). Blocks allocated one after another sit next to each other in the layer-major
// arena, so the pieces form one long run; blocks taken from a fragmented free list are scattered,
// and every piece starts a new stream. This reads 64 MiB of such pieces from a 512 MiB arena
// (far beyond the caches) in table order, the table either in id order or shuffled, with the
// attention kernels' kind of software hint (prefetcht1 of every line of the piece `ahead` pieces
// on, 0 = none). args: {piece bytes, shuffled, ahead}. Single thread.
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench_util.h"

namespace kvserve {
namespace {

constexpr size_t kArenaBytes = size_t(512) << 20;
constexpr size_t kReadBytes = size_t(64) << 20;

// The arena, filled with distinct words (a host that merges identical pages could otherwise
// serve a uniform fill from one page, and from the caches).
struct Arena {
  HugeBuffer buf{kArenaBytes};
  Arena() {
    if (buf.data() == nullptr) return;
    for (size_t i = 0; i < kArenaBytes; i += 8) {
      const uint64_t v = i * 0x9E3779B97F4A7C15ull;
      std::memcpy(buf.data() + i, &v, 8);
    }
  }
  uint8_t* data() const { return buf.data(); }
};

inline void hint_line(const uint8_t* p) { asm volatile("prefetcht1 %0" : : "m"(*p)); }

__attribute__((target("avx2"))) void BM_stream_kv_pieces(benchmark::State& state) {
  const size_t piece = size_t(state.range(0));
  const bool shuffled = state.range(1) != 0;
  const size_t ahead = size_t(state.range(2));
  static Arena arena;  // shared by every run: the fill costs more than a run
  if (arena.data() == nullptr) {
    state.SkipWithError("arena allocation failed");
    return;
  }
  const size_t num_pieces = kArenaBytes / piece, per_pass = kReadBytes / piece;
  std::vector<uint32_t> table(num_pieces);
  std::iota(table.begin(), table.end(), 0u);
  if (shuffled) {
    std::mt19937 rng(7);
    std::shuffle(table.begin(), table.end(), rng);
  }
  size_t start = 0;
  __m256i acc = _mm256_setzero_si256();
  for (auto _ : state) {
    // A different stretch of the table each pass, so no pass finds the last one's pieces cached.
    start = (start + per_pass) % (num_pieces - per_pass);
    for (size_t i = 0; i < per_pass; ++i) {
      if (ahead > 0 && i + ahead < per_pass) {
        const uint8_t* h = arena.data() + size_t(table[start + i + ahead]) * piece;
        for (size_t o = 0; o < piece; o += 64) hint_line(h + o);
      }
      const uint8_t* p = arena.data() + size_t(table[start + i]) * piece;
      for (size_t o = 0; o + 32 <= piece; o += 32)
        acc = _mm256_add_epi32(acc, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + o)));
    }
  }
  benchmark::DoNotOptimize(acc);
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(per_pass * piece));
  state.SetLabel(std::string(shuffled ? "scattered" : "adjacent") + " pieces");
}

// 6,528 bytes: one (block, layer) of smollm-135m q8_0 K/V with 16-token blocks; 26,112: the same
// with 64-token blocks.
BENCHMARK(BM_stream_kv_pieces)
    ->ArgsProduct({{6528, 26112}, {0, 1}, {0, 2, 4}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Whether the tiled attention kernel's order of reads lets memory overlap its arithmetic. One core
// reads 256 MiB of the arena (a different stretch each pass) as smollm-135m's q8_0 K/V blocks (16
// tokens, 3 KV heads: per block a K plane of three 1,088-byte tile-heads, then a V plane), doing
// `work` vpdpwssd per 64-byte line on what it loads (16 is about the kernel's arithmetic per line
// in L2: ~6.2 ns per 136-byte (position, KV head) pair, 2.9 ns a line). Orders (arg 1):
//   0 sequential: every line in address order;
//   1 the kernel's: per span of 4 blocks, per KV head, its K tile-heads of the 4 blocks, then its V
//     tile-heads (each (span, KV head) item of the tiled kernel reads one head's tiles of a span);
//   2 the kernel's, with its hint: each tile-head's lines one span ahead, prefetcht1;
//   3 per block, per KV head, its K tile-head then its V tile-head (one tile per softmax update);
//   4 the kernel's, hinting as many lines as 2 but the next span's in address order.
// args: {work, order}. Needs AVX-512 VNNI (skipped elsewhere).
constexpr size_t kTileHead = 1088, kKvPlane = 3 * kTileHead, kKvBlock = 2 * kKvPlane, kKvSpan = 4 * kKvBlock;
constexpr size_t kOrderReadBytes = size_t(256) << 20;

template <int W>
__attribute__((target("avx512f,avx512bw,avx512vnni"), always_inline)) inline void line_work(__m512i* acc,
                                                                                            const uint8_t* p) {
  const __m512i x = _mm512_load_si512(p), c = _mm512_set1_epi16(3);
  for (int w = 0; w < W; ++w) acc[w % 8] = _mm512_dpwssd_epi32(acc[w % 8], x, c);
  if (W == 0) acc[0] = _mm512_add_epi32(acc[0], x);
}

template <int W>
__attribute__((target("avx512f,avx512bw,avx512vnni"), always_inline)) inline void tile_head_work(__m512i* acc,
                                                                                                 const uint8_t* t) {
  for (size_t o = 0; o < kTileHead; o += 64) line_work<W>(acc, t + o);
}

template <int W>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void read_in_order(const uint8_t* base, size_t bytes, int order,
                                                                          __m512i* acc) {
  if (order == 0) {
    for (size_t o = 0; o < bytes; o += 64) line_work<W>(acc, base + o);
  } else if (order == 3) {
    for (size_t b = 0; b + kKvBlock <= bytes; b += kKvBlock)
      for (size_t h = 0; h < 3; ++h)
        for (size_t part = 0; part < 2; ++part) tile_head_work<W>(acc, base + b + part * kKvPlane + h * kTileHead);
  } else {
    for (size_t s = 0; s + kKvSpan <= bytes; s += kKvSpan) {
      size_t next = s + kKvSpan;  // order 4: the next span's line to hint next
      for (size_t h = 0; h < 3; ++h)
        for (size_t part = 0; part < 2; ++part)
          for (size_t b = 0; b < 4; ++b) {
            const uint8_t* t = base + s + b * kKvBlock + part * kKvPlane + h * kTileHead;
            if (order == 2 && s + 2 * kKvSpan <= bytes)
              for (size_t o = 0; o < kTileHead; o += 64) hint_line(t + kKvSpan + o);
            if (order == 4 && s + 2 * kKvSpan <= bytes)
              for (size_t o = 0; o < kTileHead; o += 64, next += 64) hint_line(base + next);
            tile_head_work<W>(acc, t);
          }
    }
  }
}

void BM_stream_access_order(benchmark::State& state) {
  const int work = int(state.range(0)), order = int(state.range(1));
  if (!__builtin_cpu_supports("avx512vnni")) {
    state.SkipWithError("needs AVX-512 VNNI");
    return;
  }
  static Arena arena;
  if (arena.data() == nullptr) {
    state.SkipWithError("arena allocation failed");
    return;
  }
  const size_t stretches = kArenaBytes / kOrderReadBytes;
  size_t pass = 0;
  alignas(64) __m512i acc[8] = {};
  for (auto _ : state) {
    const uint8_t* base = arena.data() + (pass++ % stretches) * kOrderReadBytes;
    switch (work) {
      case 0: read_in_order<0>(base, kOrderReadBytes, order, acc); break;
      case 8: read_in_order<8>(base, kOrderReadBytes, order, acc); break;
      default: read_in_order<16>(base, kOrderReadBytes, order, acc); break;
    }
  }
  benchmark::DoNotOptimize(acc);
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(kOrderReadBytes));
  static const char* const names[] = {"sequential", "kernel order", "kernel order, hinted", "per block K/V by head",
                                      "kernel order, hinted in address order"};
  state.SetLabel(std::string(names[order]) + ", " + std::to_string(work) + " vpdpwssd a line");
}

BENCHMARK(BM_stream_access_order)->ArgsProduct({{0, 8, 16}, {0, 1, 2, 3, 4}})->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace kvserve
