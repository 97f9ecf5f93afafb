// Paged attention kernels against a naive two-pass softmax in double precision, over every KV
// element type (f32, f16, bf16, q8_0, q4_0, and K/V of different types), several lengths (inside
// one block, across blocks and chunks, partial last block), head dims (vector paths and the scalar
// fallback; 8, 12, 40, 64, 128, 192 and 272) and query-head groupings, with a shuffled block table, on
// every vector path this CPU has (AVX2, AVX-512).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kernels/attention_fixture.h"
#include "kernels/kv_quant.h"

namespace kvserve {
namespace {

// Every test runs once per vector path this CPU has (attention_fixture.h).
using PagedAttention = PinnedAttentionPath;
INSTANTIATE_TEST_SUITE_P(Paths, PagedAttention, ::testing::ValuesIn(vector_isas()), isa_name);

TEST_P(PagedAttention, PinnedPathIsUsed) { EXPECT_EQ(attention_isa(), GetParam()); }

// The kernels compute exactly what the stored values say, for every type (quantization error
// is not in play here: the reference reads the same dequantized values).
TEST_P(PagedAttention, MatchesNaiveSoftmax) {
  struct Case { int head_dim, num_kv_heads, group, block_size; };
  const Case cases[] = {{64, 3, 3, 16}, {64, 1, 1, 16}, {128, 2, 4, 32}, {64, 2, 9, 16},
                        {8, 1, 2, 4},   {12, 2, 3, 16}, {272, 1, 2, 16}, {40, 1, 2, 16},
                        {192, 1, 2, 16}};
  uint32_t seed = 1;
  for (const Case& c : cases)
    for (KvElem kt : kAll)
      for (KvElem vt : {kt, KvElem::Q4_0})
        for (int64_t n : {1, 5, 16, 17, 100, 300}) {
          const Arena a(c.block_size, c.num_kv_heads, c.head_dim, kt, vt, n, seed++);
          // Large queries make the softmax peaked, which exercises the running-max rescaling.
          const auto q = random_q(c.group, c.head_dim, seed++, 2.0f);
          const float scale = 1.0f / std::sqrt(float(c.head_dim));
          // The vector path's reference reads the query as it does (attention_rounds_query).
          const auto qr = rounded_if_the_path_rounds(q, kt, c.head_dim);
          for (int kvh = 0; kvh < c.num_kv_heads; ++kvh) {
            const auto want = naive(a, n, kvh, q.data(), c.group, scale);
            const auto want_vec = naive(a, n, kvh, qr.data(), c.group, scale);
            std::vector<float> got(q.size()), got_scalar(q.size());
            attention_group(a.view(), n, kvh, q.data(), c.group, scale, got.data());
            attention_group_scalar(a.view(), n, kvh, q.data(), c.group, scale, got_scalar.data());
            for (size_t i = 0; i < q.size(); ++i) {
              // The query's rounding (2^-16 of its group's largest value) stays far below the
              // tolerances of the quantized types themselves (QuantizedCloseToF32).
              ASSERT_NEAR(got[i], want[i], 2e-4 * (1 + std::fabs(want[i])))
                  << "exact query: hd " << c.head_dim << " k " << name(kt) << " n " << n << " i " << i;
              ASSERT_NEAR(got[i], want_vec[i], 2e-5 * (1 + std::fabs(want_vec[i])))
                  << "hd " << c.head_dim << " group " << c.group << " k " << name(kt) << " v " << name(vt)
                  << " n " << n << " i " << i;
              ASSERT_NEAR(got_scalar[i], want[i], 2e-5 * (1 + std::fabs(want[i])))
                  << "scalar hd " << c.head_dim << " group " << c.group << " k " << name(kt) << " v "
                  << name(vt) << " n " << n;
            }
          }
        }
}

// Grouped heads give the same numbers as each head alone (the group only shares K/V reads).
TEST_P(PagedAttention, GroupEqualsSingleHeads) {
  for (KvElem t : {KvElem::F16, KvElem::Q8_0}) {
    const Arena a(16, 2, 64, t, t, 200, 7);
    const auto q = random_q(10, 64, 3, 1.0f);
    std::vector<float> grouped(q.size()), single(q.size());
    attention_group(a.view(), 200, 1, q.data(), 10, 0.125f, grouped.data());
    for (int h = 0; h < 10; ++h)
      attention_group(a.view(), 200, 1, q.data() + h * 64, 1, 0.125f, single.data() + h * 64);
    for (size_t i = 0; i < q.size(); ++i) ASSERT_EQ(grouped[i], single[i]) << name(t) << " " << i;
  }
}

// Several KV heads in one call (attention_partial_heads, attention_group_range_heads) give each
// head's own result bit for bit: KV head counts past the kernel's 4 per pass, groups past its 8
// query heads per pass, windows that start and end mid-block, every K/V type.
TEST_P(PagedAttention, HeadsTogetherEqualHeadByHead) {
  struct Case {
    int num_kv_heads, group, head_dim;
  };
  for (const Case c : {Case{3, 3, 64}, Case{5, 2, 64}, Case{2, 9, 32}, Case{8, 4, 128}, Case{2, 3, 40}})
    for (KvElem t : kAll)
      for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, 1}, {0, 100}, {37, 300}}) {
        const KvElem vt = t == KvElem::Q4_0 ? KvElem::F16 : t;
        const Arena a(16, c.num_kv_heads, c.head_dim, t, vt, end, uint32_t(end + c.group));
        const size_t qh = size_t(c.group) * size_t(c.head_dim);
        const auto q = random_q(c.num_kv_heads * c.group, c.head_dim, 17, 2.0f);
        const size_t pf = attention_partial_floats(c.group, c.head_dim);
        for (int h0 : {0, 1}) {
          const int nh = c.num_kv_heads - h0;
          std::vector<float> together(pf * size_t(nh)), alone(pf);
          attention_partial_heads(a.view(), begin, end, h0, nh, q.data(), c.group, 0.125f, together.data());
          std::vector<float> out_together(qh * size_t(nh)), out_alone(qh);
          attention_group_range_heads(a.view(), begin, end, h0, nh, q.data(), c.group, 0.125f, out_together.data());
          for (int h = 0; h < nh; ++h) {
            attention_partial(a.view(), begin, end, h0 + h, q.data() + size_t(h) * qh, c.group, 0.125f, alone.data());
            ASSERT_EQ(0, std::memcmp(alone.data(), &together[size_t(h) * pf], pf * sizeof(float)))
                << name(t) << " heads " << c.num_kv_heads << " group " << c.group << " h " << h0 + h;
            attention_group_range(a.view(), begin, end, h0 + h, q.data() + size_t(h) * qh, c.group, 0.125f,
                                  out_alone.data());
            ASSERT_EQ(0, std::memcmp(out_alone.data(), &out_together[size_t(h) * qh], qh * sizeof(float)))
                << name(t) << " heads " << c.num_kv_heads << " group " << c.group << " h " << h0 + h;
          }
        }
      }
}

