// The run-time choice of kernel instruction set.
//
// Tables are built once: the scalar table holds every kernel, and each wider table starts as a
// copy of the next narrower one and overrides what it implements, so a type without a wide kernel
// still works. KVSERVE_KERNELS=scalar|avx2 in the environment caps the choice (for debugging and
// for comparing numerics on one machine).
#include <cstdlib>
#include <cstring>

#include "kernels/vec_dot.h"

namespace kvserve {

bool isa_supported(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return true;
    case Isa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("f16c");
  }
  return false;
}

namespace {

struct Tables {
  KernelTable scalar{};
  KernelTable avx2{};
  Tables() {
    scalar.isa = Isa::kScalar;
    scalar.name = "scalar";
    fill_scalar_kernels(&scalar);
    avx2 = scalar;
    avx2.isa = Isa::kAvx2;
    avx2.name = "avx2";
    fill_avx2_kernels(&avx2);
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

Isa choose_isa() {
  Isa best = isa_supported(Isa::kAvx2) ? Isa::kAvx2 : Isa::kScalar;
  if (const char* cap = std::getenv("KVSERVE_KERNELS")) {
    if (std::strcmp(cap, "scalar") == 0) best = Isa::kScalar;
  }
  return best;
}

}  // namespace

const KernelTable& kernel_table(Isa isa) {
  switch (isa) {
    case Isa::kAvx2:
      return tables().avx2;
    case Isa::kScalar:
      break;
  }
  return tables().scalar;
}

const KernelTable& active_kernels() {
  static const KernelTable& t = kernel_table(choose_isa());
  return t;
}

}  // namespace kvserve
