// Paged attention kernels against a naive two-pass softmax in double precision, over f32 and f16
// K/V, several lengths (inside one block, across blocks, partial last block), head dims (vector
// path and the scalar fallback) and query-head groupings, with a shuffled block table.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/attention.h"
#include "util/half.h"

namespace kvserve {
namespace {

// A K/V arena shaped like the KV cache's: blocks of [block_size][num_kv_heads][head_dim] for K,
// then the same for V, one layer.
struct Arena {
  int block_size, num_kv_heads, head_dim;
  bool f16;
  int num_blocks;
  std::vector<uint8_t> bytes;
  std::vector<int32_t> table;  // a permutation of the blocks

  size_t esize() const { return f16 ? 2 : 4; }
  size_t plane_bytes() const { return size_t(block_size) * size_t(num_kv_heads) * size_t(head_dim) * esize(); }
  size_t block_stride() const { return 2 * plane_bytes(); }

  Arena(int bs, int kvh, int hd, bool half, int64_t n, uint32_t seed)
      : block_size(bs), num_kv_heads(kvh), head_dim(hd), f16(half), num_blocks(int((n + bs - 1) / bs) + 2) {
    bytes.resize(size_t(num_blocks) * block_stride());
    std::mt19937 rng(seed);
    std::normal_distribution<float> g(0.0f, 1.0f);
    const size_t elems = bytes.size() / esize();
    for (size_t i = 0; i < elems; ++i) {
      const float v = g(rng);
      if (f16) reinterpret_cast<uint16_t*>(bytes.data())[i] = f32_to_f16(v);
      else reinterpret_cast<float*>(bytes.data())[i] = v;
    }
    table.resize(size_t(num_blocks));
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng);
  }

  PagedKvView view() const {
    return PagedKvView{bytes.data(), bytes.data() + plane_bytes(), block_stride(), table.data(),
                       block_size,   num_kv_heads,                 head_dim,       f16};
  }

  // Element i of K (part 0) or V (part 1) at position p, KV head h.
  double at(int part, int64_t p, int h, int i) const {
    const size_t block = size_t(table[size_t(p / block_size)]);
    const size_t elem = (size_t(p % block_size) * size_t(num_kv_heads) + size_t(h)) * size_t(head_dim) + size_t(i);
    const uint8_t* base = bytes.data() + block * block_stride() + size_t(part) * plane_bytes();
    if (f16) return f16_to_f32(reinterpret_cast<const uint16_t*>(base)[elem]);
    return reinterpret_cast<const float*>(base)[elem];
  }
};

// out[g][i] with all scores kept, max subtracted, in double.
std::vector<double> naive(const Arena& a, int64_t n, int kv_head, const float* q, int group, double scale) {
  const int hd = a.head_dim;
  std::vector<double> out(size_t(group) * size_t(hd), 0.0);
  std::vector<double> scores(static_cast<size_t>(n));
  for (int g = 0; g < group; ++g) {
    double mx = -INFINITY;
    for (int64_t p = 0; p < n; ++p) {
      double s = 0;
      for (int i = 0; i < hd; ++i) s += double(q[g * hd + i]) * a.at(0, p, kv_head, i);
      scores[size_t(p)] = s * scale;
      mx = std::max(mx, scores[size_t(p)]);
    }
    double sum = 0;
    for (auto& s : scores) sum += (s = std::exp(s - mx));
    for (int64_t p = 0; p < n; ++p)
      for (int i = 0; i < hd; ++i) out[size_t(g * hd + i)] += scores[size_t(p)] / sum * a.at(1, p, kv_head, i);
  }
  return out;
}

TEST(PagedAttention, MatchesNaiveSoftmax) {
  struct Case { int head_dim, num_kv_heads, group, block_size; };
  const Case cases[] = {{64, 3, 3, 16}, {64, 1, 1, 16}, {128, 2, 4, 32}, {64, 2, 9, 16},
                        {8, 1, 2, 4},   {12, 2, 3, 16}, {272, 1, 2, 16}};
  uint32_t seed = 1;
  for (const Case& c : cases)
    for (bool f16 : {false, true})
      for (int64_t n : {1, 5, 16, 17, 100, 517}) {
        const Arena a(c.block_size, c.num_kv_heads, c.head_dim, f16, n, seed++);
        std::mt19937 rng(seed++);
        // Large queries make the softmax peaked, which exercises the running-max rescaling.
        std::normal_distribution<float> g(0.0f, 2.0f);
        std::vector<float> q(size_t(c.group) * size_t(c.head_dim));
        for (auto& v : q) v = g(rng);
        const float scale = 1.0f / std::sqrt(float(c.head_dim));
        for (int kvh = 0; kvh < c.num_kv_heads; ++kvh) {
          const auto want = naive(a, n, kvh, q.data(), c.group, scale);
          std::vector<float> got(q.size()), got_scalar(q.size());
          attention_group(a.view(), n, kvh, q.data(), c.group, scale, got.data());
          attention_group_scalar(a.view(), n, kvh, q.data(), c.group, scale, got_scalar.data());
          for (size_t i = 0; i < q.size(); ++i) {
            ASSERT_NEAR(got[i], want[i], 2e-5 * (1 + std::fabs(want[i])))
                << "hd " << c.head_dim << " group " << c.group << " f16 " << f16 << " n " << n << " i " << i;
            ASSERT_NEAR(got_scalar[i], want[i], 2e-5 * (1 + std::fabs(want[i])))
                << "scalar hd " << c.head_dim << " group " << c.group << " f16 " << f16 << " n " << n;
          }
        }
      }
}

// Grouped heads give the same numbers as each head alone (the group only shares K/V reads).
TEST(PagedAttention, GroupEqualsSingleHeads) {
  const Arena a(16, 2, 64, true, 200, 7);
  std::mt19937 rng(3);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> q(10 * 64);
  for (auto& v : q) v = g(rng);
  std::vector<float> grouped(q.size()), single(q.size());
  attention_group(a.view(), 200, 1, q.data(), 10, 0.125f, grouped.data());
  for (int h = 0; h < 10; ++h) attention_group(a.view(), 200, 1, q.data() + h * 64, 1, 0.125f, single.data() + h * 64);
  for (size_t i = 0; i < q.size(); ++i) ASSERT_EQ(grouped[i], single[i]) << i;
}

}  // namespace
}  // namespace kvserve
