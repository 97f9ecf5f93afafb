// The packed legacy-quant layout's weight-stream hints (kernels/packed_layout.h): the lines a
// kernel hints one at a time (GroupLayout::hint_line, spread over its work on a block) are every
// cache line of a group exactly once, whatever the block count, so spreading them leaves no part
// of the stream unhinted and hints nothing twice.
#include "kernels/packed_layout.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace kvserve {
namespace {

template <typename F>
void expect_every_line_once(const char* name) {
  using L = GroupLayout<F>;
  for (int64_t nb : {1, 2, 3, 17, 18, 48}) {
    const size_t bytes = L::group_bytes(nb);
    ASSERT_EQ(bytes % 64, 0u) << name;
    std::map<size_t, int> hinted;  // line offset -> times hinted
    for (int64_t b = 0; b < nb; ++b)
      for (int i = 0; i < L::hint_lines(nb, b); ++i) {
        const size_t at = L::hint_line_at(nb, b, i);
        ASSERT_EQ(at % 64, 0u) << name << " nb " << nb << " block " << b << " line " << i;
        ++hinted[at];
      }
    const std::string where = std::string(name) + " nb " + std::to_string(nb);
    EXPECT_EQ(hinted.size(), bytes / 64) << where;
    for (const auto& [at, times] : hinted) {
      EXPECT_LT(at, bytes) << where;
      EXPECT_EQ(times, 1) << where << " line at " << at;
    }
  }
}

TEST(PackedLayout, SpreadHintsCoverEveryLineOfAGroupOnce) {
  expect_every_line_once<PackQ8_0>("q8_0 (paired)");
  expect_every_line_once<PackQ4_0>("q4_0 (split)");
  expect_every_line_once<PackQ5_0>("q5_0 (split)");
}

}  // namespace
}  // namespace kvserve
