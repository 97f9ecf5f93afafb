// The AVX2 table's packed k-quant GEMMs (the kernels: gemm_packed_kquant_avx2.h).
#include "kernels/gemm_packed_kquant_avx2.h"

namespace kvserve {

void fill_avx2_packed_kquant_kernels(KernelTable* t) {
  t->packed[int(GgmlType::Q4_K)] = q4k_packed_kernels<BlockQ4_K, q4k_gemm<BlockQ4_K, false>>();
  t->packed[int(GgmlType::Q5_K)] = q4k_packed_kernels<BlockQ5_K, q4k_gemm<BlockQ5_K, false>>();
  t->packed[int(GgmlType::Q6_K)] = q6k_packed_kernels<q6k_gemm<false>>();
}

}  // namespace kvserve
