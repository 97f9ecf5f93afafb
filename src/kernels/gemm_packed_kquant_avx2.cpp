// The AVX2 table's packed k-quant GEMMs (the kernels: gemm_packed_kquant_avx2.h).
#include "kernels/gemm_packed_kquant_avx2.h"

namespace kvserve {

void fill_avx2_packed_kquant_kernels(KernelTable* t) { fill_packed_kquant_kernels<false>(t); }

}  // namespace kvserve
