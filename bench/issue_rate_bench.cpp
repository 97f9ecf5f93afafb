// How many of the kernels' instructions one core issues per cycle, alone and in the mixes the
// GEMM and attention kernels use: which execution ports the integer dot products share with the
// float multiplies, how many vector loads (broadcasts included) a cycle takes, what a widening
// load costs next to vpdpwssd. The kernels' cycle budgets in docs/benchmarks.md come from here.
//
// Each case is one loop of straight-line assembly (fixed registers, so the compiler adds nothing):
// 16 or 24 independent accumulators (enough to cover the dot products' 4-cycle latency), loads
// from L1 (a 4 KiB buffer). Counter `cycles`: cycles per loop iteration, from a chain of dependent
// adds timed in the same process (one cycle each) - so it holds at whatever clock the core runs.
// Needs AVX-512 VNNI (skipped elsewhere); pin the process (taskset -c N) on a VM whose vCPUs run
// at different speeds.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>

namespace kvserve {
namespace {

alignas(64) int32_t g_operands[1024];

// Nanoseconds per cycle: 2^24 x 8 dependent adds.
double ns_per_cycle() {
  static const double v = [] {
    constexpr uint64_t kIters = uint64_t(1) << 24;
    uint64_t x = 0, n = kIters;
    const auto t0 = std::chrono::steady_clock::now();
    asm volatile(
        "1:\n\t"
        "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
        "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
        "dec %1\n\tjnz 1b"
        : "+r"(x), "+r"(n));
    const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
    return ns / double(kIters * 8);
  }();
  return v;
}

// Instruction text helpers: zmm29..31 hold constant operands, zmm0..15 and zmm18..25 accumulate,
// zmm16/17 are loaded or shuffled into. %1 is g_operands.
// clang-format off
#define KVS_X8(m) m(0) m(1) m(2) m(3) m(4) m(5) m(6) m(7)
#define KVS_X16(m) KVS_X8(m) m(8) m(9) m(10) m(11) m(12) m(13) m(14) m(15)
#define KVS_DP(acc) "vpdpbusd %%zmm31, %%zmm30, %%zmm" #acc "\n\t"
#define KVS_DP16 KVS_X16(KVS_DP)
#define KVS_FMA(i) "vfmadd231ps %%zmm30, %%zmm31, %%zmm" #i "\n\t"
#define KVS_BCAST(i) "vpbroadcastd 4*" #i "(%1), %%zmm16\n\t"
#define KVS_BCAST_B(i) "vpbroadcastd 4*" #i "+64(%1), %%zmm17\n\t"
#define KVS_SCALAR(i) "mov 4*" #i "(%1), %%eax\n\tmov 4*" #i "+64(%1), %%eax\n\t"
#define KVS_SHUF(i) "vpshufd $" #i ", %%zmm31, %%zmm16\n\t"
#define KVS_DP_EMB(i) "vpdpbusd 4*" #i "(%1)%{1to16%}, %%zmm30, %%zmm" #i "\n\t"
// One 32-byte widening load (16 dims x 2 positions of q8_0 V) and three vpdpwssd against it, the
// tiled attention kernel's V step for 3 query heads, with the weights in registers or as embedded
// broadcasts; a, b, c: its accumulators (24 independent chains over the 8 steps).
#define KVS_WIDEN3(i, a, b, c)                             \
  "vpmovsxbw 32*" #i "(%1), %%zmm16\n\t"                   \
  "vpdpwssd %%zmm31, %%zmm16, %%zmm" #a "\n\t"             \
  "vpdpwssd %%zmm30, %%zmm16, %%zmm" #b "\n\t"             \
  "vpdpwssd %%zmm29, %%zmm16, %%zmm" #c "\n\t"
#define KVS_WIDEN3_EMB(i, a, b, c)                                 \
  "vpmovsxbw 32*" #i "(%1), %%zmm16\n\t"                           \
  "vpdpwssd 512+4*" #i "(%1)%{1to16%}, %%zmm16, %%zmm" #a "\n\t"   \
  "vpdpwssd 544+4*" #i "(%1)%{1to16%}, %%zmm16, %%zmm" #b "\n\t"   \
  "vpdpwssd 576+4*" #i "(%1)%{1to16%}, %%zmm16, %%zmm" #c "\n\t"
#define KVS_X8_3(m)                                                       \
  m(0, 0, 8, 18) m(1, 1, 9, 19) m(2, 2, 10, 20) m(3, 3, 11, 21)           \
  m(4, 4, 12, 22) m(5, 5, 13, 23) m(6, 6, 14, 24) m(7, 7, 15, 25)
// clang-format on

#define KVS_CASE(fn, body)                                                                                   \
  __attribute__((target("avx512f,avx512bw,avx512vnni"), noinline)) void fn(uint64_t n) {                     \
    const int32_t* p = g_operands;                                                                           \
    asm volatile(                                                                                            \
        "vpxord %%zmm29, %%zmm29, %%zmm29\n\tvpternlogd $0xff, %%zmm30, %%zmm30, %%zmm30\n\t"                \
        "vpternlogd $0xff, %%zmm31, %%zmm31, %%zmm31\n"                                                      \
        "1:\n\t" body "dec %0\n\tjnz 1b"                                                                     \
        : "+r"(n)                                                                                            \
        : "r"(p)                                                                                             \
        : "memory", "rax", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",   \
          "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", \
          "xmm21", "xmm22", "xmm23", "xmm24", "xmm25", "xmm29", "xmm30", "xmm31");                           \
  }

KVS_CASE(dp16, KVS_DP16)
KVS_CASE(dp16_fma8, KVS_DP16 KVS_X8(KVS_FMA))
KVS_CASE(dp16_bcast16, KVS_DP16 KVS_X8(KVS_BCAST) KVS_X8(KVS_BCAST_B))
KVS_CASE(dp16_bcast32, KVS_DP16 KVS_X16(KVS_BCAST) KVS_X16(KVS_BCAST_B))
KVS_CASE(dp16_scalar32, KVS_DP16 KVS_X16(KVS_SCALAR))
KVS_CASE(dp16_shuf16, KVS_DP16 KVS_X16(KVS_SHUF))
KVS_CASE(dp16_embedded, KVS_X16(KVS_DP_EMB))
KVS_CASE(widen8_dpwssd24, KVS_X8_3(KVS_WIDEN3))
KVS_CASE(widen8_dpwssd24_embedded, KVS_X8_3(KVS_WIDEN3_EMB))

struct IssueCase {
  const char* label;
  void (*fn)(uint64_t);
};
constexpr IssueCase kCases[] = {
    {"16 vpdpbusd", dp16},
    {"16 vpdpbusd + 8 vfmadd231ps", dp16_fma8},
    {"16 vpdpbusd + 16 vpbroadcastd loads", dp16_bcast16},
    {"16 vpdpbusd + 32 vpbroadcastd loads", dp16_bcast32},
    {"16 vpdpbusd + 32 scalar loads", dp16_scalar32},
    {"16 vpdpbusd + 16 vpshufd", dp16_shuf16},
    {"16 vpdpbusd, embedded-broadcast operand", dp16_embedded},
    {"8 x (vpmovsxbw load + 3 vpdpwssd)", widen8_dpwssd24},
    {"8 x (vpmovsxbw load + 3 embedded-broadcast vpdpwssd)", widen8_dpwssd24_embedded},
};

// args: {case (index into kCases)}
void BM_issue_rate(benchmark::State& state) {
  if (!__builtin_cpu_supports("avx512vnni")) {
    state.SkipWithError("needs AVX-512 VNNI");
    return;
  }
  const IssueCase& c = kCases[state.range(0)];
  constexpr uint64_t kLoops = 1 << 16;
  double ns = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    c.fn(kLoops);
    ns += std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
  }
  state.counters["cycles"] = ns / (double(kLoops) * double(state.iterations()) * ns_per_cycle());
  state.SetLabel(c.label);
}

BENCHMARK(BM_issue_rate)
    ->DenseRange(0, int(sizeof(kCases) / sizeof(kCases[0])) - 1)
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kvserve
