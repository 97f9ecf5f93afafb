// Block keys: deterministic, sensitive to every input (parent, namespace, each token), never the
// reserved empty hash.
#include "kvcache/prefix_hash.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <utility>
#include <vector>

namespace kvserve {
namespace {

TEST(PrefixHash, DeterministicAndNeverEmpty) {
  const std::vector<int32_t> t = {1, 2, 3, 4};
  const BlockHash ns = hash_bytes("model", 5);
  EXPECT_EQ(hash_block({}, ns, t), hash_block({}, ns, t));
  EXPECT_FALSE(hash_block({}, ns, t).empty());
  EXPECT_FALSE(hash_block({}, {}, {}).empty());
  EXPECT_FALSE(hash_bytes(nullptr, 0).empty());
  EXPECT_EQ(hash_bytes("abc", 3), hash_bytes(std::string("abc").data(), 3));
  EXPECT_NE(hash_bytes("abc", 3), hash_bytes("abd", 3));
}

TEST(PrefixHash, EveryInputChangesTheKey) {
  const std::vector<int32_t> t = {10, 20, 30, 40};
  const BlockHash ns1 = hash_bytes("tenant-a", 8), ns2 = hash_bytes("tenant-b", 8);
  const BlockHash parent = hash_block({}, ns1, t);
  std::set<std::pair<uint64_t, uint64_t>> keys;
  auto add = [&](const BlockHash& h) { keys.insert({h.hi, h.lo}); };
  add(hash_block({}, ns1, t));
  add(hash_block(parent, ns1, t));  // same tokens, other parent
  add(hash_block({}, ns2, t));      // other namespace
  for (size_t i = 0; i < t.size(); ++i) {
    std::vector<int32_t> u = t;
    u[i] += 1;
    add(hash_block({}, ns1, u));
  }
  // Order matters, and a token's bytes are not confused with the namespace's.
  add(hash_block({}, ns1, std::vector<int32_t>{40, 30, 20, 10}));
  add(hash_block({}, ns1, std::vector<int32_t>{10, 20, 30}));
  EXPECT_EQ(keys.size(), 3u + t.size() + 2u);
}

}  // namespace
}  // namespace kvserve
