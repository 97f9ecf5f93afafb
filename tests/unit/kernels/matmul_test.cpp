// matmul / get_rows for every weight type:
//  - every instruction set equals the scalar reference within f32 reordering noise;
//  - the scalar reference equals a double-precision dot of the dequantized weights with the
//    quantize->dequantize'd activations (what the reference engine computes) within a per-type bound;
//  - threaded results are bit-identical to single-threaded ones.
#include "kernels/matmul.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "kernels/vec_dot.h"
#include "tensor/quants.h"
#include "util/half.h"
#include "util/thread_pool.h"

namespace kvserve {
namespace {

const GgmlType kWeightTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_1,
                                 GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q2_K, GgmlType::Q3_K,
                                 GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

// Random weights: f32 types from a gaussian; quantized types are random bytes (every bit pattern
// of codes and packed scales occurs) with the f16 scale fields set to sane magnitudes.
struct RandomWeights {
  std::vector<uint8_t> bytes;
  WeightMatrix matrix;
};

uint16_t small_f16(std::mt19937& rng, bool allow_negative) {
  std::uniform_real_distribution<float> u(0.001f, 0.02f);
  float v = u(rng);
  if (allow_negative && (rng() & 1)) v = -v;
  return f32_to_f16(v);
}

RandomWeights make_weights(GgmlType t, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  RandomWeights w;
  const size_t row_bytes = ggml_row_size(t, cols);
  w.bytes.resize(row_bytes * size_t(rows));
  if (t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16) {
    std::normal_distribution<float> g(0.0f, 0.05f);
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      for (auto& v : row) v = g(rng);
      quantize_row(t, row.data(), w.bytes.data() + size_t(r) * row_bytes, cols);
    }
  } else {
    for (auto& b : w.bytes) b = uint8_t(rng());
    const int64_t nblocks = int64_t(w.bytes.size() / ggml_type_size(t));
    for (int64_t i = 0; i < nblocks; ++i) {
      uint8_t* p = w.bytes.data() + size_t(i) * ggml_type_size(t);
      switch (t) {
        case GgmlType::Q4_0: reinterpret_cast<BlockQ4_0*>(p)->d = small_f16(rng, true); break;
        case GgmlType::Q5_0: reinterpret_cast<BlockQ5_0*>(p)->d = small_f16(rng, true); break;
        case GgmlType::Q8_0: reinterpret_cast<BlockQ8_0*>(p)->d = small_f16(rng, true); break;
        case GgmlType::Q4_1:
          reinterpret_cast<BlockQ4_1*>(p)->d = small_f16(rng, false);
          reinterpret_cast<BlockQ4_1*>(p)->m = small_f16(rng, true);
          break;
        case GgmlType::Q5_1:
          reinterpret_cast<BlockQ5_1*>(p)->d = small_f16(rng, false);
          reinterpret_cast<BlockQ5_1*>(p)->m = small_f16(rng, true);
          break;
        case GgmlType::Q2_K:
          reinterpret_cast<BlockQ2_K*>(p)->d = small_f16(rng, false);
          reinterpret_cast<BlockQ2_K*>(p)->dmin = small_f16(rng, false);
          break;
        case GgmlType::Q3_K: reinterpret_cast<BlockQ3_K*>(p)->d = small_f16(rng, true); break;
        case GgmlType::Q4_K:
          reinterpret_cast<BlockQ4_K*>(p)->d = small_f16(rng, false);
          reinterpret_cast<BlockQ4_K*>(p)->dmin = small_f16(rng, false);
          break;
        case GgmlType::Q5_K:
          reinterpret_cast<BlockQ5_K*>(p)->d = small_f16(rng, false);
          reinterpret_cast<BlockQ5_K*>(p)->dmin = small_f16(rng, false);
          break;
        case GgmlType::Q6_K: reinterpret_cast<BlockQ6_K*>(p)->d = small_f16(rng, true); break;
        default: ADD_FAILURE() << "no generator for " << ggml_type_name(t);
      }
    }
  }
  w.matrix = WeightMatrix{t, w.bytes.data(), rows, cols, row_bytes};
  return w;
}

std::vector<float> make_activations(int64_t m, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(m * cols));
  for (auto& v : x) v = g(rng);
  for (size_t i = 0; i < x.size(); i += 61) x[i] *= 8.0f;  // a few outliers per row
  return x;
}

// The activation row as the kernels see it: converted to the activation type and decoded.
std::vector<float> activation_as_seen(GgmlType weight, const float* x, int64_t n) {
  std::vector<uint8_t> q(activation_row_bytes(weight, n));
  convert_activation_row(weight, x, q.data(), n);
  std::vector<float> y(static_cast<size_t>(n));
  dequantize_row(activation_type(weight), q.data(), y.data(), n);
  return y;
}

