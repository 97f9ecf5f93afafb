#include "util/cpu_budget.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <thread>

#include "fake_root.h"

namespace kvserve {
namespace {

// The fake "/" of one test, with the sources that read it.
class FakeRoot : public testing::FakeRoot {
 public:
  CpuSources sources() const { return CpuSources{path()}; }
};

int machine_cpus() { return std::max(1, int(std::thread::hardware_concurrency())); }

TEST(CpuBudget, NoCgroupNoLimit) {
  FakeRoot root;
  EXPECT_FALSE(cgroup_cpu_limit(root.sources()).has_value());
  EXPECT_EQ(usable_cpus(root.sources()), machine_cpus());
  root.write("/proc/self/cgroup", "0::/user.slice\n");
  root.write("/sys/fs/cgroup/user.slice/cpu.max", "max 100000\n");
  EXPECT_FALSE(cgroup_cpu_limit(root.sources()).has_value());
}

// A container's --cpus=1.5 (v2): 1.5 CPUs, threads rounded up to 2; the tightest level wins.
TEST(CpuBudget, V2QuotaOnTheTightestLevel) {
  FakeRoot root;
  root.write("/proc/self/cgroup", "0::/kubepods/pod1/ctr\n");
  root.write("/sys/fs/cgroup/kubepods/pod1/ctr/cpu.max", "150000 100000\n");
  root.write("/sys/fs/cgroup/kubepods/pod1/cpu.max", "400000 100000\n");
  root.write("/sys/fs/cgroup/kubepods/cpu.max", "max 100000\n");
  ASSERT_TRUE(cgroup_cpu_limit(root.sources()).has_value());
  EXPECT_DOUBLE_EQ(*cgroup_cpu_limit(root.sources()), 1.5);
  EXPECT_EQ(usable_cpus(root.sources()), std::min(machine_cpus(), 2));
  root.write("/sys/fs/cgroup/kubepods/cpu.max", "50000 100000\n");  // an ancestor's half CPU
  EXPECT_DOUBLE_EQ(*cgroup_cpu_limit(root.sources()), 0.5);
  EXPECT_EQ(usable_cpus(root.sources()), 1);
}

// v1: cpu.cfs_quota_us / cpu.cfs_period_us on the hierarchy that lists "cpu"; -1 is no limit.
TEST(CpuBudget, V1Quota) {
  FakeRoot root;
  root.write("/proc/self/cgroup", "5:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n");
  root.write("/sys/fs/cgroup/cpu/docker/abc/cpu.cfs_quota_us", "-1\n");
  root.write("/sys/fs/cgroup/cpu/docker/abc/cpu.cfs_period_us", "100000\n");
  EXPECT_FALSE(cgroup_cpu_limit(root.sources()).has_value());
  root.write("/sys/fs/cgroup/cpu/docker/abc/cpu.cfs_quota_us", "300000\n");
  ASSERT_TRUE(cgroup_cpu_limit(root.sources()).has_value());
  EXPECT_DOUBLE_EQ(*cgroup_cpu_limit(root.sources()), 3.0);
  EXPECT_EQ(usable_cpus(root.sources()), std::min(machine_cpus(), 3));
}

// The live system: at least one CPU, never more than the machine has.
TEST(CpuBudget, LiveSystemIsBetweenOneAndTheMachine) {
  const int n = usable_cpus();
  EXPECT_GE(n, 1);
  EXPECT_LE(n, machine_cpus());
}

}  // namespace
}  // namespace kvserve
