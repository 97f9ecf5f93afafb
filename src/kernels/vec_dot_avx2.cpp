// AVX2 + FMA + F16C dot products (the baseline every target machine has).
//
// Same arithmetic as vec_dot_scalar.cpp: exact int32 sums per (sub-)block, scales applied in f32.
// Integer work uses maddubs (unsigned x signed bytes -> int16 pairs) followed by madd (-> int32);
// weight codes are kept unsigned where the format allows and the constant offset (-8, -16, -4,
// -32) is applied through the activation block sums instead.
//
// Every kernel is a template over NX, the number of activation rows it serves per pass over the
// weight row: NX = 1 is the VecDotFn, NX = kRowsPerMultiDot the VecDotMultiFn. Each activation row
// has its own accumulators that see the same sequence of operations for any NX (explicit
// intrinsics only, so the compiler cannot contract differently), which makes the two bit-identical.
#include <immintrin.h>

#include <type_traits>

#include "kernels/simd_avx2.h"
#include "kernels/vec_dot.h"
#include "tensor/block_formats.h"
#include "util/half.h"

namespace kvserve {

namespace {

using avx2::dot_s8s8;
using avx2::dot_u8s8;
using avx2::dot_u8s8_scaled;
using avx2::hsum;
using avx2::load;

// c + a * b in f32 with one rounding, whatever the compiler's contraction settings.
inline float fma_ss(float a, float b, float c) {
  return _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(a), _mm_set_ss(b), _mm_set_ss(c)));
}

// Activation block `i` of row k.
template <typename B>
inline const B* act_row(const void* x, size_t x_stride, int k) {
  return reinterpret_cast<const B*>(static_cast<const uint8_t*>(x) + size_t(k) * x_stride);
}

// ---- float formats: two accumulators of 8 lanes per activation row ----

enum class FloatFormat { kF32, kF16, kBf16 };

template <FloatFormat F>
using FloatStorage = std::conditional_t<F == FloatFormat::kF32, float, uint16_t>;

template <FloatFormat F>
inline __m256 load8(const FloatStorage<F>* p) {
  if constexpr (F == FloatFormat::kF32) {
    return _mm256_loadu_ps(p);
  } else {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    if constexpr (F == FloatFormat::kF16) return _mm256_cvtph_ps(h);
    else return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
}

template <FloatFormat F>
inline float load1(const FloatStorage<F>* p) {
  if constexpr (F == FloatFormat::kF32) return *p;
  else if constexpr (F == FloatFormat::kF16) return f16_to_f32(*p);
  else return bf16_to_f32(*p);
}

// Weights stored as FW, activations as FX.
template <int NX, FloatFormat FW, FloatFormat FX>
void dot_float_format(int64_t n, const void* w, const void* x, size_t xs, float* out, size_t os) {
  using TW = FloatStorage<FW>;
  using TX = FloatStorage<FX>;
  const TW* a = static_cast<const TW*>(w);
  const TX* b[NX];
  __m256 acc0[NX], acc1[NX];
  for (int k = 0; k < NX; ++k) {
    b[k] = act_row<TX>(x, xs, k);
    acc0[k] = _mm256_setzero_ps();
    acc1[k] = _mm256_setzero_ps();
  }
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 w0 = load8<FW>(a + i), w1 = load8<FW>(a + i + 8);
    for (int k = 0; k < NX; ++k) {
      acc0[k] = _mm256_fmadd_ps(w0, load8<FX>(b[k] + i), acc0[k]);
      acc1[k] = _mm256_fmadd_ps(w1, load8<FX>(b[k] + i + 8), acc1[k]);
    }
  }
  for (int k = 0; k < NX; ++k) {
    float sum = hsum(_mm256_add_ps(acc0[k], acc1[k]));
    for (int64_t j = i; j < n; ++j) sum = fma_ss(load1<FW>(a + j), load1<FX>(b[k] + j), sum);
    out[size_t(k) * os] = sum;
  }
}

// ---- legacy formats against q8_0 / q8_1 ----

