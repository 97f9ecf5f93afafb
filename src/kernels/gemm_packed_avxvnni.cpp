// The AVX-VNNI table's packed GEMMs for the legacy quants and the k-quants: the AVX2 kernels
// (gemm_packed_legacy_avx2.h, gemm_packed_kquant_avx2.h) with each 4-byte integer product group
// in one 256-bit vpdpbusd (VEX-encoded AVX-VNNI, as Intel's Alder Lake and later client cores and
// AMD's Zen 4 and later have) instead of maddubs + madd.
// Compiled with -mavxvnni; dispatch.cpp calls the filler only where cpuid reports AVX-VNNI.
#include "kernels/gemm_packed_kquant_avx2.h"
#include "kernels/gemm_packed_legacy_avx2.h"

namespace kvserve {

void fill_avxvnni_packed_kernels(KernelTable* t) {
  t->packed[int(GgmlType::Q8_0)] = legacy_packed_kernels<PackQ8_0, gemm<PackQ8_0, true>>();
  t->packed[int(GgmlType::Q4_0)] = legacy_packed_kernels<PackQ4_0, gemm<PackQ4_0, true>>();
  t->packed[int(GgmlType::Q5_0)] = legacy_packed_kernels<PackQ5_0, gemm<PackQ5_0, true>>();
  fill_packed_kquant_kernels<true>(t);
}

}  // namespace kvserve
