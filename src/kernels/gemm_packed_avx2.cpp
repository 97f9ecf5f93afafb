// The AVX2 table's packed legacy-quant GEMMs (the kernels: gemm_packed_legacy_avx2.h).
#include "kernels/gemm_packed_legacy_avx2.h"

namespace kvserve {

void fill_avx2_packed_kernels(KernelTable* t) {
  t->packed[int(GgmlType::Q8_0)] = legacy_packed_kernels<PackQ8_0, gemm<PackQ8_0, false>>();
  t->packed[int(GgmlType::Q4_0)] = legacy_packed_kernels<PackQ4_0, gemm<PackQ4_0, false>>();
  t->packed[int(GgmlType::Q5_0)] = legacy_packed_kernels<PackQ5_0, gemm<PackQ5_0, false>>();
}

}  // namespace kvserve