// Applies one block's integer dot to row k's accumulator.
inline __m256 scale_add(__m256 acc, float dw, float dx, __m256i p) {
  return _mm256_fmadd_ps(_mm256_set1_ps(dw * dx), _mm256_cvtepi32_ps(p), acc);
}

// Shared loop of the symmetric legacy formats (Q4_0, Q5_0, Q8_0 against q8_0): Codes(block)
// returns the 32 signed codes.
template <int NX, typename BW, typename Codes>
void dot_legacy_symmetric(int64_t n, const void* w, const void* x, size_t xs, float* out, size_t os,
                          Codes codes) {
  const BW* a = static_cast<const BW*>(w);
  __m256 acc[NX];
  for (int k = 0; k < NX; ++k) acc[k] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK; ++i) {
    const __m256i q = codes(a[i]);
    const float dw = f16_to_f32(a[i].d);
    for (int k = 0; k < NX; ++k) {
      const BlockQ8_0& b = act_row<BlockQ8_0>(x, xs, k)[i];
      acc[k] = scale_add(acc[k], dw, f16_to_f32(b.d), dot_s8s8(q, load(b.qs)));
    }
  }
  for (int k = 0; k < NX; ++k) out[size_t(k) * os] = hsum(acc[k]);
}

// Shared loop of the affine legacy formats (Q4_1, Q5_1 against q8_1): unsigned codes plus m * s.
template <int NX, typename BW, typename Codes>
void dot_legacy_affine(int64_t n, const void* w, const void* x, size_t xs, float* out, size_t os,
                       Codes codes) {
  const BW* a = static_cast<const BW*>(w);
  __m256 acc[NX];
  float mins[NX];
  for (int k = 0; k < NX; ++k) {
    acc[k] = _mm256_setzero_ps();
    mins[k] = 0.0f;
  }
  for (int64_t i = 0; i < n / kQK; ++i) {
    const __m256i q = codes(a[i]);
    const float dw = f16_to_f32(a[i].d), mw = f16_to_f32(a[i].m);
    for (int k = 0; k < NX; ++k) {
      const BlockQ8_1& b = act_row<BlockQ8_1>(x, xs, k)[i];
      acc[k] = scale_add(acc[k], dw, f16_to_f32(b.d), dot_u8s8(q, load(b.qs)));
      mins[k] = fma_ss(mw, f16_to_f32(b.s), mins[k]);
    }
  }
  for (int k = 0; k < NX; ++k) out[size_t(k) * os] = hsum(acc[k]) + mins[k];
}

// Q5 codes 0..31 as unsigned bytes in element order.
inline __m256i q5_codes(const uint8_t* qs, const uint8_t* qh) {
  const __m256i high = _mm256_and_si256(avx2::expand_bits(qh), _mm256_set1_epi8(0x10));
  return _mm256_or_si256(avx2::unpack_nibbles(qs), high);
}

template <int NX>
void dot_q8_0(int64_t n, const void* w, const void* x, size_t xs, float* out, size_t os) {
  dot_legacy_symmetric<NX, BlockQ8_0>(n, w, x, xs, out, os, [](const BlockQ8_0& b) { return load(b.qs); });
}

template <int NX>
void dot_q4_0(int64_t n, const void* w, const void* x, size_t xs, float* out, size_t os) {
  dot_legacy_symmetric<NX, BlockQ4_0>(n, w, x, xs, out, os, [](const BlockQ4_0& b) {
    return _mm256_sub_epi8(avx2::unpack_nibbles(b.qs), _mm256_set1_epi8(8));
  });
}

template <int NX>
void dot_q5_0(int64_t n, const void* w, const void* x, size_t xs, float* out, size_t os) {
  dot_legacy_symmetric<NX, BlockQ5_0>(n, w, x, xs, out, os, [](const BlockQ5_0& b) {
    return _mm256_sub_epi8(q5_codes(b.qs, b.qh), _mm256_set1_epi8(16));
  });
}

template <int NX>
void dot_q4_1(int64_t n, const void* w, const void* x, size_t xs, float* out, size_t os) {
  dot_legacy_affine<NX, BlockQ4_1>(n, w, x, xs, out, os,
                                   [](const BlockQ4_1& b) { return avx2::unpack_nibbles(b.qs); });
}