// sum_c |w[r][c] * x[i][c]| for every output, the scale against which f32 rounding is judged.
std::vector<double> magnitudes(const WeightMatrix& w, const float* x, int64_t m) {
  std::vector<double> mag(static_cast<size_t>(m * w.rows));
  std::vector<float> wrow(static_cast<size_t>(w.cols));
  for (int64_t i = 0; i < m; ++i) {
    const auto xs = activation_as_seen(w.type, x + i * w.cols, w.cols);
    for (int64_t r = 0; r < w.rows; ++r) {
      dequantize_row(w.type, static_cast<const uint8_t*>(w.data) + size_t(r) * w.row_bytes, wrow.data(), w.cols);
      double s = 0;
      for (int64_t c = 0; c < w.cols; ++c) s += std::fabs(double(wrow[size_t(c)]) * xs[size_t(c)]);
      mag[size_t(i * w.rows + r)] = s;
    }
  }
  return mag;
}

// Per-type bound on |kernel - exact| relative to sum |w * x|. The _1 formats apply their mins via
// s = f16(d * sum(q)), which rounds at f16 precision.
double reference_tolerance(GgmlType t) {
  if (t == GgmlType::Q4_1 || t == GgmlType::Q5_1) return 2e-3;
  return 2e-5;
}

struct Case {
  GgmlType type;
  int64_t m;
  int64_t cols;
};

class MatmulTest : public ::testing::TestWithParam<Case> {};

TEST_P(MatmulTest, MatchesReferenceAndIsasAgree) {
  const Case c = GetParam();
  const int64_t rows = 301;  // not a multiple of the pool size, and above the threading threshold
  auto w = make_weights(c.type, rows, c.cols, 7u + uint32_t(c.type));
  auto x = make_activations(c.m, c.cols, 11u + uint32_t(c.m));

  std::vector<float> y_scalar(static_cast<size_t>(c.m * rows)), y_best(y_scalar.size()), y_threaded(y_scalar.size());
  matmul_with_kernels(kernel_table(Isa::kScalar), w.matrix, x.data(), c.m, y_scalar.data(), nullptr);
  matmul(w.matrix, x.data(), c.m, y_best.data(), nullptr);
  ThreadPool pool(4);
  matmul(w.matrix, x.data(), c.m, y_threaded.data(), &pool);
  EXPECT_EQ(0, std::memcmp(y_best.data(), y_threaded.data(), y_best.size() * sizeof(float)))
      << "threaded result differs";

  std::vector<float> wrow(static_cast<size_t>(c.cols));
  for (int64_t i = 0; i < c.m; ++i) {
    const auto xs = activation_as_seen(c.type, x.data() + i * c.cols, c.cols);
    for (int64_t r = 0; r < rows; ++r) {
      dequantize_row(c.type, static_cast<const uint8_t*>(w.matrix.data) + size_t(r) * w.matrix.row_bytes,
                     wrow.data(), c.cols);
      double exact = 0, mag = 0;
      for (int64_t k = 0; k < c.cols; ++k) {
        exact += double(wrow[size_t(k)]) * xs[size_t(k)];
        mag += std::fabs(double(wrow[size_t(k)]) * xs[size_t(k)]);
      }
      const size_t idx = size_t(i * rows + r);
      ASSERT_NEAR(y_scalar[idx], exact, reference_tolerance(c.type) * mag + 1e-30)
          << ggml_type_name(c.type) << " row " << r << " act " << i;
      ASSERT_NEAR(y_best[idx], y_scalar[idx], 1e-5 * mag + 1e-30)
          << ggml_type_name(c.type) << " " << active_kernels().name << " row " << r << " act " << i;
    }
  }
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (GgmlType t : kWeightTypes)
    for (int64_t m : {1, 3, 17})
      for (int64_t cols : {256, 512}) cases.push_back({t, m, cols});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllTypes, MatmulTest, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::string(ggml_type_name(info.param.type)) + "_m" +
                                  std::to_string(info.param.m) + "_k" + std::to_string(info.param.cols);
                         });

TEST(Matmul, EveryIsaMatchesScalar) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512, Isa::kAmx}) {
    if (!isa_supported(isa)) continue;
    const KernelTable& k = kernel_table(isa);
    for (GgmlType t : kWeightTypes) {
      ASSERT_NE(k.vec_dot[int(t)], nullptr) << k.name << " " << ggml_type_name(t);
      auto w = make_weights(t, 19, 768, 3u + uint32_t(t));
      auto x = make_activations(5, 768, 5u);
      std::vector<float> a(5 * 19), b(5 * 19);
      matmul_with_kernels(kernel_table(Isa::kScalar), w.matrix, x.data(), 5, a.data(), nullptr);
      matmul_with_kernels(k, w.matrix, x.data(), 5, b.data(), nullptr);
      const auto mag = magnitudes(w.matrix, x.data(), 5);
      for (size_t i = 0; i < a.size(); ++i)
        ASSERT_NEAR(a[i], b[i], 1e-5 * mag[i]) << k.name << " " << ggml_type_name(t) << " " << i;
    }
  }
}