// A sliding window [begin, end): the same as the naive softmax over those positions only, and
// nothing outside is read: rows before `begin` in the first block hold NaN and the table entries
// of blocks wholly before it are holes (kNoBlock), as after KvCacheManager::release_before.
TEST_P(PagedAttention, WindowRangeReadsOnlyItsPositions) {
  const int hd = 64, group = 3, bs = 16;
  for (KvElem t : {KvElem::F32, KvElem::F16, KvElem::Q8_0})
    for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, 7}, {5, 21}, {37, 300}, {130, 131}, {100, 400}}) {
      Arena a(bs, 2, hd, t, t, end, uint32_t(begin * 7 + end));
      const auto q = random_q(group, hd, 9, 2.0f);
      const auto want = naive(a, end, 1, q.data(), group, 0.125, begin);
      const auto qr = rounded_if_the_path_rounds(q, t, hd);
      const auto want_vec = naive(a, end, 1, qr.data(), group, 0.125, begin);
      std::vector<float> nan_row(size_t(hd), NAN);
      for (int64_t p = (begin / bs) * bs; p < begin; ++p)
        for (int part = 0; part < 2; ++part)
          for (int h = 0; h < 2; ++h)
            kv_quantize_row(part == 0 ? t : t, nan_row.data(), hd,
                            a.row_at(a.table[size_t(p / bs)], part, int(p % bs) * 2 + h));
      for (int64_t b = 0; b < begin / bs; ++b) a.table[size_t(b)] = -1;
      std::vector<float> got(q.size()), got_scalar(q.size());
      attention_group_range(a.view(), begin, end, 1, q.data(), group, 0.125f, got.data());
      attention_group_range_scalar(a.view(), begin, end, 1, q.data(), group, 0.125f, got_scalar.data());
      for (size_t i = 0; i < q.size(); ++i) {
        ASSERT_NEAR(got[i], want_vec[i], 2e-5 * (1 + std::fabs(want_vec[i])))
            << name(t) << " [" << begin << "," << end << ") " << i;
        ASSERT_NEAR(got_scalar[i], want[i], 2e-5 * (1 + std::fabs(want[i]))) << name(t) << " scalar " << i;
      }
      // The chunk arithmetic the forward pass uses to split a window across threads.
      const int64_t chunks = attention_num_chunks(begin, end);
      ASSERT_EQ(attention_chunk_begin(begin, 0), begin);
      ASSERT_EQ(attention_chunk_end(begin, end, chunks - 1), end);
      for (int64_t c = 1; c < chunks; ++c) ASSERT_EQ(attention_chunk_begin(begin, c), attention_chunk_end(begin, end, c - 1));
    }
}