template <int NX>
void dot_q5_1(int64_t n, const void* w, const void* x, size_t xs, float* out, size_t os) {
  dot_legacy_affine<NX, BlockQ5_1>(n, w, x, xs, out, os, [](const BlockQ5_1& b) { return q5_codes(b.qs, b.qh); });
}

// ---- k-quants against q8_K ----

// sum_j scale[j] * bsums[j] over the 16 sub-blocks of 16.
inline int weighted_bsums16(const int16_t* bsums, const int* scale) {
  int s = 0;
  for (int j = 0; j < 16; ++j) s += scale[j] * bsums[j];
  return s;
}

// Q4_K / Q5_K min term: sum_j min_j * (bsums[2j] + bsums[2j + 1]).
inline int weighted_bsums_pairs(const int16_t* bsums, const int* mins) {
  int s = 0;
  for (int j = 0; j < 8; ++j) s += mins[j] * (bsums[2 * j] + bsums[2 * j + 1]);
  return s;
}

// Per-row state of the k-quant kernels: f32 accumulator of scaled sums, running min term.
template <int NX>
struct KAccumulators {
  __m256 acc[NX];
  float mins[NX];
  KAccumulators() {
    for (int k = 0; k < NX; ++k) {
      acc[k] = _mm256_setzero_ps();
      mins[k] = 0.0f;
    }
  }
  // Adds dw * dx * sumi (and subtracts dminw * dx * msum) for row k.
  void add(int k, float dx, float dw, __m256i sumi) {
    acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(dx * dw), _mm256_cvtepi32_ps(sumi), acc[k]);
  }
  void add_min(int k, float dx, float dminw, int msum) { mins[k] = fma_ss(dx * dminw, float(msum), mins[k]); }
  void store(float* out, size_t os) const {
    for (int k = 0; k < NX; ++k) out[size_t(k) * os] = hsum(acc[k]) - mins[k];
  }
};

template <int NX>
void dot_q2_k(int64_t n, const void* w, const void* x, size_t xs, float* out, size_t os) {
  const BlockQ2_K* a = static_cast<const BlockQ2_K*>(w);
  const __m256i three = _mm256_set1_epi8(3);
  KAccumulators<NX> st;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int sc[16], mn[16];
    for (int j = 0; j < 16; ++j) {
      sc[j] = a[i].scales[j] & 15;
      mn[j] = a[i].scales[j] >> 4;
    }
    const BlockQ8_K* b[NX];
    __m256i sumi[NX];
    for (int k = 0; k < NX; ++k) {
      b[k] = act_row<BlockQ8_K>(x, xs, k) + i;
      sumi[k] = _mm256_setzero_si256();
    }
    for (int h = 0; h < 2; ++h) {
      __m256i bits = load(a[i].qs + 32 * h);
      for (int s = 0; s < 4; ++s) {
        const __m256i q = _mm256_and_si256(bits, three);
        bits = _mm256_srli_epi16(bits, 2);
        const int j = 8 * h + 2 * s;
        for (int k = 0; k < NX; ++k)
          sumi[k] = _mm256_add_epi32(sumi[k], dot_u8s8_scaled(q, load(b[k]->qs + 16 * j), sc[j], sc[j + 1]));
      }
    }
    const float dw = f16_to_f32(a[i].d), dminw = f16_to_f32(a[i].dmin);
    for (int k = 0; k < NX; ++k) {
      st.add(k, b[k]->d, dw, sumi[k]);
      st.add_min(k, b[k]->d, dminw, weighted_bsums16(b[k]->bsums, mn));
    }
  }
  st.store(out, os);
}

