// Dot-product kernels behind the matmul, per weight type and instruction set, and the one
// dispatch point that picks an instruction set at run time.
//
// A weight row of type T is always multiplied with an activation row that was first converted to
// T's "activation type" (activation_type below), as the reference engine does:
//   F32 -> F32, F16 -> F32, BF16 -> BF16, Q4_0/Q5_0/Q8_0 -> Q8_0, Q4_1/Q5_1 -> Q8_1,
//   Q2_K..Q6_K -> Q8_K.
// F16 is the one that surprises: the reference's CPU matmul for f16 weights (its sgemm path) works
// on f32 activations. Checked against the golden logits of tiny-llama-f16: NMSE 2.6e-12 with f32
// activations, 9.2e-7 when they are rounded to f16 first. BF16 activations are rounded to bf16.
// Every kernel then computes exact integer dot products per (sub-)block and applies the block
// scales in f32, so two instruction sets differ only in the order of f32 additions.
//
// Adding an instruction set: write vec_dot_<isa>.cpp (compiled with its own flags), give it a
// fill_<isa>_kernels() that overrides the entries it implements, and add it to dispatch.cpp.
// Whoever overrides vec_dot[t] must also set vec_dot_multi[t] and gemm[t] (or null them), so
// that all three stay bit-identical.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gguf/types.h"