// Splitting by position: the chunk states computed separately (as threads do) and merged left
// to right give attention_group's result bit for bit; any other split agrees up to rounding.
TEST_P(PagedAttention, PositionSplitMergesExactly) {
  for (KvElem t : {KvElem::F32, KvElem::Q4_0}) {
    const int hd = 64, group = 3;
    const int64_t n = 1000;
    const Arena a(16, 3, hd, t, t, n, 11);
    const auto q = random_q(group, hd, 5, 2.0f);
    const float scale = 0.125f;
    std::vector<float> whole(q.size());
    attention_group(a.view(), n, 2, q.data(), group, scale, whole.data());

    const size_t pf = attention_partial_floats(group, hd);
    const int64_t chunks = attention_num_chunks(n);
    std::vector<float> states(size_t(chunks) * pf);
    for (int64_t c = chunks - 1; c >= 0; --c)  // any order of computing
      attention_partial(a.view(), c * kAttentionChunk, std::min(n, (c + 1) * kAttentionChunk), 2, q.data(), group,
                        scale, &states[size_t(c) * pf]);
    for (int64_t c = 1; c < chunks; ++c) attention_merge(group, hd, states.data(), &states[size_t(c) * pf]);
    std::vector<float> split(q.size());
    attention_finish(group, hd, states.data(), split.data());
    for (size_t i = 0; i < q.size(); ++i) ASSERT_EQ(split[i], whole[i]) << name(t) << " " << i;

    // An uneven split into 3 ranges (what another thread count could have done).
    std::vector<float> s1(pf), s2(pf), s3(pf), uneven(q.size());
    attention_partial(a.view(), 0, 77, 2, q.data(), group, scale, s1.data());
    attention_partial(a.view(), 77, 512, 2, q.data(), group, scale, s2.data());
    attention_partial(a.view(), 512, n, 2, q.data(), group, scale, s3.data());
    attention_merge(group, hd, s1.data(), s2.data());
    attention_merge(group, hd, s1.data(), s3.data());
    attention_finish(group, hd, s1.data(), uneven.data());
    for (size_t i = 0; i < q.size(); ++i) ASSERT_NEAR(uneven[i], whole[i], 1e-5 * (1 + std::fabs(whole[i]))) << i;
  }
}