// A row's result must not depend on the other rows of its batch (prefill vs decode, batching of
// sequences): m rows at once equals each row alone, bit for bit, for every instruction set.
TEST(Matmul, BatchInvariant) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512, Isa::kAmx}) {
    if (!isa_supported(isa)) continue;
    for (GgmlType t : kWeightTypes) {
      auto w = make_weights(t, 23, 512, 13u + uint32_t(t));
      const int64_t m = 11;
      auto x = make_activations(m, 512, 17u);
      std::vector<float> batched(static_cast<size_t>(m * 23)), alone(23);
      matmul_with_kernels(kernel_table(isa), w.matrix, x.data(), m, batched.data(), nullptr);
      for (int64_t i = 0; i < m; ++i) {
        matmul_with_kernels(kernel_table(isa), w.matrix, x.data() + i * 512, 1, alone.data(), nullptr);
        ASSERT_EQ(0, std::memcmp(alone.data(), batched.data() + i * 23, sizeof(float) * 23))
            << kernel_table(isa).name << " " << ggml_type_name(t) << " row " << i;
      }
    }
  }
}

// A packed copy of the weights (KernelTable::packed) against the same table's file-layout path,
// for every batch size the packed GEMM tiles differently (1 to 3: decode chains; 4..8: one
// register tile; 9, 17: remainder tiles; 70: more than one activation chunk) and a block count
// that is odd. Then: bit-identical whatever the batch and the thread count, and a matrix packed
// for one table is read in the file layout by every other table.
struct PackedCase {
  WeightMatrix w;
  std::vector<uint8_t> packed;  // std::vector storage is not 64-byte aligned: the kernel must not care
};

bool pack_for(const KernelTable& k, WeightMatrix w, PackedCase* out) {
  const size_t bytes = packed_weight_bytes(k, w);
  if (bytes == 0) return false;
  out->packed.assign(bytes, 0xAB);
  pack_weight(k, &w, out->packed.data());
  out->w = w;
  return true;
}

TEST(PackedMatmul, MatchesFileLayoutAndIsBatchAndThreadInvariant) {
  bool any = false;
  std::set<GgmlType> packed_types;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512, Isa::kAmx}) {
    if (!isa_supported(isa)) continue;
    const KernelTable& k = kernel_table(isa);
    for (GgmlType t : kWeightTypes) {
      for (int64_t cols : {37, 96, 512, 576}) {
        if (cols % int64_t(ggml_block_size(t)) != 0) continue;
        auto w = make_weights(t, 48, cols, 21u + uint32_t(t));
        PackedCase pc;
        if (!pack_for(k, w.matrix, &pc)) continue;
        any = true;
        packed_types.insert(t);
        EXPECT_EQ(pc.w.packed_for, &k);
        for (int64_t m : {1, 2, 3, 5, 8, 9, 17, 70}) {
          auto x = make_activations(m, cols, 31u + uint32_t(m));
          std::vector<float> file(size_t(m) * 48), packed(size_t(m) * 48), threaded(size_t(m) * 48), alone(48);
          matmul_with_kernels(k, w.matrix, x.data(), m, file.data(), nullptr);
          matmul_with_kernels(k, pc.w, x.data(), m, packed.data(), nullptr);
          const auto mag = magnitudes(w.matrix, x.data(), m);
          for (size_t i = 0; i < file.size(); ++i)
            ASSERT_NEAR(file[i], packed[i], 1e-5 * mag[i]) << k.name << " " << ggml_type_name(t) << " m " << m << " " << i;
          ThreadPool pool(3);
          matmul_with_kernels(k, pc.w, x.data(), m, threaded.data(), &pool);
          ASSERT_EQ(0, std::memcmp(threaded.data(), packed.data(), sizeof(float) * packed.size())) << "m " << m;
          for (int64_t i = 0; i < m; ++i) {
            matmul_with_kernels(k, pc.w, x.data() + i * cols, 1, alone.data(), nullptr);
            ASSERT_EQ(0, std::memcmp(alone.data(), packed.data() + i * 48, sizeof(float) * 48)) << "m " << m << " row " << i;
          }
          // matmul_multi with a packed and an unpacked matrix: each as matmul computes it.
          std::vector<float> m0(size_t(m) * 48), m1(size_t(m) * 48);
          const WeightMatrix both[2] = {pc.w, w.matrix};
          float* const outs[2] = {m0.data(), m1.data()};
          matmul_multi_with_kernels(k, both, 2, x.data(), m, outs, &pool);
          ASSERT_EQ(0, std::memcmp(m0.data(), packed.data(), sizeof(float) * packed.size()));
          ASSERT_EQ(0, std::memcmp(m1.data(), file.data(), sizeof(float) * file.size()));
        }
        // Another table ignores the packed copy.
        if (&k != &kernel_table(Isa::kScalar)) {
          auto x = make_activations(3, cols, 5u);
          std::vector<float> a(3 * 48), b(3 * 48);
          matmul_with_kernels(kernel_table(Isa::kScalar), w.matrix, x.data(), 3, a.data(), nullptr);
          matmul_with_kernels(kernel_table(Isa::kScalar), pc.w, x.data(), 3, b.data(), nullptr);
          EXPECT_EQ(a, b);
        }
      }
    }
  }
  if (isa_supported(Isa::kAvx2)) {  // the AVX2 table packs what the AVX-512 table packs
    std::set<GgmlType> avx2_types;
    for (GgmlType t : kWeightTypes)
      if (kernel_table(Isa::kAvx2).packed[int(t)].gemm != nullptr) avx2_types.insert(t);
    EXPECT_EQ(avx2_types, (std::set<GgmlType>{GgmlType::Q8_0, GgmlType::Q5_0, GgmlType::Q4_0, GgmlType::Q2_K,
                                              GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K,
                                              GgmlType::F16, GgmlType::F32, GgmlType::BF16}));
  }
  if (isa_supported(Isa::kAvxVnni)) {  // the AVX-VNNI table packs what the AVX2 table packs
    std::set<GgmlType> vnni_types;
    for (GgmlType t : kWeightTypes)
      if (kernel_table(Isa::kAvxVnni).packed[int(t)].gemm != nullptr) vnni_types.insert(t);
    std::set<GgmlType> avx2_types;
    for (GgmlType t : kWeightTypes)
      if (kernel_table(Isa::kAvx2).packed[int(t)].gemm != nullptr) avx2_types.insert(t);
    EXPECT_EQ(vnni_types, avx2_types);
  }
  if (isa_supported(Isa::kAvx512)) {  // the AVX-512 table packs the legacy 8-, 5- and 4-bit formats and f16/f32
    EXPECT_EQ(packed_types, (std::set<GgmlType>{GgmlType::Q8_0, GgmlType::Q5_0, GgmlType::Q4_0, GgmlType::F16,
                                                GgmlType::F32, GgmlType::BF16, GgmlType::Q2_K, GgmlType::Q3_K,
                                                GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K}));
  }
  if (isa_supported(Isa::kAmx)) {  // the AMX table packs what the AVX-512 table packs (same layouts)
    for (GgmlType t : kWeightTypes)
      EXPECT_EQ(kernel_table(Isa::kAmx).packed[int(t)].group_bytes, kernel_table(Isa::kAvx512).packed[int(t)].group_bytes)
          << ggml_type_name(t);
  }
  if (!any) GTEST_SKIP() << "no kernel table on this CPU has a packed layout";
}

