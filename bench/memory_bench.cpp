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

}  // namespace
}  // namespace kvserve
