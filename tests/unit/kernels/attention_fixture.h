// Test helpers shared by the attention tests (attention_test.cpp, attention_tiled_test.cpp): a K/V
// arena shaped like one layer of the KV cache, a naive double-precision reference over its stored
// values, and random queries.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kernels/kv_quant.h"

namespace kvserve {
namespace {

inline const char* name(KvElem t) {
  switch (t) {
    case KvElem::F32: return "f32";
    case KvElem::F16: return "f16";
    case KvElem::BF16: return "bf16";
    case KvElem::Q8_0: return "q8_0";
    case KvElem::Q4_0: return "q4_0";
  }
  return "?";
}

constexpr KvElem kAll[] = {KvElem::F32, KvElem::F16, KvElem::BF16, KvElem::Q8_0, KvElem::Q4_0};

// A K/V arena shaped like the KV cache's: blocks of [block_size][num_kv_heads] K rows of k_type,
// then the same for V in v_type, one layer. Filled from N(0, 1) values (the same values for
// the same seed and shape, whatever the types), each head row quantized on its own.
struct Arena {
  int block_size, num_kv_heads, head_dim;
  KvElem k_type, v_type;
  int num_blocks;
  std::vector<uint8_t> bytes;
  std::vector<int32_t> table;  // a permutation of the blocks

  size_t row(int part) const { return kv_row_bytes(part == 0 ? k_type : v_type, head_dim); }
  size_t plane_bytes(int part) const { return size_t(block_size) * size_t(num_kv_heads) * row(part); }
  size_t block_stride() const { return plane_bytes(0) + plane_bytes(1); }

  Arena(int bs, int kvh, int hd, KvElem kt, KvElem vt, int64_t n, uint32_t seed)
      : block_size(bs), num_kv_heads(kvh), head_dim(hd), k_type(kt), v_type(vt),
        num_blocks(int((n + bs - 1) / bs) + 2) {
    bytes.resize(size_t(num_blocks) * block_stride());
    std::mt19937 rng(seed);
    std::normal_distribution<float> g(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(hd));
    for (int b = 0; b < num_blocks; ++b)
      for (int part = 0; part < 2; ++part)
        for (int r = 0; r < bs * kvh; ++r) {
          for (auto& v : x) v = g(rng);
          kv_quantize_row(part == 0 ? kt : vt, x.data(), hd, row_at(b, part, r));
        }
    table.resize(size_t(num_blocks));
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng);
  }

  uint8_t* row_at(int block, int part, int r) {
    return bytes.data() + size_t(block) * block_stride() + (part ? plane_bytes(0) : 0) + size_t(r) * row(part);
  }

  PagedKvView view() const {
    PagedKvView v{bytes.data(), bytes.data() + plane_bytes(0), block_stride(), table.data(),
                  block_size,   num_kv_heads,                   head_dim};
    v.k_type = k_type;
    v.v_type = v_type;
    return v;
  }

  // The stored (dequantized) K (part 0) or V (part 1) row at position p, KV head h.
  std::vector<float> at(int part, int64_t p, int h) const {
    const size_t block = size_t(table[size_t(p / block_size)]);
    const size_t r = size_t(p % block_size) * size_t(num_kv_heads) + size_t(h);
    const uint8_t* src = bytes.data() + block * block_stride() + (part ? plane_bytes(0) : 0) + r * row(part);
    std::vector<float> y(static_cast<size_t>(head_dim));
    kv_dequantize_row_scalar(part == 0 ? k_type : v_type, src, head_dim, y.data());
    return y;
  }
};

// out[g][i] with all scores kept, max subtracted, in double, over the stored values.
// Positions [begin, n) only when begin > 0 (a sliding window).
std::vector<double> naive(const Arena& a, int64_t n, int kv_head, const float* q, int group, double scale,
                          int64_t begin = 0) {
  const int hd = a.head_dim;
  std::vector<double> out(size_t(group) * size_t(hd), 0.0);
  std::vector<double> scores(static_cast<size_t>(n), -INFINITY);
  for (int g = 0; g < group; ++g) {
    double mx = -INFINITY;
    std::fill(scores.begin(), scores.end(), -INFINITY);  // positions before begin weigh exp(-inf) = 0
    for (int64_t p = begin; p < n; ++p) {
      const auto k = a.at(0, p, kv_head);
      double s = 0;
      for (int i = 0; i < hd; ++i) s += double(q[g * hd + i]) * k[size_t(i)];
      scores[size_t(p)] = s * scale;
      mx = std::max(mx, scores[size_t(p)]);
    }
    double sum = 0;
    for (auto& s : scores) sum += (s = std::exp(s - mx));
    for (int64_t p = begin; p < n; ++p) {
      const auto v = a.at(1, p, kv_head);
      for (int i = 0; i < hd; ++i) out[size_t(g * hd + i)] += scores[size_t(p)] / sum * v[size_t(i)];
    }
  }
  return out;
}

std::vector<float> random_q(int group, int hd, uint32_t seed, float sd) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, sd);
  std::vector<float> q(size_t(group) * size_t(hd));
  for (auto& v : q) v = g(rng);
  return q;
}

// q as the pinned path reads it against K rows of type k: rounded where attention_rounds_query
// says so (per 32 values, so rounding [group][hd] at once rounds each head's row), else as is.
std::vector<float> rounded_if_the_path_rounds(const std::vector<float>& q, KvElem k, int hd) {
  if (!attention_rounds_query(k, hd)) return q;
  std::vector<float> r(q.size());
  attention_round_query(q.data(), int(q.size()), r.data());
  return r;
}
// The same for attention over the view `kv` (the tiled AVX-512 kernel rounds q8_0 K's query to 8
// bits: attention_rounds_query_8bit).
[[maybe_unused]] std::vector<float> rounded_if_the_path_rounds(const std::vector<float>& q,
                                                               const PagedKvView& kv, int hd) {
  if (!attention_rounds_query_8bit(kv)) return rounded_if_the_path_rounds(q, kv.k_type, hd);
  std::vector<float> r(q.size());
  attention_round_query(q.data(), int(q.size()), r.data(), 127);
  return r;
}

// A test fixture run once per vector path this CPU has (AVX2 always, AVX-512 where present),
// pinned with attention_pin_isa; the scalar reference is the same in both.
class PinnedAttentionPath : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override { attention_pin_isa(GetParam()); }
  void TearDown() override { attention_pin_isa(Isa::kScalar); }
};

inline std::vector<Isa> vector_isas() {
  std::vector<Isa> v{Isa::kAvx2};
  if (isa_supported(Isa::kAvx512)) v.push_back(Isa::kAvx512);
  return v;
}

inline std::string isa_name(const ::testing::TestParamInfo<Isa>& i) {
  return i.param == Isa::kAvx512 ? "avx512" : "avx2";
}

}  // namespace
}  // namespace kvserve