// attention_round_query: per group of 32, values move by at most half a step of max |q| / 32767,
// the largest keeps its magnitude, zeros stay zero, and a short last group is rounded on its own.
TEST(AttentionRoundQuery, HalfAStepOfTheGroupMaximum) {
  std::vector<float> q = random_q(1, 100, 5, 3.0f);
  q[7] = 250.0f;  // an outlier: its group's step grows, the other groups' do not
  for (int i = 64; i < 96; ++i) q[size_t(i)] = 0.0f;
  std::vector<float> r(q.size());
  attention_round_query(q.data(), int(q.size()), r.data());
  for (int b = 0; b < 100; b += 32) {
    float amax = 0;
    for (int i = b; i < std::min(100, b + 32); ++i) amax = std::max(amax, std::fabs(q[size_t(i)]));
    for (int i = b; i < std::min(100, b + 32); ++i) {
      ASSERT_LE(std::fabs(r[size_t(i)] - q[size_t(i)]), 0.5f * amax / 32767.0f * (1 + 1e-5f)) << i;
      if (q[size_t(i)] == 0.0f) {
        ASSERT_EQ(r[size_t(i)], 0.0f) << i;
      }
    }
  }
  EXPECT_NEAR(r[7], 250.0f, 1e-4f);
  EXPECT_NE(r[40], q[40]);  // rounded: not a no-op
  EXPECT_NEAR(r[40], q[40], 0.5 * 3.0 * 6 / 32767);  // its group (32..63) has no outlier
}

// Quantized K/V against the f32 cache built from the same values: the attention output moves
// by no more than each type's own rounding allows. Tolerances are on the RMS error relative to
// the RMS of the f32 output (softmax over N(0,1) keys with a moderately peaked query).
TEST_P(PagedAttention, QuantizedCloseToF32) {
  struct Tol { KvElem k, v; double rel_rms; };
  const Tol tols[] = {{KvElem::F16, KvElem::F16, 2e-3},  {KvElem::BF16, KvElem::BF16, 2e-2},
                      {KvElem::Q8_0, KvElem::Q8_0, 2e-2}, {KvElem::Q4_0, KvElem::Q4_0, 0.25},
                      {KvElem::Q8_0, KvElem::Q4_0, 0.2},  {KvElem::F16, KvElem::Q8_0, 2e-2}};
  for (int hd : {8, 64, 128})
    for (const Tol& t : tols) {
      const int64_t n = 300;
      const int group = 2;
      const Arena ref(16, 1, hd, KvElem::F32, KvElem::F32, n, 21);
      const Arena quant(16, 1, hd, t.k, t.v, n, 21);  // same seed: same values before storing
      const auto q = random_q(group, hd, 9, 1.0f);
      const float scale = 1.0f / std::sqrt(float(hd));
      std::vector<float> want(q.size()), got(q.size());
      attention_group(ref.view(), n, 0, q.data(), group, scale, want.data());
      attention_group(quant.view(), n, 0, q.data(), group, scale, got.data());
      double err = 0, norm = 0;
      for (size_t i = 0; i < q.size(); ++i) {
        err += (got[i] - want[i]) * (got[i] - want[i]);
        norm += want[i] * want[i];
      }
      const double rel = std::sqrt(err / norm);
      EXPECT_LT(rel, t.rel_rms) << "hd " << hd << " k " << name(t.k) << " v " << name(t.v);
      EXPECT_GT(rel, 0.0) << "quantization should change something: hd " << hd << " " << name(t.k);
    }
}

}  // namespace
}  // namespace kvserve