// A table's one-pass activation quantizer (PackedKernels::quantize_pack_acts) writes the bytes of
// its two steps, quantize_act (or convert_activation_row) then pack_acts, padding included: rows
// with zero blocks, a block whose largest magnitude is negative, values that round to +-127 and
// tiny ones, at widths of 1 to 49 blocks.
TEST(PackedMatmul, OnePassActivationQuantizerEqualsItsTwoSteps) {
  std::mt19937 rng(11);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  int checked = 0;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512, Isa::kAmx}) {
    if (!isa_supported(isa)) continue;
    const KernelTable& k = kernel_table(isa);
    for (GgmlType t : kWeightTypes) {
      const PackedKernels& pk = k.packed[int(t)];
      if (pk.gemm == nullptr || pk.quantize_pack_acts == nullptr) continue;
      const GgmlType at = activation_type(t);
      for (int64_t cols : {32, 576, 1536, 1568}) {
        for (int64_t m : {1, 3, 8, 9}) {
          std::vector<float> x(size_t(m * cols));
          for (auto& v : x) v = gauss(rng) * 3.0f;
          for (int64_t b = 0; b < m * cols / 32; b += 5)
            std::fill_n(&x[size_t(b * 32)], 32, 0.0f);                                   // zero blocks
          for (int64_t b = 1; b < m * cols / 32; b += 7) x[size_t(b * 32 + 3)] = -1e4f;  // negative largest
          for (int64_t b = 2; b < m * cols / 32; b += 11)
            for (int e = 0; e < 32; ++e) x[size_t(b * 32 + e)] = 1e-30f * float(e - 16);  // tiny values
          const size_t xs = activation_row_bytes(t, cols), ps = pk.act_bytes(cols) + 64;
          std::vector<uint8_t> blocks(xs * size_t(m)), two(ps * size_t(m), 0xCD), one(ps * size_t(m), 0xEF);
          for (int64_t i = 0; i < m; ++i) {
            if (k.quantize_act[int(at)] != nullptr)
              k.quantize_act[int(at)](&x[size_t(i * cols)], &blocks[size_t(i) * xs], cols);
            else
              convert_activation_row(t, &x[size_t(i * cols)], &blocks[size_t(i) * xs], cols);
          }
          pk.pack_acts(blocks.data(), xs, m, cols, two.data(), ps);
          pk.quantize_pack_acts(x.data(), m, cols, one.data(), ps);
          ASSERT_EQ(0, std::memcmp(one.data(), two.data(), one.size()))
              << k.name << " " << ggml_type_name(t) << " cols " << cols << " m " << m;
          ++checked;
        }
      }
    }
  }
  if (checked == 0) GTEST_SKIP() << "no table here has a one-pass activation quantizer";
}

