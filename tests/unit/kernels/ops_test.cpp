// f32 ops against direct double-precision formulas.
#include "kernels/ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/ops_impl.h"
#include "kernels/vec_dot.h"

namespace kvserve {
namespace {

std::vector<float> random_vector(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = g(rng);
  return v;
}

TEST(Ops, RmsnormMatchesDouble) {
  for (size_t n : {1u, 7u, 64u, 4099u}) {
    const auto x = random_vector(n, 1, 3.0f), w = random_vector(n, 2);
    std::vector<float> out(n), out_plain(n);
    rmsnorm(x.data(), w.data(), int64_t(n), 1e-5f, out.data());
    rmsnorm(x.data(), nullptr, int64_t(n), 1e-5f, out_plain.data());
    double ss = 0;
    for (float v : x) ss += double(v) * v;
    const double s = 1.0 / std::sqrt(ss / double(n) + 1e-5);
    for (size_t i = 0; i < n; ++i) {
      EXPECT_NEAR(out[i], x[i] * s * w[i], 1e-6 * std::fabs(x[i] * s * w[i]) + 1e-7) << n << " " << i;
      EXPECT_NEAR(out_plain[i], x[i] * s, 1e-6 * std::fabs(x[i] * s) + 1e-7);
    }
  }
  // In place.
  auto x = random_vector(33, 3);
  const auto copy = x;
  std::vector<float> want(33);
  rmsnorm(copy.data(), nullptr, 33, 1e-6f, want.data());
  rmsnorm(x.data(), nullptr, 33, 1e-6f, x.data());
  EXPECT_EQ(x, want);
}

// rmsnorm sums its squares in 16 double lanes; one chain of 4 lanes (what it did before, as the
// reference's order is also a plain left-to-right sum) gives the same floats: f32 squares summed
// in double are exact while they span less than 2^29, as model activations do.
TEST(Ops, RmsnormSumOrderDoesNotShow) {
  for (size_t n : {20u, 576u, 896u, 1536u, 2048u}) {
    const auto x = random_vector(n, 11 + uint32_t(n), 2.0f), w = random_vector(n, 12);
    double lane[4] = {0, 0, 0, 0};
    size_t i = 0;
    for (; i + 4 <= n; i += 4)
      for (size_t l = 0; l < 4; ++l) lane[l] += double(x[i + l] * x[i + l]);
    double sum = (lane[0] + lane[1]) + (lane[2] + lane[3]);
    for (; i < n; ++i) sum += double(x[i] * x[i]);
    const float s = 1.0f / std::sqrt(float(sum / double(n)) + 1e-5f);
    std::vector<float> out(n);
    rmsnorm(x.data(), w.data(), int64_t(n), 1e-5f, out.data());
    for (size_t j = 0; j < n; ++j) ASSERT_EQ(out[j], (x[j] * s) * w[j]) << n << " " << j;
  }
}

TEST(Ops, SoftmaxMatchesDouble) {
  for (size_t n : {1u, 5u, 1000u}) {
    auto x = random_vector(n, 4, 5.0f);
    x[0] = 80.0f;  // a large value must not overflow
    std::vector<double> want(n);
    double mx = -INFINITY, sum = 0;
    for (float v : x) mx = std::max(mx, double(v));
    for (size_t i = 0; i < n; ++i) sum += want[i] = std::exp(double(x[i]) - mx);
    softmax(x.data(), int64_t(n));
    double total = 0;
    for (size_t i = 0; i < n; ++i) {
      EXPECT_NEAR(x[i], want[i] / sum, 1e-6 * want[i] / sum + 1e-12) << n << " " << i;
      total += x[i];
    }
    EXPECT_NEAR(total, 1.0, 1e-5);
  }
  std::vector<float> ninf = {-INFINITY, 0.0f, -INFINITY};  // masked entries
  softmax(ninf.data(), 3);
  EXPECT_EQ(ninf[0], 0.0f);
  EXPECT_EQ(ninf[1], 1.0f);
  EXPECT_EQ(ninf[2], 0.0f);
}

TEST(Ops, SiluSwigluAddScale) {
  const auto g = random_vector(100, 5, 4.0f), u = random_vector(100, 6);
  std::vector<float> s(100), sw(100), sum(100), sc(100);
  silu(g.data(), 100, s.data());
  swiglu(g.data(), u.data(), 100, sw.data());
  add(g.data(), u.data(), 100, sum.data());
  scale(g.data(), 0.5f, 100, sc.data());
  for (size_t i = 0; i < 100; ++i) {
    const double want = double(g[i]) / (1.0 + std::exp(-double(g[i])));
    EXPECT_NEAR(s[i], want, 1e-6 * std::fabs(want) + 1e-7);
    EXPECT_NEAR(sw[i], want * u[i], 1e-6 * std::fabs(want * u[i]) + 1e-7);
    EXPECT_EQ(sum[i], g[i] + u[i]);
    EXPECT_EQ(sc[i], g[i] * 0.5f);
  }
}

TEST(Ops, SiluAccurateOverWideRange) {
  // Covers the polynomial exp's clamping: large |x| must give x (x >> 0) and -0 (x << 0).
  std::vector<float> x;
  for (float v = -120.0f; v <= 120.0f; v += 0.0371f) x.push_back(v);
  std::vector<float> y(x.size());
  silu(x.data(), int64_t(x.size()), y.data());
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = double(x[i]) / (1.0 + std::exp(-double(x[i])));
    ASSERT_NEAR(y[i], want, 5e-7 * std::fabs(want) + 1e-35) << x[i];
  }
}

// swiglu's 16-lane body is bit for bit the 8-lane one: every length's tail (masked lanes against
// a zero-padded copy), the exp's clamps (|x| up to 120) and the values around zero.
TEST(Ops, SwigluAvx512EqualsAvx2BitForBit) {
  if (!isa_supported(Isa::kAvx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  std::vector<float> g = random_vector(12288 + 3, 7, 6.0f), u = random_vector(12288 + 3, 8);  // + the offset
  for (size_t i = 0; i < 2400; ++i) g[i] = -120.0f + 0.1f * float(i);
  g[3000] = 0.0f;
  g[3001] = -0.0f;
  g[3002] = 1e-30f;
  for (int64_t n : {1, 2, 7, 8, 15, 16, 17, 31, 33, 100, 1536, 12288}) {
    for (int64_t off : {0, 3}) {
      std::vector<float> a(size_t(n) + 1, 7.0f), b(size_t(n) + 1, 7.0f);
      detail::swiglu_avx2(g.data() + off, u.data() + off, n, a.data());
      detail::swiglu_avx512(g.data() + off, u.data() + off, n, b.data());
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(std::memcmp(&a[size_t(i)], &b[size_t(i)], sizeof(float)), 0)
            << "n " << n << " offset " << off << " i " << i << ": " << a[size_t(i)] << " vs " << b[size_t(i)];
      ASSERT_EQ(b[size_t(n)], 7.0f) << "wrote past the end, n " << n;
    }
  }
}

// swiglu_pairs16 on gate and up interleaved 16 at a time is swiglu on them apart, bit for bit, in
// both instruction sets (the exp's clamps included).
TEST(Ops, SwigluPairs16EqualsSwiglu) {
  constexpr int64_t kChunks = 97;
  std::vector<float> g = random_vector(16 * kChunks, 21, 6.0f), u = random_vector(16 * kChunks, 22);
  for (size_t i = 0; i < 300; ++i) g[i] = -120.0f + 0.8f * float(i);
  std::vector<float> y(32 * kChunks), want(16 * kChunks);
  for (int64_t c = 0; c < kChunks; ++c)
    for (int j = 0; j < 16; ++j) {
      y[size_t(32 * c + j)] = g[size_t(16 * c + j)];
      y[size_t(32 * c + 16 + j)] = u[size_t(16 * c + j)];
    }
  detail::swiglu_avx2(g.data(), u.data(), 16 * kChunks, want.data());
  std::vector<float> got(16 * kChunks + 1, 7.0f);
  swiglu_pairs16(y.data(), kChunks, got.data());
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0) << i << ": " << got[i] << " vs " << want[i];
  EXPECT_EQ(got.back(), 7.0f) << "wrote past the end";
  if (isa_supported(Isa::kAvx512)) {
    std::vector<float> wide(16 * kChunks);
    detail::swiglu_pairs16_avx512(y.data(), kChunks, wide.data());
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_EQ(std::memcmp(&wide[i], &want[i], sizeof(float)), 0) << i;
  }
}

TEST(Ops, SoftmaxHandlesExtremes) {
  std::vector<float> x = {0.0f, -87.0f, -88.0f, -100.0f, -1e30f, 1e-3f, -INFINITY};
  softmax(x.data(), int64_t(x.size()));
  double sum = 0;
  for (float v : x) {
    EXPECT_GE(v, 0.0f);
    sum += v;
  }
  EXPECT_NEAR(sum, 1.0, 1e-6);
  EXPECT_EQ(x[6], 0.0f);
  EXPECT_EQ(x[4], 0.0f);
  EXPECT_NEAR(x[1] / x[0], std::exp(-87.0), 1e-6 * std::exp(-87.0));
}

TEST(Ops, RopeInvFreq) {
  std::vector<float> f(32);
  rope_inv_freq(10000.0f, 1.0f, nullptr, 64, f.data());
  for (int i = 0; i < 32; ++i) EXPECT_NEAR(f[i], std::pow(10000.0, -2.0 * i / 64), 1e-6 * f[i]) << i;
  // Linear scaling and per-dimension factors.
  std::vector<float> factors(32), g(32);
  for (int i = 0; i < 32; ++i) factors[i] = 1.0f + float(i);
  rope_inv_freq(500000.0f, 0.25f, factors.data(), 64, g.data());
  for (int i = 0; i < 32; ++i)
    EXPECT_NEAR(g[i], 0.25 * std::pow(500000.0, -2.0 * i / 64) / factors[i], 1e-5 * g[i]) << i;
}

// Direct formula: rotate pair (a, b) by theta = pos * base^(-2i/d).
void check_rope(bool neox, int n_heads, int head_dim, int rope_dim, int pos) {
  auto x = random_vector(size_t(n_heads * head_dim), 7);
  const auto orig = x;
  std::vector<float> inv(size_t(rope_dim / 2));
  rope_inv_freq(10000.0f, 1.0f, nullptr, rope_dim, inv.data());
  apply_rope(x.data(), n_heads, head_dim, rope_dim, pos, inv.data(), neox);
  for (int h = 0; h < n_heads; ++h) {
    const float* o = orig.data() + h * head_dim;
    const float* r = x.data() + h * head_dim;
    for (int i = 0; i < rope_dim / 2; ++i) {
      const double theta = pos * std::pow(10000.0, -2.0 * i / rope_dim);
      const int ia = neox ? i : 2 * i, ib = neox ? i + rope_dim / 2 : 2 * i + 1;
      const double a = o[ia], b = o[ib];
      // Angle error of float theta grows with pos: allow ~1e-6 relative on theta.
      const double tol = 2e-6 * (std::fabs(a) + std::fabs(b)) * (1.0 + theta);
      EXPECT_NEAR(r[ia], a * std::cos(theta) - b * std::sin(theta), tol) << neox << " " << h << " " << i;
      EXPECT_NEAR(r[ib], a * std::sin(theta) + b * std::cos(theta), tol) << neox << " " << h << " " << i;
    }
    for (int d = rope_dim; d < head_dim; ++d) EXPECT_EQ(r[d], o[d]);
  }
}

TEST(Ops, RopeNormalAndNeox) {
  for (bool neox : {false, true}) {
    check_rope(neox, 3, 64, 64, 0);
    check_rope(neox, 3, 64, 64, 1);
    check_rope(neox, 2, 128, 128, 517);
    check_rope(neox, 4, 80, 32, 33);     // partial rotary
    check_rope(neox, 1, 1024, 1024, 9);  // more pairs than one angle chunk
  }
}

// rope_cos_sin forms each angle as the reference does: theta = pos, multiplied by s = base^(-2/d)
// once per pair, divided by the pair's factor, times freq_scale; all in f32.
TEST(Ops, RopeCosSinFollowsReferenceRecurrence) {
  const int d = 64;
  std::vector<float> factors(d / 2), c(d / 2), s(d / 2), c2(d / 2), s2(d / 2);
  for (int i = 0; i < d / 2; ++i) factors[i] = 1.0f + 0.37f * float(i);
  for (int pos : {0, 1, 7, 1000, 131071}) {
    for (const float* f : {static_cast<const float*>(nullptr), static_cast<const float*>(factors.data())}) {
      rope_cos_sin(pos, 500000.0f, 0.5f, f, d, c.data(), s.data());
      const float step = std::pow(500000.0f, -2.0f / float(d));
      volatile float theta = float(pos);  // volatile: one f32 rounding per step, as specified
      for (int i = 0; i < d / 2; ++i) {
        const float t = 0.5f * (f ? theta / f[i] : theta);
        EXPECT_EQ(c[i], std::cos(t)) << pos << " " << i;
        EXPECT_EQ(s[i], std::sin(t)) << pos << " " << i;
        // And within float accuracy of the exact angle.
        const double exact = 0.5 * pos * std::pow(500000.0, -2.0 * i / d) / (f ? f[i] : 1.0);
        EXPECT_NEAR(std::atan2(double(s[i]), double(c[i])), std::remainder(exact, 2 * M_PI),
                    2e-6 * (1 + exact) + 1e-6);
        theta = theta * step;
      }
    }
  }
}

TEST(Ops, ApplyRopeCosSinMatchesInvFreqForm) {
  for (bool neox : {false, true}) {
    auto a = random_vector(4 * 96, 9), b = a;
    std::vector<float> inv(32), c(32), s(32);
    rope_inv_freq(10000.0f, 1.0f, nullptr, 64, inv.data());
    rope_cos_sin(37, 10000.0f, 1.0f, nullptr, 64, c.data(), s.data());
    apply_rope(a.data(), 4, 96, 64, 37, inv.data(), neox);
    apply_rope_cos_sin(b.data(), 4, 96, 64, c.data(), s.data(), neox);
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5 * (1 + std::fabs(a[i]))) << i;
  }
}

TEST(Ops, RopePositionZeroIsIdentity) {
  auto x = random_vector(128, 8);
  const auto orig = x;
  std::vector<float> inv(32);
  rope_inv_freq(10000.0f, 1.0f, nullptr, 64, inv.data());
  apply_rope(x.data(), 2, 64, 64, 0, inv.data(), false);
  EXPECT_EQ(x, orig);
}

}  // namespace
}  // namespace kvserve
