// The run-time choice of kernel instruction set.
//
// Tables are built once: the scalar table holds every kernel, and each wider table starts as a
// copy of the next narrower one and overrides what it implements, so a type without a wide kernel
// still works. KVSERVE_KERNELS=scalar|avx2|avxvnni|avx512|amx in the environment caps the choice
// (for debugging and for comparing numerics or speed on one machine).
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <initializer_list>

#include "kernels/vec_dot.h"

namespace kvserve {

namespace {

// Linux enables AMX's tile data (8 KiB of state per thread) only for processes that ask: without
// the grant the first tile instruction raises SIGILL. Asked once; false on kernels without AMX
// support (before 5.16) or where the request is refused.
bool amx_permitted() {
  static const bool granted = [] {
    constexpr long kArchReqXcompPerm = 0x1023;  // ARCH_REQ_XCOMP_PERM (asm/prctl.h)
    constexpr long kXfeatureXtiledata = 18;     // XFEATURE_XTILEDATA
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return granted;
}

}  // namespace

CpuModel cpu_model() {
  static const CpuModel m = [] {
    CpuModel r;
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid(0, &eax, &ebx, &ecx, &edx) == 0) return r;
    char vendor[13] = {};
    std::memcpy(vendor, &ebx, 4);
    std::memcpy(vendor + 4, &edx, 4);
    std::memcpy(vendor + 8, &ecx, 4);
    r.amd = std::strcmp(vendor, "AuthenticAMD") == 0;
    r.intel = std::strcmp(vendor, "GenuineIntel") == 0;
    if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return r;
    const int base_family = int((eax >> 8) & 0xF), base_model = int((eax >> 4) & 0xF);
    r.family = base_family == 0xF ? base_family + int((eax >> 20) & 0xFF) : base_family;
    r.model = base_family == 0xF || base_family == 0x6 ? base_model + (int((eax >> 16) & 0xF) << 4) : base_model;
    return r;
  }();
  return m;
}

bool single_stream_hints() {
  const CpuModel cpu = cpu_model();
  return !(cpu.amd && cpu.family == 0x19);
}

bool paired_single_row_hints() { return !cpu_model().amd; }

bool isa_supported(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return true;
    case Isa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("f16c");
    case Isa::kAvxVnni:
      return isa_supported(Isa::kAvx2) && __builtin_cpu_supports("avxvnni");
    case Isa::kAvx512:
      // Everything gemm_avx512.cpp is compiled for (VL: the 256-bit forms; VNNI: vpdpbusd).
      return isa_supported(Isa::kAvx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512vnni");
    case Isa::kAmx:
      return isa_supported(Isa::kAvx512) && __builtin_cpu_supports("amx-tile") &&
             __builtin_cpu_supports("amx-int8") && amx_permitted();
  }
  return false;
}

bool avx512_bf16_supported() {
  return isa_supported(Isa::kAvx512) && __builtin_cpu_supports("avx512bf16");
}

namespace {

// Whether the AVX-512 table takes the vdpbf16ps BF16 GEMM (KVSERVE_BF16_DOT=0 declines it).
bool use_bf16_dot() {
  const char* v = std::getenv("KVSERVE_BF16_DOT");
  return avx512_bf16_supported() && !(v != nullptr && std::strcmp(v, "0") == 0);
}

struct Tables {
  KernelTable scalar{};
  KernelTable avx2{};
  KernelTable avxvnni{};
  KernelTable avx512{};
  KernelTable amx{};
  Tables() {
    scalar.isa = Isa::kScalar;
    scalar.name = "scalar";
    fill_scalar_kernels(&scalar);
    avx2 = scalar;
    avx2.isa = Isa::kAvx2;
    avx2.name = "avx2";
    fill_avx2_kernels(&avx2);
    fill_avx2_packed_kernels(&avx2);
    fill_avx2_packed_kquant_kernels(&avx2);
    fill_avx2_packed_float_kernels(&avx2);
    avxvnni = avx2;
    avxvnni.isa = Isa::kAvxVnni;
    avxvnni.name = "avxvnni";
    if (isa_supported(Isa::kAvxVnni)) fill_avxvnni_packed_kernels(&avxvnni);  // compiled with -mavxvnni
    // Not a copy of avxvnni: a CPU may have AVX-512 VNNI without the VEX-encoded AVX-VNNI.
    avx512 = avx2;
    avx512.isa = Isa::kAvx512;
    avx512.name = "avx512";
    // The filler itself is compiled with AVX-512 flags: call it only where it may run (elsewhere
    // the table stays a copy of avx2, and kernel_table(kAvx512) must not be used anyway).
    if (isa_supported(Isa::kAvx512)) {
      fill_avx512_kernels(&avx512);
      fill_avx512_packed_kernels(&avx512);
      fill_avx512_packed_float_kernels(&avx512);
      fill_avx512_packed_kquant_kernels(&avx512);
      if (use_bf16_dot()) fill_avx512_bf16_packed_kernels(&avx512);  // compiled with -mavx512bf16
    }
    // The AVX-512 table with AMX tile GEMMs for the packed legacy quants (compiled with AMX flags).
    amx = avx512;
    amx.isa = Isa::kAmx;
    amx.name = "amx";
    if (isa_supported(Isa::kAmx)) fill_amx_packed_kernels(&amx);
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

// The widest supported instruction set, at most KVSERVE_KERNELS's when set (a cap the CPU lacks,
// say avxvnni on an AVX-512 machine without AVX-VNNI, gives the widest supported one below it).
Isa choose_isa() {
  Isa limit = Isa::kAmx;
  if (const char* cap = std::getenv("KVSERVE_KERNELS")) {
    if (std::strcmp(cap, "scalar") == 0) limit = Isa::kScalar;
    if (std::strcmp(cap, "avx2") == 0) limit = Isa::kAvx2;
    if (std::strcmp(cap, "avxvnni") == 0) limit = Isa::kAvxVnni;
    if (std::strcmp(cap, "avx512") == 0) limit = Isa::kAvx512;
  }
  Isa best = Isa::kScalar;
  for (Isa isa : {Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512, Isa::kAmx})
    if (int(isa) <= int(limit) && isa_supported(isa)) best = isa;
  return best;
}

}  // namespace

const KernelTable& kernel_table(Isa isa) {
  switch (isa) {
    case Isa::kAvx2:
      return tables().avx2;
    case Isa::kAvxVnni:
      return tables().avxvnni;
    case Isa::kAvx512:
      return tables().avx512;
    case Isa::kAmx:
      return tables().amx;
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