void multi_across_packed_types(const KernelTable& k) {
  const GgmlType types[] = {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::Q5_0};
  std::vector<RandomWeights> raw;
  std::vector<PackedCase> packed(4);
  WeightMatrix ws[4];
  for (int j = 0; j < 4; ++j) {
    raw.push_back(make_weights(types[j], 32, 512, 40u + uint32_t(j)));
    ASSERT_TRUE(pack_for(k, raw.back().matrix, &packed[size_t(j)])) << ggml_type_name(types[j]);
    ws[j] = packed[size_t(j)].w;
  }
  ThreadPool pool(2);
  for (int64_t m : {1, 5}) {
    auto x = make_activations(m, 512, 7u);
    std::vector<std::vector<float>> multi(4, std::vector<float>(size_t(m) * 32)), single = multi;
    float* const outs[4] = {multi[0].data(), multi[1].data(), multi[2].data(), multi[3].data()};
    // Pairs that share an activation type (q8_K: Q4_K + Q6_K; q8_0: Q8_0 + Q5_0), so that the
    // multi path converts once for both.
    matmul_multi_with_kernels(k, ws, 2, x.data(), m, outs, &pool);
    matmul_multi_with_kernels(k, ws + 2, 2, x.data(), m, outs + 2, &pool);
    for (int j = 0; j < 4; ++j) {
      matmul_with_kernels(k, ws[j], x.data(), m, single[size_t(j)].data(), &pool);
      EXPECT_EQ(multi[size_t(j)], single[size_t(j)]) << k.name << " " << ggml_type_name(types[j]) << " m " << m;
    }
  }
}

// matmul_multi over packed matrices of different types (their activation rearrangements
// differ: Q4_K's and Q6_K's are not Q8_0's) equals one matmul per matrix, bit for bit.
TEST(PackedMatmul, MultiAcrossPackedTypes) {
  for (Isa isa : {Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512, Isa::kAmx})
    if (isa_supported(isa)) multi_across_packed_types(kernel_table(isa));
}

// Weights packed for table `a` and for table `b` give identical bits for every type, row length
// and batch size listed, alone and over a thread pool, with codes and activations at their
// extremes (|q| = 128 for Q8_0's -128, x = +-127); b's GEMM must be its own.
void expect_packed_tables_agree(const KernelTable& a, const KernelTable& b, std::initializer_list<GgmlType> types,
                                std::initializer_list<int64_t> col_counts, std::initializer_list<int64_t> batches,
                                uint32_t seed) {
  ThreadPool pool(3);
  for (GgmlType t : types) {
    ASSERT_NE(b.packed[int(t)].gemm, a.packed[int(t)].gemm) << b.name << " " << ggml_type_name(t);
    for (int64_t cols : col_counts) {
      auto w = make_weights(t, 48, cols, seed + uint32_t(t));
      if (t == GgmlType::Q8_0) {  // a block of q = -128 (stored code 0x80) and one of +127 in row 0
        uint8_t* row = w.bytes.data();
        std::memset(row + 2, 0x80, 32);
        std::memset(row + 34 + 2, 0x7F, 32);
      }
      PackedCase pa, pb;
      ASSERT_TRUE(pack_for(a, w.matrix, &pa));
      ASSERT_TRUE(pack_for(b, w.matrix, &pb));
      for (int64_t m : batches) {
        auto x = make_activations(m, cols, seed + 16u + uint32_t(m));
        for (int64_t c = 0; c < std::min<int64_t>(cols, 64); ++c) x[size_t(c)] = c % 2 ? 1e3f : -1e3f;  // x = +-127
        std::vector<float> ya(size_t(m) * 48), yb(size_t(m) * 48), threaded(size_t(m) * 48);
        matmul_with_kernels(a, pa.w, x.data(), m, ya.data(), nullptr);
        matmul_with_kernels(b, pb.w, x.data(), m, yb.data(), nullptr);
        ASSERT_EQ(0, std::memcmp(ya.data(), yb.data(), sizeof(float) * ya.size()))
            << b.name << " " << ggml_type_name(t) << " cols " << cols << " m " << m;
        matmul_with_kernels(b, pb.w, x.data(), m, threaded.data(), &pool);
        ASSERT_EQ(0, std::memcmp(ya.data(), threaded.data(), sizeof(float) * ya.size()))
            << b.name << " " << ggml_type_name(t) << " cols " << cols << " m " << m << " threaded";
      }
    }
  }
}

// The AVX-VNNI table's packed integer GEMMs (vpdpbusd) compute the same exact integer sums as the
// AVX2 table's (maddubs + madd), then the same f32 steps: bit-identical for every batch shape.
TEST(PackedMatmul, AvxVnniIsBitIdenticalToAvx2) {
  if (!isa_supported(Isa::kAvxVnni)) GTEST_SKIP() << "CPU lacks AVX-VNNI";
  expect_packed_tables_agree(kernel_table(Isa::kAvx2), kernel_table(Isa::kAvxVnni),
                             {GgmlType::Q8_0, GgmlType::Q5_0, GgmlType::Q4_0, GgmlType::Q2_K, GgmlType::Q3_K,
                              GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K},
                             {256, 768}, {1, 2, 3, 4, 5, 9, 70}, 61u);
}

