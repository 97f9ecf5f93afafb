// Token-id lists and namespaces shared by the prefix-cache tests of kvcache and scheduler.
#pragma once

#include <cstdint>
#include <numeric>
#include <vector>

#include "kvcache/block_pool.h"

namespace kvserve::test_util {

using Toks = std::vector<int32_t>;

inline const BlockHash kNs1{0, 1};
inline const BlockHash kNs2{0, 2};

// n consecutive ids starting at `first`.
inline Toks iota_tokens(int n, int32_t first) {
  Toks t(size_t(n), 0);
  std::iota(t.begin(), t.end(), first);
  return t;
}

inline Toks concat(Toks a, const Toks& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace kvserve::test_util