namespace kvserve {

// w: one weight row of n elements; x: one activation row of n elements in the activation type.
using VecDotFn = float (*)(int64_t n, const void* w, const void* x);
// The same for kRowsPerMultiDot activation rows at once (x + k * x_stride bytes), writing
// out[k * out_stride]: the weight row is decoded once for all of them. A kernel of this kind must
// give results bit-identical to its table's VecDotFn on each row, so that what a row computes never
// depends on which other rows share its batch.
using VecDotMultiFn = void (*)(int64_t n, const void* w, const void* x, size_t x_stride, float* out,
                               size_t out_stride);
constexpr int kRowsPerMultiDot = 4;

// A block of nw weight rows (w + r * w_stride bytes) times nx activation rows (x + k * x_stride
// bytes): y[k * y_stride + r] = dot(row r, row k) for r < nw, k < nx. The kernel tiles this in
// registers (several weight rows x several activation rows per pass over the blocks), and like
// VecDotMultiFn must give each output bit-identical to its table's VecDotFn.
using GemmFn = void (*)(int64_t n, const void* w, size_t w_stride, int64_t nw, const void* x, size_t x_stride,
                        int64_t nx, float* y, size_t y_stride);

// Converts one f32 activation row of n elements into an activation encoding (q8_0, q8_K), bit for
// bit as convert_activation_row does (the golden logits depend on the exact rounding); a table
// entry exists only so that the conversion can use wide registers.
using QuantizeActFn = void (*)(const float* x, void* dst, int64_t n);

// Repacked weights (optional, per weight type and table): a layout of the same codes and scales
// that the table's packed GEMM reads faster than the file's row-major one (see
// gemm_packed_avx512.cpp). Weight rows go in groups of kPackedRows; a group's bytes are
// group_bytes(cols). The activation rows are first converted as usual (activation_type) and then
// rearranged by pack_acts into rows of act_bytes(cols).
constexpr int kPackedRows = 16;
struct PackedKernels {
  // Bytes of one group of kPackedRows weight rows of `cols` elements; 0 = this shape cannot be packed.
  size_t (*group_bytes)(int64_t cols);
  // rows (a multiple of kPackedRows) file-layout rows at w (row_bytes apart) -> dst (64-byte aligned).
  void (*pack)(const void* w, size_t row_bytes, int64_t rows, int64_t cols, void* dst);
  // Bytes of one rearranged activation row.
  size_t (*act_bytes)(int64_t cols);
  // m activation rows in activation_type (x_stride apart) -> rearranged rows (dst_stride apart).
  void (*pack_acts)(const void* x, size_t x_stride, int64_t m, int64_t cols, void* dst, size_t dst_stride);
  // Groups [0, ng) of packed weights (group_bytes apart) times nx rearranged activation rows:
  // y[k * y_stride + kPackedRows * g + r] = dot(weight row kPackedRows * g + r, activation row k).
  // Each output is computed by the same operations whatever ng, nx and the tiling, so results
  // depend neither on the batch nor on the thread split.
  void (*gemm)(int64_t cols, const void* w, size_t group_bytes, int64_t ng, const void* x, size_t x_stride,
               int64_t nx, float* y, size_t y_stride);
  // Row r (0 .. kPackedRows - 1) of the packed group at `group` as f32, bit for bit what
  // dequantize_row gives for that row in the file: get_rows reads a tied embedding's rows from the
  // output matrix's packed copy, which every decode step streams, instead of a copy of its own.
  // Null where the layout has no row reader (the k-quants, the AVX-512 BF16 pairs).
  void (*unpack_row)(const void* group, int64_t cols, int r, float* out);
  // Optional (null: quantize_act then pack_acts): m f32 activation rows (cols apart) straight to
  // rearranged rows (dst_stride apart), bit for bit what those two steps give, in one pass.
  void (*quantize_pack_acts)(const float* x, int64_t m, int64_t cols, void* dst, size_t dst_stride) = nullptr;
  // Calls of at most this many activation rows (0: none beyond matmul's decode size) multiply them
  // in one pass over the weights, however many groups they get, and pay a set-up per call: matmul
  // hands each claimed range to one call instead of one call per tile of groups.
  int64_t whole_range_rows = 0;
  // Weight bytes per tile of groups in longer calls (0: matmul's default), each tile multiplied
  // with all of a call's activation rows before the next.
  size_t tile_bytes = 0;
};

// Kernel instruction sets, narrowest first. kAvxVnni is AVX2 plus the VEX-encoded 256-bit
// vpdpbusd (AVX-VNNI): the AVX2 table with its packed integer GEMMs using it. kAmx is the AVX-512
// table with AMX-INT8 tile GEMMs for the packed legacy quants (gemm_packed_amx.cpp).
enum class Isa { kScalar, kAvx2, kAvxVnni, kAvx512, kAmx };

constexpr int kNumTypeIds = 40;  // ggml type ids are < 40

struct KernelTable {
  Isa isa;
  const char* name;
  VecDotFn vec_dot[kNumTypeIds];             // indexed by weight type id; null = unsupported
  VecDotMultiFn vec_dot_multi[kNumTypeIds];  // optional (null = use vec_dot row by row)
  GemmFn gemm[kNumTypeIds];                  // optional; preferred over vec_dot_multi when set
  // Indexed by *activation* type id (activation_type(weight)); optional (null = the portable
  // convert_activation_row).
  QuantizeActFn quantize_act[kNumTypeIds];
  // Indexed by weight type id; all-null entries = no packed layout for that type.
  PackedKernels packed[kNumTypeIds];
};

// The activation encoding a weight type is multiplied with (see the table above).
GgmlType activation_type(GgmlType weight);
// Bytes of one activation row of n elements for weight type `weight`.
size_t activation_row_bytes(GgmlType weight, int64_t n);
// Converts an f32 activation row into activation_type(weight) at dst.
void convert_activation_row(GgmlType weight, const float* x, void* dst, int64_t n);

// Kernel tables. kernel_table(kScalar) is the portable reference; kernel_table(isa) for an isa the
// CPU lacks must not be called (isa_supported tells).
bool isa_supported(Isa isa);
// AVX-512 plus avx512_bf16 (vdpbf16ps): the AVX-512 and AMX tables then multiply packed BF16
// weights with it (gemm_packed_bf16_avx512.cpp); KVSERVE_BF16_DOT=0 in the environment keeps the
// widening float kernel instead (to compare the two on one machine).
bool avx512_bf16_supported();
// This CPU's vendor and x86 family/model (base plus extended fields of cpuid leaf 1), for the few
// kernel choices that measurements showed to differ between microarchitectures of one instruction
// set (the table fillers read it).
struct CpuModel {
  bool amd = false;
  bool intel = false;
  int family = 0;
  int model = 0;
};
CpuModel cpu_model();
// Whether the AVX-512 single-row passes that read their weights as one sequential stream (Q4_K,
// F16/BF16/F32) hint them ahead on this CPU. No on AMD family 0x19 (the Zen 4 VM: the hardware
// prefetchers alone were 19-28% faster), yes elsewhere (the Zen 5 VM, family 0x1A: hints 15-35%
// faster; other CPUs untested, so they hint as every other pass does). Paired Q8_0 has its own
// rule, below.
bool single_stream_hints();
// Whether paired Q8_0's single-row pass (batch-1 decode) hints its weights ahead. No on AMD (the
// Zen 4 and Zen 5 VMs: the hardware prefetchers alone were 6-23% faster), yes elsewhere (an Intel
// Xeon VM with AMX, 2026-12-06: smollm-135m Q8_0 batch 1 ~1.5x faster with them).
bool paired_single_row_hints();
const KernelTable& kernel_table(Isa isa);
// The table for the best instruction set of this CPU, chosen once (cpuid) on first use.
const KernelTable& active_kernels();

// Table builders, one per source file.
void fill_scalar_kernels(KernelTable* t);
void fill_avx2_kernels(KernelTable* t);
void fill_avx2_packed_kernels(KernelTable* t);  // repacked Q8_0/Q5_0/Q4_0 GEMM (gemm_packed_avx2.cpp)
void fill_avx2_packed_kquant_kernels(KernelTable* t);  // repacked Q4_K/Q5_K/Q6_K GEMM (gemm_packed_kquant_avx2.cpp)
void fill_avx2_packed_float_kernels(KernelTable* t);  // repacked F16/BF16/F32 GEMM (gemm_packed_float_avx2.cpp)
void fill_avxvnni_packed_kernels(KernelTable* t);  // AVX-VNNI repacked legacy + k-quant GEMMs (gemm_packed_avxvnni.cpp)
void fill_avx512_kernels(KernelTable* t);  // AVX-512 F/BW/VL + VNNI (gemm_avx512.cpp)
void fill_avx512_packed_kernels(KernelTable* t);  // repacked Q8_0/Q5_0/Q4_0 GEMM (gemm_packed_avx512.cpp)
void fill_avx512_packed_kquant_kernels(KernelTable* t);  // repacked Q4_K/Q5_K/Q6_K GEMM (gemm_packed_kquant_avx512.cpp)
void fill_avx512_packed_float_kernels(KernelTable* t);  // repacked F16/BF16/F32 GEMM (gemm_packed_float_avx512.cpp)
// Repacked BF16 GEMM with vdpbf16ps over the AVX-512 table (gemm_packed_bf16_avx512.cpp); only
// where avx512_bf16_supported().
void fill_avx512_bf16_packed_kernels(KernelTable* t);
void fill_amx_packed_kernels(KernelTable* t);  // AMX-INT8 Q8_0/Q5_0/Q4_0 GEMM over the AVX-512 table (gemm_packed_amx.cpp)
// Tests only: the same GEMM with its tile instructions emulated in scalar code, for a copy of the
// AVX-512 table on a CPU with AVX-512 (the kernel's tiling checked where AMX is absent).
void fill_amx_emulated_packed_kernels(KernelTable* t);

}  // namespace kvserve