// An AMX table's tile GEMM (gemm_packed_amx.cpp: tiles of 16 activation rows, then for Q8_0 one
// tile of the 8 to 15 rows left; fewer rows on the AVX-512 kernel) computes the same exact integer
// sums and then the same f32 steps as the AVX-512 table's: bit-identical below, at and past a
// tile, in partial tiles alone and after full ones, over several tiles and more than one call's
// worth of rows, and with a block count that is not a multiple of the kernel's ring of four.
void expect_bit_identical_to_avx512(const KernelTable& tiles) {
  expect_packed_tables_agree(kernel_table(Isa::kAvx512), tiles,
                             {GgmlType::Q8_0, GgmlType::Q5_0, GgmlType::Q4_0}, {32, 576, 608, 2048},
                             {1, 7, 8, 12, 15, 16, 17, 26, 33, 64, 70, 150}, 91u);
}

TEST(PackedMatmul, AmxIsBitIdenticalToAvx512) {
  if (!isa_supported(Isa::kAmx)) GTEST_SKIP() << "CPU (or kernel) lacks AMX-INT8";
  EXPECT_STREQ(kernel_table(Isa::kAmx).name, "amx");  // its start-up self-check passed
  expect_bit_identical_to_avx512(kernel_table(Isa::kAmx));
}

// The same kernel with its tile instructions emulated as the instruction set reference defines
// them: checks the tiling (tile shapes, strides, block pairs, the odd last block, the rows past
// the last full tile) on any CPU with AVX-512, AMX or not.
TEST(PackedMatmul, AmxKernelWithEmulatedTilesIsBitIdenticalToAvx512) {
  if (!isa_supported(Isa::kAvx512)) GTEST_SKIP() << "CPU lacks AVX-512";
  KernelTable emulated = kernel_table(Isa::kAvx512);
  emulated.name = "amx-emulated";
  fill_amx_emulated_packed_kernels(&emulated);
  EXPECT_STREQ(emulated.name, "amx-emulated");  // its start-up self-check passed
  expect_bit_identical_to_avx512(emulated);
}

// NextWeights: each thread hints where its share of the next pass starts (the start of its pool
// segment of that pass's units), capped, for decode-sized calls only.
TEST(NextWeights, StartIsEachThreadsFirstUnit) {
  const KernelTable& k = active_kernels();  // the table matmul() (and the hint) uses
  ThreadPool pool(2);
  auto a = make_weights(GgmlType::Q8_0, 64, 576, 1u);  // 64 rows: 4 packed groups, 8 units of 8 rows
  auto b = make_weights(GgmlType::Q8_0, 32, 576, 2u);
  const size_t rb = a.matrix.row_bytes;
  // File layout (no packed copy): units of kRowUnit (8) rows, or single rows.
  const WeightMatrix plain[2] = {a.matrix, b.matrix};
  WeightSpan s0 = next_weights_start({plain, 1}, 1, pool, 0), s1 = next_weights_start({plain, 1}, 1, pool, 1);
  EXPECT_EQ(s0.data, static_cast<const uint8_t*>(a.matrix.data));
  EXPECT_EQ(s1.data, static_cast<const uint8_t*>(a.matrix.data) + 32 * rb);
  EXPECT_EQ(s1.bytes, std::min<size_t>(16 * 1024, 32 * rb));
  // Two matrices in one pass: thread 1 starts at unit (64 + 32) / 2 = row 48 of a.
  s1 = next_weights_start({plain, 2}, 2, pool, 1);
  EXPECT_EQ(s1.data, static_cast<const uint8_t*>(a.matrix.data) + 48 * rb);
  // Beyond a small batch, or with nothing next: no hint.
  EXPECT_EQ(next_weights_start({plain, 2}, 64, pool, 1).bytes, 0u);
  EXPECT_EQ(next_weights_start({}, 1, pool, 0).bytes, 0u);
  // Packed copies: units are whole groups of kPackedRows rows.
  PackedCase pa, pb;
  if (pack_for(k, a.matrix, &pa) && pack_for(k, b.matrix, &pb)) {
    const size_t gb = packed_weight_bytes(k, pa.w) / 4;
    const WeightMatrix packed[2] = {pa.w, pb.w};
    s1 = next_weights_start({packed, 1}, 1, pool, 1);
    EXPECT_EQ(s1.data, static_cast<const uint8_t*>(pa.w.packed) + 2 * gb);
    EXPECT_EQ(s1.bytes, std::min<size_t>(16 * 1024, 2 * gb));
    // 4 + 2 groups: thread 1 starts at group 3 of a.
    s1 = next_weights_start({packed, 2}, 1, pool, 1);
    EXPECT_EQ(s1.data, static_cast<const uint8_t*>(pa.w.packed) + 3 * gb);
    // A packed and a plain matrix cannot share a pass: only the first is numbered.
    const WeightMatrix mixed[2] = {pa.w, b.matrix};
    s1 = next_weights_start({mixed, 2}, 1, pool, 1);
    EXPECT_EQ(s1.data, static_cast<const uint8_t*>(pa.w.packed) + 2 * gb);
  }
}