template <int NX>
void dot_q3_k(int64_t n, const void* w, const void* x, size_t xs, float* out, size_t os) {
  const BlockQ3_K* a = static_cast<const BlockQ3_K*>(w);
  const __m256i three = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
  KAccumulators<NX> st;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int8_t sc8[16];
    unpack_scales_q3_k(a[i].scales, sc8);
    int sc[16];
    for (int j = 0; j < 16; ++j) sc[j] = sc8[j];
    const BlockQ8_K* b[NX];
    __m256i sumi[NX];
    for (int k = 0; k < NX; ++k) {
      b[k] = act_row<BlockQ8_K>(x, xs, k) + i;
      // Codes are taken as unsigned low2 + 4 * bit (0..7); the -4 offset is applied via bsums.
      sumi[k] = _mm256_set_epi32(0, 0, 0, 0, 0, 0, 0, -4 * weighted_bsums16(b[k]->bsums, sc));
    }
    __m256i hbits = load(a[i].hmask);  // bit 4h + s, consumed one per group of 32
    for (int h = 0; h < 2; ++h) {
      __m256i bits = load(a[i].qs + 32 * h);
      for (int s = 0; s < 4; ++s) {
        const __m256i high = _mm256_slli_epi16(_mm256_and_si256(hbits, one), 2);
        const __m256i q = _mm256_or_si256(_mm256_and_si256(bits, three), high);
        bits = _mm256_srli_epi16(bits, 2);
        hbits = _mm256_srli_epi16(hbits, 1);
        const int j = 8 * h + 2 * s;
        for (int k = 0; k < NX; ++k)
          sumi[k] = _mm256_add_epi32(sumi[k], dot_u8s8_scaled(q, load(b[k]->qs + 16 * j), sc[j], sc[j + 1]));
      }
    }
    const float dw = f16_to_f32(a[i].d);
    for (int k = 0; k < NX; ++k) st.add(k, b[k]->d, dw, sumi[k]);
  }
  st.store(out, os);
}

// Q4_K and Q5_K share everything but the fifth bit.
template <int NX, bool kQ5>
void dot_q45_k(int64_t n, const void* w, const void* x, size_t xs, float* out, size_t os) {
  using BW = std::conditional_t<kQ5, BlockQ5_K, BlockQ4_K>;
  const BW* a = static_cast<const BW*>(w);
  const __m256i low4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
  KAccumulators<NX> st;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int sc[8], mn[8];
    for (int j = 0; j < 8; ++j) {
      uint8_t s, m;
      unpack_scale_min_k4(j, a[i].scales, &s, &m);
      sc[j] = s;
      mn[j] = m;
    }
    const BlockQ8_K* b[NX];
    __m256i sumi[NX];
    for (int k = 0; k < NX; ++k) {
      b[k] = act_row<BlockQ8_K>(x, xs, k) + i;
      sumi[k] = _mm256_setzero_si256();
    }
    __m256i hbits = _mm256_setzero_si256();
    if constexpr (kQ5) hbits = load(a[i].qh);  // bits 2c and 2c + 1, consumed two per chunk
    for (int c = 0; c < 4; ++c) {
      const __m256i bytes = load(a[i].qs + 32 * c);
      __m256i lo = _mm256_and_si256(bytes, low4);
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4);
      if constexpr (kQ5) {
        lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(hbits, one), 4));
        hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hbits, 1), one), 4));
        hbits = _mm256_srli_epi16(hbits, 2);
      }
      for (int k = 0; k < NX; ++k) {
        const __m256i p_lo = dot_u8s8_scaled(lo, load(b[k]->qs + 64 * c), sc[2 * c], sc[2 * c]);
        const __m256i p_hi = dot_u8s8_scaled(hi, load(b[k]->qs + 64 * c + 32), sc[2 * c + 1], sc[2 * c + 1]);
        sumi[k] = _mm256_add_epi32(sumi[k], _mm256_add_epi32(p_lo, p_hi));
      }
    }
    const float dw = f16_to_f32(a[i].d), dminw = f16_to_f32(a[i].dmin);
    for (int k = 0; k < NX; ++k) {
      st.add(k, b[k]->d, dw, sumi[k]);
      st.add_min(k, b[k]->d, dminw, weighted_bsums_pairs(b[k]->bsums, mn));
    }
  }
  st.store(out, os);
}

