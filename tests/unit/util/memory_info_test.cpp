#include "util/memory_info.h"

#include <gtest/gtest.h>

#include <string>

#include "fake_root.h"
#include "util/units.h"

namespace kvserve {
namespace {

// The fake "/" of one test, with the sources that read it.
class FakeRoot : public testing::FakeRoot {
 public:
  MemorySources sources() const { return MemorySources{path()}; }
};

TEST(MemoryInfo, ParsesMemAvailable) {
  EXPECT_EQ(parse_meminfo_available("MemTotal: 100 kB\nMemFree: 5 kB\nMemAvailable:   22675928 kB\n"),
            uint64_t(22675928) * 1024);
  EXPECT_FALSE(parse_meminfo_available("MemTotal: 100 kB\n").has_value());
  EXPECT_FALSE(parse_meminfo_available("MemAvailable: lots\n").has_value());
}

TEST(MemoryInfo, NoFilesMeansPhysicalMemoryAndNoCgroup) {
  FakeRoot root;
  EXPECT_FALSE(cgroup_memory(root.sources()).has_value());
  EXPECT_EQ(available_memory_bytes(root.sources()), physical_memory_bytes());
  EXPECT_EQ(memory_limit_bytes(root.sources()), physical_memory_bytes());
}

TEST(MemoryInfo, MemAvailableWithoutCgroupLimit) {
  FakeRoot root;
  root.write("/proc/meminfo", "MemTotal: 9000 kB\nMemAvailable: 4000 kB\n");
  root.write("/proc/self/cgroup", "0::/user.slice\n");
  root.write("/sys/fs/cgroup/user.slice/memory.max", "max\n");
  EXPECT_FALSE(cgroup_memory(root.sources()).has_value());
  EXPECT_EQ(available_memory_bytes(root.sources()), 4000u * 1024);
}

// cgroup v2: the tightest level above the process counts, and inactive file pages (reclaimable)
// do not count as used.
TEST(MemoryInfo, CgroupV2LimitOfAnAncestorCaps) {
  FakeRoot root;
  root.write("/proc/meminfo", "MemAvailable: 16777216 kB\n");  // 16 GiB
  root.write("/proc/self/cgroup", "0::/kubepods/pod1/ctr\n");
  root.write("/sys/fs/cgroup/kubepods/pod1/ctr/memory.max", "max\n");
  root.write("/sys/fs/cgroup/kubepods/pod1/memory.max", "4294967296\n");      // 4 GiB
  root.write("/sys/fs/cgroup/kubepods/pod1/memory.current", "1610612736\n");  // 1.5 GiB
  root.write("/sys/fs/cgroup/kubepods/pod1/memory.stat", "anon 1\ninactive_file 536870912\nactive_file 7\n");
  root.write("/sys/fs/cgroup/kubepods/memory.max", "8589934592\n");  // looser
  root.write("/sys/fs/cgroup/kubepods/memory.current", "1610612736\n");
  auto cg = cgroup_memory(root.sources());
  ASSERT_TRUE(cg.has_value());
  EXPECT_EQ(cg->limit, uint64_t(4) << 30);
  EXPECT_EQ(cg->left, (uint64_t(4) << 30) - (uint64_t(1) << 30));  // 1.5 GiB used - 0.5 GiB inactive file
  EXPECT_EQ(available_memory_bytes(root.sources()), uint64_t(3) << 30);
  const uint64_t phys = physical_memory_bytes();
  EXPECT_EQ(memory_limit_bytes(root.sources()), std::min(phys, uint64_t(4) << 30));
}

// cgroup v1 (the memory controller's own hierarchy; "unlimited" is a value near 2^63), with the
// container's cgroup mounted at the hierarchy's root as Docker does without a cgroup namespace.
TEST(MemoryInfo, CgroupV1LimitAtTheMountRoot) {
  FakeRoot root;
  root.write("/proc/meminfo", "MemAvailable: 16777216 kB\n");
  root.write("/proc/self/cgroup", "12:pids:/docker/abc\n4:cpuacct,memory:/docker/abc\n0::/\n");
  root.write("/sys/fs/cgroup/memory/memory.limit_in_bytes", "2147483648\n");
  root.write("/sys/fs/cgroup/memory/memory.usage_in_bytes", "1073741824\n");
  root.write("/sys/fs/cgroup/memory/memory.stat", "cache 5\ntotal_inactive_file 268435456\n");
  auto cg = cgroup_memory(root.sources());
  ASSERT_TRUE(cg.has_value());
  EXPECT_EQ(cg->limit, uint64_t(2) << 30);
  EXPECT_EQ(cg->left, (uint64_t(2) << 30) - (uint64_t(768) << 20));
  EXPECT_EQ(available_memory_bytes(root.sources()), (uint64_t(2) << 30) - (uint64_t(768) << 20));

  root.write("/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
  EXPECT_FALSE(cgroup_memory(root.sources()).has_value());
  EXPECT_EQ(available_memory_bytes(root.sources()), uint64_t(16) << 30);
}

// Usage over the limit (possible for a moment) leaves nothing, not a wrapped-around huge number.
TEST(MemoryInfo, UsageOverTheLimitLeavesZero) {
  FakeRoot root;
  root.write("/proc/meminfo", "MemAvailable: 1048576 kB\n");
  root.write("/proc/self/cgroup", "0::/\n");
  root.write("/sys/fs/cgroup/memory.max", "1000\n");
  root.write("/sys/fs/cgroup/memory.current", "5000\n");
  auto cg = cgroup_memory(root.sources());
  ASSERT_TRUE(cg.has_value());
  EXPECT_EQ(cg->left, 0u);
  EXPECT_EQ(available_memory_bytes(root.sources()), 0u);
}

TEST(MemoryInfo, LiveSystemGivesSomething) {
  EXPECT_GT(available_memory_bytes(), 0u);
  EXPECT_LE(memory_limit_bytes(), physical_memory_bytes());
}

}  // namespace
}  // namespace kvserve