// gate and up packed as one pair (pack_weight_pair) through matmul_swiglu: bit for bit the two
// packed separately through matmul_multi, then swiglu, for every packed type and tile width,
// alone and over a pool; and the next pass's hint for a pair starts at each thread's first unit.
TEST(PackedMatmul, SwigluPairEqualsMultiThenSwiglu) {
  bool any = false;
  ThreadPool pool(3);
  constexpr int64_t kRows = 48;  // 3 groups of each matrix
  for (Isa isa : {Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512, Isa::kAmx}) {
    if (!isa_supported(isa)) continue;
    const KernelTable& k = kernel_table(isa);
    for (GgmlType t : kWeightTypes) {
      for (int64_t cols : {96, 512, 576}) {
        if (cols % int64_t(ggml_block_size(t)) != 0) continue;
        auto gate = make_weights(t, kRows, cols, 41u + uint32_t(t)),
             up = make_weights(t, kRows, cols, 42u + uint32_t(t));
        const size_t bytes = packed_pair_bytes(k, gate.matrix, up.matrix);
        PackedCase pg, pu;
        if (!pack_for(k, gate.matrix, &pg) || !pack_for(k, up.matrix, &pu)) {
          EXPECT_EQ(bytes, 0u) << k.name << " " << ggml_type_name(t);
          continue;
        }
        ASSERT_EQ(bytes, 2 * pg.packed.size());
        std::vector<uint8_t> storage(bytes, 0xCD);
        const WeightMatrix pair = pack_weight_pair(k, gate.matrix, up.matrix, storage.data());
        EXPECT_EQ(pair.rows, 2 * kRows);
        any = true;
        for (int64_t m : {1, 2, 3, 5, 8, 9, 17, 70}) {
          auto x = make_activations(m, cols, 51u + uint32_t(m));
          std::vector<float> gy(size_t(m * kRows)), uy(size_t(m * kRows)), want(size_t(m * kRows));
          const WeightMatrix both[2] = {pg.w, pu.w};
          float* const outs[2] = {gy.data(), uy.data()};
          matmul_multi_with_kernels(k, both, 2, x.data(), m, outs, nullptr);
          swiglu(gy.data(), uy.data(), m * kRows, want.data());
          for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
            std::vector<float> got(size_t(m * kRows) + 1, 7.0f), scratch(size_t(2 * m * kRows));
            matmul_swiglu_with_kernels(k, pair, x.data(), m, got.data(), scratch.data(), p);
            ASSERT_EQ(0, std::memcmp(got.data(), want.data(), sizeof(float) * want.size()))
                << k.name << " " << ggml_type_name(t) << " cols " << cols << " m " << m << (p ? " pool" : "");
            EXPECT_EQ(got.back(), 7.0f);
          }
        }
      }
    }
  }
  // Pairs that cannot be: different shapes or types.
  const KernelTable& k = active_kernels();
  auto a = make_weights(GgmlType::Q8_0, 32, 96, 1u), b = make_weights(GgmlType::Q8_0, 48, 96, 2u);
  auto c = make_weights(GgmlType::Q4_0, 32, 96, 3u);
  EXPECT_EQ(packed_pair_bytes(k, a.matrix, b.matrix), 0u);
  EXPECT_EQ(packed_pair_bytes(k, a.matrix, c.matrix), 0u);
  // The hint for a pass over a pair: thread 1 starts at its first unit (two groups each).
  if (packed_pair_bytes(k, a.matrix, a.matrix) > 0) {
    auto d = make_weights(GgmlType::Q8_0, 96, 576, 4u);  // 6 units of 2 groups
    std::vector<uint8_t> storage(packed_pair_bytes(k, d.matrix, d.matrix));
    const WeightMatrix pair = pack_weight_pair(k, d.matrix, d.matrix, storage.data());
    const size_t gb = storage.size() / 12;
    ThreadPool two(2);
    const WeightSpan s1 = next_weights_start({&pair, 1, true}, 1, two, 1);
    EXPECT_EQ(s1.data, static_cast<const uint8_t*>(pair.packed) + 6 * gb);
    EXPECT_EQ(s1.bytes, std::min<size_t>(16 * 1024, 6 * gb));
  }
  if (!any) GTEST_SKIP() << "no kernel table on this CPU packs a gate/up pair";
}

// Where the CPU has avx512_bf16, the AVX-512 (and AMX) table multiplies packed BF16 weights with
// vdpbf16ps (gemm_packed_bf16_avx512.cpp): its activation rows stay bf16 pairs, 2 bytes per column
// (the widening kernel's are f32, 4 bytes). Its results are checked with every other packed kernel
// above (MatchesFileLayoutAndIsBatchAndThreadInvariant: odd widths, every tile width, threads).
TEST(PackedMatmul, Bf16UsesTheDotProductKernelWhereSupported) {
  if (!avx512_bf16_supported()) GTEST_SKIP() << "no avx512_bf16 on this CPU";
  const char* env = std::getenv("KVSERVE_BF16_DOT");
  if (env != nullptr && std::string(env) == "0") GTEST_SKIP() << "KVSERVE_BF16_DOT=0";
  EXPECT_EQ(kernel_table(Isa::kAvx512).packed[int(GgmlType::BF16)].act_bytes(37), 76u);  // 19 pairs
  EXPECT_EQ(kernel_table(Isa::kAvx2).packed[int(GgmlType::BF16)].act_bytes(37), 148u);   // f32 rows
  if (isa_supported(Isa::kAmx)) {
    EXPECT_EQ(kernel_table(Isa::kAmx).packed[int(GgmlType::BF16)].gemm,
              kernel_table(Isa::kAvx512).packed[int(GgmlType::BF16)].gemm);
  }
}