template <int NX>
void dot_q6_k(int64_t n, const void* w, const void* x, size_t xs, float* out, size_t os) {
  const BlockQ6_K* a = static_cast<const BlockQ6_K*>(w);
  const __m256i low4 = _mm256_set1_epi8(0x0F), bits45 = _mm256_set1_epi8(0x30);
  KAccumulators<NX> st;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int sc[16];
    for (int j = 0; j < 16; ++j) sc[j] = a[i].scales[j];
    const BlockQ8_K* b[NX];
    __m256i sumi[NX];
    for (int k = 0; k < NX; ++k) {
      b[k] = act_row<BlockQ8_K>(x, xs, k) + i;
      // Codes taken unsigned (0..63); the -32 offset is applied via bsums.
      sumi[k] = _mm256_set_epi32(0, 0, 0, 0, 0, 0, 0, -32 * weighted_bsums16(b[k]->bsums, sc));
    }
    for (int h = 0; h < 2; ++h) {
      const __m256i ql0 = load(a[i].ql + 64 * h), ql1 = load(a[i].ql + 64 * h + 32);
      const __m256i qh = load(a[i].qh + 32 * h);
      const __m256i q[4] = {
          _mm256_or_si256(_mm256_and_si256(ql0, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), bits45)),
          _mm256_or_si256(_mm256_and_si256(ql1, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), bits45)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4), _mm256_and_si256(qh, bits45)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4),
                          _mm256_and_si256(_mm256_srli_epi16(qh, 2), bits45)),
      };
      for (int g = 0; g < 4; ++g) {
        const int j = 8 * h + 2 * g;
        for (int k = 0; k < NX; ++k)
          sumi[k] = _mm256_add_epi32(sumi[k], dot_u8s8_scaled(q[g], load(b[k]->qs + 16 * j), sc[j], sc[j + 1]));
      }
    }
    const float dw = f16_to_f32(a[i].d);
    for (int k = 0; k < NX; ++k) st.add(k, b[k]->d, dw, sumi[k]);
  }
  st.store(out, os);
}

// VecDotFn adapter: the NX = 1 instantiation.
template <void (*K)(int64_t, const void*, const void*, size_t, float*, size_t)>
float single(int64_t n, const void* w, const void* x) {
  float r;
  K(n, w, x, 0, &r, 0);
  return r;
}

}  // namespace

void fill_avx2_kernels(KernelTable* t) {
  constexpr int M = kRowsPerMultiDot;
  auto set = [t](GgmlType type, VecDotFn one, VecDotMultiFn multi) {
    t->vec_dot[int(type)] = one;
    t->vec_dot_multi[int(type)] = multi;
  };
  using FF = FloatFormat;
  set(GgmlType::F32, single<dot_float_format<1, FF::kF32, FF::kF32>>, dot_float_format<M, FF::kF32, FF::kF32>);
  set(GgmlType::F16, single<dot_float_format<1, FF::kF16, FF::kF32>>, dot_float_format<M, FF::kF16, FF::kF32>);
  set(GgmlType::BF16, single<dot_float_format<1, FF::kBf16, FF::kBf16>>, dot_float_format<M, FF::kBf16, FF::kBf16>);
  set(GgmlType::Q4_0, single<dot_q4_0<1>>, dot_q4_0<M>);
  set(GgmlType::Q4_1, single<dot_q4_1<1>>, dot_q4_1<M>);
  set(GgmlType::Q5_0, single<dot_q5_0<1>>, dot_q5_0<M>);
  set(GgmlType::Q5_1, single<dot_q5_1<1>>, dot_q5_1<M>);
  set(GgmlType::Q8_0, single<dot_q8_0<1>>, dot_q8_0<M>);
  set(GgmlType::Q2_K, single<dot_q2_k<1>>, dot_q2_k<M>);
  set(GgmlType::Q3_K, single<dot_q3_k<1>>, dot_q3_k<M>);
  set(GgmlType::Q4_K, single<dot_q45_k<1, false>>, dot_q45_k<M, false>);
  set(GgmlType::Q5_K, single<dot_q45_k<1, true>>, dot_q45_k<M, true>);
  set(GgmlType::Q6_K, single<dot_q6_k<1>>, dot_q6_k<M>);
}

}  // namespace kvserve