TEST(PackedMatmul, ShapesThatCannotBePacked) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512, Isa::kAmx}) {
    if (!isa_supported(isa)) continue;
    const KernelTable& k = kernel_table(isa);
    auto odd_rows = make_weights(GgmlType::Q8_0, 40, 64, 1);  // not a multiple of kPackedRows
    EXPECT_EQ(packed_weight_bytes(k, odd_rows.matrix), 0u);
    auto q4_1 = make_weights(GgmlType::Q4_1, 32, 64, 1);  // no packed layout yet
    EXPECT_EQ(packed_weight_bytes(k, q4_1.matrix), 0u);
  }
}

// Float weights allow any row length; the kernels' tails must agree with the main loops.
TEST(Matmul, FloatTypesAnyLength) {
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16}) {
    for (int64_t cols : {1, 7, 100, 129}) {
      auto w = make_weights(t, 9, cols, 5);
      auto x = make_activations(6, cols, 6);
      std::vector<float> a(6 * 9), b(6 * 9);
      matmul_with_kernels(kernel_table(Isa::kScalar), w.matrix, x.data(), 6, a.data(), nullptr);
      matmul(w.matrix, x.data(), 6, b.data(), nullptr);
      const auto mag = magnitudes(w.matrix, x.data(), 6);
      for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_NEAR(a[i], b[i], 1e-6 * mag[i]) << ggml_type_name(t) << " cols " << cols << " " << i;
      }
    }
  }
}

TEST(Matmul, RowStrideLargerThanRow) {
  auto w = make_weights(GgmlType::Q8_0, 8, 64, 1);
  const size_t rb = w.matrix.row_bytes, padded = rb + 6;
  std::vector<uint8_t> strided(padded * 8, 0xEE);
  for (int r = 0; r < 8; ++r) std::memcpy(strided.data() + r * padded, w.bytes.data() + r * rb, rb);
  WeightMatrix sw{GgmlType::Q8_0, strided.data(), 8, 64, padded};
  auto x = make_activations(2, 64, 2);
  std::vector<float> a(16), b(16);
  matmul(w.matrix, x.data(), 2, a.data(), nullptr);
  matmul(sw, x.data(), 2, b.data(), nullptr);
  EXPECT_EQ(a, b);
}

TEST(Matmul, ZeroActivationRowGivesZero) {
  for (GgmlType t : kWeightTypes) {
    auto w = make_weights(t, 4, 256, 9);
    std::vector<float> x(256, 0.0f), y(4, 1.0f);
    matmul(w.matrix, x.data(), 1, y.data(), nullptr);
    for (float v : y) EXPECT_EQ(v, 0.0f) << ggml_type_name(t);
  }
}

TEST(GetRows, DequantizesSelectedRows) {
  for (GgmlType t : kWeightTypes) {
    auto w = make_weights(t, 10, 512, 21);
    const int32_t ids[4] = {3, 0, 9, 3};
    std::vector<float> out(4 * 512), want(512);
    get_rows(w.matrix, ids, 4, out.data());
    for (int i = 0; i < 4; ++i) {
      dequantize_row(t, static_cast<const uint8_t*>(w.matrix.data) + size_t(ids[i]) * w.matrix.row_bytes,
                     want.data(), 512);
      EXPECT_EQ(0, std::memcmp(want.data(), out.data() + i * 512, 512 * sizeof(float))) << ggml_type_name(t);
    }
  }
}

// get_rows on a packed matrix whose layout has a row reader reads its rows from the packed copy
// (the file bytes are clobbered to prove it) and gives exactly dequantize_row's values; the legacy
// quants and the float types have one on every table that packs them.
TEST(GetRows, ReadsPackedRowsBitForBit) {
  std::set<GgmlType> read_packed;
  for (Isa isa : {Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512, Isa::kAmx}) {
    if (!isa_supported(isa)) continue;
    const KernelTable& k = kernel_table(isa);
    for (GgmlType t : kWeightTypes) {
      for (int64_t cols : {96, 576}) {
        auto w = make_weights(t, 48, cols, 7u + uint32_t(t));
        PackedCase pc;
        if (!pack_for(k, w.matrix, &pc) || k.packed[int(t)].unpack_row == nullptr) continue;
        read_packed.insert(t);
        const int32_t ids[6] = {0, 15, 16, 47, 31, 16};
        std::vector<float> want(size_t(6 * cols)), got(size_t(6 * cols));
        get_rows(w.matrix, ids, 6, want.data());
        std::vector<uint8_t> clobbered(w.matrix.row_bytes * 48, 0xFF);  // f16 0xFFFF is a NaN scale
        pc.w.data = clobbered.data();
        get_rows(pc.w, ids, 6, got.data());
        EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
            << k.name << " " << ggml_type_name(t) << " cols " << cols;
      }
    }
  }
  if (isa_supported(Isa::kAvx2)) {
    for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::F16, GgmlType::F32})
      EXPECT_TRUE(read_packed.count(t)) << ggml_type_name(t);
  }
}

}  // namespace
}  // namespace kvserve
